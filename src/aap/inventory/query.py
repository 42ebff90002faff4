"""The effective query: what a schema-valid search or facets request really asks for.

A request leaves schema validation with optional fields everywhere; the engine
needs one normalised object instead: the effective currency and mileage unit,
normalised filters (term values compared by :func:`term_keys`), rooftop
distances for ``near``, the effective sort and limit, and a digest of all of
that so that a cursor can be bound to exactly this query. Building it also runs
the post-schema checks in the order of docs/search.md, "Validation order":
semantic problems, then capability problems; cursor checks come last, in the
skill.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from aap.config.model import ALL_FILTERS, ALL_SORT_FIELDS, Settings
from aap.errors import AapError, Problem, problem
from aap.inventory.geo import Located, RooftopIndex

ELIGIBLE_STATUSES: tuple[str, ...] = ("available", "intransit", "pending")

# Odometers are stored as exact integer millimetres, so mi/km comparisons are integer math.
MM_PER_UNIT: dict[str, int] = {"mi": 1_609_344, "km": 1_000_000}

# Free-text term filters: whole-value equality of their term keys (docs/search.md, "Term filters").
TERM_FILTERS: tuple[str, ...] = (
    "make",
    "model",
    "trim",
    "transmission",
    "fuel",
    "driveline",
    "body",
    "exterior_color",
    "interior_color",
    "charge_port",
)
RANGE_PAIRS: tuple[tuple[str, str], ...] = (
    ("year_min", "year_max"),
    ("price_min", "price_max"),
    ("displacement_cc_min", "displacement_cc_max"),
    ("electric_range_mi_min", "electric_range_mi_max"),
)
FEATURE_FILTERS: tuple[str, ...] = ("features_all", "features_any")

CURSOR_HINT = "restart without cursor"


def term_keys(values: Iterable[Any]) -> list[str | None]:
    """The comparison form of free-text terms: each trimmed, then Unicode-casefolded;
    None for a value that is blank or not text.

    The one definition: requests are normalised with it here, and imports store
    the keys (``aap.store.inventory.rows``) for the SQL to compare. It takes a
    batch because an import calls it once per listing, for every term field.
    """
    return [value.strip().casefold() or None if value.__class__ is str else None for value in values]


def mm_to_unit(mm: int, unit: str) -> int | float:
    """An odometer in exact millimetres as a reading in ``unit`` (fractional when it must be)."""
    value = Fraction(mm, MM_PER_UNIT[unit])
    return int(value) if value.denominator == 1 else float(value)


@dataclass(frozen=True)
class Place:
    """A physical rooftop inside a ``near`` radius.

    ``dealer_id`` is None on a dealer-scoped endpoint (every listing belongs to
    the one dealer); ``match_null`` is set when that dealer has exactly one
    rooftop, so a listing with a null ``rooftop`` sits here (docs/search.md, "near").
    """

    dealer_id: str | None
    rooftop: str
    match_null: bool
    distance_mi: float


@dataclass(frozen=True)
class Position:
    """Keyset position: the last sort key (None = in the missing-values tail) and its id."""

    key: tuple[Any, ...] | None
    id: str


@dataclass(frozen=True)
class Criteria:
    """The matching set: currency, unit and normalised filters (shared by search and facets)."""

    currency: str
    mileage_unit: str
    applied: dict[str, Any]  # applied_filters, as echoed to the caller
    terms: dict[str, tuple[str, ...]]  # term filter -> casefolded keys
    tokens: tuple[str, ...] = ()  # query tokens, original case, input order
    places: tuple[Place, ...] | None = None  # near: rooftops inside the radius
    dealer_ids: tuple[str, ...] | None = None  # aggregate: the configured sellers
    aggregate: bool = False
    digest: str = ""


@dataclass(frozen=True)
class SearchQuery:
    """Criteria plus ordering and paging; ``digest`` binds cursors to it."""

    criteria: Criteria
    sort_field: str
    sort_order: str
    limit: int
    skip: int | None = None
    after: Position | None = None
    digest: str = ""

    @property
    def sort(self) -> dict[str, str]:
        return {"field": self.sort_field, "order": self.sort_order}


@dataclass
class _Checks:
    semantic: list[Problem] = field(default_factory=list)
    capability: list[Problem] = field(default_factory=list)
    sort: list[Problem] = field(default_factory=list)

    def raise_first(self) -> None:
        """Raise the first stage with problems: semantics, then capabilities, then sort."""
        if self.semantic:
            raise AapError("SCHEMA_VALIDATION_FAILED", errors=self.semantic)
        if self.capability:
            raise AapError(
                "UNSUPPORTED_FILTER",
                errors=self.capability + self.sort,
                hint="Use only the filters and feature codes this deployment advertises "
                "(inventory.search capabilities and inventory.facets features).",
            )
        if self.sort:
            raise AapError(
                "UNSUPPORTED_SORT",
                errors=self.sort,
                hint="Use one of the advertised sort_fields.",
            )


def unpaired_surrogates(value: Any, location: str) -> list[Problem]:
    """A problem for every string that is not valid Unicode (JSON allows lone surrogates).

    Such text can equal no stored value, and no database driver accepts it.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return [problem(location, "format", "Text must be valid Unicode (no unpaired surrogates).")]
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in unpaired_surrogates(v, f"{location}/{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in unpaired_surrogates(v, f"{location}/{i}")]
    return []


def _digest(value: Any) -> str:
    # stdlib json: request integers may exceed 64 bits (orjson refuses those)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check_request(
    request: dict[str, Any],
    settings: Settings,
    vocabulary: Callable[[], Iterable[str]],
    checks: _Checks,
) -> None:
    caps = settings.search
    currency = request.get("currency")
    if currency is not None and currency not in caps.currencies:
        checks.semantic.append(
            problem(
                "/currency",
                "enum",
                "Currency is not offered here; supported: " + ", ".join(caps.currencies) + ".",
            )
        )
    filters = request.get("filters") or {}
    for low, high in RANGE_PAIRS:
        if low in filters and high in filters and filters[low] > filters[high]:
            checks.semantic.append(
                problem(
                    f"/filters/{low}",
                    "range",
                    f"{low} must not be greater than {high}.",
                )
            )
    checks.semantic += unpaired_surrogates(filters, "/filters")
    for key in TERM_FILTERS:
        for index, value in enumerate(filters.get(key, ())):
            if not value.strip():
                checks.semantic.append(
                    problem(
                        f"/filters/{key}/{index}",
                        "pattern",
                        "A term value must contain a non-whitespace character.",
                    )
                )

    checks.capability += filter_capability_problems(filters, settings, vocabulary)


