"""AAP 3.1 JSON Schemas as package data, and the one validator every binding uses.

Schemas are named by file stem: ``"inventory-search-request"`` is
``schemas/inventory-search-request.schema.json``, i.e. the seed OpenAPI component
``InventorySearchRequest`` in kebab case.  They resolve their ``$ref``s through a
local registry only (see :mod:`aap.spec.schema_files`); nothing is fetched.

``validate()`` returns every problem at once, ready for ``details.errors[]``, and
never quotes the instance (request values are customer data).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from aap.spec import schema_files
from aap.spec.validator import UnknownSchema, compiled, is_valid, problem_order, validate

__all__ = [
    "UnknownSchema",
    "compiled",
    "is_valid",
    "openapi_document",
    "problem_order",
    "schema",
    "schema_bytes",
    "schema_names",
    "schema_url",
    "validate",
]


def schema_names() -> list[str]:
    """Every bundled schema stem, sorted."""
    return list(schema_files.documents())


def _known(name: str) -> None:
    if name not in schema_files.documents():
        raise UnknownSchema(name)


def schema(name: str) -> dict[str, Any]:
    """A copy of schema ``name`` as a dict."""
    _known(name)
    return copy.deepcopy(schema_files.documents()[name])


def schema_url(name: str) -> str:
    """The schema's ``$id``: ``https://autoagentprotocol.org/v3.1/schemas/<name>.schema.json``
    for AAP 3.1 schemas; the older/newer standalone seeds keep their own ``$id``."""
    _known(name)
    url: str = schema_files.documents()[name]["$id"]
    return url


def schema_bytes(name: str) -> bytes:
    """The exact file contents, for serving under ``/schemas/<name>.schema.json``."""
    _known(name)
    return schema_files.raw_files()[name]


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the seed OpenAPI document (AAP 3.1 A2A JSON-RPC binding) as JSON."""
    document: dict[str, Any] = json.loads(schema_files.openapi_bytes())
    return document
