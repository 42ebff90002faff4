"""A readable page of an OpenAPI 3.x document, rendered on the server.

The documents are the ones this deployment serves (``/a2a/openapi.json``,
``/poppy/openapi.json``), read through the app itself so the page shows exactly
what clients get. This module flattens one into what the template lists: the
operations with their parameters, bodies and responses, and every component
schema as a table of properties, with ``$ref``\\ s as links between them. No
JavaScript viewer, no CDN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


@dataclass(frozen=True)
class TypeRef:
    """A schema's type as text, and the component it names (for a link), if any."""

    text: str
    anchor: str | None = None


@dataclass
class Property:
    name: str
    type: list[TypeRef]
    required: bool
    description: str


@dataclass
class SchemaView:
    name: str
    anchor: str
    description: str
    type: list[TypeRef]
    properties: list[Property] = field(default_factory=list)
    enum: list[str] = field(default_factory=list)


@dataclass
class Body:
    media_type: str
    type: list[TypeRef]


@dataclass
class ResponseView:
    status: str
    description: str
    bodies: list[Body]


@dataclass
class Operation:
    method: str
    path: str
    anchor: str
    summary: str
    description: str
    parameters: list[Property]
    bodies: list[Body]
    responses: list[ResponseView]


@dataclass
class DocumentView:
    title: str
    version: str
    openapi: str
    description: str
    servers: list[str]
    operations: list[Operation]
    schemas: list[SchemaView]


def _anchor(name: str) -> str:
    return "schema-" + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name)


def describe(schema: Any, depth: int = 0) -> list[TypeRef]:
    """A schema's type in a few words: ``string``, ``array of Vehicle``, ``Vehicle | null``."""
    if not isinstance(schema, dict):
        return [TypeRef("any")]
    ref = schema.get("$ref")
    if isinstance(ref, str):
        prefix = "#/components/schemas/"
        if ref.startswith(prefix):  # a component, or a part of one ("Vehicle/properties/status")
            path = ref[len(prefix) :]
            return [TypeRef(path, _anchor(path.split("/", 1)[0]))]
        return [TypeRef(ref)]
    if depth > 3:
        return [TypeRef("…")]
    for combiner, joint in (("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")):
        parts = schema.get(combiner)
        if isinstance(parts, list) and parts:
            out: list[TypeRef] = []
            for i, part in enumerate(parts):
                if i:
                    out.append(TypeRef(joint))
                out += describe(part, depth + 1)
            return out
    if "const" in schema:
        return [TypeRef(f"const {schema['const']!r}")]
    kind = schema.get("type")
    if kind == "array":
        return [TypeRef("array of ")] + describe(schema.get("items"), depth + 1)
    if isinstance(kind, list):
        return [TypeRef(" | ".join(str(k) for k in kind))]
    if isinstance(kind, str):
        fmt = schema.get("format")
        return [TypeRef(f"{kind} ({fmt})" if fmt else kind)]
    if "properties" in schema:
        return [TypeRef("object")]
    return [TypeRef("any")]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _properties(schema: Any) -> list[Property]:
    if not isinstance(schema, dict):
        return []
    required = set(schema.get("required") or [])
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    return [
        Property(name, describe(sub), name in required, _text((sub or {}).get("description")))
        for name, sub in props.items()
    ]


def _bodies(content: Any) -> list[Body]:
    if not isinstance(content, dict):
        return []
    return [Body(media, describe((spec or {}).get("schema"))) for media, spec in content.items()]


def build(document: dict[str, Any]) -> DocumentView:
    info = document.get("info") or {}
    operations = []
    for path, item in (document.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        shared = item.get("parameters") or []
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            params = [
                Property(
                    f"{p.get('name')} ({p.get('in')})",
                    describe(p.get("schema")),
                    bool(p.get("required")),
                    _text(p.get("description")),
                )
                for p in [*shared, *(op.get("parameters") or [])]
                if isinstance(p, dict)
            ]
            body = op.get("requestBody") or {}
            responses = [
                ResponseView(str(code), _text((spec or {}).get("description")), _bodies((spec or {}).get("content")))
                for code, spec in (op.get("responses") or {}).items()
            ]
            operations.append(
                Operation(
                    method,
                    path,
                    f"op-{method}-{''.join(ch if ch.isalnum() else '-' for ch in path)}",
                    _text(op.get("summary")),
                    _text(op.get("description")),
                    params,
                    _bodies(body.get("content") if isinstance(body, dict) else None),
                    responses,
                )
            )
    schemas = []
    for name, schema in sorted(((document.get("components") or {}).get("schemas") or {}).items()):
        spec = schema if isinstance(schema, dict) else {}
        schemas.append(
            SchemaView(
                name,
                _anchor(name),
                _text(spec.get("description")),
                describe(spec) if "properties" not in spec else [TypeRef("object")],
                _properties(spec),
                [str(v) for v in spec.get("enum") or []],
            )
        )
    return DocumentView(
        _text(info.get("title")) or "API",
        _text(info.get("version")),
        _text(document.get("openapi")),
        _text(info.get("description")),
        [_text(s.get("url")) for s in document.get("servers") or [] if isinstance(s, dict)],
        operations,
        schemas,
    )