def filter_capability_problems(
    filters: Any, settings: Settings, vocabulary: Callable[[], Iterable[str]]
) -> list[Problem]:
    """Filters this deployment does not advertise, and feature codes outside its vocabulary.

    Tolerates any shape, so that a request failing its schema still hears about these
    too (one complete list, docs/search.md "Validation order"): a filter the schema does
    not know is the schema's to report, a value of the wrong type is skipped.
    """
    if not isinstance(filters, dict):
        return []
    caps = settings.search
    found: list[Problem] = []
    for key in filters:
        if key not in ALL_FILTERS:
            continue
        if key not in caps.filters:
            found.append(
                problem(
                    f"/filters/{key}",
                    "capability",
                    f"Filter {key} is not supported by this deployment.",
                )
            )
        elif key == "rooftops" and caps.scope == "aggregate":
            found.append(
                problem(
                    "/filters/rooftops",
                    "capability",
                    "Rooftop names are ambiguous on an aggregate endpoint; filter by near instead.",
                )
            )
    wanted = [
        (key, i, code)
        for key in FEATURE_FILTERS
        if key in caps.filters and isinstance(filters.get(key), list)
        for i, code in enumerate(filters[key])
        if isinstance(code, str)
    ]
    if wanted:
        known = set(vocabulary())
        for key, index, code in wanted:
            if code not in known:
                found.append(
                    problem(
                        f"/filters/{key}/{index}",
                        "capability",
                        "Feature code is not in the vocabulary advertised by inventory.facets.",
                    )
                )
    return found


