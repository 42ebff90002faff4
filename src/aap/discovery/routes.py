"""The discovery documents as a surface: the paths they are served at, and the route table.

Each document is rendered by the module that owns it (:mod:`~aap.discovery.agent_card`,
:mod:`~aap.discovery.llms_txt`, :mod:`~aap.discovery.api_catalog`,
:mod:`~aap.discovery.ai_catalog`, :mod:`~aap.discovery.a2a_openapi`,
:mod:`~aap.discovery.schemas_route`) from the deployment settings, on its first request, and
kept (:class:`_Rendered`).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from aap.discovery import a2a_openapi, ai_catalog, api_catalog, llms_txt, schemas_route
from aap.discovery.agent_card import AgentCard
from aap.discovery.card_keys import CardKeys, ConfiguredCardKeys
from aap.gateway import Gateway
from aap.paths import (
    A2A_OPENAPI_PATH,
    AGENT_CARD_KEYS_PATH,
    AGENT_CARD_PATH,
    AI_CATALOG_PATH,
    API_CATALOG_PATH,
    LLMS_TXT_PATH,
    SCHEMAS_PREFIX,
)
from aap.web.documents import StaticDocument
from aap.web.errors import ErrorShape
from aap.web.parts import BindingParts

__all__ = ["ERROR_SHAPES", "PATHS", "build"]


class _Rendered:
    """A document rendered on first use, then served as it is."""

    def __init__(self, render: Callable[[], StaticDocument]) -> None:
        self._render = render
        self._document: StaticDocument | None = None

    def __call__(self) -> StaticDocument:
        if self._document is None:
            self._document = self._render()
        return self._document


def _static_route(path: str, document: _Rendered, extra_headers: dict[str, str] | None = None) -> Route:
    async def endpoint(request: Request) -> Response:
        response = document().respond(request)
        for name, value in (extra_headers or {}).items():
            response.headers[name] = value
        return response

    return Route(path, endpoint, methods=["GET", "HEAD"])


#: The paths this surface answers (:mod:`aap.web.surface`); errors in the app's plain shape.
PATHS = (
    AGENT_CARD_PATH,
    AGENT_CARD_KEYS_PATH,
    LLMS_TXT_PATH,
    API_CATALOG_PATH,
    AI_CATALOG_PATH,
    A2A_OPENAPI_PATH,
    SCHEMAS_PREFIX,
)
ERROR_SHAPES: dict[str, ErrorShape] = {}


def build(gateway: Gateway, keys: CardKeys | None = None) -> BindingParts:
    """Routes for the agent card, ``/llms.txt``, ``/.well-known/api-catalog``, ``/.well-known/ai-catalog.json``,
    ``/a2a/openapi.json`` and ``/schemas/``."""
    agent = gateway.agent
    settings = agent.settings
    urls = settings.urls
    # The card's signing key (docs/a2a.md, "Signed agent card"): an environment variable or a tenant secret.
    signing = (keys or ConfiguredCardKeys()).signing_key(settings)
    card = AgentCard(agent, signing)
    llms = _Rendered(
        lambda: StaticDocument(llms_txt.render(settings, agent.skills).encode("utf-8"), llms_txt.MEDIA_TYPE)
    )
    catalog = _Rendered(lambda: StaticDocument(api_catalog.render(settings), api_catalog.MEDIA_TYPE))
    ai = _Rendered(lambda: StaticDocument(ai_catalog.render(settings), ai_catalog.MEDIA_TYPE))
    openapi = _Rendered(lambda: StaticDocument(a2a_openapi.render(settings), a2a_openapi.MEDIA_TYPE))
    schemas = schemas_route.schema_documents  # the package's files: the same for every agent
    index = _Rendered(lambda: schemas_route.index_document(settings, schemas()))

    async def schema_file(request: Request) -> Response:
        document = schemas().get(request.path_params["name"])
        if document is None:
            return JSONResponse(
                {"error": "not_found", "error_description": "No such schema; see " + urls.schemas},
                status_code=404,
            )
        return document.respond(request)

    catalog_link = {"Link": f'<{urls.api_catalog}>; rel="api-catalog"'}
    key_set = None
    if signing is not None:
        jwks = {"keys": [signing.public_jwk()]}
        key_set = _Rendered(lambda: StaticDocument(orjson.dumps(jwks), "application/jwk-set+json"))

    async def card_keys(request: Request) -> Response:
        """The signing key's JWK Set (the signatures' ``jku``); 404 for an unsigned card. Always
        routed, so that which surface owns the path does not depend on one agent's settings."""
        if key_set is None:
            return JSONResponse({"error": "not_found", "error_description": "This agent card is not signed."}, 404)
        return key_set().respond(request)

    routes: list[BaseRoute] = [
        Route(AGENT_CARD_PATH, card.endpoint, methods=["GET"], name="agent_card"),
        Route(AGENT_CARD_KEYS_PATH, card_keys, methods=["GET", "HEAD"]),
        _static_route(LLMS_TXT_PATH, llms),
        _static_route(API_CATALOG_PATH, catalog, catalog_link),
        _static_route(AI_CATALOG_PATH, ai),
        _static_route(A2A_OPENAPI_PATH, openapi),
        _static_route(SCHEMAS_PREFIX, index),
        Route(SCHEMAS_PREFIX + "{name:str}", schema_file, methods=["GET", "HEAD"]),
    ]
    return BindingParts(routes=routes)
