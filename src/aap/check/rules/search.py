"""inventory.search semantics: limits, pagination invariants, cursor binding, filters, sort."""

from __future__ import annotations

import math
from typing import Any

from aap.check.context import CheckContext, describe
from aap.check.registry import Fail, Skip, rule
from aap.client.errors import AapRemoteError

# Facet key → (filter key, listing field). Every one of these is a whole-value term filter.
TERM_FACETS = {
    "makes": ("make", "make"),
    "models": ("model", "model"),
    "bodies": ("body", "body"),
    "conditions": ("condition", "condition"),
    "fuels": ("fuel", "fuel"),
    "drivelines": ("driveline", "driveline"),
    "transmissions": ("transmission", "transmission"),
    "exterior_colors": ("exterior_color", "exterior_color"),
    "interior_colors": ("interior_color", "interior_color"),
    "statuses": ("status", "status"),
    "vehicle_types": ("vehicle_type", "vehicle_type"),
    "rooftops": ("rooftops", "rooftop"),
}

# One schema-valid value per filter key, for the UNSUPPORTED_FILTER probe.
SAMPLE_FILTERS: dict[str, Any] = {
    "make": ["Honda"],
    "model": ["Civic"],
    "trim": ["EX"],
    "condition": ["used"],
    "vehicle_type": ["car"],
    "transmission": ["automatic"],
    "fuel": ["gasoline"],
    "electric_range_mi_min": 100,
    "electric_range_mi_max": 400,
    "dc_fast_charge": True,
    "charge_port": ["ccs"],
    "driveline": ["awd"],
    "body": ["suv"],
    "displacement_cc_min": 100,
    "displacement_cc_max": 2000,
    "exterior_color": ["black"],
    "interior_color": ["black"],
    "rooftops": ["Main"],
    "status": ["available"],
    "features_all": ["heated_seats"],
    "features_any": ["heated_seats"],
    "near": {"latitude": 40.0, "longitude": -75.0, "radius_mi": 50},
    "year_min": 2015,
    "year_max": 2025,
    "price_min": 1000,
    "price_max": 90000,
    "mileage_max": 100000,
    "vin": "AAPCHECK000000001",
    "stock": "AAPCHECK",
    "query": "aapcheck",
}


#: (dealer_id, vehicle_id, vin, stock): what tells two listings apart across pages.
ListingKey = tuple[Any, Any, Any, Any]


def listing_key(vehicle: dict[str, Any]) -> ListingKey:
    return (vehicle.get("dealer_id"), vehicle.get("vehicle_id"), vehicle.get("vin"), vehicle.get("stock"))


async def search(ctx: CheckContext, **fields: Any) -> dict[str, Any]:
    """inventory.search over A2A, schema-validated; returns ``data``."""
    response = await ctx.ok("a2a", {"type": "inventory.search.request", **fields})
    return response.get("data") or {}


