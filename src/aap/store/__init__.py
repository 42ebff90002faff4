"""Storage: one database, one store object per domain.

:func:`open_stores` opens (and migrates) the database; each domain's store is
built lazily from the same :class:`~aap.store.db.Database`, so a deployment
only pays for the domains it uses and every worker process shares one truth.
"""

from __future__ import annotations

from functools import cached_property

from aap.store.db import Database, open_database


class Stores:
    """The domain stores of one deployment, all on one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @cached_property
    def inventory(self):  # -> aap.store.inventory.InventoryStore
        from aap.store.inventory import InventoryStore

        return InventoryStore(self.db)

    @cached_property
    def state(self):  # -> aap.store.state.StateStore
        from aap.store.state import StateStore

        return StateStore(self.db)

    @cached_property
    def leads(self):  # -> aap.store.leads.LeadStore
        from aap.store.leads import LeadStore

        return LeadStore(self.db)

    @cached_property
    def poppy(self):  # -> aap.store.poppy.PoppyStore
        from aap.store.poppy import PoppyStore

        return PoppyStore(self.db)

    def close(self) -> None:
        self.db.close()


def open_stores(url: str) -> Stores:
    """Open the database at ``url`` (``sqlite:///file.db`` or ``postgresql://...``)."""
    return Stores(open_database(url))
