"""The public dealer page: the dealership as AI assistants see it, for people (docs/console.md).

``GET /`` shows the profile (``dealer.information``), a search form with the
filters and sorts the agent advertises, paged results (``inventory.search``)
and a "connect an assistant" panel; ``GET /vehicles/{vehicle_id}`` one listing
(``inventory.vehicle``) with a form to ask the dealer about it; ``GET /contact``
the general contact form, and ``POST /contact`` where every contact form is sent
(``lead.submit``, :mod:`aap.site.contact`); ``GET /api-docs/a2a`` and
``/api-docs/poppy`` the OpenAPI documents as readable pages. Every answer comes
through the gateway (:mod:`aap.gateway`) as door ``web`` — the same validation, the
same data, the same errors and the same prices as any assistant gets: a page view
takes one token of the caller's rate limit, like an API call, and each skill call it
makes costs what its work costs beyond that, as on the other doors (a lead four in all).

The page shows no stored personal data: it reads the inventory and the profile, and a
contact form's answer shows the shopper only what they sent. ``[web] public_page =
false`` removes these routes (an API-only host); ``[web] contact_form = false`` the forms.

Where each part lives: :mod:`~aap.site.core` (the :class:`~aap.site.core.PublicSite`: the
calls to the core, what every page is given), :mod:`~aap.site.pages` (``/`` and a vehicle's
page), :mod:`~aap.site.search_form` (the search form's fields and their reading),
:mod:`~aap.site.contact_pages` and :mod:`~aap.site.contact` (the contact forms: the pages,
and what a form means), :mod:`~aap.site.api_docs` with :mod:`~aap.site.openapi_view` (the
API documents as pages), :mod:`~aap.site.routes` (the route table).
"""

from aap.site.routes import ERROR_SHAPES, PATHS, build

__all__ = ["ERROR_SHAPES", "PATHS", "build"]