def sort_capability_problems(sort: Any, settings: Settings) -> list[Problem]:
    """A sort field the schema knows but this deployment does not sort by (any shape tolerated)."""
    field_ = sort.get("field") if isinstance(sort, dict) else None
    if isinstance(field_, str) and field_ in ALL_SORT_FIELDS and field_ not in settings.search.sort_fields:
        return [problem("/sort/field", "capability", "Sort field is not supported by this deployment.")]
    return []


def capability_problems(
    request: Any, settings: Settings, vocabulary: Callable[[], Iterable[str]], *, sort: bool
) -> list[Problem]:
    """Every capability problem of a search (``sort``) or facets request, whatever its shape."""
    if not isinstance(request, dict):
        return []
    found = filter_capability_problems(request.get("filters"), settings, vocabulary)
    return found + (sort_capability_problems(request.get("sort"), settings) if sort else [])


def _places(rooftops: RooftopIndex[RooftopKey], near: dict[str, Any]) -> tuple[Place, ...]:
    """The rooftops within the radius, in configuration order, with their exact distances."""
    found = rooftops.within(near["latitude"], near["longitude"], near["radius_mi"])
    return tuple(Place(*located.item, distance) for located, distance in found)


#: A located rooftop: (dealer_id on an aggregate endpoint, rooftop name, the dealer's only rooftop).
RooftopKey = tuple[str | None, str, bool]


def rooftop_index(settings: Settings) -> RooftopIndex[RooftopKey]:
    """Every rooftop with coordinates that can hold listings, as (dealer_id, name, only rooftop).

    Built once per agent by its owner (:class:`aap.skills.context.SkillDeps`), never cached here.
    """
    aggregate = settings.scope == "aggregate"
    located: list[Located[RooftopKey]] = []
    for profile in settings.all_profiles():
        if aggregate and profile.dealer_id is None:
            continue
        rooftops = profile.rooftops
        for rooftop in rooftops:
            geo = rooftop.get("geo")
            if geo:
                item: RooftopKey = (profile.dealer_id if aggregate else None, rooftop["name"], len(rooftops) == 1)
                located.append(Located(len(located), geo["latitude"], geo["longitude"], item))
    return RooftopIndex(located)


def _dealer_ids(settings: Settings) -> tuple[str, ...] | None:
    """Aggregate corpus: listings of the configured sellers only (so dealer_id resolves)."""
    if settings.scope != "aggregate":
        return None
    return tuple(p.dealer_id for p in settings.all_profiles() if p.dealer_id is not None)


#: What gives an agent's rooftop index: asked only by a request that filters on ``near``.
RooftopsOf = Callable[[], RooftopIndex[RooftopKey]]


