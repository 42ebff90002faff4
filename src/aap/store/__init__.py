"""Storage: one database, one store object per domain.

:func:`open_stores` opens (and migrates) the database and builds every
domain's store on it, so that every worker process shares one truth. The
modules: :mod:`~aap.store.db` (connections, transactions),
:mod:`~aap.store.dialect` (what differs between SQLite and PostgreSQL),
:mod:`~aap.store.migrations` (every domain's schema steps), and the domain
stores :mod:`~aap.store.inventory`, :mod:`~aap.store.state`,
:mod:`~aap.store.leads` (and the console's reads of it, :mod:`~aap.store.lead_inbox`),
:mod:`~aap.store.poppy`, :mod:`~aap.store.feeds` and :mod:`~aap.store.console`.
"""

from __future__ import annotations

from aap.store.console import ConsoleStore
from aap.store.db import Database, connect
from aap.store.feeds import FeedStore
from aap.store.inventory import InventoryStore
from aap.store.inventory.summary import InventorySummaries
from aap.store.lead_inbox import LeadInbox
from aap.store.leads import LeadStore
from aap.store.migrations import migrate
from aap.store.poppy import PoppyStore
from aap.store.state import StateStore


class Stores:
    """The domain stores of one deployment, all on one database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.inventory = InventoryStore(db)
        self.state = StateStore(db)
        self.leads = LeadStore(db)
        self.poppy = PoppyStore(db)
        self.feeds = FeedStore(db)
        # The staff console's views and state (docs/console.md).
        self.console = ConsoleStore(db)
        self.lead_inbox = LeadInbox(db, self.leads)
        self.inventory_summaries = InventorySummaries(db)

    def close(self) -> None:
        self.db.close()


def open_database(url: str) -> Database:
    """Open (and migrate) the database at ``url`` (``sqlite:///file.db`` or ``postgresql://...``)."""
    db = connect(url)
    migrate(db)
    return db


def open_stores(url: str) -> Stores:
    """Open (and migrate) the database at ``url`` and every store on it."""
    return Stores(open_database(url))
