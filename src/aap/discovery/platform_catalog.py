"""The platform host's AI Catalog: every tenant, for 100,000 of them and more (docs/platform.md,
"AI Catalog of the platform").

``GET https://PLATFORM_HOST/.well-known/ai-catalog.json`` is an index: one nested catalog entry
(``application/ai-catalog+json``) per page of :data:`PAGE` tenants in id order, named by the
range of ids it holds. Each page, ``…/ai-catalog.json?after=A&through=B``, lists the tenants with
ids in (A, B] — one nested catalog entry per tenant, its own catalog at its primary public URL
(:mod:`aap.discovery.ai_catalog`). So a client reads at most three levels (index, page, the
tenant's catalog: within the specification's recommended depth of four), each document is
bounded, and nothing of a tenant's configuration is read to list it.

**Decisions:** pages are ranges, not offsets: a tenant added or removed changes only its own
page, never skips another tenant, and a page's URL keeps meaning the same ids (the index names
the ranges anew after every change of the registry, read once per change). A range holds at
most twice :data:`PAGE` tenants (after a burst of additions, until the index is read again).
Both answer with an ``ETag`` and ``Cache-Control: public, max-age=60``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aap.config.platform import PlatformSettings, tenant_id_problem
from aap.discovery.ai_catalog import MEDIA_TYPE, SPEC_VERSION, identifier
from aap.paths import AI_CATALOG_PATH, DeploymentUrls
from aap.store.platform import PlatformStore, TenantRecord
from aap.web.accesslog import annotate
from aap.web.documents import StaticDocument
from aap.work import Work

#: Tenants per page of the platform's catalog.
PAGE = 1000
MAX_AGE = 60


class PlatformCatalog:
    """The platform host's ``/.well-known/ai-catalog.json`` (the index, and its pages)."""

    def __init__(
        self,
        store: PlatformStore,
        platform: PlatformSettings,
        public_url: Callable[[TenantRecord], str],
        work: Work,
    ) -> None:
        self.store = store
        self.work = work
        self.platform = platform
        self.public_url = public_url
        self.urls = DeploymentUrls(platform.base_url)
        self._index: tuple[int, StaticDocument] | None = None  # (the registry's last change, the index)

    def host(self) -> dict[str, Any]:
        return {"displayName": self.platform.host, "identifier": self.platform.host}

    def index(self) -> StaticDocument:
        """The index as of the registry's last change (rebuilt once per change)."""
        seq = self.store.last_change()
        if self._index is not None and self._index[0] == seq:
            return self._index[1]
        entries = []
        start = ""
        for end in self.store.boundaries(PAGE):
            query = f"?after={start}&through={end}" if start else f"?through={end}"
            entries.append(
                {
                    "identifier": identifier(self.platform.base_url, "tenants", end),
                    "displayName": f"Agents after {start} to {end}" if start else f"Agents to {end}",
                    "type": MEDIA_TYPE,
                    "url": self.urls.ai_catalog + query,
                }
            )
            start = end
        body = {"specVersion": SPEC_VERSION, "host": self.host(), "entries": entries}
        document = StaticDocument(orjson.dumps(body), MEDIA_TYPE, MAX_AGE)
        self._index = (seq, document)
        return document

    def page(self, after: str, through: str) -> StaticDocument:
        entries = []
        for record in self.store.directory(after=after, through=through, limit=2 * PAGE):
            url = self.public_url(record)
            entries.append(
                {
                    "identifier": identifier(url, "catalog", record.tenant_id),
                    "type": MEDIA_TYPE,
                    "url": url.rstrip("/") + AI_CATALOG_PATH,
                }
            )
        body = {"specVersion": SPEC_VERSION, "host": self.host(), "entries": entries}
        return StaticDocument(orjson.dumps(body), MEDIA_TYPE, MAX_AGE)

    async def endpoint(self, request: Request) -> Response:
        annotate(request.scope, binding="discovery")
        params = request.query_params
        if not params:
            document = await self.work.blocking(self.index)
            return document.respond(request)
        after, through = params.get("after", ""), params.get("through")
        problems = [
            f"{name}: not a tenant id"
            for name, value in (("after", after), ("through", through))
            if value and tenant_id_problem(value) is not None
        ]
        if through is None or set(params) - {"after", "through"} or len(params.multi_items()) != len(params):
            problems.append("a page is named by through=ID (and after=ID), as the index links it")
        if problems:
            body = {"error": {"status": 400, "message": "No such page of the catalog.", "problems": problems}}
            return JSONResponse(body, status_code=400)
        assert through is not None
        document = await self.work.blocking(self.page, after, through)
        return document.respond(request)
