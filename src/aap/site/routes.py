"""The public page as a surface: the paths it answers and its route table, one row per page.

The handlers are named functions ``handler(site, request)`` of :mod:`~aap.site.pages`,
:mod:`~aap.site.contact_pages` and :mod:`~aap.site.api_docs`, over one
:class:`~aap.site.core.PublicSite`.
"""

from __future__ import annotations

from functools import partial

from starlette.routing import BaseRoute, Route

from aap.gateway import Gateway
from aap.paths import API_DOCS_PREFIX, CONTACT_PAGE_PATH, SITE_ASSETS_PREFIX, SITE_PATH, VEHICLE_PAGE_PREFIX
from aap.site.api_docs import api_docs
from aap.site.contact_pages import contact, contact_submit
from aap.site.core import PublicSite
from aap.site.pages import home, vehicle
from aap.web.errors import ErrorShape
from aap.web.pages import asset_routes
from aap.web.parts import BindingParts

#: The paths this surface answers (:mod:`aap.web.surface`); errors in the app's plain shape.
PATHS = (SITE_PATH, VEHICLE_PAGE_PREFIX, API_DOCS_PREFIX, SITE_ASSETS_PREFIX, CONTACT_PAGE_PATH)
ERROR_SHAPES: dict[str, ErrorShape] = {}


def build(gateway: Gateway) -> BindingParts:
    """The public page's routes, unless ``[web] public_page = false``."""
    if not gateway.settings.web.public_page:
        return BindingParts()
    site = PublicSite(gateway)
    routes: list[BaseRoute] = [
        Route(SITE_PATH, partial(home, site), methods=["GET", "HEAD"], name="site_home"),
        Route(
            VEHICLE_PAGE_PREFIX + "{vehicle_id:str}",
            partial(vehicle, site),
            methods=["GET", "HEAD"],
            name="site_vehicle",
        ),
        Route(API_DOCS_PREFIX + "{name:str}", partial(api_docs, site), methods=["GET", "HEAD"], name="site_api_docs"),
        *asset_routes(SITE_ASSETS_PREFIX),
    ]
    if gateway.settings.web.contact_form:
        routes += [
            Route(CONTACT_PAGE_PATH, partial(contact, site), methods=["GET", "HEAD"], name="site_contact"),
            Route(CONTACT_PAGE_PATH, partial(contact_submit, site), methods=["POST"], name="site_contact_submit"),
        ]
    return BindingParts(routes=routes)
