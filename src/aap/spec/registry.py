"""The bundled AAP schemas and a ``referencing`` registry that never leaves the package.

Every ``*.schema.json`` under ``schemas/`` is registered twice: under its ``$id``
(``https://autoagentprotocol.org/v3.1/schemas/vehicle.schema.json``) and under its
bare file name (``vehicle.schema.json``), so both absolute and relative refs resolve.
Anything else is refused: the schema URLs are identifiers, and a validator that
fetched them would make request handling depend on a third-party host.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SUFFIX = ".schema.json"
OPENAPI_FILE = "openapi-jsonrpc.json"


class SchemaNotBundled(LookupError):
    """A $ref pointed outside the bundled schemas; nothing is ever fetched."""


def _no_network(uri: str) -> Resource:
    raise SchemaNotBundled(f"{uri} is not a bundled AAP schema (schemas are never fetched)")


def _directory():
    return resources.files("aap.spec") / "schemas"


@functools.cache
def raw_files() -> dict[str, bytes]:
    """stem -> exact bytes of ``<stem>.schema.json`` (what /schemas/ serves)."""
    out = {}
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


@functools.cache
def registry() -> Registry:
    pairs = []
    for stem, contents in documents().items():
        resource = Resource.from_contents(contents, default_specification=DRAFT202012)
        pairs.append((contents["$id"], resource))
        pairs.append((stem + SUFFIX, resource))
    return Registry(retrieve=_no_network).with_resources(pairs).crawl()
