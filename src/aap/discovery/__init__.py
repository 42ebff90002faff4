"""Discovery documents that agree with each other: llms.txt, api-catalog, schemas, A2A OpenAPI.

``build(agent)`` renders every document once from the deployment settings
(so each ETag is a hash of exactly what is served) and returns the routes as
:class:`~aap.web.parts.BindingParts`. The agent card and poppy.json are served
by their own bindings from the same :class:`~aap.discovery.urls.DeploymentUrls`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aap.discovery import a2a_openapi, api_catalog, llms_txt, schemas_route
from aap.discovery.http import StaticDocument
from aap.discovery.urls import (
    A2A_OPENAPI_PATH,
    API_CATALOG_PATH,
    LLMS_TXT_PATH,
    SCHEMAS_PREFIX,
    DeploymentUrls,
)
from aap.web.parts import BindingParts

__all__ = ["build", "DeploymentUrls"]


def _static_route(path: str, document: StaticDocument, extra_headers: dict[str, str] | None = None) -> Route:
    async def endpoint(request: Request) -> Response:
        response = document.respond(request)
        for name, value in (extra_headers or {}).items():
            response.headers[name] = value
        return response

    return Route(path, endpoint, methods=["GET", "HEAD"])


def build(agent: Any) -> BindingParts:
    """Routes for ``/llms.txt``, ``/.well-known/api-catalog``, ``/a2a/openapi.json`` and ``/schemas/``."""
    settings = agent.settings
    urls = DeploymentUrls(settings)
    llms = StaticDocument(llms_txt.render(settings, agent.skills).encode("utf-8"), llms_txt.MEDIA_TYPE)
    catalog = StaticDocument(api_catalog.render(settings), api_catalog.MEDIA_TYPE)
    openapi = StaticDocument(a2a_openapi.render(settings), a2a_openapi.MEDIA_TYPE)
    schemas = schemas_route.schema_documents()
    index = schemas_route.index_document(settings, schemas)

    async def schema_file(request: Request) -> Response:
        document = schemas.get(request.path_params["name"])
        if document is None:
            return JSONResponse(
                {"error": "not_found", "error_description": "No such schema; see " + urls.schemas},
                status_code=404,
            )
        return document.respond(request)

    catalog_link = {"Link": f'<{urls.api_catalog}>; rel="api-catalog"'}
    routes = [
        _static_route(LLMS_TXT_PATH, llms),
        _static_route(API_CATALOG_PATH, catalog, catalog_link),
        _static_route(A2A_OPENAPI_PATH, openapi),
        _static_route(SCHEMAS_PREFIX, index),
        Route(SCHEMAS_PREFIX + "{name:str}", schema_file, methods=["GET", "HEAD"]),
    ]
    return BindingParts(routes=routes)
