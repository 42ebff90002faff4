"""The LLM-facing ``inputSchema`` of each MCP tool, derived from the skill's AAP request schema.

What an agent framework hands to a model is the tool's ``inputSchema``, converted
for the model's provider, on every turn. The AAP request schemas are written
for validators: root ``allOf``/``anyOf``, ``if``/``then``, ``not``,
``uniqueItems``, nested ``$ref``s, a 20 KB ``Vehicle`` twice in a lead. Providers
refuse those (Anthropic: a root ``anyOf``; Gemini: nested refs, untyped
``const``; OpenAI strict: ``allOf``, ``not``, most ``format``s) and every token
of them is paid on every turn (docs/mcp.md, "For LLM agents").

:func:`llm_input_schema` is the one transform from the packaged request schema
to the subset every provider accepts: a root ``{"type": "object",
"properties", "required"}``, every reference inlined, only the keywords of
:data:`KEPT` (``format`` only where OpenAI strict and Gemini both read it),
the first sentence of each description, every optional member optional and
nullable (a strict converter makes every member required; ``null`` then says
"absent", which the MCP binding accepts, :mod:`.calls`). A constraint the
subset cannot state becomes a sentence of the description: derived for the
plain shapes (``anyOf`` of ``required`` alternatives, ``not`` of a pair,
``exclusiveMinimum``), declared in :data:`SURFACES` for the conditionals, which
must each be declared or the build fails. What a tool does not offer a model
is declared as data too: ``type`` (the tool names the request type) and the
members of a lead's vehicles a shopper does not give (:data:`SURFACES`). The
full AAP validation still runs on every call; this schema only guides a model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urldefrag, urljoin

from aap import SCHEMA_BASE_URL
from aap.spec import schema
from aap.util import pointer

#: Keywords a tool schema keeps (every other keyword is dropped, described, or refused).
KEPT = frozenset(
    {
        "type",
        "description",
        "enum",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "pattern",
        "format",
    }
)
#: ``format`` values both OpenAI strict mode and Gemini function declarations read.
ALLOWED_FORMATS = frozenset({"date-time"})
#: Keywords dropped without a word: annotations, and limits the server checks anyway.
_DROPPED = frozenset(
    {
        "$schema",
        "$id",
        "$defs",
        "$comment",
        "title",
        "examples",
        "default",
        "uniqueItems",
        "minLength",
        "maxLength",
        "contains",
    }
)
#: Keywords a declared note must replace (see :class:`Surface`): conditionals and compositions.
_CONDITIONAL = frozenset({"allOf", "if", "then", "else", "dependentSchemas", "dependentRequired", "oneOf"})

_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)\.(?=\s+[A-Z`'\"(\[])")
_ASIDE = re.compile(r"\s*\([^()]*\)")


@dataclass(frozen=True)
class Surface:
    """What one tool offers a model beyond the plain transform (data, not a second schema).

    ``omit``: top-level members not offered. ``projections``: for an object at a
    dotted path, the member names offered (in this order). ``notes``: text added to
    the description at a dotted path (``""`` is the root); a path whose AAP schema
    has conditionals (``allOf``, ``if``/``then``) needs one, saying what they require.
    """

    omit: tuple[str, ...] = ("type",)
    projections: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)


#: What a shopper tells a buyer agent about a car they want, or the one they trade in.
VEHICLE_OF_INTEREST = (
    "vehicle_id",
    "vin",
    "stock",
    "dealer_id",
    "vehicle_type",
    "year",
    "make",
    "model",
    "trim",
    "condition",
)
TRADE_IN = ("vehicle_type", "vin", "year", "make", "model", "trim", "mileage", "mileage_unit", "condition")
#: The filters a facets question scopes by; a search offers every filter.
FACET_FILTERS = (
    "make",
    "model",
    "condition",
    "vehicle_type",
    "body",
    "fuel",
    "year_min",
    "year_max",
    "price_min",
    "price_max",
    "mileage_max",
    "rooftops",
)

SURFACES: dict[str, Surface] = {
    "dealer-information-request": Surface(),
    "inventory-facets-request": Surface(projections={"filters": FACET_FILTERS}),
    "inventory-search-request": Surface(
        notes={"": "Sorting by distance_mi needs filters.near."},
    ),
    "vehicle-detail-request": Surface(),
    "lead-submit-request": Surface(
        omit=("type", "submitted_at"),
        projections={
            "vehicle_of_interest": VEHICLE_OF_INTEREST,
            "trade_in": TRADE_IN,
            "customer": ("first_name", "last_name", "email", "phone", "preferred_contact"),
            "source_agent": ("name",),
        },
        descriptions={
            "vehicle_of_interest.condition": "Sale condition: new, used or cpo.",
            "trade_in.condition": "Wear condition: excellent, good, fair or poor.",
        },
        notes={
            "": "A consent channel needs its contact: email needs customer.email; phone and sms need "
            "customer.phone; customer.preferred_contact must be one of consent.allowed_channels.",
        },
    ),
}


def first_sentence(text: str) -> str:
    """The first sentence of a seed description, without its asides in parentheses (examples,
    standards' names: the schema says the type; abbreviations such as ``e.g.`` end no sentence)."""
    match = _SENTENCE_END.search(text)
    return _ASIDE.sub("", text[: match.end()] if match else text)


def _join(*parts: str | None) -> str:
    return " ".join(p.strip() for p in parts if p and p.strip())


class _Transform:
    """One request schema to its tool schema; refs are inlined as they are met."""

    def __init__(self, name: str, surface: Surface) -> None:
        self.name = name
        self.surface = surface

    def resolve(self, ref: str, base: str) -> tuple[dict[str, Any], str]:
        url, fragment = urldefrag(urljoin(base, ref))
        if not (url.startswith(SCHEMA_BASE_URL) and url.endswith(".schema.json")):
            raise ValueError(f"{self.name}: reference outside the AAP schema set: {ref}")
        node: Any = schema(url[len(SCHEMA_BASE_URL) : -len(".schema.json")])
        for token in pointer.tokens(fragment):
            node = node[token]
        return node, url

    def convert(self, node: dict[str, Any], base: str, path: str) -> dict[str, Any]:
        """The tool schema of ``node`` (a subschema of the document at ``base``) at dotted ``path``."""
        description = node.get("description")
        while "$ref" in node:  # a referencing property's own description wins
            target, base = self.resolve(node["$ref"], base)
            siblings = set(node) - {"$ref", "description", *_DROPPED}
            if siblings:
                raise ValueError(f"{self.name} {path or '/'}: $ref beside {sorted(siblings)} is not supported")
            description = description or target.get("description")
            node = target
        out: dict[str, Any] = {}
        notes: list[str] = []
        kind = node.get("type")
        if isinstance(kind, list):  # a nullable member: null is how every optional member says absent here
            kinds = [k for k in kind if k != "null"]
            kind = kinds[0] if len(kinds) == 1 else None
            if kind is None:
                raise ValueError(f"{self.name} {path or '/'}: a type list is not supported")
        if "const" in node:
            out["enum"] = [node["const"]]
            kind = kind or _json_type(node["const"])
        if "enum" in node:
            out["enum"] = list(node["enum"])
            kind = kind or _json_type(node["enum"][0])
        if kind is None and ("properties" in node):
            kind = "object"
        if kind is not None:
            out["type"] = kind
        for keyword in ("minimum", "maximum", "minItems", "maxItems", "pattern"):
            if keyword in node:
                out[keyword] = node[keyword]
        if node.get("format") in ALLOWED_FORMATS:
            out["format"] = node["format"]
        if "exclusiveMinimum" in node:
            notes.append(f"Greater than {node['exclusiveMinimum']}.")
        if "items" in node:
            out["items"] = self.convert(node["items"], base, path + "[]")
            out["items"].pop("description", None)
        if kind == "object" or "properties" in node:
            self.object_members(node, base, path, out)
        if "anyOf" in node:
            notes.append(self.any_of(node["anyOf"], base, path, out))
        if "not" in node:
            notes.append(_not_note(node["not"], self.name, path))
        conditional = _CONDITIONAL & set(node)
        declared = self.surface.notes.get(path)
        if conditional and declared is None:
            raise ValueError(f"{self.name} {path or '/'}: {sorted(conditional)} needs a declared note (SURFACES)")
        unknown = set(node) - KEPT - _DROPPED - _CONDITIONAL - {"$ref", "const", "exclusiveMinimum", "anyOf", "not"}
        if unknown:
            raise ValueError(f"{self.name} {path or '/'}: keywords {sorted(unknown)} are not supported")
        if not path:
            description = None  # the tool's own description says what it is for
        first = self.surface.descriptions.get(path) or (first_sentence(description) if description else None)
        text = _join(first, *notes, declared)
        if text:
            out = {"description": text, **out}
        return out

    def object_members(self, node: dict[str, Any], base: str, path: str, out: dict[str, Any]) -> None:
        members: dict[str, Any] = node.get("properties", {})
        offered = self.surface.projections.get(path)
        names = [n for n in (offered if offered is not None else members) if n in members]
        if offered is not None and len(names) != len(offered):
            raise ValueError(f"{self.name} {path}: projection names members the schema lacks")
        if not path:
            names = [n for n in names if n not in self.surface.omit]
        required = [n for n in node.get("required", []) if n in names]
        properties = {}
        for name in names:
            converted = self.convert(members[name], base, f"{path}.{name}" if path else name)
            properties[name] = converted if name in required else nullable(converted, nested=bool(path))
        out["type"] = "object"
        out["properties"] = properties
        if required:
            out["required"] = required

    def any_of(self, branches: list[Any], base: str, path: str, out: dict[str, Any]) -> str:
        """An ``anyOf`` of ``required`` alternatives becomes a sentence; anything else is refused."""
        names = []
        for branch in branches:
            keys = set(branch) - {"type", "properties", "description"}
            if keys != {"required"} or len(branch["required"]) != 1:
                raise ValueError(f"{self.name} {path or '/'}: only an anyOf of single required members is supported")
            names.append(branch["required"][0])
        return f"Give at least one of {_words(names)}."


def _words(names: list[str], conj: str = "or") -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" {conj} " + names[-1]


def _not_note(value: Any, name: str, path: str) -> str:
    if isinstance(value, dict) and set(value) == {"required"} and len(value["required"]) == 2:
        first, second = value["required"]
        return f"Send {first} or {second}, not both."
    raise ValueError(f"{name} {path or '/'}: only a not of two required members is supported")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    raise ValueError(f"no JSON type for the constant {value!r}")


def nullable(member: dict[str, Any], *, nested: bool = False) -> dict[str, Any]:
    """An optional member: its schema or ``null`` (strict converters make every member required;
    ``null`` is then how a model leaves it out). The description stays beside the ``anyOf``.

    ``nested``: a member of an object inside the root also says ``"default": null``, the form
    pydantic writes for an optional field: LangChain's Gemini converter makes every member of a
    nested object without a ``default`` required.
    """
    description = member.get("description")
    branch = {k: v for k, v in member.items() if k != "description"}
    out: dict[str, Any] = {"anyOf": [branch, {"type": "null"}]}
    if nested:
        out["default"] = None
    return {"description": description, **out} if description else out


def build(name: str, surface: Surface) -> dict[str, Any]:
    """The tool schema of the packaged request schema ``name``, as :class:`Surface` offers it."""
    url = f"{SCHEMA_BASE_URL}{name}.schema.json"
    root = _Transform(name, surface).convert(schema(name), url, "")
    if root.get("type") != "object" or "properties" not in root:
        raise ValueError(f"{name}: a tool schema needs an object root")
    return root


@cache
def llm_input_schema(name: str) -> dict[str, Any]:
    """The cached tool schema of request schema ``name`` (treat as read-only)."""
    return build(name, SURFACES[name])
