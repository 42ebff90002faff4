#!/usr/bin/env python3
"""Rebuild the AAP 3.1 OpenAPI seed (block YAML whose line breaks were lost) as JSON.

The seed ``004_*.txt`` is one 118 KB line: every original line was stripped of its
indentation and joined to the next with a single space.  Keys, dashes and scalars
survive; the nesting does not.  This tool puts the nesting back:

1. *Tokenize* the flat text into lines: ``- `` markers, ``key:`` (plain or quoted),
   plain scalars (which YAML forbids to contain ``": "``), double-quoted scalars and
   ``[]``.  Scalars are typed by the YAML 1.2 core schema.
2. *Parse* the lines with a backtracking search over "which open container does
   this key / dash belong to".  The grammar knows OpenAPI 3.1 object kinds and the
   JSON Schema 2020-12 vocabulary (which keyword takes a string, a schema, a map of
   schemas, a list...), so most decisions are forced.  The remaining choices are
   ordered by explicit preference rules (see ``Parser._order``) and checked by hard
   constraints (keyword applicability to the schema's ``type``, ``then``/``else``
   need ``if``, ``additionalProperties: false`` needs ``properties``, ...).
3. Free data (``example(s)``, ``const``, ``default``, ``enum``, example ``value``)
   has no grammar; its nesting is chosen so that each example validates against its
   schema.  Because examples often precede the rest of their schema, the parse runs
   to a fixpoint: pass *n* validates examples against the schemas of pass *n-1*.
4. ``OVERRIDES`` records, with reasons, the few decisions no rule settles.

Run ``python tools/seed_rebuild.py`` to regenerate
``src/aap/spec/schemas/openapi-jsonrpc.json``; ``--check`` compares instead of
writing.  ``tests/test_spec_seed.py`` re-flattens the output and compares it with the
seed byte for byte.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

# the same format assertions as aap.spec, so the rebuild does not depend on which
# optional jsonschema format packages happen to be installed
from aap.spec.formats import checker as FORMAT_CHECKER

ROOT = Path(__file__).resolve().parent.parent
# a copy of the seed, byte for byte as received (see tools/seeds/README.md)
SEED = ROOT / "tools" / "seeds" / "004_dc4252dd1f36965a.txt"
OUTPUT = ROOT / "src" / "aap" / "spec" / "schemas" / "openapi-jsonrpc.json"


# --------------------------------------------------------------------------- scalars

_INT = re.compile(r"[-+]?[0-9]+$")
_OCT = re.compile(r"0o[0-7]+$")
_HEX = re.compile(r"0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def resolve_plain(text: str) -> Any:
    """Type a plain scalar by the YAML 1.2 core schema (no timestamps, no sexagesimal)."""
    if text in ("null", "Null", "NULL", "~", ""):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT.match(text):
        return int(text)
    if _OCT.match(text):
        return int(text[2:], 8)
    if _HEX.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    if text in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"):
        return float("inf")
    if text in ("-.inf", "-.Inf", "-.INF"):
        return float("-inf")
    if text in (".nan", ".NaN", ".NAN"):
        return float("nan")
    return text


_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "\t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
    "N": "\x85",
    "_": "\xa0",
    "L": "\u2028",
    "P": "\u2029",
}


def _read_double_quoted(text: str, i: int) -> tuple[str, int]:
    """Read a double-quoted scalar starting at text[i] == '"'; return (value, end)."""
    out = []
    j = i + 1
    while True:
        if j >= len(text):
            raise ValueError(f"unterminated double-quoted scalar at {i}")
        c = text[j]
        if c == '"':
            return "".join(out), j + 1
        if c == "\\":
            e = text[j + 1]
            if e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                out.append(chr(int(text[j + 2 : j + 2 + width], 16)))
                j += 2 + width
                continue
            out.append(_ESCAPES[e])
            j += 2
            continue
        out.append(c)
        j += 1


# ------------------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class Scalar:
    value: Any
    style: str  # "plain" | "double" | "flow"
    start: int


@dataclass(frozen=True)
class Line:
    """One original YAML line: ``- `` markers, then ``key:`` [scalar] or a scalar."""

    index: int
    dashes: int
    key: str | None
    scalar: Scalar | None
    start: int

    @property
    def bare(self) -> bool:  # "key:" whose value follows on the next lines
        return self.key is not None and self.scalar is None


def _is_key_word(word: str) -> bool:
    return len(word) > 1 and word.endswith(":") and not word.startswith(("-", "#", '"', "'"))


def tokenize(text: str) -> list[Line]:
    """Split the flattened YAML into lines.

    A plain scalar cannot contain ``": "`` in YAML, so a word ending with ``:`` always
    starts a key; a lone ``-`` always starts a sequence entry (the seed has no plain
    text containing `` - ``; the re-flatten test would show it otherwise).
    """
    n = len(text)
    i = 0
    lines: list[Line] = []

    def skip_space(k: int) -> int:
        if k < n and text[k] == " ":
            return k + 1
        return k

    def word_end(k: int) -> int:
        m = text.find(" ", k)
        return n if m < 0 else m

    while i < n:
        start = i
        dashes = 0
        while text.startswith("- ", i) or (text[i:] == "-"):
            dashes += 1
            i = skip_space(i + 1)
        key = None
        scalar = None
        # key?
        if i < n and text[i] == '"':
            value, end = _read_double_quoted(text, i)
            if end < n and text[end] == ":" and (end + 1 == n or text[end + 1] == " "):
                key = value
                i = skip_space(end + 1)
            else:
                scalar = Scalar(value, "double", i)
                i = skip_space(end)
        else:
            w_end = word_end(i)
            word = text[i:w_end]
            if _is_key_word(word):
                key = word[:-1]
                i = skip_space(w_end)
        if key is not None and scalar is None and i < n:
            # inline value?
            if text[i] == '"':
                value, end = _read_double_quoted(text, i)
                if not (end < n and text[end] == ":" and (end + 1 == n or text[end + 1] == " ")):
                    scalar = Scalar(value, "double", i)
                    i = skip_space(end)
            elif not text.startswith("- ", i) and text[i:] != "-":
                w_end = word_end(i)
                if not _is_key_word(text[i:w_end]):
                    scalar, i = _read_plain(text, i)
        elif key is None and scalar is None:
            scalar, i = _read_plain(text, i)
        lines.append(Line(len(lines), dashes, key, scalar, start))
    return lines


def _read_plain(text: str, i: int) -> tuple[Scalar, int]:
    """Read a plain scalar: words up to the next key word, quoted key or dash."""
    n = len(text)
    start = i
    words = []
    while i < n:
        m = text.find(" ", i)
        w_end = n if m < 0 else m
        word = text[i:w_end]
        if words and (word == "-" or _is_key_word(word)):
            break
        if words and word.startswith('"'):
            try:
                _value, end = _read_double_quoted(text, i)
            except (ValueError, KeyError, IndexError):
                end = -1
            if end > 0 and end < n and text[end] == ":" and (end + 1 == n or text[end + 1] == " "):
                break
        words.append(word)
        i = w_end + 1 if w_end < n else n
    raw = " ".join(words)
    if raw == "[]":
        return Scalar([], "flow", start), i
    if raw == "{}":
        return Scalar({}, "flow", start), i
    return Scalar(resolve_plain(raw), "plain", start), i


# ------------------------------------------------------------------ re-flattening

_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")


def _needs_quotes(s: str) -> bool:
    if s == "" or s != s.strip():
        return True
    if not isinstance(resolve_plain(s), str):
        return True
    if s[0] in _INDICATORS and not (s[0] in "-?:" and len(s) > 1 and s[1] != " "):
        return True
    if ": " in s or " #" in s or s.endswith(":") or "\n" in s or "\t" in s:
        return True
    if s in ("-", "[]", "{}"):
        return True
    return False


def _quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _quote(value) if _needs_quotes(value) else value
    if value == []:
        return "[]"
    if value == {}:
        return "{}"
    raise TypeError(type(value))


def yaml_lines(value: Any, indent: int = 0) -> list[str]:
    """Block YAML the way the seed was written (2-space indent, dashes indented)."""
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict) and value:
        for k, v in value.items():
            key = _quote(k) if _needs_quotes(k) else k
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{key}:")
                out.extend(yaml_lines(v, indent + 2))
            else:
                out.append(f"{pad}{key}: {yaml_scalar(v)}")
        return out
    if isinstance(value, list) and value:
        for item in value:
            if isinstance(item, (dict, list)) and item:
                sub = yaml_lines(item, indent + 2)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {yaml_scalar(item)}")
        return out
    return [pad + yaml_scalar(value)]


def reflatten(document: Any) -> str:
    """Serialize as block YAML, strip indentation and join the lines with spaces."""
    return " ".join(line.strip() for line in yaml_lines(document))


# -------------------------------------------------------------------- the grammar
#
# A "kind" names what a container holds.  Mapping kinds list their fixed fields with
# the kind of each value; name-map kinds accept any (matching) name; FREE is data.

SCHEMA = "schema"
FREE = "free"

# value kinds of fixed fields, by object kind
STR, NUM, NONNEG, BOOL, SCAL = "str", "num", "nonneg", "bool", "scalar"

OBJECTS: dict[str, dict[str, str]] = {
    "root": {
        "openapi": STR,
        "info": "info",
        "jsonSchemaDialect": STR,
        "servers": "list:server",
        "paths": "paths",
        "webhooks": "paths",
        "components": "components",
        "security": "list:free",
        "tags": "list:tag",
        "externalDocs": "extdocs",
    },
    "info": {
        "title": STR,
        "summary": STR,
        "description": STR,
        "termsOfService": STR,
        "contact": "contact",
        "license": "license",
        "version": STR,
    },
    "contact": {"name": STR, "url": STR, "email": STR},
    "license": {"name": STR, "identifier": STR, "url": STR},
    "server": {"url": STR, "description": STR, "variables": "map:free"},
    "tag": {"name": STR, "description": STR, "externalDocs": "extdocs"},
    "extdocs": {"description": STR, "url": STR},
    "pathitem": {
        "$ref": STR,
        "summary": STR,
        "description": STR,
        "servers": "list:server",
        "parameters": "list:parameter",
        **{m: "operation" for m in ("get", "put", "post", "delete", "options", "head", "patch", "trace")},
    },
    "operation": {
        "tags": "list:str",
        "summary": STR,
        "description": STR,
        "externalDocs": "extdocs",
        "operationId": STR,
        "parameters": "list:parameter",
        "requestBody": "requestbody",
        "responses": "responses",
        "callbacks": "map:free",
        "deprecated": BOOL,
        "security": "list:free",
        "servers": "list:server",
    },
    "parameter": {
        "name": STR,
        "in": STR,
        "description": STR,
        "required": BOOL,
        "deprecated": BOOL,
        "allowEmptyValue": BOOL,
        "style": STR,
        "explode": BOOL,
        "allowReserved": BOOL,
        "schema": SCHEMA,
        "example": "example",
        "examples": "examples",
        "content": "content",
    },
    "requestbody": {"description": STR, "content": "content", "required": BOOL},
    "mediatype": {"schema": SCHEMA, "example": "example", "examples": "examples", "encoding": "map:free"},
    "exampleobj": {"summary": STR, "description": STR, "value": "example", "externalValue": STR},
    "response": {"description": STR, "headers": "map:header", "content": "content", "links": "map:free"},
    "header": {
        "description": STR,
        "required": BOOL,
        "deprecated": BOOL,
        "schema": SCHEMA,
        "example": "example",
        "examples": "examples",
        "content": "content",
    },
    "components": {
        "schemas": "components:schemas",
        "responses": "map:response",
        "parameters": "map:parameter",
        "examples": "examples",
        "requestBodies": "map:requestbody",
        "headers": "map:header",
        "securitySchemes": "map:free",
        "links": "map:free",
        "callbacks": "map:free",
        "pathItems": "paths",
    },
}

# name maps: kind -> (value kind, key pattern)
NAMEMAPS: dict[str, tuple[str, re.Pattern[str] | None]] = {
    "paths": ("pathitem", re.compile(r"^/")),
    "content": ("mediatype", re.compile(r"^[\w.+*-]+/[\w.+*-]+$")),
    "examples": ("exampleobj", None),
    "responses": ("response", re.compile(r"^(default|[1-5](\d\d|XX))$")),
    "schemas": (SCHEMA, None),  # properties, $defs, patternProperties, ...
    # component names are PascalCase throughout the seed
    "components:schemas": (SCHEMA, re.compile(r"^[A-Z][A-Za-z0-9]*$")),
    "map:free": (FREE, None),
    "map:header": ("header", None),
    "map:response": ("response", None),
    "map:parameter": ("parameter", None),
    "map:requestbody": ("requestbody", None),
    "map:strlist": ("list:str", None),
}

TYPES = {"string", "number", "integer", "boolean", "object", "array", "null"}

SCHEMA_KEYWORDS: dict[str, str] = {
    # core
    "$schema": STR,
    "$id": STR,
    "$ref": STR,
    "$anchor": STR,
    "$dynamicRef": STR,
    "$dynamicAnchor": STR,
    "$comment": STR,
    "$defs": "schemas",
    "$vocabulary": "map:free",
    # applicators
    "allOf": "list:schema",
    "anyOf": "list:schema",
    "oneOf": "list:schema",
    "not": SCHEMA,
    "if": SCHEMA,
    "then": SCHEMA,
    "else": SCHEMA,
    "dependentSchemas": "schemas",
    "prefixItems": "list:schema",
    "items": SCHEMA,
    "contains": SCHEMA,
    "properties": "schemas",
    "patternProperties": "schemas",
    "additionalProperties": SCHEMA,
    "propertyNames": SCHEMA,
    "unevaluatedItems": SCHEMA,
    "unevaluatedProperties": SCHEMA,
    # validation
    "type": "type",
    "enum": "enum",
    "const": "example",
    "multipleOf": NUM,
    "maximum": NUM,
    "exclusiveMaximum": NUM,
    "minimum": NUM,
    "exclusiveMinimum": NUM,
    "maxLength": NONNEG,
    "minLength": NONNEG,
    "pattern": STR,
    "maxItems": NONNEG,
    "minItems": NONNEG,
    "uniqueItems": BOOL,
    "maxContains": NONNEG,
    "minContains": NONNEG,
    "maxProperties": NONNEG,
    "minProperties": NONNEG,
    "required": "list:str",
    "dependentRequired": "map:strlist",
    # format, content, meta-data
    "format": STR,
    "contentEncoding": STR,
    "contentMediaType": STR,
    "contentSchema": SCHEMA,
    "title": STR,
    "description": STR,
    "default": "example",
    "deprecated": BOOL,
    "readOnly": BOOL,
    "writeOnly": BOOL,
    "examples": "list:example",
    # OpenAPI 3.1 additions
    "discriminator": "map:free",
    "xml": "map:free",
    "externalDocs": "extdocs",
    "example": "example",
}

# keyword families, for applicability to a schema's declared type
OBJ_ONLY = {
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
}
ARR_ONLY = {
    "items",
    "prefixItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "unevaluatedItems",
}
STR_ONLY = {"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType", "contentSchema"}
NUM_ONLY = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
FAMILY_TYPES = [
    (OBJ_ONLY, {"object"}),
    (ARR_ONLY, {"array"}),
    (STR_ONLY, {"string"}),
    (NUM_ONLY, {"number", "integer"}),
]
IN_PLACE = ("allOf", "anyOf", "oneOf")  # lists of in-place subschemas
IN_PLACE_SINGLE = ("not", "if", "then", "else")  # single in-place subschemas
ANNOTATIONS = {"description", "title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly"}

# where boolean schemas may appear (the seed uses `false` for forbidden properties)
BOOL_SCHEMA_KEYWORDS = {"additionalProperties", "unevaluatedProperties", "unevaluatedItems", "items", "propertyNames"}


def _types_of(schema: dict) -> set[str] | None:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and t and all(isinstance(x, str) for x in t):
        return set(t)
    return None


def _inferred_types(schema: dict) -> set[str] | None:
    """Types implied by ``const``/``enum``, or by anyOf/oneOf branches that all
    declare one, when the schema declares no ``type``."""
    values = []
    if "const" in schema:
        values.append(schema["const"])
    if isinstance(schema.get("enum"), list):
        values.extend(schema["enum"])
    if not values:
        for k in ("anyOf", "oneOf"):
            branches = schema.get(k)
            if isinstance(branches, list) and branches and all(isinstance(b, dict) for b in branches):
                union: set[str] = set()
                for b in branches:
                    t = _types_of(b) or _inferred_types(b)
                    if t is None:
                        return None
                    union |= t
                return union
        return None
    out = set()
    for v in values:
        if isinstance(v, bool):
            out.add("boolean")
        elif isinstance(v, (int, float)):
            out |= {"number", "integer"}
        elif isinstance(v, str):
            out.add("string")
        elif v is None:
            out.add("null")
        elif isinstance(v, list):
            out.add("array")
        elif isinstance(v, dict):
            out.add("object")
    return out


def keyword_fits_types(keyword: str, types: set[str] | None) -> bool:
    if types is None:
        return True
    for family, ok in FAMILY_TYPES:
        if keyword in family:
            return bool(types & ok)
    return True


def value_fits_types(value: Any, types: set[str] | None) -> bool:
    if types is None:
        return True
    if value is None:
        return "null" in types
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, int):
        return bool(types & {"integer", "number"})
    if isinstance(value, float):
        return "number" in types or ("integer" in types and value.is_integer())
    if isinstance(value, str):
        return "string" in types
    if isinstance(value, list):
        return "array" in types
    if isinstance(value, dict):
        return "object" in types
    return False


def schema_problems(schema: Any, types: set[str] | None = None, strict: bool = True) -> list[str]:
    """Structural impossibilities in one schema object (not descending into properties).

    ``types`` is the effective type inherited by in-place subschemas (allOf items,
    if/then/else, not) that declare none of their own.
    """
    if not isinstance(schema, dict):
        return []
    problems = []
    own = _types_of(schema)
    eff = own if own is not None else types
    for k in schema:
        if not keyword_fits_types(k, eff):
            problems.append(f"{k} does not apply to type {sorted(eff or [])}")
    for k in ("const",):
        if k in schema and not value_fits_types(schema[k], eff):
            problems.append(f"{k} value does not fit type")
    if isinstance(schema.get("enum"), list):
        for item in schema["enum"]:
            if not value_fits_types(item, eff):
                problems.append("enum member does not fit type")
    if ("then" in schema or "else" in schema) and "if" not in schema:
        problems.append("then/else without if")
    if schema.get("additionalProperties") is False and not ("properties" in schema or "patternProperties" in schema):
        problems.append("additionalProperties: false without properties")
    if strict and schema.get("additionalProperties") is False and isinstance(schema.get("required"), list):
        declared = set(schema.get("properties", {}))
        pats = [re.compile(p) for p in schema.get("patternProperties", {})]
        for name in schema["required"]:
            if name not in declared and not any(p.search(name) for p in pats):
                problems.append(f"required {name!r} is undeclared under additionalProperties: false")
    for k in IN_PLACE:
        for sub in schema.get(k, []) if isinstance(schema.get(k), list) else []:
            problems.extend(schema_problems(sub, eff, strict))
    for k in IN_PLACE_SINGLE:
        if isinstance(schema.get(k), dict):
            problems.extend(schema_problems(schema[k], eff, strict))
    return problems


# ----------------------------------------------------------------------- overrides
#
# Each override pins one decision the rules leave open.  ``key`` is the key (or "-"
# for a dash) at the decision, ``after`` the JSON pointer of the innermost container
# open at that point (as the parse would otherwise continue it), ``attach`` the
# pointer of the container that must receive it.


@dataclass(frozen=True)
class Override:
    key: str
    after: str
    attach: str
    why: str


OVERRIDES: list[Override] = [
    Override(
        key="mileage_unit",
        after="/components/schemas/InventorySearchResponse/properties/data/dependentSchemas"
        "/currency/allOf/1/else/properties/facets/properties/mileage_unit",
        attach="/components/schemas/InventorySearchResponse/properties/data/dependentSchemas",
        why="`mileage_unit: {$ref: .../dependentSchemas/currency}` reuses the currency "
        "dependent schema for the other query context; as a property of the "
        "currency `else` branch it would be a no-op on a string.  The schema's "
        "description ('Explicit 3.1 query contexts require matching ...') covers both "
        "contexts; data declares mileage_unit, so rule 9 cannot tell.",
    ),
]


# --------------------------------------------------------------------------- parser


class ParseError(Exception):
    pass


@dataclass
class FreeRoot:
    """One example/const/default/enum value: validated against its schema at close."""

    owner: tuple  # path of the schema (or media type) it exemplifies
    path: tuple  # path of the value itself
    check: bool  # validate against the owner schema?
    obj: Any = None


@dataclass(eq=False)
class Frame:
    kind: str
    obj: Any
    path: tuple
    free: FreeRoot | None = None

    @property
    def is_map(self) -> bool:
        return isinstance(self.obj, dict)


def _is_component_root(path: tuple) -> bool:
    return len(path) == 3 and path[:2] == ("components", "schemas")


def _is_in_place(path: tuple) -> bool:
    """allOf/anyOf/oneOf branches, if/then/else/not and dependentSchemas entries:
    subschemas that apply to the same instance as their parent."""
    if not path:
        return False
    if isinstance(path[-1], int):
        return len(path) > 1 and path[-2] in IN_PLACE
    if len(path) > 1 and path[-2] == "dependentSchemas":
        return True
    return path[-1] in IN_PLACE_SINGLE


def _under_in_place(path: tuple) -> bool:
    """Is this schema an in-place subschema or nested in one (a conditional
    refinement rather than a declaration)?"""
    return any(_is_in_place(path[:n]) for n in range(1, len(path) + 1))


def pointer(path: tuple) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@dataclass
class Decision:
    line: int
    key: str
    chosen: str
    alternatives: list[str]


class Parser:
    def __init__(self, lines: list[Line], previous: dict | None = None, overrides: list[Override] = OVERRIDES):
        self.lines = lines
        self.previous = previous
        self.checker = ExampleChecker(previous) if previous is not None else None
        self.overrides = overrides
        self.undo: list[tuple] = []
        self.document: dict = {}
        self.used_overrides: set[Override] = set()
        self.steps = 0
        self.furthest = 0
        self.budget = 2_000_000

    # -- mutation with undo ---------------------------------------------------------
    def _set(self, d: dict, k: str, v: Any) -> None:
        d[k] = v
        self.undo.append(("d", d, k))

    def _append(self, lst: list, v: Any) -> None:
        lst.append(v)
        self.undo.append(("l", lst))

    def _undo_to(self, n: int) -> None:
        while len(self.undo) > n:
            entry = self.undo.pop()
            if entry[0] == "d":
                del entry[1][entry[2]]
            else:
                entry[1].pop()

    # -- kinds ----------------------------------------------------------------------
    @staticmethod
    def field_kind(frame: Frame, key: str) -> str | None:
        """Kind of the value of ``key`` in mapping ``frame``, or None if not accepted."""
        kind = frame.kind
        if kind == SCHEMA:
            if key in frame.obj:
                return None
            if key in ("then", "else") and "if" not in frame.obj:
                return None
            if key == "$defs" and not _is_component_root(frame.path):
                return None  # every $defs ref in the seed points at a component root
            return SCHEMA_KEYWORDS.get(key)
        if kind == FREE:
            return None if key in frame.obj else FREE
        if kind in OBJECTS:
            if key in frame.obj:
                return None
            if key.startswith("x-"):
                return FREE
            return OBJECTS[kind].get(key)
        if kind in NAMEMAPS:
            if key in frame.obj:
                return None
            value_kind, pattern = NAMEMAPS[kind]
            if pattern is not None and not pattern.search(key):
                return None
            return value_kind
        return None

    @staticmethod
    def item_kind(frame: Frame) -> str:
        kind = frame.kind
        if kind.startswith("list:"):
            return kind[5:]
        return FREE  # free lists, enum, examples

    def _scalar_fits(self, vkind: str, value: Any, frame: Frame, key: str | None) -> bool:
        if vkind in (FREE, "example"):
            return True
        if vkind == STR:
            return isinstance(value, str)
        if vkind == NUM:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if vkind == NONNEG:
            return isinstance(value, int) and not isinstance(value, bool) and value >= 0
        if vkind == BOOL:
            return isinstance(value, bool)
        if vkind in ("type", "typename"):
            return value in TYPES
        if vkind == SCHEMA:
            if value is False and (
                frame.kind == "schemas" and frame.path and frame.path[-1] in ("properties", "patternProperties")
            ):
                return True  # forbidden property
            if isinstance(value, bool) and frame.kind == SCHEMA and key in BOOL_SCHEMA_KEYWORDS:
                return True
            return False
        if vkind.startswith("list:") or vkind == "enum":
            return value == []  # `[]`
        if vkind == "extdocs" or vkind in OBJECTS or vkind in NAMEMAPS or vkind == "schemas":
            return value == {}
        return False

    @staticmethod
    def _container_kind_ok(vkind: str, is_seq: bool) -> bool:
        seq_kinds = vkind.startswith("list:") or vkind in ("enum", "type")
        if vkind in (FREE, "example"):
            return True
        return seq_kinds if is_seq else not seq_kinds

    # -- the search -----------------------------------------------------------------
    def parse(self) -> dict:
        root = Frame("root", self.document, ())
        state = ([root], None)
        # choice points: [line index, alternatives, next alt, undo length, state]
        cps: list[list] = []
        self.decisions: dict[int, Decision] = {}
        i = 0
        alts = self._alternatives(i, state)
        cps.append([i, alts, 0, len(self.undo), state])
        while cps:
            self.steps += 1
            if self.steps > self.budget:
                raise ParseError(f"search budget exhausted; furthest line {self.furthest}")
            cp = cps[-1]
            i, alts, k, ulen, state = cp
            self.furthest = max(self.furthest, i)
            if k >= len(alts):
                cps.pop()
                continue
            cp[2] += 1
            self._undo_to(ulen)
            new_state = self._apply(i, alts[k], state)
            if new_state is None:
                continue
            if i + 1 == len(self.lines):
                if self._close_all(new_state):
                    self._record(cps)
                    return self.document
                continue
            cps.append([i + 1, self._alternatives(i + 1, new_state), 0, len(self.undo), new_state])
        raise ParseError("no parse")

    def _record(self, cps: list[list]) -> None:
        for i, alts, k, _ulen, state in cps:
            if len(alts) > 1:
                line = self.lines[i]
                stack = state[0]
                names = [pointer(stack[a].path) if a is not None else "(pending)" for a in alts]
                self.decisions[i] = Decision(i, line.key if not line.dashes else "-", names[k - 1], names)

    def _alternatives(self, i: int, state) -> list:
        """Stack indices of containers that may take line i, best first."""
        stack, pending = state
        line = self.lines[i]
        if pending is not None:
            return [None]
        cands = []
        if line.dashes:
            for idx in range(len(stack) - 1, -1, -1):
                if isinstance(stack[idx].obj, list):
                    cands.append(idx)
        else:
            for idx in range(len(stack) - 1, -1, -1):
                f = stack[idx]
                if f.is_map and self.field_kind(f, line.key) is not None:
                    cands.append(idx)
        return self._order(i, stack, cands)

    def _order(self, i: int, stack: list[Frame], cands: list[int]) -> list[int]:
        """Order the candidate containers for line i, best first.

        Tiers: schema keywords, then schema name maps (properties, $defs,
        components/schemas), then other OpenAPI objects and maps, then free data
        (examples, const, default, enum); innermost first within a tier.  Then:

        1. ``required: [names]`` (or an anyOf/oneOf of ``required`` branches) goes to
           the innermost schema whose properties declare the most of those names;
        2. an annotation after an ``items``/``additionalProperties`` subschema
           describes the array/map that owns it (if that has none yet);
        3. ``additionalProperties: true|false`` (closing an object) skips in-place
           subschemas (if/then/else/not, branches, dependentSchemas) and schemas
           nested in them, unless the subschema is itself a ``type: object`` with
           ``properties``: refinements do not declare openness;
        4. a ``$ref`` schema takes only annotation siblings (description, default);
        5. ``$comment`` (provenance) belongs to the component root;
        6. ``description``/``title`` skip in-place subschemas;
        7. an anyOf/oneOf branch made of a single ``required``/``maxProperties``
           assertion takes nothing more except ``not`` (``- required: [a]  not:``);
        8. a property name goes to the ``properties`` whose schema listed it as
           required in the previous pass;
        9. a name goes into a ``properties`` map under an in-place subschema only if
           the declaring schema has that property at the mirrored place;
        10. a PascalCase name (the seed's component naming) starts a new component;
        11. within free data, a key the example's schema declares at that place
            before one that would be an additional property.

        Hard constraints (``_apply``/``_close``) then reject what cannot be: keywords
        outside their schema's type, ``then``/``else`` without ``if``, ``$defs``
        below a component root, ``additionalProperties: false`` without properties or
        with undeclared required names, conditions on properties the object forbids,
        and free data that does not validate against its schema.
        """
        line = self.lines[i]
        key = line.key if not line.dashes else "-"
        for ov in self.overrides:
            if ov.key == key and pointer(stack[-1].path) == ov.after:
                for idx in cands:
                    if pointer(stack[idx].path) == ov.attach:
                        self.used_overrides.add(ov)
                        return [idx]
        if not cands:
            return cands

        def tier(idx: int) -> int:
            kind = stack[idx].kind
            if kind in (FREE, "list:example", "enum"):
                return 4
            if kind == SCHEMA:
                return 1
            if kind in ("schemas", "components:schemas"):
                return 2
            return 3

        if line.dashes:
            structural = [c for c in cands if tier(c) < 4]
            free = [c for c in cands if tier(c) == 4]
            return structural + free

        t1 = [c for c in cands if tier(c) == 1]
        t2 = [c for c in cands if tier(c) == 2]
        t2b = [c for c in cands if tier(c) == 3]
        t3 = [c for c in cands if tier(c) == 4]

        # rule 1: required
        if key in ("required", "anyOf", "oneOf") and len(t1) > 1:
            names = set(self._peek_required(i))
            if names:

                def declared(c: int) -> int:
                    props = stack[c].obj.get("properties", {}) if stack[c].kind == SCHEMA else {}
                    return len(names & set(props))

                best = max(declared(c) for c in t1)
                if best:
                    good = [c for c in t1 if declared(c) == best]
                    t1 = good + [c for c in t1 if c not in good]
        # rule 2: an annotation after a value subschema (items, additionalProperties)
        # describes the array or map that owns it, unless that already has one
        if key in ANNOTATIONS:
            values = [c for c in t1 if stack[c].path and stack[c].path[-1] in ("items", "additionalProperties")]
            t1 = [c for c in t1 if c not in values] + values
        # rule 3: additionalProperties/unevaluatedProperties close an object that
        # declares its properties, not an if/then/else/not, a branch or a schema
        # nested in one (unless that branch is itself a `type: object` declaration)
        if key in ("additionalProperties", "unevaluatedProperties") and not line.bare:

            def declares(c: int) -> bool:
                obj = stack[c].obj
                return not _under_in_place(stack[c].path) or (obj.get("type") == "object" and "properties" in obj)

            own = [c for c in t1 if declares(c)]
            t1 = own + [c for c in t1 if c not in own]
        # rule 4: a `$ref` schema takes annotations as siblings (description,
        # default...), not further assertions
        if key not in ANNOTATIONS:
            refs = [
                c
                for c in t1
                if stack[c].kind == SCHEMA and "$ref" in stack[c].obj and set(stack[c].obj) <= ANNOTATIONS | {"$ref"}
            ]
            t1 = [c for c in t1 if c not in refs] + refs
        # rule 5: provenance comments describe the whole component
        if key == "$comment":
            roots = [c for c in t1 if _is_component_root(stack[c].path)]
            t1 = roots + [c for c in t1 if c not in roots]
        # rule 6: descriptions and titles describe a schema with its own instance
        # location, not an if/then/else/not or allOf/anyOf/oneOf branch
        if key in ("description", "title"):
            own = [c for c in t1 if not _is_in_place(stack[c].path)]
            t1 = own + [c for c in t1 if c not in own]
        # rule 7: an anyOf/oneOf branch that is a single assertion such as
        # `required: [x]` or `maxProperties: 0` ends there; only `not` may join it
        # (the exclusive-or idiom `- required: [a]  not: {required: [b]}`)
        if key != "not":

            def single(c: int) -> bool:
                f = stack[c]
                return (
                    f.kind == SCHEMA
                    and _is_in_place(f.path)
                    and isinstance(f.path[-1], int)
                    and f.path[-2] in ("anyOf", "oneOf")
                    and len(f.obj) == 1
                    and next(iter(f.obj)) in ("required", "maxProperties", "minProperties")
                )

            singles = [c for c in t1 if single(c)]
            t1 = [c for c in t1 if c not in singles] + singles
        # rule 8: property names required by their schema in the previous pass
        if t2 and self.previous is not None:
            good = []
            for c in t2:
                f = stack[c]
                if f.kind == "schemas" and f.path and f.path[-1] == "properties":
                    owner = _get(self.previous, f.path[:-1])
                    if isinstance(owner, dict) and key in (owner.get("required") or []):
                        good.append(c)
            if good:
                t2 = good + [c for c in t2 if c not in good]
        # rule 9: properties maps inside a conditional or branch (if/then/else,
        # allOf...) refine properties that the object schema itself declares at
        # that place; a name it does not declare belongs further out
        if len(t2) > 1:
            late = [c for c in t2 if self._undeclared_refinement(stack, c, key)]
            t2 = [c for c in t2 if c not in late] + late
        # rule 10: PascalCase names are components, not properties
        comp = [c for c in t2 if stack[c].kind == "components:schemas"]
        if comp:
            t2 = comp + [c for c in t2 if c not in comp]
        # rule 11: declared keys first within free data
        if t3 and self.checker is not None:
            declared = [c for c in t3 if self.checker.declares(stack[c], key)]
            t3 = declared + [c for c in t3 if c not in declared]
        return t1 + t2 + t2b + t3

    def _undeclared_refinement(self, stack: list[Frame], c: int, key: str) -> bool:
        """Is stack[c] a properties map under an in-place subschema whose mirrored
        location in the declaring schema does not declare ``key``?"""
        mirror = self._mirror(stack[c].path)
        if mirror is None:
            return False
        names, _closed = mirror
        return names is not None and key not in names

    def _mirror(self, path: tuple) -> tuple[set[str] | None, bool] | None:
        """For a ``properties`` map under an in-place subschema (if/then/else,
        branches, dependentSchemas): the property names the declaring schema has at
        the mirrored instance location (None if it declares none) and whether it
        forbids others (``additionalProperties: false``).  None if not applicable."""
        if path[-1:] != ("properties",):
            return None
        # walk up to the nearest schema with its own instance location that
        # is not below an in-place subschema, recording the instance-path steps
        path = path[:-1]
        steps: list = []
        in_place = False
        while path:
            if _is_in_place(path):
                in_place = True
                dropped = isinstance(path[-1], int) or path[-2] == "dependentSchemas"
                path = path[:-2] if dropped else path[:-1]
                continue
            if path[-2:-1] == ("properties",):
                steps.append(("p", path[-1]))
                path = path[:-2]
                continue
            if path[-1] in ("items", "additionalProperties", "contains"):
                steps.append(("i", None) if path[-1] != "additionalProperties" else ("a", None))
                path = path[:-1]
                continue
            break
        if not in_place or not path:
            return None
        schemas = [_get(self.document, path)]
        for kind, name in reversed(steps):
            nxt = []
            for sch in self._expand_declared(schemas):
                if kind == "p":
                    props = sch.get("properties")
                    if isinstance(props, dict) and name in props:
                        nxt.append(props[name])
                elif kind == "i" and isinstance(sch.get("items"), dict):
                    nxt.append(sch["items"])
                elif kind == "a" and isinstance(sch.get("additionalProperties"), dict):
                    nxt.append(sch["additionalProperties"])
            schemas = nxt
        names: set[str] = set()
        found = closed = False
        for sch in self._expand_declared(schemas):
            if isinstance(sch.get("properties"), dict):
                found = True
                names |= set(sch["properties"])
            if sch.get("additionalProperties") is False and not sch.get("patternProperties"):
                closed = True
        return (names if found else None), closed

    def _expand_declared(self, schemas: list) -> list[dict]:
        out, seen, todo = [], set(), list(schemas)
        while todo:
            sch = todo.pop()
            if not isinstance(sch, dict) or id(sch) in seen:
                continue
            seen.add(id(sch))
            out.append(sch)
            ref = sch.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/"):
                path = tuple(p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))
                for doc in (self.document, self.previous):
                    target = _get(doc, path) if doc is not None else None
                    if isinstance(target, dict):
                        todo.append(target)
                        break
            for k in IN_PLACE:
                if isinstance(sch.get(k), list):
                    todo.extend(sch[k])
        return out

    def _peek_required(self, i: int) -> list[str]:
        """Names listed by ``required`` at line i, or by the ``required`` branches of
        the anyOf/oneOf starting at line i (``- required: [a]  - required: [b]``)."""
        if self.lines[i].key == "required":
            return self._peek_strings(i)
        out: list[str] = []
        j = i + 1
        while j < len(self.lines) and self.lines[j].key == "required" and self.lines[j].bare:
            names = self._peek_strings(j)
            if not names:
                break
            out.extend(names)
            j += 1 + len(names)
        return out

    def _peek_strings(self, i: int) -> list[str]:
        out = []
        j = i + 1
        while j < len(self.lines):
            ln = self.lines[j]
            if ln.dashes == 1 and ln.key is None and isinstance(ln.scalar.value, str):
                out.append(ln.scalar.value)
                j += 1
            else:
                break
        return out

    def _close(self, frame: Frame) -> bool:
        if frame.kind == "schemas" and frame.path[-1:] == ("properties",):
            # a condition on a property its object forbids can never hold
            mirror = self._mirror(frame.path)
            if mirror is not None and mirror[1]:
                names = mirror[0] or set()
                if any(k not in names for k in frame.obj):
                    return False
        if frame.kind == SCHEMA and frame.is_map:
            # pass 0 cannot know where properties go yet (rule 8 needs a previous
            # pass), so "required but undeclared" is only enforced from pass 1 on
            if schema_problems(frame.obj, strict=self.previous is not None):
                return False
        if frame.free is not None and frame.obj is frame.free.obj:
            return self._check_free(frame.free, final=True)
        return True

    def _close_all(self, state) -> bool:
        stack, pending = state
        if pending is not None:
            return False
        for f in reversed(stack):
            if not self._close(f):
                return False
        return True

    def _check_free(self, root: FreeRoot, final: bool) -> bool:
        if self.checker is None or not root.check:
            return True
        return self.checker.ok(root, final)

    def _new_container(self, parent: Frame, key: Any, vkind: str, is_seq: bool, path: tuple) -> Frame:
        obj: Any = [] if is_seq else {}
        free = parent.free
        if vkind == "example":
            free = FreeRoot(owner=self._owner_of(parent, key), path=path, check=self._checkable(parent, key), obj=obj)
            kind = FREE
        elif vkind == "enum" or vkind == "list:example":
            kind = vkind
            free = None
        elif vkind == "type":
            kind = "list:typename"
        elif vkind == FREE:
            kind = FREE
        else:
            kind = vkind
        return Frame(kind, obj, path, free)

    def _owner_of(self, parent: Frame, key: Any) -> tuple:
        if parent.kind == "list:example":  # schema examples item
            return parent.path[:-1]
        if parent.kind == "exampleobj":  # Example object "value"
            return parent.path[:-2] + ("schema",)
        if parent.kind == "enum":
            return parent.path[:-1]
        if parent.kind in ("mediatype", "parameter", "header"):  # "example"
            return parent.path + ("schema",)
        return parent.path  # const / default / example in a schema

    @staticmethod
    def _checkable(parent: Frame, key: Any) -> bool:
        if parent.kind == "enum":
            return False
        if parent.kind == SCHEMA and key == "const":
            return False
        return True

    def _place_scalar(self, frame: Frame, key: Any, vkind: str, scalar: Scalar, path: tuple) -> bool:
        value = scalar.value
        if not self._scalar_fits(vkind, value, frame, key):
            return False
        if isinstance(value, (list, dict)):
            value = [] if isinstance(value, list) else {}
        if isinstance(frame.obj, dict):
            if frame.kind == SCHEMA:
                types = self._effective_types()
                if not keyword_fits_types(key, types):
                    return False
                if key == "type":
                    new_types = {value}
                    if any(not keyword_fits_types(k, new_types) for k in frame.obj):
                        return False
            self._set(frame.obj, key, value)
        else:
            self._append(frame.obj, value)
        if vkind == "example" or frame.kind in ("list:example", "enum"):
            root = FreeRoot(owner=self._owner_of(frame, key), path=path, check=self._checkable(frame, key), obj=value)
            if not self._check_free(root, final=True):
                return False
        elif frame.free is not None:
            if not self._check_free(frame.free, final=False):
                return False
        return True

    def _ref_types(self, ref: str) -> set[str] | None:
        """Declared type of a local $ref target, from this pass or the previous one."""
        if not ref.startswith("#/"):
            return None
        path = tuple(p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/"))
        for doc in (self.document, self.previous):
            target = _get(doc, path) if doc is not None else None
            if isinstance(target, dict) and _types_of(target) is not None:
                return _types_of(target)
        return None

    def _effective_types(self) -> set[str] | None:
        """The type constraining the top schema frame: its own, or for an in-place
        subschema (branch, if/then/else/not) the nearest enclosing declared one."""
        stack = self._stack
        j = len(stack) - 1
        while j >= 0:
            f = stack[j]
            if f.kind == SCHEMA:
                t = _types_of(f.obj)
                if t is None and isinstance(f.obj.get("$ref"), str):
                    t = self._ref_types(f.obj["$ref"])
                if t is None:
                    t = _inferred_types(f.obj)
                if t is not None:
                    return t
                if not _is_in_place(f.path):
                    return None
            elif not f.kind.startswith("list:"):
                return None
            j -= 1
        return None

    def _apply(self, i: int, choice, state):
        stack, pending = state
        line = self.lines[i]
        stack = list(stack)
        self._stack = stack
        if pending is None:
            # attach to stack[choice]: close everything above it
            while len(stack) - 1 > choice:
                if not self._close(stack.pop()):
                    return None
            frame = stack[-1]
            dashes = line.dashes
            if dashes:
                # first dash: a new item of the chosen sequence
                target = frame
            else:
                return self._place_key(stack, frame, line)
        else:
            pframe, pkey, pkind = pending
            dashes = line.dashes
            is_seq = dashes > 0
            if not self._container_kind_ok(pkind, is_seq):
                return None
            if pframe.kind == SCHEMA:
                types = self._effective_types()
                if not keyword_fits_types(pkey, types):
                    return None
            container = self._new_container(pframe, pkey, pkind, is_seq, pframe.path + (pkey,))
            if pframe.is_map:
                self._set(pframe.obj, pkey, container.obj)
            else:
                self._append(pframe.obj, container.obj)
            stack.append(container)
            if not is_seq:
                return self._place_key(stack, container, line)
            target = container
        # dashes: first one adds an item to target; further ones nest sequences
        frame = target
        for d in range(dashes):
            item_kind = self.item_kind(frame)
            idx = len(frame.obj)
            last = d == dashes - 1
            if last and line.key is None:
                scalar = line.scalar
                if item_kind == "example" or frame.kind in ("list:example", "enum"):
                    vk = "example"
                else:
                    vk = item_kind
                if vk == SCHEMA:
                    return None  # no boolean schemas in lists
                if not self._place_scalar(frame, idx, vk, scalar, frame.path + (idx,)):
                    return None
                return (stack, None)
            # the item is a container: a nested sequence or a mapping
            is_seq = not last
            vk = item_kind
            if frame.kind in ("list:example", "enum"):
                vk = "example"
            if not self._container_kind_ok(vk, is_seq):
                return None
            container = self._new_container(frame, idx, vk, is_seq, frame.path + (idx,))
            self._append(frame.obj, container.obj)
            stack.append(container)
            frame = container
        return self._place_key(stack, frame, line)

    def _place_key(self, stack: list[Frame], frame: Frame, line: Line):
        key = line.key
        vkind = self.field_kind(frame, key)
        if vkind is None:
            return None
        path = frame.path + (key,)
        if line.scalar is not None:
            if not self._place_scalar(frame, key, vkind, line.scalar, path):
                return None
            return (stack, None)
        return (stack, (frame, key, vkind))


def _get(doc: Any, path: tuple) -> Any:
    cur = doc
    for p in path:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            return None
    return cur


# ------------------------------------------------------------- example validation

PERMANENT = {
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "type",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "maxLength",
    "minLength",
    "multipleOf",
    "maxItems",
    "maxProperties",
    "uniqueItems",
    "maxContains",
    "false",
}


class ExampleChecker:
    """Validates free data against the schemas of the previous pass."""

    def __init__(self, document: dict):

        self.document = document
        self.registry = Registry().with_resource(
            "urn:aap:openapi", Resource.from_contents(document, default_specification=DRAFT202012)
        )
        self._validators: dict[tuple, Any] = {}
        self._cls = Draft202012Validator
        self._skill_schema = {}
        for name, s in (document.get("components", {}).get("schemas", {}) or {}).items():
            t = _get(s, ("properties", "type", "const"))
            if isinstance(t, str) and t.endswith(".request"):
                self._skill_schema[t] = ("components", "schemas", name)

    def validator(self, owner: tuple):
        if owner not in self._validators:
            target = _get(self.document, owner)
            if not isinstance(target, (dict, bool)):
                self._validators[owner] = None
            else:
                schema = {"$ref": "urn:aap:openapi#" + pointer(owner)}
                self._validators[owner] = self._cls(schema, registry=self.registry, format_checker=FORMAT_CHECKER)
        return self._validators[owner]

    def _is_jsonrpc_request(self, owner: tuple) -> bool:
        s = _get(self.document, owner)
        return isinstance(s, dict) and s.get("$ref") == "#/components/schemas/JsonRpcRequest"

    def errors(self, root: FreeRoot) -> list:
        v = self.validator(root.owner)
        if v is None:
            return []
        errs = list(v.iter_errors(root.obj))
        if self._is_jsonrpc_request(root.owner) and isinstance(root.obj, dict):
            parts = _get(root.obj, ("params", "message", "parts"))
            for part in parts if isinstance(parts, list) else []:
                data = part.get("data") if isinstance(part, dict) else None
                if isinstance(data, dict) and data.get("type") in self._skill_schema:
                    sv = self.validator(self._skill_schema[data["type"]])
                    if sv is not None:
                        errs.extend(sv.iter_errors(data))
        return errs

    def ok(self, root: FreeRoot, final: bool) -> bool:
        errs = self.errors(root)
        if final:
            return not errs
        return not any(_permanent(e) for e in errs)

    def declares(self, frame: Frame, key: str) -> bool:
        """Does the example's schema declare ``key`` at ``frame``'s instance location?"""
        root = frame.free
        if root is None:
            return False
        rel = frame.path[len(root.path) :]
        owner = _get(self.document, root.owner)
        schemas = [owner]
        if (
            self._is_jsonrpc_request(root.owner)
            and len(rel) >= 4
            and rel[:3] == ("params", "message", "parts")
            and len(rel) >= 5
            and rel[4] == "data"
        ):
            data = _get(root.obj, rel[:5])
            t = data.get("type") if isinstance(data, dict) else None
            if t in self._skill_schema:
                schemas = [_get(self.document, self._skill_schema[t])]
                rel = rel[5:]
        for seg in rel:
            nxt = []
            for s in self._expand(schemas):
                if isinstance(seg, int):
                    if isinstance(s.get("items"), dict):
                        nxt.append(s["items"])
                else:
                    props = s.get("properties") or {}
                    if seg in props:
                        nxt.append(props[seg])
                    elif isinstance(s.get("additionalProperties"), dict):
                        nxt.append(s["additionalProperties"])
            schemas = nxt
        for s in self._expand(schemas):
            if key in (s.get("properties") or {}):
                return True
        return False

    def _expand(self, schemas: list) -> list[dict]:
        out, seen, todo = [], set(), list(schemas)
        while todo:
            s = todo.pop()
            if not isinstance(s, dict) or id(s) in seen:
                continue
            seen.add(id(s))
            out.append(s)
            ref = s.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/"):
                todo.append(
                    _get(self.document, tuple(p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")))
                )
            for k in IN_PLACE:
                todo.extend(s.get(k) or [])
            for k in ("then", "else"):
                todo.append(s.get(k))
        return out


def _permanent(error) -> bool:
    kw = error.validator
    if kw in ("anyOf", "oneOf"):
        if not error.context:
            return False
        branches: dict[Any, list] = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        n = len(error.validator_value)
        if len(branches) < n:
            return False
        return all(any(_permanent(s) for s in subs) for subs in branches.values())
    path = list(error.absolute_schema_path)
    if any(p in ("then", "else", "not", "dependentSchemas", "if") for p in path):
        return False
    if kw in ("const", "enum"):
        return not isinstance(error.instance, (dict, list))
    return kw in PERMANENT


# ----------------------------------------------------------------------- top level


def load_seed() -> str:
    return SEED.read_text(encoding="utf-8").rstrip("\n")


def rebuild(text: str | None = None, max_passes: int = 6, verbose: bool = False) -> dict:
    """Parse to a fixpoint: examples of pass n validate against the schemas of n-1."""
    text = load_seed() if text is None else text
    lines = tokenize(text)
    previous = None
    for n in range(max_passes):
        parser = Parser(lines, previous)
        document = parser.parse()
        if verbose:
            print(f"pass {n}: {parser.steps} steps, {len(parser.decisions)} open decisions", file=sys.stderr)
        if document == previous:
            rebuild.last_parser = parser  # type: ignore[attr-defined]
            return document
        previous = json.loads(json.dumps(document))
    raise ParseError("no fixpoint")


def render(document: dict) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    ap.add_argument("--decisions", action="store_true", help="print open decisions")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    document = rebuild(verbose=args.verbose)
    if args.decisions:
        parser = rebuild.last_parser  # type: ignore[attr-defined]
        for d in parser.decisions.values():
            others = [a for a in d.alternatives if a != d.chosen]
            print(f"line {d.line} {d.key!r} -> {d.chosen}   (also possible: {', '.join(others)})")
    out = render(document)
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_text(encoding="utf-8") == out
        print("in sync" if same else f"{OUTPUT} is out of date")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(out, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
