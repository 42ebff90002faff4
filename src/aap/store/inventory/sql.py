"""SQL for the matching set and its ordering, on the listing table aliased ``l``.

Everything here is portable SQL with ``?`` placeholders: a condition and its
parameters travel together as a :data:`Clause`. The one backend-specific piece,
a JSON array of ids as a row set, comes from the database's dialect. A matching set is
always one tenant's (:func:`where_clause` starts with ``l.tenant_id = ?``), and every
subquery joins its table on the tenant too (docs/architecture.md, "Storage").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aap.inventory.query import MM_PER_UNIT, Criteria, Place, SearchQuery
from aap.store.dialect import Dialect
from aap.store.inventory.schema import BITS_PER_MASK, FEATURE_MASKS, INT64, MASK_COLUMNS

#: An SQL condition (or expression) and its parameters, in placeholder order.
Clause = tuple[str, list[Any]]

NOTHING: Clause = ("1 = 0", [])

# Sort field -> listing columns compared in turn: a text field by its term key, then
# as listed (docs/search.md, "Sort").
SORT_COLUMNS: dict[str, tuple[str, ...]] = {
    "price": ("price",),
    "list_price": ("list_price",),
    "msrp": ("msrp",),
    "mileage": ("odometer_mm",),
    "year": ("year",),
    "make": ("make_k", "make"),
    "model": ("model_k", "model"),
    "stock": ("stock_k", "stock"),
    "updated_at": ("updated_us",),
}
_NUMERIC_COLUMNS = frozenset({"price", "list_price", "msrp", "odometer_mm", "year", "updated_us"})
# Range filter -> (column, comparison); ranges are inclusive.
_RANGE_FILTERS: dict[str, tuple[str, str]] = {
    "year_min": ("year", ">="),
    "year_max": ("year", "<="),
    "price_min": ("price", ">="),
    "price_max": ("price", "<="),
    "displacement_cc_min": ("displacement_cc", ">="),
    "displacement_cc_max": ("displacement_cc", "<="),
    "electric_range_mi_min": ("electric_range_mi", ">="),
    "electric_range_mi_max": ("electric_range_mi", "<="),
}
# Filter whose values are compared exactly -> column.
_EXACT_FILTERS: dict[str, str] = {
    "condition": "condition",
    "vehicle_type": "vehicle_type",
    "status": "status",
    "rooftops": "rooftop",
}


def in_list(column: str, values: Sequence[Any]) -> Clause:
    """``column IN (?, ...)`` (``values`` must not be empty)."""
    return f"{column} IN ({', '.join('?' * len(values))})", list(values)


def _bound(column: str, comparison: str, value: int | float) -> Clause:
    """``column >= value`` or ``<=``, for a bound that may exceed what a BIGINT column can hold."""
    if value >= INT64:  # every stored value is below it
        return NOTHING if comparison == ">=" else (f"l.{column} IS NOT NULL", [])
    return f"l.{column} {comparison} ?", [value]


def feature_masks(codes: Iterable[str], bits: dict[str, int]) -> list[int]:
    """The mask column values with the bits of ``codes`` set (every code must have a bit)."""
    masks = [0] * MASK_COLUMNS
    for code in codes:
        column, shift = divmod(bits[code], BITS_PER_MASK)
        masks[column] |= 1 << shift
    return masks


def _features(codes: Sequence[str], bits: dict[str, int], *, every: bool) -> Clause:
    """Present evidence of ``codes``: all of them (``every``) or at least one.

    Codes with a bit are tested on the row's masks; codes without one (beyond the
    mask capacity) in the ``inv_feature_extra`` side table.
    """
    parts: list[str] = []
    params: list[Any] = []
    with_bit = [code for code in codes if code in bits]
    without_bit = [code for code in codes if code not in bits]
    for column, mask in zip(FEATURE_MASKS, feature_masks(with_bit, bits)):
        if mask:
            parts.append(f"(l.{column} & ?) = ?" if every else f"(l.{column} & ?) <> 0")
            params += [mask, mask] if every else [mask]
    if every:  # one probe of the side table per code
        for code in without_bit:
            parts.append(
                "EXISTS (SELECT 1 FROM inv_feature_extra x WHERE x.tenant_id = l.tenant_id AND x.id = l.id"
                " AND x.code = ?)"
            )
            params.append(code)
    elif without_bit:
        sql, codes_params = in_list("x.code", without_bit)
        parts.append(
            f"EXISTS (SELECT 1 FROM inv_feature_extra x WHERE x.tenant_id = l.tenant_id AND x.id = l.id AND {sql})"
        )
        params += codes_params
    return "(" + (" AND " if every else " OR ").join(parts) + ")", params


def at_place(place: Place) -> Clause:
    """Listings sitting at ``place`` (a null rooftop too, where it is the dealer's only one)."""
    sql = "(l.rooftop = ? OR l.rooftop IS NULL)" if place.match_null else "l.rooftop = ?"
    params: list[Any] = [place.rooftop]
    if place.dealer_id is not None:
        sql = f"({sql} AND l.dealer_id = ?)"
        params.append(place.dealer_id)
    return sql, params


def at_any_place(places: Sequence[Place]) -> Clause:
    """Listings at one of ``places`` (none: nothing)."""
    if not places:
        return NOTHING
    sqls, params = [], []
    for place in places:
        sql, place_params = at_place(place)
        sqls.append(sql)
        params += place_params
    return "(" + " OR ".join(sqls) + ")", params


def distance_case(places: Sequence[Place]) -> Clause:
    """A row's distance in miles: the distance of the place it sits at."""
    parts, params = [], []
    for place in places:
        sql, place_params = at_place(place)
        parts.append(f"WHEN {sql} THEN ?")
        params += place_params
        params.append(place.distance_mi)
    return "CASE " + " ".join(parts) + " END", params


def _like_pattern(token: str) -> str:
    escaped = token.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _likes(tokens: Sequence[str]) -> Clause:
    return " AND ".join("t.query LIKE ? ESCAPE '\\'" for _ in tokens), [_like_pattern(t.casefold()) for t in tokens]


def keyword_scan(tenant: str, tokens: Sequence[str]) -> Clause:
    """Ids of ``tenant``'s listings whose keyword text contains every token (casefolded substrings)."""
    likes, params = _likes(tokens)
    return f"SELECT t.id FROM inv_text t WHERE t.tenant_id = ? AND {likes}", [tenant, *params]


# The three ways to test keyword tokens; each is a condition on ``l``.


def keywords_by_subquery(tenant: str, tokens: Sequence[str]) -> Clause:
    """The canonical form: the planner runs the scan (the posting index answers keyword tokens
    whenever it can; this is the fallback)."""
    sql, params = keyword_scan(tenant, tokens)
    return f"l.id IN ({sql})", params


def keywords_per_row(tokens: Sequence[str]) -> Clause:
    """A test of each row's own keyword text: cheap when a sort-index walk visits few rows."""
    likes, params = _likes(tokens)
    return f"EXISTS (SELECT 1 FROM inv_text t WHERE t.tenant_id = l.tenant_id AND t.id = l.id AND {likes})", params


def keywords_in_ids(dialect: Dialect, ids_json: str) -> Clause:
    """The ids a keyword scan already found (a JSON array), reused by every query of a request."""
    return f"l.id IN ({dialect.json_array_values})", [ids_json]


def seller_clause(sellers: Sequence[str]) -> Clause:
    """Listings of ``sellers`` (dealer keys; ``""`` is the listings without a dealer)."""
    named = [s for s in sellers if s]
    parts: list[str] = []
    params: list[Any] = []
    if named:
        sql, params = in_list("l.dealer_id", named)
        parts.append(sql)
    if "" in sellers:
        parts.append("l.dealer_id IS NULL")
    return ("(" + " OR ".join(parts) + ")", params) if parts else NOTHING


def rows_in(dialect: Dialect, tenant: str, rids: Iterable[int]) -> Clause:
    """``tenant``'s listings by row number (a matching set the posting index found), as one parameter."""
    sql, params = dialect.integers_in("l.rid", list(rids))
    return f"l.tenant_id = ? AND {sql}", [tenant, *params]


def where_clause(tenant: str, criteria: Criteria, bits: dict[str, int], keywords: Clause | None = None) -> Clause:
    """The condition selecting ``criteria``'s matching set among ``tenant``'s listings; ``bits``
    maps feature codes to bits.

    ``keywords`` tests the keyword tokens (default: :func:`keywords_by_subquery`).
    Filters combine with AND, the values of one filter with OR (``features_all``
    excepted), and a listing without the field never matches a filter on it
    (InventorySearchRequest ``$defs/filters``, seed 004).
    """
    sqls: list[str] = []
    params: list[Any] = []

    def add(clause: Clause) -> None:
        sqls.append(clause[0])
        params.extend(clause[1])

    add(("l.tenant_id = ?", [tenant]))
    add(("l.currency = ?", [criteria.currency]))
    if criteria.dealer_ids is not None:
        add(in_list("l.dealer_id", criteria.dealer_ids) if criteria.dealer_ids else NOTHING)
    filters = criteria.applied
    for name, keys in criteria.terms.items():
        add(in_list(f"l.{name}_k", keys))
    for name, column in _EXACT_FILTERS.items():
        if name in filters:
            add(in_list(f"l.{column}", filters[name]))
    for name, (column, comparison) in _RANGE_FILTERS.items():
        if name in filters:
            add(_bound(column, comparison, filters[name]))
    if "mileage_max" in filters:
        add(_bound("odometer_mm", "<=", filters["mileage_max"] * MM_PER_UNIT[criteria.mileage_unit]))
    if "dc_fast_charge" in filters:
        add(("l.dc_fast_charge = ?", [1 if filters["dc_fast_charge"] else 0]))
    if "vin" in filters:
        add(("l.vin = ?", [filters["vin"]]))
    if "stock" in filters:
        add(("l.stock = ?", [filters["stock"]]))
    for name, every in (("features_all", True), ("features_any", False)):
        if name in filters:
            add(_features(filters[name], bits, every=every))
    if criteria.tokens:
        add(keywords if keywords is not None else keywords_by_subquery(tenant, criteria.tokens))
    if criteria.places is not None:
        add(at_any_place(criteria.places))
    return " AND ".join(sqls), params


# -- ordering ------------------------------------------------------------------


def sort_ref(column: str, defeat_index: bool) -> str:
    """A sort column as SQL; with ``defeat_index``, as an expression no index can serve.

    When the matching set is sparse, walking a sort index means a table lookup
    per skipped row; scanning and sorting the few matches is cheaper. Wrapping
    the column (``+ 0``, ``|| ''``) is the portable way to tell both SQLite's
    and PostgreSQL's planners not to use an index for it.
    """
    if not defeat_index:
        return f"l.{column}"
    return f"(l.{column} + 0)" if column in _NUMERIC_COLUMNS else f"(l.{column} || '')"


def _after(columns: Sequence[str], values: Sequence[Any], descending: bool, last_id: str, defeat_index: bool) -> Clause:
    """Keyset condition: strictly after (values, last_id) in (columns dir..., id asc) order.

    Spelled ``c1 >= v1 AND (c1 > v1 OR (c1 = v1 AND ...))`` so that the leading
    bound is an index range the planner can start from.
    """
    beyond = "<" if descending else ">"
    sql = f"{sort_ref('id', defeat_index)} > ?"
    params: list[Any] = [last_id]
    for column, value in reversed(list(zip(columns, values))):
        ref = sort_ref(column, defeat_index)
        sql = f"({ref} {beyond} ? OR ({ref} = ? AND {sql}))"
        params = [value, value] + params
    return f"{sort_ref(columns[0], defeat_index)} {beyond}= ? AND {sql}", [values[0]] + params


@dataclass(frozen=True)
class Segment:
    """One index-friendly slice of the ordering; the slices are walked in sequence."""

    where: str
    params: list[Any]
    order: str
    columns: tuple[str, ...]  # key columns selected (empty: the key is fixed)
    fixed_key: tuple[Any, ...] | None  # key of every row of a fixed slice


def segments(query: SearchQuery, defeat_index: bool = False) -> list[Segment]:
    """The ordering as slices, resuming after ``query.after``.

    A field sort is (rows with a value, by value then id) then (rows without,
    by id): missing values last in both directions, each slice able to use an
    index (unless ``defeat_index``, see :func:`sort_ref`). A distance sort is one
    slice per distinct rooftop distance, by id.
    """
    descending = query.sort_order == "desc"
    after = query.after
    if query.sort_field == "distance_mi":
        return _distance_segments(query, descending)
    columns = SORT_COLUMNS[query.sort_field]
    direction = "DESC" if descending else "ASC"
    lead = sort_ref(columns[0], defeat_index)
    ident = sort_ref("id", defeat_index)
    found: list[Segment] = []
    if after is None or after.key is not None:
        where = f"{lead} IS NOT NULL"
        params: list[Any] = []
        if after is not None and after.key is not None:
            sql, params = _after(columns, after.key, descending, after.id, defeat_index)
            where += " AND " + sql
        order = ", ".join(f"{sort_ref(c, defeat_index)} {direction}" for c in columns) + f", {ident} ASC"
        found.append(Segment(where, params, order, columns, None))
    tail_where, tail_params = f"{lead} IS NULL", []
    if after is not None and after.key is None:
        tail_where += f" AND {ident} > ?"
        tail_params.append(after.id)
    found.append(Segment(tail_where, tail_params, f"{ident} ASC", (), None))
    return found


def _distance_segments(query: SearchQuery, descending: bool) -> list[Segment]:
    by_distance: dict[float, list[Place]] = {}
    for place in query.criteria.places or ():
        by_distance.setdefault(place.distance_mi, []).append(place)
    after = query.after
    resume = (after.key[0], after.id) if after is not None and after.key is not None else None
    found: list[Segment] = []
    for distance in sorted(by_distance, reverse=descending):
        if resume is not None and (distance > resume[0] if descending else distance < resume[0]):
            continue  # already walked
        where, params = at_any_place(by_distance[distance])
        if resume is not None and distance == resume[0]:
            where += " AND l.id > ?"
            params.append(resume[1])
        found.append(Segment(where, params, "l.id ASC", (), (distance,)))
    return found


def full_order(query: SearchQuery) -> tuple[Clause, Clause]:
    """(key select, ORDER BY) of the whole ordering in one statement, for a ``skip`` entry."""
    direction = "DESC" if query.sort_order == "desc" else "ASC"
    if query.sort_field == "distance_mi":
        if not query.criteria.places:  # nothing within the radius: the WHERE matches nothing
            return ("NULL", []), ("l.id ASC", [])
        case, params = distance_case(query.criteria.places)
        return (case, params), (f"{case} {direction}, l.id ASC", list(params))
    columns = SORT_COLUMNS[query.sort_field]
    order = (
        f"CASE WHEN l.{columns[0]} IS NULL THEN 1 ELSE 0 END, "
        + ", ".join(f"l.{c} {direction}" for c in columns)
        + ", l.id ASC"
    )
    return (", ".join(f"l.{c}" for c in columns), []), (order, [])
