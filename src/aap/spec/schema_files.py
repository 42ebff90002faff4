"""The schema files packaged with aap, and a ``referencing`` registry over them that never leaves the package.

Every ``*.schema.json`` under ``schemas/`` is registered twice: under its ``$id``
(``https://autoagentprotocol.org/v3.1/schemas/vehicle.schema.json``) and under its
bare file name (``vehicle.schema.json``), so both absolute and relative refs resolve.
The same resources back the jsonschema-rs registry (:func:`rust_registry`).
Anything else is refused: the schema URLs are identifiers, and a validator that
fetched them would make request handling depend on a third-party host.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, NoReturn

import jsonschema_rs
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012, SchemaRegistry, SchemaResource

SUFFIX = ".schema.json"
OPENAPI_FILE = "openapi-jsonrpc.json"


class SchemaNotBundled(LookupError):
    """A $ref pointed outside the bundled schemas; nothing is ever fetched."""


def _no_network(uri: str) -> SchemaResource:
    no_fetch(uri)


def _directory() -> Traversable:
    return resources.files("aap.spec") / "schemas"


@functools.cache
def raw_files() -> dict[str, bytes]:
    """stem -> exact bytes of ``<stem>.schema.json`` (what /schemas/ serves)."""
    out: dict[str, bytes] = {}
    for entry in _directory().iterdir():
        if entry.name.endswith(SUFFIX):
            out[entry.name[: -len(SUFFIX)]] = entry.read_bytes()
    return dict(sorted(out.items()))


@functools.cache
def documents() -> dict[str, dict[str, Any]]:
    """stem -> parsed schema. Treat as read-only; the public API hands out copies."""
    return {stem: json.loads(data) for stem, data in raw_files().items()}


@functools.cache
def openapi_bytes() -> bytes:
    return (_directory() / OPENAPI_FILE).read_bytes()


DRAFT202012_URI = "https://json-schema.org/draft/2020-12/schema"


def _referencing(docs: dict[str, dict[str, Any]]) -> SchemaRegistry:
    pairs: list[tuple[str, SchemaResource]] = []
    for stem, contents in docs.items():
        resource: SchemaResource = Resource.from_contents(contents, default_specification=DRAFT202012)
        pairs.append((contents["$id"], resource))
        pairs.append((stem + SUFFIX, resource))
    # `retrieve` is the documented keyword (attrs strips the field's underscore); referencing's
    # dataclass_transform stub does not say so, and mypy expects `_retrieve`.
    registry: SchemaRegistry = Registry(retrieve=_no_network)  # type: ignore[call-arg]
    return registry.with_resources(pairs).crawl()


@functools.cache
def registry() -> SchemaRegistry:
    return _referencing(documents())


@functools.cache
def dialect_free() -> tuple[dict[str, dict[str, Any]], SchemaRegistry]:
    """The schemas without ``$schema``, and their registry (2020-12 by default).

    python-jsonschema picks the class of a referenced resource from its ``$schema``,
    which would swap an extended validator class (aap.spec.validator's) for the
    stock one behind every cross-file ``$ref``; without the declaration it carries
    through.  Every bundled schema is 2020-12, so nothing else changes.
    """
    stripped: dict[str, dict[str, Any]] = {}
    for stem, document in documents().items():
        if document.get("$schema", DRAFT202012_URI) != DRAFT202012_URI:
            raise ValueError(f"{stem}: only JSON Schema 2020-12 schemas are bundled")
        stripped[stem] = {k: v for k, v in document.items() if k != "$schema"}
    return stripped, _referencing(stripped)


@functools.cache
def rust_registry() -> jsonschema_rs.Registry:
    """The same resources for jsonschema-rs, with the same refusal to fetch anything."""
    pairs: list[tuple[str, dict[str, Any]]] = []
    for stem, contents in documents().items():
        pairs.append((contents["$id"], contents))
        pairs.append((stem + SUFFIX, contents))
    return jsonschema_rs.Registry(pairs, draft=jsonschema_rs.Draft202012, retriever=no_fetch)


def no_fetch(uri: str) -> NoReturn:
    """jsonschema-rs retriever: never fetch."""
    raise SchemaNotBundled(f"{uri} is not a bundled AAP schema (schemas are never fetched)")
