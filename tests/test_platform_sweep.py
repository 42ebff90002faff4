"""The passes over every tenant: the sweep by one worker at a time, the loads kept for requests.

The sweep walks the tenants whose configuration holds feeds or a retention period (their feeds
noted as due, their old leads erased; deliveries note themselves, :mod:`test_platform_due`).
At a hundred thousand tenants a pass over every tenant is minutes of a core, so the workers of a deployment take turns through the
registry (:meth:`PlatformStore.claim_sweep`) instead of each doing it. A starting worker loads
every tenant's configuration once, and keeps what it loaded packed for the tenants' first
requests.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aap.server import platform_services
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database
from aap.store.platform import DELIVERIES
from aap.tenants import TenantRegistry
from aap.work import Work
from platform_support import platform_settings, tenant_config

MINUTE_MS = 60_000
WORK = Work.for_database(True)


def paused_here(monkeypatch) -> list[float]:
    """``asyncio.sleep`` made to return at once in this thread, each delay recorded: the pass's
    pauses, without waiting for them. Another thread's loop keeps the real sleep: a server some
    other test left running polls with it, and would otherwise spin and fill the record."""
    pauses: list[float] = []
    real = asyncio.sleep
    here = threading.get_ident()

    async def sleep(delay: float, result: object = None) -> object:
        if threading.get_ident() != here:
            return await real(delay, result)
        pauses.append(delay)
        return result

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return pauses


def test_one_caller_of_many_at_once_gets_the_sweep_then_none_until_its_interval_passed(database_url) -> None:
    settings = platform_settings(database_url)
    db = open_platform_database(database_url)
    registry = TenantRegistry(settings, db, environ={})
    try:
        now = 1_800_000_000_000
        with ThreadPoolExecutor(8) as pool:
            claims = list(pool.map(lambda _: registry.store.claim_sweep(now, 10 * MINUTE_MS), range(16)))
        assert claims.count(True) == 1
        assert not registry.store.claim_sweep(now + 9 * MINUTE_MS, 10 * MINUTE_MS)
        assert registry.store.claim_sweep(now + 10 * MINUTE_MS, 10 * MINUTE_MS)
        # The platform's own row is no tenant's work: none of it is listed as a tenant due.
        assert registry.store.due(DELIVERIES, now + 60 * MINUTE_MS) == []
        assert registry.store.next_due(DELIVERIES) is None
    finally:
        db.close()


def test_a_starting_worker_loads_every_tenant_and_keeps_its_settings_for_its_first_request(
    tmp_path: Path, monkeypatch
) -> None:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db", settings_in_memory=2)
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    for i in range(3):
        registry.add(f"dealer-{i}", tenant_config(f"Dealer {i}"), [f"d{i}.example"])
    pauses = paused_here(monkeypatch)
    app = create_platform_app(settings, stores)
    ctx = app.state.platform
    try:
        asyncio.run(platform_services.load_every_tenant(ctx))
        runtimes = ctx.runtimes
        revisions = {t: registry.store.tenant(t).revision for t in ("dealer-0", "dealer-1", "dealer-2")}
        assert {t: runtimes._loaded_revision(t) for t in revisions} == revisions  # each found to load
        assert len(runtimes._packed) == 2  # as many as there is room for
        assert len(runtimes) == 0  # nothing built
        assert len(pauses) == 1 and pauses[0] >= 0  # a pause after its one page of tenants
    finally:
        ctx.work.close()
        stores.close()


def test_a_starting_worker_learns_every_tenants_domains_so_requests_read_no_host(tmp_path: Path, monkeypatch) -> None:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    for i in range(3):
        registry.add(f"dealer-{i}", tenant_config(f"Dealer {i}"), [f"d{i}.example", f"www.d{i}.example"])
    paused_here(monkeypatch)
    app = create_platform_app(settings, stores)
    ctx = app.state.platform
    reads: list[str] = []
    read = ctx.hosts.store.tenant_at

    def counted(host: str) -> str | None:
        reads.append(host)
        return read(host)

    monkeypatch.setattr(ctx.hosts.store, "tenant_at", counted)

    async def scenario() -> None:
        await platform_services.load_every_tenant(ctx)
        for i in range(3):
            assert await ctx.hosts.tenant(f"d{i}.example") == f"dealer-{i}"
            assert await ctx.hosts.tenant(f"www.d{i}.example") == f"dealer-{i}"
        assert reads == []  # every tenant's host known from the start-up pass
        assert await ctx.hosts.tenant("nobody.example") is None
        assert await ctx.hosts.tenant("nobody.example") is None
        assert reads == ["nobody.example"]  # read once, then known to be nobody's
        # A change forgets the tenant's hosts and the names known as nobody's: read again.
        registry.add("dealer-9", tenant_config("Dealer 9"), ["nobody.example"])
        ctx.hosts.forget("dealer-0")
        assert await ctx.hosts.tenant("nobody.example") == "dealer-9"
        assert await ctx.hosts.tenant("d0.example") == "dealer-0"
        assert reads == ["nobody.example", "nobody.example", "d0.example"]
        ctx.hosts.forget("dealer-1", "dealer-2")  # the changes of one look at the registry, at once
        assert await ctx.hosts.tenant("d1.example") == "dealer-1"
        assert await ctx.hosts.tenant("www.d2.example") == "dealer-2"
        assert await ctx.hosts.tenant("d0.example") == "dealer-0"
        assert reads[3:] == ["d1.example", "www.d2.example"]

    try:
        asyncio.run(scenario())
    finally:
        ctx.work.close()
        stores.close()


def test_a_page_read_before_a_change_is_not_learned_and_made_up_names_never_push_out_a_tenants(
    tmp_path: Path, monkeypatch
) -> None:
    from aap.server import tenant_routing

    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-0", tenant_config("Dealer 0"), ["d0.example"])
    hosts = tenant_routing.Hosts(registry.store, WORK)
    monkeypatch.setattr(tenant_routing, "NOBODY_KEPT", 3)
    try:
        page = registry.list()
        generation = hosts.generation
        hosts.forget("dealer-0")  # its domains changed after the page was read
        hosts.learn(page, generation)
        assert hosts._known == {}
        hosts.learn(registry.list(), hosts.generation)
        assert dict(hosts._known) == {"d0.example": "dealer-0"}
        for i in range(20):
            assert asyncio.run(hosts.tenant(f"made-up-{i}.example")) is None
        assert len(hosts._nobody) == 3
        assert dict(hosts._known) == {"d0.example": "dealer-0"}
    finally:
        stores.close()


def test_the_sweep_is_given_only_the_tenants_whose_configuration_holds_its_work(tmp_path: Path) -> None:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    db = open_platform_database(settings.database_url)
    registry = TenantRegistry(settings, db, environ={})
    try:
        registry.add("dealer-a", tenant_config("Alpha Motors"), ["a.example"])
        registry.add("dealer-b", tenant_config("Beta Cars", extra="[leads]\nretention_days = 30\n"), ["b.example"])
        registry.add("dealer-c", tenant_config("Gamma Auto", rooftop="retentionXdays"), ["c.example"])
        registry.add("dealer-d", tenant_config("Delta Trucks"), ["d.example"])
        held = platform_services.SWEPT_FOR
        assert [r.tenant_id for r in registry.store.tenants(holding=held)] == ["dealer-b"]  # "_" is no wildcard
        assert [r.tenant_id for r in registry.store.tenants(after="dealer-b", holding=held)] == []
        assert len(registry.store.tenants()) == 4
    finally:
        db.close()