def _criteria(request: dict[str, Any], settings: Settings, rooftops: RooftopsOf | None) -> Criteria:
    caps = settings.search
    currency = request.get("currency") or caps.default_currency or "USD"
    unit = request.get("mileage_unit") or caps.default_mileage_unit or "mi"
    filters = request.get("filters") or {}

    applied: dict[str, Any] = {}
    canonical: dict[str, Any] = {}
    terms: dict[str, tuple[str, ...]] = {}
    tokens: tuple[str, ...] = ()
    for key, value in filters.items():
        if key in TERM_FILTERS:
            shown: list[str] = []
            keys: dict[str, None] = {}  # insertion-ordered set: one look-up per value
            for item, k in zip(value, term_keys(value)):  # every value is non-blank by now
                if k is not None and k not in keys:
                    keys[k] = None
                    shown.append(item.strip())
            applied[key] = shown
            terms[key] = tuple(keys)
            canonical[key] = sorted(keys)
        elif key == "query":
            text = value.strip()
            tokens = tuple(text.split())
            applied[key] = text
            canonical[key] = sorted({t.casefold() for t in tokens})
        elif isinstance(value, list):
            applied[key] = list(value)
            canonical[key] = sorted(value)
        elif isinstance(value, dict):
            applied[key] = dict(value)
            canonical[key] = dict(value)
        else:
            applied[key] = value
            canonical[key] = value
    if "near" in filters:
        places = _places(rooftops() if rooftops is not None else rooftop_index(settings), filters["near"])
    else:
        places = None
    dealer_ids = _dealer_ids(settings)
    digest = _digest(
        {
            "currency": currency,
            "unit": unit,
            "filters": canonical,
            "dealers": list(dealer_ids) if dealer_ids is not None else None,
        }
    )
    return Criteria(
        currency=currency,
        mileage_unit=unit,
        applied=applied,
        terms=terms,
        tokens=tokens,
        places=places,
        dealer_ids=dealer_ids,
        aggregate=settings.scope == "aggregate",
        digest=digest,
    )


def build_criteria(
    request: dict[str, Any],
    settings: Settings,
    vocabulary: Callable[[], Iterable[str]],
    rooftops: RooftopsOf | None = None,
) -> Criteria:
    """Effective criteria of an ``inventory.facets`` request (checks run first).

    ``rooftops``: what gives the agent's rooftop index, asked for ``near`` only (the index is
    built from ``settings`` when absent).
    """
    checks = _Checks()
    _check_request(request, settings, vocabulary, checks)
    checks.raise_first()
    return _criteria(request, settings, rooftops)


def build_search_query(
    request: dict[str, Any],
    settings: Settings,
    vocabulary: Callable[[], Iterable[str]],
    rooftops: RooftopsOf | None = None,
) -> SearchQuery:
    """Effective query of an ``inventory.search`` request (checks run first, cursor not yet)."""
    caps = settings.search
    checks = _Checks()
    pagination = request.get("pagination") or {}
    # Semantic checks on pagination go before the filter checks' capability stage.
    if "skip" in pagination and not caps.offset:
        checks.semantic.append(
            problem(
                "/pagination/skip",
                "offset",
                "This deployment does not accept skip; continue with next_cursor instead.",
            )
        )
    if "limit" in pagination and pagination["limit"] > caps.max_limit:
        checks.semantic.append(
            problem(
                "/pagination/limit",
                "maximum",
                f"limit must not exceed max_limit {caps.max_limit}.",
            )
        )
    _check_request(request, settings, vocabulary, checks)
    sort = request.get("sort")
    checks.sort += sort_capability_problems(sort, settings)
    checks.raise_first()

    criteria = _criteria(request, settings, rooftops)
    field_, order = (sort["field"], sort["order"]) if sort else caps.default_sort
    limit = pagination.get("limit", caps.default_limit)
    digest = _digest({"criteria": criteria.digest, "sort": [field_, order], "limit": limit})
    return SearchQuery(
        criteria=criteria,
        sort_field=field_,
        sort_order=order,
        limit=limit,
        skip=pagination.get("skip"),
        digest=digest,
    )


class FeatureSource(Protocol):
    """What carries the inventory's own feature vocabulary (an inventory snapshot or store)."""

    def feature_vocabulary(self) -> list[tuple[str, str]]: ...


def feature_vocabulary(settings: Settings, inventory: FeatureSource) -> list[tuple[str, str]]:
    """The advertised feature codes: configured ones, else those the inventory carries."""
    if settings.features:
        return [(f.code, f.label) for f in settings.features]
    return inventory.feature_vocabulary()
