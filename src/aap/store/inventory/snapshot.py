"""One read transaction over the inventory: every answer it gives is of one version.

A search request reads the feature vocabulary (to check the request's codes),
the feature bits, the sellers, the remembered total, the page and the
documents; a facets request reads the vocabulary and the counts. Each does all
of it through one :class:`InventorySnapshot`, so an import committing midway
can never make one part of an answer disagree with another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson
from pyroaring import FrozenBitMap

from aap.inventory.query import Criteria, SearchQuery
from aap.store.db import Tx
from aap.store.inventory.counts import BackgroundWork, Totals
from aap.store.inventory.facets import FacetKey, compute_facets
from aap.store.inventory.postings import ROW_LIST, PostingCache, Postings
from aap.store.inventory.schema import read_version_and_rows
from aap.store.inventory.search import Hit, search_page
from aap.store.inventory.sql import (
    Clause,
    keyword_scan,
    keywords_in_ids,
    keywords_per_row,
    rows_in,
    where_clause,
)
from aap.util.memo import Memo


@dataclass(frozen=True)
class Vocabulary:
    """The feature codes the inventory carries: (code, label, bit or None) by code, and the bits."""

    entries: tuple[tuple[str, str, int | None], ...]
    bits: dict[str, int]


class VersionCaches:
    """What changes only with an import, per process, keyed by the inventory version."""

    def __init__(self, facet_cache_size: int, postings: PostingCache) -> None:
        self.vocabulary: tuple[int, Vocabulary] | None = None
        self.sellers: tuple[tuple[int, str], frozenset[str]] | None = None
        #: (version, criteria digest, vocabulary) -> the Facets object, the least recently read dropped.
        self.facets: Memo[FacetKey, bytes] = Memo(facet_cache_size, lru=True)
        self.postings = postings


class InventorySnapshot:
    """Reads of one inventory version, inside one read transaction (see :meth:`InventoryStore.snapshot`)."""

    def __init__(self, tx: Tx, caches: VersionCaches, totals: Totals) -> None:
        self.tx = tx
        self.dialect = tx.db.dialect
        #: ``next_rid``: every row number handed out is below it (how big the inventory is).
        self.version, self.next_rid = read_version_and_rows(tx)
        self.totals = totals
        self._caches = caches
        #: Work to start once the transaction has closed (a background count must not
        #: slow the page down, nor write while this snapshot reads).
        self.deferred: list[BackgroundWork] = []
        self._postings: Postings | None | bool = False  # False: not looked up yet

    # -- vocabulary and sellers ------------------------------------------------
    def vocabulary(self) -> Vocabulary:
        cached = self._caches.vocabulary
        if cached is not None and cached[0] == self.version:
            return cached[1]
        entries = tuple(
            (r[0], r[1], r[2])
            for r in self.tx.fetchall(
                "SELECT code, label, bit FROM inv_vocab WHERE tenant_id = ? ORDER BY code", (self.tx.tenant,)
            )
        )
        vocabulary = Vocabulary(entries, {code: bit for code, _label, bit in entries if bit is not None})
        self._caches.vocabulary = (self.version, vocabulary)
        return vocabulary

    def feature_vocabulary(self) -> list[tuple[str, str]]:
        """(code, label) of every evidence code the inventory carries, by code."""
        return [(code, label) for code, label, _bit in self.vocabulary().entries]

    def bits(self) -> dict[str, int]:
        """Feature code -> its bit in the mask columns (codes beyond the capacity have none)."""
        return self.vocabulary().bits

    def bits_for(self, criteria: Criteria) -> dict[str, int]:
        """:meth:`bits`, read only when ``criteria`` filters by features: the other conditions
        need none, and a tenant's first search after its runtime was built reads one table fewer."""
        applied = criteria.applied
        return self.bits() if "features_all" in applied or "features_any" in applied else {}

    def sellers(self, currency: str) -> frozenset[str]:
        """Dealer keys (``""``: none) holding listings in ``currency``, from the import-time counts."""
        key = (self.version, currency)
        cached = self._caches.sellers
        if cached is not None and cached[0] == key:
            return cached[1]
        sellers = frozenset(
            r[0]
            for r in self.tx.fetchall(
                "SELECT DISTINCT dealer_key FROM inv_facet_count WHERE tenant_id = ? AND currency = ? AND field = 'statuses'",
                (self.tx.tenant, currency),
            )
        )
        self._caches.sellers = (key, sellers)
        return sellers

    # -- the matching set ------------------------------------------------------
    def effective(self, criteria: Criteria) -> Criteria:
        """``criteria`` without a seller restriction that restricts nothing.

        On an aggregate endpoint the seller restriction is dropped when every
        seller holding listings in this currency is a configured one (the usual
        case): a thousand-id ``IN`` list on every row is then pure cost.
        """
        if criteria.dealer_ids and self.sellers(criteria.currency) <= set(criteria.dealer_ids):
            return replace(criteria, dealer_ids=None)
        return criteria

    def where(self, criteria: Criteria, bits: dict[str, int]) -> Clause:
        """The matching set's condition, with the keyword scan run once where the dialect wants."""
        criteria = self.effective(criteria)
        if criteria.tokens and self.dialect.scans_keywords_first:
            return self.scanned_where(criteria, bits)
        return where_clause(self.tx.tenant, criteria, bits)

    def scanned_where(self, criteria: Criteria, bits: dict[str, int]) -> Clause:
        """The condition with keyword tokens resolved now, in this snapshot, to a list of ids."""
        sql, params = keyword_scan(self.tx.tenant, criteria.tokens)
        ids = orjson.dumps([row[0] for row in self.tx.fetchall(sql, params)]).decode()
        return where_clause(self.tx.tenant, criteria, bits, keywords_in_ids(self.dialect, ids))

    def postings(self) -> Postings | None:
        """The posting index of this snapshot's version, if this process has (or can make) it."""
        if self._postings is False:
            self._postings = self._caches.postings.for_snapshot(self)
        assert self._postings is not True
        return self._postings

    def small(self) -> bool:
        """Whether this inventory is small enough that it is counted in SQL and never indexed
        (a platform's small tenant): counting its matching set again costs less than a
        remembered total's lookup and upkeep, so none is kept for it (docs/search.md, "Totals")."""
        return self.postings() is None and self._caches.postings.small(self.version)

    def matched(self, criteria: Criteria) -> FrozenBitMap | None:
        """The row numbers of ``criteria``'s matching set (seller restriction as given), from the
        posting index; None when the index is not there or declines."""
        postings = self.postings()
        return None if postings is None else postings.match(self.tx, criteria)

    def matched_where(
        self, criteria: Criteria, bits: dict[str, int], matched: FrozenBitMap, want: int
    ) -> tuple[Clause, bool]:
        """(a condition selecting ``matched``, whether it is a short list of rows).

        A small set goes to SQL as its row numbers (sort them; no index walk); a large
        one by its condition, with keyword tokens tested on each row a sort-index walk
        visits rather than by a scan of every listing's text.
        """
        tenant = self.tx.tenant
        if len(matched) <= max(ROW_LIST, want):
            return rows_in(self.dialect, tenant, matched), True
        if criteria.tokens:
            return where_clause(tenant, criteria, bits, keywords_per_row(criteria.tokens)), False
        return where_clause(tenant, criteria, bits), False

    # -- answers ---------------------------------------------------------------
    def search(self, query: SearchQuery, *, count_timeout_ms: float = 0) -> tuple[list[Hit], int | None]:
        """One page of ``query`` (after ``query.after``, or from ``query.skip``) and the exact total.

        Returns up to ``query.limit + 1`` hits; a hit beyond ``query.limit`` means
        the set is not exhausted. The total is None when counting would take
        longer than ``count_timeout_ms`` (0: never give up); the count then
        finishes in the background once the snapshot closes.
        """
        hits, total, later = search_page(self, query, count_timeout_ms)
        if later is not None:
            self.deferred.append(later)
        return hits, total

    def facets(self, criteria: Criteria, vocabulary: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """The Facets object of ``criteria``'s matching set; ``vocabulary`` lists (code, label)."""
        vocabulary = tuple((code, label) for code, label in vocabulary)
        key = (self.version, criteria.digest, vocabulary)
        # Kept encoded: a hit is a fresh copy by decoding (the cached value is shared), and the
        # bytes are a tenth of the objects' memory, which adds up on a platform serving
        # thousands of agents in one worker (docs/platform.md, "Sizing").
        encoded = self._caches.facets.get(key, lambda: orjson.dumps(compute_facets(self, criteria, vocabulary)))
        facets: dict[str, Any] = orjson.loads(encoded)
        return facets
