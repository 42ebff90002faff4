"""The Facets object of a matching set: term counts, ranges and feature counts.

Where the posting index (:mod:`.postings`) has the inventory's version, every
count is the size of an intersection of bitmaps. Otherwise (the index is being
built, or declines a filter): SQLite aggregates by sorting, so sixteen GROUP BYs
over a large matching set cost sixteen sorts; the unfiltered facets — what most
agents ask first — are therefore maintained at import time as per-value counts
per currency and seller (``inv_facet_count``, see :class:`FacetCountChanges`),
and filtered facets are counted in one pass over the matching rows. All are
cached per inventory version. What the counts mean: ``Facets`` (seed 004) and docs/search.md, "Facets".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from aap.inventory.query import Criteria, mm_to_unit
from aap.store.db import Tx
from aap.store.inventory.schema import BITS_PER_MASK, COLUMN_INDEX, FEATURE_MASKS
from aap.store.inventory.sql import NOTHING, Clause, in_list

if TYPE_CHECKING:
    from aap.store.inventory.snapshot import InventorySnapshot

# Term facet -> the listing column counted.
TERM_FACETS: tuple[tuple[str, str], ...] = (
    ("makes", "make_k"),
    ("models", "model_k"),
    ("trims", "trim_k"),
    ("years", "year"),
    ("conditions", "condition"),
    ("transmissions", "transmission_k"),
    ("fuels", "fuel_k"),
    ("dc_fast_charge", "dc_fast_charge"),
    ("charge_ports", "charge_port_k"),
    ("drivelines", "driveline_k"),
    ("bodies", "body_k"),
    ("vehicle_types", "vehicle_type"),
    ("exterior_colors", "exterior_color_k"),
    ("interior_colors", "interior_color_k"),
    ("rooftops", "rooftop"),
    ("statuses", "status"),
)
# Term facet -> the inv_term field holding the display spellings of its keys.
_DISPLAY_FIELD = {
    "makes": "make",
    "models": "model",
    "trims": "trim",
    "transmissions": "transmission",
    "fuels": "fuel",
    "charge_ports": "charge_port",
    "drivelines": "driveline",
    "bodies": "body",
    "exterior_colors": "exterior_color",
    "interior_colors": "interior_color",
}
RANGE_FACETS: tuple[tuple[str, str], ...] = (
    ("price_range", "price"),
    ("mileage_range", "odometer_mm"),
    ("year_range", "year"),
    ("displacement_cc_range", "displacement_cc"),
    ("electric_range_mi_range", "electric_range_mi"),
)
# Range facets without an index: their values are counted like term facets.
_COUNTED_RANGES: tuple[tuple[str, str], ...] = (
    ("displacement_cc_range", "displacement_cc"),
    ("electric_range_mi_range", "electric_range_mi"),
)
FEATURE_FIELD = "features"  # inv_facet_count field of the present feature codes

# The facets maintained at import time, with the listing-row position of their column.
_MAINTAINED = tuple((facet, COLUMN_INDEX[column]) for facet, column in TERM_FACETS + _COUNTED_RANGES)
_MAINTAINED_VALUES = itemgetter(*(index for _facet, index in _MAINTAINED))
_CURRENCY, _DEALER = COLUMN_INDEX["currency"], COLUMN_INDEX["dealer_id"]

# Facet counts by facet, then value.
Counts = dict[str, dict[Any, int]]
Bounds = dict[str, tuple[Any, Any]]
Vocabulary = tuple[tuple[str, str], ...]
#: (inventory version, criteria digest, vocabulary): what a Facets object depends on.
FacetKey = tuple[int, str, Vocabulary]


class FacetCountChanges:
    """Changes to the maintained unfiltered facet counts during one import.

    Counted per (currency, seller): every term facet value, every present
    feature code, and the values of the two range fields without an index
    (displacement and electric range have few distinct values).
    """

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str, str]] = Counter()

    def add(self, rows: Sequence[Sequence[Any]], present: Sequence[Sequence[str]], sign: int) -> None:
        """Count ``rows`` (listing rows) and their present codes in (``sign`` 1) or out (-1)."""
        by_seller: dict[tuple[str, str], list[int]] = {}
        for i, row in enumerate(rows):
            by_seller.setdefault((row[_CURRENCY], row[_DEALER] or ""), []).append(i)
        counts = self.counts
        for (currency, dealer_key), members in by_seller.items():
            columns = zip(*map(_MAINTAINED_VALUES, [rows[i] for i in members]))
            for (facet, _index), column in zip(_MAINTAINED, columns):
                for value, n in Counter(column).items():
                    if value is not None:
                        counts[(currency, dealer_key, facet, str(value))] += sign * n
            codes = Counter(chain.from_iterable(present[i] for i in members))
            for code, n in codes.items():
                counts[(currency, dealer_key, FEATURE_FIELD, code)] += sign * n

    def changed(self) -> list[tuple[str, str, str, str, int]]:
        """(currency, dealer key, field, value, change) of every count that moved."""
        return [(*key, n) for key, n in self.counts.items() if n]


def compute_facets(snapshot: InventorySnapshot, criteria: Criteria, vocabulary: Vocabulary) -> dict[str, Any]:
    """The Facets object of ``criteria``'s matching set; ``vocabulary`` lists (code, label)."""
    tx = snapshot.tx
    bits = snapshot.bits()
    effective = snapshot.effective(criteria)
    matched = snapshot.matched(effective)
    if matched is not None:  # the posting index: every count an intersection size
        postings = snapshot.postings()
        assert postings is not None
        counts = {
            facet: postings.value_counts(column, matched)
            for facet, column in TERM_FACETS + _COUNTED_RANGES
            if not (facet == "rooftops" and criteria.aggregate)
        }
        counts[FEATURE_FIELD] = postings.feature_counts(matched)
        where, _listed = snapshot.matched_where(effective, bits, matched, 1)
        bounds = _probed(snapshot, where, counts, lambda column: postings.bounds(tx, column, matched, where))
    elif criteria.applied:
        counts, bounds = _aggregated(snapshot, criteria, bits, vocabulary)
    else:
        counts = _maintained(tx, criteria)
        bounds = _probed(snapshot, snapshot.where(criteria, bits), counts)
    displays = {
        (r[0], r[1]): r[2]
        for r in tx.fetchall("SELECT field, term, display FROM inv_term WHERE tenant_id = ?", (tx.tenant,))
    }
    out: dict[str, Any] = {"currency": criteria.currency, "mileage_unit": criteria.mileage_unit}
    for facet, _column in TERM_FACETS:
        if facet == "rooftops" and criteria.aggregate:
            continue  # rooftop names are only unambiguous within one dealer
        out[facet] = _entries(counts.get(facet, {}), facet, displays)
    for facet, _column in RANGE_FACETS:
        if facet not in bounds:
            continue  # no matching vehicle has the value: the range is left out
        low, high = bounds[facet]
        if facet == "mileage_range":
            unit = criteria.mileage_unit
            out[facet] = {"min": mm_to_unit(low, unit), "max": mm_to_unit(high, unit)}
        else:
            out[facet] = {"min": _plain(low), "max": _plain(high)}
    present = counts.get(FEATURE_FIELD, {})
    out["features"] = [{"code": code, "label": label, "count": present.get(code, 0)} for code, label in vocabulary]
    return out


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _shown(facet: str, stored: Any) -> Any:
    """A counted value as the Facets object shows it."""
    if facet == "years":
        return int(stored)
    if facet == "dc_fast_charge":
        return bool(int(stored))
    return stored


