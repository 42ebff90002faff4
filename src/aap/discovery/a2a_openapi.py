"""``GET /a2a/openapi.json``: the seed's A2A JSON-RPC OpenAPI document, pointed at this deployment.

The seed document is the contract (operation, header rules, every component
schema); the only deployment-specific fact is its ``servers`` entry, which is
replaced with this deployment's A2A endpoint.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from aap.config.model import Settings
from aap.spec import openapi_document

MEDIA_TYPE = "application/vnd.oai.openapi+json"


def build_document(settings: Settings) -> dict[str, Any]:
    document = copy.deepcopy(openapi_document())
    document["servers"] = [
        {
            "url": settings.urls.a2a,
            "description": f"{settings.agent.name}: AAP over A2A JSON-RPC 2.0",
        }
    ]
    return document


def render(settings: Settings) -> bytes:
    return orjson.dumps(build_document(settings))
