"""The inventory store, one module per concern.

=================  ==========================================================
``schema``         tables, migrations, the listing row (:class:`ListingRow`)
``rows``           a feed listing prepared for the store (ids, keys, JSON)
``sql``            the matching set and the ordering as portable SQL
``snapshot``       one read transaction: vocabulary, sellers, search, facets
``search``         one page and its total
``counts``         remembered totals (split by seller), count budget, background counts
``postings``       the posting index: exact counts from bitmaps, per process
``facets``         the Facets object, maintained and counted
``importer``       one import transaction
``store``          :class:`InventoryStore`, tying them together
=================  ==========================================================
"""

from aap.store.inventory.importer import GUARDED_FIELDS, Carried, Conflict, ContentGuard, ImportStats
from aap.store.inventory.rows import InventoryImportError, synthesized_id
from aap.store.inventory.schema import MIGRATIONS, ListingRow
from aap.store.inventory.search import Hit
from aap.store.inventory.snapshot import InventorySnapshot
from aap.store.inventory.store import FieldLossRefused, InventoryStore, ListingRecord, ShrinkRefused
from aap.util.rfc3339 import epoch_us

__all__ = [
    "GUARDED_FIELDS",
    "Carried",
    "Conflict",
    "ContentGuard",
    "FieldLossRefused",
    "Hit",
    "ImportStats",
    "InventoryImportError",
    "InventorySnapshot",
    "InventoryStore",
    "ListingRecord",
    "ListingRow",
    "MIGRATIONS",
    "ShrinkRefused",
    "epoch_us",
    "synthesized_id",
]