def _entries(counts: dict[Any, int], facet: str, displays: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Term facet entries, most frequent first; a term key shows its first-imported spelling."""
    field = _DISPLAY_FIELD.get(facet)
    entries = [
        {"value": displays.get((field, v), v) if field else _shown(facet, v), "count": n}
        for v, n in counts.items()
        if n > 0
    ]
    entries.sort(key=lambda e: (-e["count"], str(e["value"])))
    return entries


def _maintained(tx: Tx, criteria: Criteria) -> Counts:
    """Unfiltered: the counts maintained by imports."""
    sql, params = "tenant_id = ? AND currency = ?", [tx.tenant, criteria.currency]
    if criteria.dealer_ids is not None:
        dealer_sql, dealer_params = in_list("dealer_key", criteria.dealer_ids) if criteria.dealer_ids else NOTHING
        sql += " AND " + dealer_sql
        params += dealer_params
    out: Counts = {}
    for field, value, n in tx.fetchall(
        f"SELECT field, value, SUM(n) FROM inv_facet_count WHERE {sql} GROUP BY field, value", params
    ):
        out.setdefault(field, {})[value] = n
    return out


def _probed(
    snapshot: InventorySnapshot,
    matching: Clause,
    counts: Counts,
    bounded: Callable[[str], tuple[Any, Any] | None] | None = None,
) -> Bounds:
    """Range bounds: counted values where the counts have them, else ``bounded(column)`` (the
    posting index's buckets) or an index probe per bound."""
    where, params = matching
    counted = dict(_COUNTED_RANGES)
    if "years" in counts and "year_range" not in counted:
        counted = dict(counted, year_range="year")
    bounds: Bounds = {}
    for facet, column in RANGE_FACETS:
        if facet in counted:
            values = [float(v) for v, n in counts.get("years" if facet == "year_range" else facet, {}).items() if n > 0]
            if values:
                bounds[facet] = (min(values), max(values))
            continue
        if bounded is not None:
            found = bounded(column)
            if found is not None:
                bounds[facet] = found
            continue
        probe = (
            f"SELECT l.{column} FROM inv_listing l WHERE {where} "
            f"AND l.{column} IS NOT NULL ORDER BY l.{column} {{}} LIMIT 1"
        )
        low = snapshot.tx.fetchone(probe.format("ASC"), params)
        if low is not None:
            bounds[facet] = (low[0], snapshot.tx.one(probe.format("DESC"), params)[0])
    return bounds


def _aggregated(
    snapshot: InventorySnapshot, criteria: Criteria, bits: dict[str, int], vocabulary: Vocabulary
) -> tuple[Counts, Bounds]:
    """Filtered: one pass over the matching set (see ``Dialect.counts_facets_in_database``)."""
    tx = snapshot.tx
    where = snapshot.where(criteria, bits)
    count = _counted_in_database if snapshot.dialect.counts_facets_in_database else _counted_here
    counts, bounds, present = count(tx, where, bits, vocabulary)
    without_bit = [code for code, _ in vocabulary if code not in bits]
    if without_bit:
        code_sql, code_params = in_list("x.code", without_bit)
        present.update(
            tx.fetchall(
                f"SELECT x.code, COUNT(*) FROM inv_feature_extra x WHERE x.tenant_id = ? AND {code_sql} "
                f"AND x.id IN (SELECT l.id FROM inv_listing l WHERE {where[0]}) GROUP BY x.code",
                [tx.tenant, *code_params, *where[1]],
            )
        )
    counts[FEATURE_FIELD] = present
    return counts, bounds


def _counted_in_database(
    tx: Tx, where: Clause, bits: dict[str, int], vocabulary: Vocabulary
) -> tuple[Counts, Bounds, dict[str, int]]:
    where_sql, params = where
    columns = [column for _, column in TERM_FACETS]
    # GROUPING(c1, ..., cn) has a bit set for every column a row is not grouped by:
    # the one clear bit names the facet (a NULL value is a missing one, and skipped).
    rows = tx.fetchall(
        f"SELECT GROUPING({', '.join(f'l.{c}' for c in columns)}), "
        f"{', '.join(f'l.{c}' for c in columns)}, COUNT(*) FROM inv_listing l WHERE {where_sql} "
        f"GROUP BY GROUPING SETS ({', '.join(f'(l.{c})' for c in columns)})",
        params,
    )
    width = len(columns)
    counts: Counts = {facet: {} for facet, _ in TERM_FACETS}
    for row in rows:
        position = next(i for i in range(width) if not row[0] >> (width - 1 - i) & 1)
        value = row[1 + position]
        if value is not None:
            counts[TERM_FACETS[position][0]][str(value)] = row[-1]
    coded = [(code, *divmod(bits[code], BITS_PER_MASK)) for code, _ in vocabulary if code in bits]
    aggregates = [f"MIN(l.{column}), MAX(l.{column})" for _, column in RANGE_FACETS]
    aggregates += [f"SUM((l.{FEATURE_MASKS[mask]} >> {shift}) & 1)" for _code, mask, shift in coded]
    row = tx.one(f"SELECT {', '.join(aggregates)} FROM inv_listing l WHERE {where_sql}", params)
    bounds: Bounds = {}
    for i, (facet, _column) in enumerate(RANGE_FACETS):
        if row[2 * i] is not None:
            bounds[facet] = (row[2 * i], row[2 * i + 1])
    offset = 2 * len(RANGE_FACETS)
    present = {code: row[offset + i] or 0 for i, (code, _mask, _shift) in enumerate(coded)}
    return counts, bounds, present


def _counted_here(
    tx: Tx, where: Clause, bits: dict[str, int], vocabulary: Vocabulary
) -> tuple[Counts, Bounds, dict[str, int]]:
    where_sql, params = where
    wanted = [column for _, column in TERM_FACETS] + [column for _, column in RANGE_FACETS]
    select = ", ".join(f"l.{column}" for column in wanted + list(FEATURE_MASKS))
    rows = tx.fetchall(f"SELECT {select} FROM inv_listing l WHERE {where_sql}", params)
    columns = dict(zip(wanted + list(FEATURE_MASKS), zip(*rows))) if rows else {}
    counts: Counts = {}
    for facet, column in TERM_FACETS:
        tally = Counter(columns.get(column, ()))
        tally.pop(None, None)
        counts[facet] = {str(value): n for value, n in tally.items()}
    bounds: Bounds = {}
    for facet, column in RANGE_FACETS:
        values = [v for v in columns.get(column, ()) if v is not None]
        if values:
            bounds[facet] = (min(values), max(values))
    present: dict[str, int] = {}
    masks = [Counter(columns.get(m, ())) for m in FEATURE_MASKS]
    for code, _label in vocabulary:
        bit = bits.get(code)
        if bit is not None:
            which, shift = divmod(bit, BITS_PER_MASK)
            present[code] = sum(n for mask, n in masks[which].items() if mask >> shift & 1)
    return counts, bounds, present