async def walk(
    ctx: CheckContext, filters: dict[str, Any] | None, limit: int, sort: dict[str, str] | None, max_listings: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Follow next_cursor from the first page; returns (listings, pages' data, problems)."""
    base: dict[str, Any] = {"pagination": {"limit": limit}}
    if filters:
        base["filters"] = filters
    if sort:
        base["sort"] = sort
    listings: list[dict[str, Any]] = []
    pages: list[dict[str, Any]] = []
    problems: list[str] = []
    cursor = None
    max_pages = math.ceil(max_listings / limit) + 2
    for _ in range(max_pages):
        fields = dict(base)
        if cursor:
            fields["pagination"] = {"limit": limit, "cursor": cursor}
        data = await search(ctx, **fields)
        pages.append(data)
        page = data.get("vehicles") or []
        if len(page) > limit:
            problems.append(f"page {len(pages)} holds {len(page)} listings for limit {limit}")
        if data.get("limit") != limit:
            problems.append(f"page {len(pages)} echoes limit {data.get('limit')}, expected {limit}")
        listings.extend(page)
        cursor = data.get("next_cursor")
        if cursor is None or len(listings) >= max_listings:
            break
    return listings, pages, problems


def check_traversal(listings: list[dict[str, Any]], pages: list[dict[str, Any]], complete: bool) -> list[str]:
    problems = []
    seen: dict[ListingKey, int] = {}
    for index, vehicle in enumerate(listings):
        key = listing_key(vehicle)
        if key in seen:
            problems.append(f"listing {key[1] or key[2] or key[3]} appears twice (positions {seen[key]} and {index})")
        seen[key] = index
    totals = {p.get("total") for p in pages}
    if len(totals) > 1:
        problems.append(f"total changes between pages: {sorted(map(str, totals))}")
    total = pages[0].get("total") if pages else None
    if complete:
        if pages[-1].get("next_cursor") is not None:
            problems.append("the last page still has a next_cursor")
        if total is not None and total != len(listings):
            problems.append(f"total is {total} but the traversal visited {len(listings)} listings")
    for i, page in enumerate(pages[:-1]):
        if page.get("next_cursor") is None:
            problems.append(f"page {i + 1} has next_cursor null before the set was exhausted")
    return problems


async def walk_target(ctx: CheckContext) -> tuple[dict[str, Any] | None, int]:
    """A query whose matching set is small enough to walk completely, and its size."""
    first = await ctx.first_page()
    total = first.get("total")
    limit_cap = ctx.options.max_walk
    if isinstance(total, int) and total <= limit_cap:
        return None, total
    facets = await ctx.facets()
    caps = await ctx.capabilities()
    for facet_key, (filter_key, _) in TERM_FACETS.items():
        if filter_key not in caps.get("filters", []):
            continue
        for entry in sorted(facets.get(facet_key) or [], key=lambda e: -e.get("count", 0)):
            if 3 <= entry.get("count", 0) <= limit_cap:
                return {filter_key: [entry["value"]]}, entry["count"]
    raise Skip(f"no query with at most {limit_cap} matches found to walk completely")


@rule(
    "search.limit",
    "limit is echoed, defaults to default_limit, and above max_limit is rejected (never clamped)",
    "InventorySearchRequest.pagination, InventoryCapabilities.max_limit (seed 004)",
)
async def search_limit(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    problems = []
    data = await search(ctx)
    if data.get("limit") != caps.get("default_limit"):
        problems.append(
            f"without a limit the response says limit {data.get('limit')}, "
            f"but default_limit is {caps.get('default_limit')}"
        )
    if len(data.get("vehicles") or []) > (caps.get("default_limit") or 0):
        problems.append("the default page is larger than default_limit")
    data = await search(ctx, pagination={"limit": 1})
    if data.get("limit") != 1 or len(data.get("vehicles") or []) > 1:
        problems.append(f"limit 1 answered limit {data.get('limit')} with {len(data.get('vehicles') or [])} listings")
    over = caps["max_limit"] + 1
    outcome = await ctx.call("a2a", {"type": "inventory.search.request", "pagination": {"limit": over}})
    if outcome.error is None:
        echoed = (outcome.response or {}).get("data", {}).get("limit")
        problems.append(
            f"limit {over} (max_limit {caps['max_limit']}) was accepted"
            + (f" and clamped to {echoed}" if echoed != over else "")
        )
    elif not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "SCHEMA_VALIDATION_FAILED":
        problems.append(f"limit {over}: expected SCHEMA_VALIDATION_FAILED, got {describe(outcome.error)}")
    if problems:
        raise Fail("page-size handling is wrong", problems)
    return None


@rule(
    "search.pagination",
    "Walking next_cursor visits every match exactly once and total is exact",
    "InventorySearchResponse.next_cursor/total (seed 004)",
)
async def search_pagination(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    filters, expected = await walk_target(ctx)
    if expected == 0:
        raise Skip("the dealer's inventory is empty")
    limit = max(1, min(caps["max_limit"], math.ceil(expected / 4)))
    sorts: list[dict[str, str] | None] = [None]
    for field in ("make", "price", "year"):
        if field in caps.get("sort_fields", []):
            sorts.append({"field": field, "order": "asc"})
            break
    problems = []
    for sort in sorts:
        listings, pages, page_problems = await walk(ctx, filters, limit, sort, ctx.options.max_walk)
        label = f"sort {sort['field']} {sort['order']}" if sort else "default sort"
        problems += [f"{label}: {p}" for p in page_problems + check_traversal(listings, pages, complete=True)]
        if len(listings) != expected and pages and pages[0].get("total") is not None:
            problems.append(f"{label}: visited {len(listings)} listings, expected {expected}")
    if problems:
        raise Fail("pagination is broken", problems)
    where = f"filters {filters}" if filters else "the whole inventory"
    return f"walked {expected} listings of {where} with limit {limit}"


@rule(
    "search.cursor_binding",
    "A cursor is bound to its query: changed filters, sort or limit → INVALID_CURSOR",
    "InventorySearchRequest.pagination.cursor (seed 004)",
)
async def search_cursor_binding(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    first = await search(ctx, pagination={"limit": 1})
    cursor = first.get("next_cursor")
    if cursor is None:
        raise Skip("fewer than two listings: no cursor to reuse")
    problems = []
    follow = await ctx.call("a2a", {"type": "inventory.search.request", "pagination": {"limit": 1, "cursor": cursor}})
    if follow.error is not None:
        problems.append(f"the cursor does not continue its own query: {describe(follow.error)}")
    variants: list[tuple[str, dict[str, Any]]] = []
    filter_value = await _some_filter(ctx)
    if filter_value:
        variants.append(
            (
                f"different filters {filter_value}",
                {"filters": filter_value, "pagination": {"limit": 1, "cursor": cursor}},
            )
        )
    other_sort = next(
        (
            {"field": f, "order": "asc"}
            for f in caps.get("sort_fields", [])
            if f != "distance_mi" and {"field": f, "order": "asc"} != first.get("sort")
        ),
        None,
    )
    if other_sort:
        variants.append(("a different sort", {"sort": other_sort, "pagination": {"limit": 1, "cursor": cursor}}))
    if caps["max_limit"] >= 2:
        variants.append(("a different limit", {"pagination": {"limit": 2, "cursor": cursor}}))
    tampered = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    variants.append(("a tampered cursor", {"pagination": {"limit": 1, "cursor": tampered}}))
    for label, fields in variants:
        outcome = await ctx.call("a2a", {"type": "inventory.search.request", **fields})
        if not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "INVALID_CURSOR":
            got = describe(outcome.error) if outcome.error else "a page of results"
            problems.append(f"cursor reused with {label}: expected INVALID_CURSOR, got {got}")
        elif outcome.error.retryable:
            problems.append(f"cursor reused with {label}: INVALID_CURSOR must not be retryable")
    if problems:
        raise Fail("cursors are not bound to their query", problems)
    return None


async def _some_filter(ctx: CheckContext) -> dict[str, Any] | None:
    caps = await ctx.capabilities()
    try:
        facets = await ctx.facets()
    except Skip:
        facets = {}
    for facet_key, (filter_key, _) in TERM_FACETS.items():
        if filter_key in caps.get("filters", []) and facets.get(facet_key):
            return {filter_key: [facets[facet_key][0]["value"]]}
    if "year_min" in caps.get("filters", []):
        return {"year_min": 1900}
    return None


def _field_matches(filter_key: str, listing_value: Any, wanted: Any) -> bool:
    if filter_key == "vehicle_type":
        listing_value = listing_value or "car"
    if filter_key in ("rooftops", "status", "condition", "vehicle_type"):
        return listing_value == wanted
    if isinstance(listing_value, str) and isinstance(wanted, str):
        return listing_value.strip().casefold() == wanted.strip().casefold()
    return listing_value == wanted


@rule(
    "search.filters",
    "Filtering by values from the dealer's own facets returns exactly the facet counts",
    "InventorySearchRequest filters, Facets (seed 004)",
)
async def search_filters(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    facets = await ctx.facets()
    problems = []
    sampled = []
    for facet_key, (filter_key, field) in TERM_FACETS.items():
        if filter_key not in caps.get("filters", []):
            continue
        entries = [e for e in facets.get(facet_key) or [] if e.get("count", 0) > 0]
        if not entries:
            continue
        entry = min(entries, key=lambda e: e["count"])  # the smallest bucket walks fastest
        value, count = entry["value"], entry["count"]
        filters = {filter_key: [value]}
        sampled.append(f"{filter_key}={value!r}")
        limit = max(1, min(caps["max_limit"], 50))
        listings, pages, page_problems = await walk(ctx, filters, limit, None, ctx.options.max_walk)
        problems += [f"{filter_key}={value!r}: {p}" for p in page_problems]
        total = pages[0].get("total") if pages else None
        if total is not None and total != count:
            problems.append(f"{filter_key}={value!r}: total {total}, but the {facet_key} facet counts {count}")
        if count <= ctx.options.max_walk and len(listings) != count:
            problems.append(f"{filter_key}={value!r}: walked {len(listings)} listings, the facet counts {count}")
        wrong = [v for v in listings if not _field_matches(filter_key, v.get(field), value)]
        if wrong:
            problems.append(f"{filter_key}={value!r}: {len(wrong)} result(s) have {field}={wrong[0].get(field)!r}")
        applied = (pages[0].get("applied_filters") or {}).get(filter_key) if pages else None
        if applied is None:
            problems.append(f"{filter_key}={value!r}: applied_filters does not report the filter")
        scoped = await ctx.ok("a2a", {"type": "inventory.facets.request", "filters": filters})
        counts = {e.get("value"): e.get("count") for e in (scoped.get("data") or {}).get(facet_key) or []}
        if counts.get(value) != count:
            problems.append(
                f"{filter_key}={value!r}: facets scoped to the filter count {counts.get(value)}, unscoped {count}"
            )
        if len(sampled) >= 3:
            break
    features = [f for f in facets.get("features") or [] if f.get("count", 0) > 0]
    if features and "features_all" in caps.get("filters", []):
        feature = min(features, key=lambda f: f["count"])
        code = feature["code"]
        sampled.append(f"features_all=[{code!r}]")
        listings, pages, _ = await walk(
            ctx, {"features_all": [code]}, max(1, min(caps["max_limit"], 50)), None, ctx.options.max_walk
        )
        total = pages[0].get("total") if pages else None
        if total is not None and total != feature["count"]:
            problems.append(f"features_all=[{code!r}]: total {total}, the features facet counts {feature['count']}")
        for vehicle in listings:
            evidence = [e for e in vehicle.get("feature_evidence") or [] if isinstance(e, dict)]
            if not any(e.get("code") == code and e.get("status") == "present" for e in evidence):
                problems.append(f"features_all=[{code!r}]: a result lacks present evidence for {code}")
                break
    if not sampled:
        raise Skip("the facets offer no term value to sample")
    if problems:
        raise Fail("filter results disagree with the dealer's facets", problems)
    return "sampled " + ", ".join(sampled)


def _order_problems(listings: list[dict[str, Any]], field: str, order: str) -> list[str]:
    """Order violations; strings pass in casefolded or in raw order (AAP fixes no collation)."""
    folded = _order_problems_by(listings, field, order, casefold=True)
    if folded and any(isinstance(v.get(field), str) for v in listings):
        raw = _order_problems_by(listings, field, order, casefold=False)
        return raw if raw else []
    return folded


def _order_problems_by(listings: list[dict[str, Any]], field: str, order: str, *, casefold: bool) -> list[str]:
    present_done = False
    previous = None
    for index, vehicle in enumerate(listings):
        value = vehicle.get(field)
        if value is None:
            present_done = True
            continue
        if present_done:
            return [f"{field} {order}: a listing with {field} follows listings without it (missing sorts last)"]
        key = value.casefold() if casefold and isinstance(value, str) else value
        if previous is not None:
            try:
                wrong = key < previous if order == "asc" else key > previous
            except TypeError:
                return [f"{field}: values of different types cannot be ordered"]
            if wrong:
                return [f"{field} {order}: position {index} ({value!r}) is out of order"]
        previous = key
    return []


@rule(
    "search.sort",
    "Results follow the requested sort, with missing values last",
    "InventorySearchRequest.sort (seed 004)",
)
async def search_sort(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    fields = [f for f in ("price", "year", "mileage", "make") if f in caps.get("sort_fields", [])]
    if not fields:
        raise Skip("none of price, year, mileage, make is a supported sort field")
    problems = []
    limit = max(1, min(caps["max_limit"], 50))
    for field in fields[:2]:
        for order in ("asc", "desc"):
            listings, pages, page_problems = await walk(
                ctx, None, limit, {"field": field, "order": order}, min(ctx.options.max_walk, 3 * limit)
            )
            problems += page_problems
            if pages and pages[0].get("sort") != {"field": field, "order": order}:
                problems.append(f"{field} {order}: the response echoes sort {pages[0].get('sort')}")
            if field == "mileage":
                continue  # mixed native units: order holds on converted values only
            problems += _order_problems(listings, field, order)
    if problems:
        raise Fail("sorting is wrong", problems)
    return None


@rule(
    "search.unsupported",
    "A filter or sort the card does not advertise is rejected, never ignored",
    "InventoryCapabilities.filters/sort_fields (seed 004)",
)
async def search_unsupported(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    problems = []
    tried = []
    missing_filters = [k for k in SAMPLE_FILTERS if k not in caps.get("filters", [])]
    if missing_filters:
        key = missing_filters[0]
        tried.append(f"filter {key}")
        outcome = await ctx.call("a2a", {"type": "inventory.search.request", "filters": {key: SAMPLE_FILTERS[key]}})
        if not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "UNSUPPORTED_FILTER":
            problems.append(
                f"unadvertised filter {key}: expected UNSUPPORTED_FILTER, got "
                f"{describe(outcome.error) if outcome.error else 'results'}"
            )
    missing_sorts = [
        f
        for f in ("price", "list_price", "msrp", "mileage", "year", "make", "model", "stock", "updated_at")
        if f not in caps.get("sort_fields", [])
    ]
    if missing_sorts:
        field = missing_sorts[0]
        tried.append(f"sort {field}")
        outcome = await ctx.call("a2a", {"type": "inventory.search.request", "sort": {"field": field, "order": "asc"}})
        if not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "UNSUPPORTED_SORT":
            problems.append(
                f"unadvertised sort {field}: expected UNSUPPORTED_SORT, got "
                f"{describe(outcome.error) if outcome.error else 'results'}"
            )
    if not tried:
        raise Skip("every filter and sort field is advertised")
    if problems:
        raise Fail("unsupported input was not rejected", problems)
    return "tried " + ", ".join(tried)


@rule(
    "search.skip",
    "pagination.skip works only when capabilities.offset is true",
    "InventoryCapabilities.offset (seed 004)",
)
async def search_skip(ctx: CheckContext) -> str | None:
    caps = await ctx.capabilities()
    outcome = await ctx.call("a2a", {"type": "inventory.search.request", "pagination": {"limit": 1, "skip": 1}})
    if not caps.get("offset"):
        if not isinstance(outcome.error, AapRemoteError) or outcome.error.code != "SCHEMA_VALIDATION_FAILED":
            raise Fail("offset is false but skip was not rejected with SCHEMA_VALIDATION_FAILED")
        return None
    if outcome.error is not None:
        raise Fail(f"offset is true but skip failed: {describe(outcome.error)}")
    data = (outcome.response or {}).get("data") or {}
    if data.get("skip") != 1:
        raise Fail(f"the response does not echo skip (got {data.get('skip')!r})")
    two = await search(ctx, pagination={"limit": 2})
    expected = (two.get("vehicles") or [])[1:2]
    got = data.get("vehicles") or []
    if [listing_key(v) for v in got] != [listing_key(v) for v in expected]:
        raise Fail("skip 1 does not return the second listing of the same ordering")
    return None


@rule(
    "vehicle.lookup",
    "inventory.vehicle finds a listing by each of its identifiers; unknown VIN → not found",
    "VehicleDetailRequest/Response (seed 004)",
)
async def vehicle_lookup(ctx: CheckContext) -> str | None:
    await ctx.implements("inventory.vehicle")
    listing = await ctx.sample_listing()
    problems = []
    used = []
    for key in ("vehicle_id", "vin", "stock"):
        value = listing.get(key)
        if not isinstance(value, str):
            continue
        used.append(key)
        outcome = await ctx.call("a2a", {"type": "inventory.vehicle.request", key: value})
        if outcome.error is not None:
            problems.append(f"by {key}: {describe(outcome.error)}")
            continue
        data = (outcome.response or {}).get("data") or {}
        if listing_key(data) != listing_key(listing):
            problems.append(f"by {key}: returned a different listing")
    await ctx.expect_error(
        "a2a", {"type": "inventory.vehicle.request", "vin": "AAPCHECK000000001"}, {"VEHICLE_NOT_FOUND"}, "unknown VIN"
    )
    if problems:
        raise Fail("vehicle lookup is wrong", problems)
    return "looked up by " + ", ".join(used)
