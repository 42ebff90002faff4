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

import threading
from collections.abc import Callable
from typing import Generic, TypeVar, overload

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
from aap.store.state import KeysKept, StateStore

T = TypeVar("T")


class _Built(Generic[T]):
    """A domain store of :class:`Stores`, built on first use and then an attribute of the
    instance (the descriptor is not asked again). One lock per store kind: two threads
    asking at once get one store."""

    def __init__(self, make: Callable[[Stores], T]) -> None:
        self.make = make
        self.lock = threading.Lock()
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, stores: None, owner: type) -> _Built[T]: ...
    @overload
    def __get__(self, stores: Stores, owner: type) -> T: ...
    def __get__(self, stores: Stores | None, owner: type) -> T | _Built[T]:
        if stores is None:
            return self
        with self.lock:
            held: T | None = stores.__dict__.get(self.name)
            if held is None:
                held = self.make(stores)
                stores.__dict__[self.name] = held
        return held


class Stores:
    """The domain stores of one agent, all on one database as its tenant sees it (and its read replicas).

    Each domain's store is built when it is first used: a platform worker holds thousands of
    tenants' stores, and a tenant that is only searched uses its inventory alone
    (docs/platform.md, "Sizing")."""

    def __init__(
        self,
        db: Database,
        reads: ReadRouter | None = None,
        *,
        index_min_rows: int = 0,
        facet_cache_size: int = 256,
        owner: Database | None = None,
        keys: KeysKept | None = None,
    ) -> None:
        """``owner``: the database ``db`` is a tenant's view of, when these stores opened it
        themselves (it is closed with them). ``keys``: the worker's secrets kept across builds
        of a platform's tenants."""
        self.db = db
        self._owner = owner
        self._keys = keys
        self.reads = reads or ReadRouter(db)
        self._index_min_rows = index_min_rows
        self._facet_cache_size = facet_cache_size

    inventory = _Built(
        lambda s: InventoryStore(
            s.db, reads=s.reads, index_min_rows=s._index_min_rows, facet_cache_size=s._facet_cache_size
        )
    )
    state = _Built(lambda s: StateStore(s.db, s._keys))
    leads = _Built(lambda s: LeadStore(s.db))
    poppy = _Built(lambda s: PoppyStore(s.db))
    feeds = _Built(lambda s: FeedStore(s.db))
    #: The staff console's views and state (docs/console.md).
    console = _Built(lambda s: ConsoleStore(s.db))
    lead_inbox = _Built(lambda s: LeadInbox(s.db, s.leads))
    lead_pipeline = _Built(lambda s: LeadPipeline(s.db, s.lead_inbox))
    #: Erasing a customer's leads, or those past their retention period (docs/leads.md).
    erasure = _Built(lambda s: ErasureStore(s.db))
    inventory_summaries = _Built(lambda s: InventorySummaries(s.db))
    inventory_browser = _Built(lambda s: InventoryBrowser(s.db))

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


def connect_platform(url: str) -> Database:
    """A platform deployment's own database, not migrated here: what its tenants' stores write
    for the platform (its events, when their work is due) is written with their rows."""
    db = connect(url)
    db.platform = True
    return db


def open_platform_database(url: str) -> Database:
    """Open (and migrate) a platform deployment's own database: its tenants' registry too."""
    db = connect_platform(url)
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
    platform = connect_platform(url)
    reads = ReadRouter(platform, read_urls, max_lag_ms=max_replica_lag_ms)
    return Stores(platform.for_tenant(tenant), reads.for_tenant(tenant), owner=platform)
