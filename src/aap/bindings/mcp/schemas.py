"""Self-contained JSON Schemas for MCP tool definitions.

MCP clients must not fetch ``$ref`` targets from the network and may reject a
schema whose external reference they cannot resolve, so a tool's
``inputSchema``/``outputSchema`` is the AAP schema *bundled*: every schema it
references is copied under ``$defs`` and every ``$ref`` rewritten to a local
JSON Pointer (``#/$defs/<name>/...``). Nested ``$id``/``$schema`` members are
dropped, so no URL is left for a client to chase; the canonical schema URLs
travel in the tool's ``_meta`` instead.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any, Callable
from urllib.parse import urldefrag, urljoin

from aap import SCHEMA_BASE_URL
from aap.spec import schema

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


def _pointer_token(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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
        return f"/$defs/{_pointer_token(self.keys[url])}"

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


def bundle(name: str, load: Loader = _load_from_spec) -> dict[str, Any]:
    """The AAP schema ``name`` with every reference inlined; root ``type: object``."""
    url = schema_url(name)
    root = copy.deepcopy(load(url))
    root.pop("$id", None)
    root.pop("$schema", None)
    bundler = _Bundler(url, load)
    bundler.rewrite(root, url)
    local_defs = root.get("$defs", {})
    for key, value in bundler.defs.items():
        if key in local_defs:
            raise ValueError(f"$defs key {key!r} of {name} collides with a bundled schema")
        local_defs[key] = value
    if local_defs:
        root["$defs"] = local_defs
    root.setdefault("type", "object")
    return {"$schema": DIALECT, **root}


@lru_cache(maxsize=None)
def bundled(name: str) -> dict[str, Any]:
    """Cached :func:`bundle` of a packaged AAP schema (treat as read-only)."""
    return bundle(name)
