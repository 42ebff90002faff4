"""``GET /api-docs/{name}``: the OpenAPI documents this deployment serves, as readable pages.

Each document is read once through the app itself (so the page shows exactly what is served),
turned into a view by :mod:`aap.site.openapi_view`, and kept by the
:class:`~aap.site.core.PublicSite`.
"""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response

from aap.paths import A2A_OPENAPI_PATH, POPPY_OPENAPI_PATH, SITE_PATH
from aap.site import openapi_view
from aap.site.core import PublicSite
from aap.web.accesslog import annotate
from aap.web.pages import render, url

API_DOCUMENTS = {"a2a": (A2A_OPENAPI_PATH, "A2A JSON-RPC binding"), "poppy": (POPPY_OPENAPI_PATH, "Poppy native API")}


async def _document(site: PublicSite, request: Request, name: str) -> openapi_view.DocumentView | None:
    """The document this app serves at the path, read once through the app itself."""
    if name not in site.documents:
        transport = httpx.ASGITransport(app=request.app)
        async with httpx.AsyncClient(transport=transport, base_url=site.urls.base_url) as client:
            answer = await client.get(API_DOCUMENTS[name][0])
        site.documents[name] = openapi_view.build(answer.json()) if answer.status_code == 200 else None
    return site.documents[name]


async def api_docs(site: PublicSite, request: Request) -> Response:
    annotate(request.scope, binding="site")
    name = request.path_params["name"]
    if name not in API_DOCUMENTS:
        return render(
            site.pages,
            request,
            "error.html",
            {
                **site.common(request),
                "heading": "No such API document",
                "message": "The API documents are: " + ", ".join(API_DOCUMENTS),
                "back": url(request, SITE_PATH),
            },
            status_code=404,
        )
    document = await _document(site, request, name)
    if document is None:
        return render(
            site.pages,
            request,
            "error.html",
            {
                **site.common(request),
                "heading": "Not served here",
                "message": f"This deployment does not serve the {API_DOCUMENTS[name][1]}.",
                "back": url(request, SITE_PATH),
            },
            status_code=404,
        )
    return render(
        site.pages,
        request,
        "api_docs.html",
        {
            **site.common(request),
            "doc": document,
            "name": name,
            "json_url": url(request, API_DOCUMENTS[name][0]),
            "documents": API_DOCUMENTS,
        },
    )
