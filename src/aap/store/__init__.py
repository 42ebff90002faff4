"""Storage: one database, one store object per domain.

:func:`open_stores` opens (and migrates) the database and builds every
domain's store on it, so that every worker process shares one truth. The
modules: :mod:`~aap.store.db` (connections, transactions),
:mod:`~aap.store.dialect` (what differs between SQLite and PostgreSQL),
:mod:`~aap.store.migrations` (every domain's schema steps), and the domain
stores :mod:`~aap.store.inventory`, :mod:`~aap.store.state`,
:mod:`~aap.store.leads` (and the console's reads of it, :mod:`~aap.store.lead_inbox`, and the
lead pipeline, :mod:`~aap.store.lead_pipeline`),
:mod:`~aap.store.poppy`, :mod:`~aap.store.feeds` and :mod:`~aap.store.console`.
"""

from __future__ import annotations

from aap.store.console import ConsoleStore
from aap.store.db import Database, connect
from aap.store.erasure import ErasureStore
from aap.store.feeds import FeedStore
from aap.store.inventory import InventoryStore
from aap.store.inventory.browse import InventoryBrowser
from aap.store.inventory.summary import InventorySummaries
from aap.store.lead_inbox import LeadInbox
from aap.store.lead_pipeline import LeadPipeline
from aap.store.leads import LeadStore
from aap.store.migrations import PLATFORM_DOMAINS, migrate
from aap.store.poppy import PoppyStore
from aap.store.replicas import ReadRouter
from aap.store.state import StateStore


class Stores:
    """The domain stores of one agent, all on one database as its tenant sees it (and its read replicas)."""

    def __init__(
        self,
        db: Database,
        reads: ReadRouter | None = None,
        *,
        index_min_rows: int = 0,
        facet_cache_size: int = 256,
        owner: Database | None = None,
    ) -> None:
        """``owner``: the database ``db`` is a tenant's view of, when these stores opened it
        themselves (it is closed with them)."""
        self.db = db
        self._owner = owner
        self.reads = reads or ReadRouter(db)
        self.inventory = InventoryStore(
            db, reads=self.reads, index_min_rows=index_min_rows, facet_cache_size=facet_cache_size
        )
        self.state = StateStore(db)
        self.leads = LeadStore(db)
        self.poppy = PoppyStore(db)
        self.feeds = FeedStore(db)
        # The staff console's views and state (docs/console.md).
        self.console = ConsoleStore(db)
        self.lead_inbox = LeadInbox(db, self.leads)
        self.lead_pipeline = LeadPipeline(db, self.lead_inbox)
        # Erasing a customer's leads, or those past their retention period (docs/leads.md).
        self.erasure = ErasureStore(db)
        self.inventory_summaries = InventorySummaries(db)
        self.inventory_browser = InventoryBrowser(db)

    @property
    def tenant(self) -> str:
        """Whose rows these stores read and write (:mod:`aap.store.layout`)."""
        return self.db.tenant

    def close(self) -> None:
        self.reads.close()
        self.db.close()
        if self._owner is not None:
            self._owner.close()


def open_database(url: str) -> Database:
    """Open (and migrate) the database at ``url`` (``sqlite:///file.db`` or ``postgresql://...``)."""
    db = connect(url)
    migrate(db)
    return db


def open_platform_database(url: str) -> Database:
    """Open (and migrate) a platform deployment's own database: its tenants' registry too."""
    db = connect(url)
    db.platform = True
    migrate(db, PLATFORM_DOMAINS)
    return db


def open_stores(
    url: str, read_urls: tuple[str, ...] = (), *, max_replica_lag_ms: float = 5000, tenant: str | None = None
) -> Stores:
    """Open (and migrate) the database at ``url`` and every store on it; the read skills may
    read from the PostgreSQL replicas ``read_urls`` (docs/deployment.md, "Read replicas").
    ``tenant``: a platform tenant's stores, in its platform's database (which is not migrated
    here: a platform database is migrated with its registry, :func:`open_platform_database`);
    None: the deployment's own agent."""
    if tenant is None:
        db = open_database(url)
        return Stores(db, ReadRouter(db, read_urls, max_lag_ms=max_replica_lag_ms))
    platform = connect(url)
    platform.platform = True
    reads = ReadRouter(platform, read_urls, max_lag_ms=max_replica_lag_ms)
    return Stores(platform.for_tenant(tenant), reads.for_tenant(tenant), owner=platform)
