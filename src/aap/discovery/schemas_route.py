"""``GET /schemas/<name>.schema.json``: the AAP 3.1 JSON Schemas for offline clients.

The path mirrors the published layout (``schema_base_url`` +
``<name>.schema.json``), so a client that cannot reach autoagentprotocol.org
swaps the base URL for this deployment's ``/schemas/`` and resolves every
``$ref`` locally. ``GET /schemas/`` lists what is available. Bytes are served
verbatim: the ``$id`` values stay the canonical identifiers.
"""

from __future__ import annotations

import functools

import orjson

from aap import SCHEMA_BASE_URL, spec
from aap.config.model import Settings
from aap.web.documents import StaticDocument

MEDIA_TYPE = "application/schema+json"
SUFFIX = ".schema.json"
# Schemas are fixed for a release: clients may keep them for a day.
MAX_AGE = 86_400


@functools.cache
def schema_documents() -> dict[str, StaticDocument]:
    """``<name>.schema.json`` → document, for every schema the package carries.

    Made once per process: the files are the package's own, the same for every agent it serves.
    """
    names = spec.schema_names()
    return {f"{name}{SUFFIX}": StaticDocument(spec.schema_bytes(name), MEDIA_TYPE, MAX_AGE) for name in sorted(names)}


def index_document(settings: Settings, documents: dict[str, StaticDocument]) -> StaticDocument:
    """``GET /schemas/``: each file's local URL and its canonical ``$id`` (when it has one)."""
    urls = settings.urls
    entries = []
    for filename in sorted(documents):
        entry = {"name": filename, "url": urls.schema(filename)}
        schema_id = orjson.loads(documents[filename].body).get("$id")
        if isinstance(schema_id, str):
            entry["$id"] = schema_id
        entries.append(entry)
    body = {"schema_base_url": SCHEMA_BASE_URL, "local_base_url": urls.schemas, "schemas": entries}
    return StaticDocument(orjson.dumps(body, option=orjson.OPT_INDENT_2), "application/json", MAX_AGE)
