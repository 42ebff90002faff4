"""Self-contained JSON Schemas for MCP tool definitions, readable by every client's validator.

MCP clients must not fetch ``$ref`` targets from the network and may reject a
schema whose external reference they cannot resolve, so a tool's
``inputSchema``/``outputSchema`` is the AAP schema *bundled*: every schema it
references is copied under ``$defs`` and every ``$ref`` rewritten to a local
JSON Pointer (``#/$defs/<name>/...``). Nested ``$id``/``$schema`` members are
dropped, so no URL is left for a client to chase; the canonical schema URLs
travel in the tool's ``_meta`` instead.

The schemas say 2020-12, but the validator of the most used client line (the
TypeScript SDK 1.x: Ajv in its default draft-07 mode, ``$schema`` ignored)
reads them as draft-07. :func:`portable` makes the two readings agree without
changing the 2020-12 one: ``dependentSchemas``/``dependentRequired`` (unknown
to draft-07) are mirrored as ``if``/``then`` under ``allOf``, a ``$ref`` with
validating siblings (ignored beside ``$ref`` in draft-07) moves into ``allOf``,
and a keyword draft-07 cannot express is refused at build time, so nothing
silently stops being enforced.

A tool's ``outputSchema`` accepts the skill's response *and* ``aap.error``
(:func:`output_schema`): the 1.x TypeScript client validates the
``structuredContent`` of ``isError`` results against it too, and would
otherwise throw away every AAP error (docs/mcp.md, "Tools").
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any
from urllib.parse import urldefrag, urljoin

from aap import SCHEMA_BASE_URL
from aap.spec import schema
from aap.util.pointer import escape

DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Keywords whose values are instance data, not subschemas: never rewritten.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})
# Keywords whose values map names to subschemas.
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})

Loader = Callable[[str], dict[str, Any]]


def schema_url(name: str) -> str:
    """Canonical URL of the AAP schema ``name`` (a file stem such as ``error``)."""
    return f"{SCHEMA_BASE_URL}{name}.schema.json"


def _name_of(url: str) -> str:
    if not (url.startswith(SCHEMA_BASE_URL) and url.endswith(".schema.json")):
        raise ValueError(f"schema reference outside the AAP schema set: {url}")
    return url[len(SCHEMA_BASE_URL) : -len(".schema.json")]


def _load_from_spec(url: str) -> dict[str, Any]:
    return schema(_name_of(url))


class _Bundler:
    """Copies referenced documents under ``$defs`` of the root and rewrites ``$ref``s."""

    def __init__(self, root_url: str, load: Loader) -> None:
        self.root_url = root_url
        self.load = load
        self.keys: dict[str, str] = {}  # document URL -> key under $defs
        self.defs: dict[str, Any] = {}

    def pointer(self, url: str) -> str:
        """JSON Pointer (in the bundle) of the document at ``url``, copying it in once."""
        if url == self.root_url:
            return ""
        if url not in self.keys:
            key = _name_of(url)
            self.keys[url] = key
            document = copy.deepcopy(self.load(url))
            document.pop("$id", None)
            document.pop("$schema", None)
            self.defs[key] = document
            self.rewrite(document, url)
        return f"/$defs/{escape(self.keys[url])}"

    def rewrite(self, node: Any, base: str) -> None:
        """Point every ``$ref`` in ``node`` (part of the document ``base``) into the bundle."""
        if isinstance(node, list):
            for item in node:
                self.rewrite(item, base)
            return
        if not isinstance(node, dict):
            return
        if "$id" in node:
            raise ValueError(f"nested $id in {base} is not supported by the MCP schema bundler")
        ref = node.get("$ref")
        if isinstance(ref, str):
            target, fragment = urldefrag(urljoin(base, ref))
            if fragment and not fragment.startswith("/"):
                raise ValueError(f"anchor reference {ref!r} in {base} is not supported")
            node["$ref"] = f"#{self.pointer(target)}{fragment}"
        for keyword, value in node.items():
            if keyword in _SCHEMA_MAPS and isinstance(value, dict):
                for subschema in value.values():  # keys are names, not keywords
                    self.rewrite(subschema, base)
            elif keyword not in _DATA_KEYWORDS and keyword != "$ref":
                self.rewrite(value, base)


def _merge_defs(root: dict[str, Any], defs: dict[str, Any], name: str) -> None:
    local_defs = root.get("$defs", {})
    for key, value in defs.items():
        if key in local_defs:
            raise ValueError(f"$defs key {key!r} of {name} collides with a bundled schema")
        local_defs[key] = value
    if local_defs:
        root["$defs"] = local_defs


def bundle(name: str, load: Loader = _load_from_spec) -> dict[str, Any]:
    """The AAP schema ``name`` with every reference inlined; root ``type: object``; :func:`portable`."""
    url = schema_url(name)
    root = copy.deepcopy(load(url))
    root.pop("$id", None)
    root.pop("$schema", None)
    bundler = _Bundler(url, load)
    bundler.rewrite(root, url)
    _merge_defs(root, bundler.defs, name)
    root.setdefault("type", "object")
    return portable({"$schema": DIALECT, **root})


def bundle_any_of(names: tuple[str, ...], load: Loader = _load_from_spec) -> dict[str, Any]:
    """One object schema accepting an instance of any AAP schema in ``names`` (each under ``$defs``)."""
    bundler = _Bundler(SCHEMA_BASE_URL + "any-of.schema.json", load)  # a root no document refers to
    any_of = [{"$ref": "#" + bundler.pointer(schema_url(name))} for name in names]
    return portable({"$schema": DIALECT, "type": "object", "anyOf": any_of, "$defs": bundler.defs})


@cache
def bundled(name: str) -> dict[str, Any]:
    """Cached :func:`bundle` of a packaged AAP schema (treat as read-only)."""
    return bundle(name)


@cache
def output_schema(response_schema: str) -> dict[str, Any]:
    """A tool's ``outputSchema``: its skill's response, or ``aap.error`` (treat as read-only)."""
    return bundle_any_of((response_schema, ERROR_SCHEMA))


# -- one reading for draft-07 and 2020-12 validators -------------------------------------

ERROR_SCHEMA = "error"
# 2019-09/2020-12 keywords with no draft-07 equivalent: refused rather than silently dropped.
_NOT_PORTABLE = frozenset(
    {
        "unevaluatedProperties",
        "unevaluatedItems",
        "prefixItems",
        "minContains",
        "maxContains",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
        "contentSchema",
    }
)
# Keywords that only annotate: harmless beside a $ref in either draft.
_ANNOTATIONS = frozenset(
    {"$ref", "title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)


def _conditional(name: str, then: dict[str, Any]) -> dict[str, Any]:
    """``then`` applies when an object has member ``name`` (what ``dependent*`` means)."""
    return {"if": {"type": "object", "required": [name]}, "then": then}


def portable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (bundled, local refs only) rewritten so draft-07 and 2020-12 validators agree.

    In place; returns ``schema``. The 2020-12 meaning is unchanged: each added
    ``allOf`` member restates a constraint the node already has.
    """

    def visit(node: Any, pointer: str) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                visit(item, f"{pointer}/{index}")
            return
        if not isinstance(node, dict):
            return
        refused = _NOT_PORTABLE & set(node)
        if refused:
            raise ValueError(f"{pointer or '/'} uses {sorted(refused)}, which draft-07 validators cannot read")
        for key, value in list(node.items()):
            if key in _DATA_KEYWORDS:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, dict):
                for member, subschema in value.items():
                    visit(subschema, f"{pointer}/{escape(key)}/{escape(member)}")
            else:
                visit(value, f"{pointer}/{escape(key)}")
        extra: list[dict[str, Any]] = []
        for member in node.get("dependentSchemas", {}):
            target = f"#{pointer}/dependentSchemas/{escape(member)}"
            extra.append(_conditional(member, {"$ref": target}))
        for member, required in node.get("dependentRequired", {}).items():
            extra.append(_conditional(member, {"required": list(required)}))
        if "$ref" in node and set(node) - _ANNOTATIONS:
            extra.insert(0, {"$ref": node.pop("$ref")})  # draft-07 ignores a $ref's siblings
        if extra:
            node["allOf"] = [*node.get("allOf", []), *extra]

    visit(schema, "")
    return schema
