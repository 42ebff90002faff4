"""What a platform worker's tenants share, and what each keeps its own (docs/platform.md, "Sizing").

A built tenant is kept small by holding once what every tenant holds alike: Settings sections
with equal content, the agent's skill table; and by building a store or a surface only when a
request needs it. Sharing is safe only for what cannot change: these tests check that the
shared pieces really are one object, that they are immutable, and that two tenants with
different settings, or their mutable parts (stores, databases, gateways, rate limiters), are
never one object.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from aap.agent import DEFAULT_HANDLERS, DealerAgent
from aap.config.shared import SHARED_FIELDS, SharedSections
from aap.server.platform import create_platform_app
from aap.server.runtime import AgentRuntime
from aap.skills import dealer_information
from aap.store import Stores, open_platform_database
from aap.store.replicas import ReadRouter
from aap.tenants import TenantRegistry
from http_helpers import AAP_HEADERS, send_message
from platform_support import PLATFORM_HOST, platform_settings, tenant_config

SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 5}}
#: A tenant whose rate limit and lead settings are its own.
OWN_RULES = """
[rate_limit]
per_minute = 30
burst = 10

[leads]
consent_clock_skew_seconds = 300
"""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[tuple[TestClient, TenantRegistry]]:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example"])
    registry.add("dealer-b", tenant_config("Beta Cars"), ["beta.example"])
    registry.add("dealer-c", tenant_config("Gamma Autos", extra=OWN_RULES), ["gamma.example"])
    app = create_platform_app(settings, stores)
    with TestClient(app, base_url=f"https://{PLATFORM_HOST}") as client:
        yield client, registry
    stores.close()


def runtime_of(client: TestClient, tenant_id: str, host: str) -> AgentRuntime:
    runtimes = client.app.state.platform.runtimes  # type: ignore[attr-defined]

    async def get() -> AgentRuntime:
        runtime = await runtimes.get(tenant_id, f"https://{host}")
        assert runtime is not None
        return runtime

    return client.portal.call(get)


def search(client: TestClient, host: str) -> None:
    answer = client.post("/a2a", json=send_message(SEARCH), headers={**AAP_HEADERS, "host": host})
    assert answer.status_code == 200 and "result" in answer.json(), answer.text


def frozen(value: Any) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and params.frozen


def test_tenants_with_equal_sections_share_them_and_nothing_mutable(platform) -> None:
    client, _ = platform
    search(client, "alpha.example")
    search(client, "beta.example")
    a, b = runtime_of(client, "dealer-a", "alpha.example"), runtime_of(client, "dealer-b", "beta.example")
    sa, sb = a.gateway.settings, b.gateway.settings
    for name in SHARED_FIELDS:
        assert getattr(sa, name) is getattr(sb, name), name
        assert frozen(getattr(sa, name)), f"{name} is shared, so it must be immutable"
    # Each tenant's own: its identity, its dealer, and everything that holds state.
    assert sa.dealer is not sb.dealer and sa.agent is not sb.agent and sa != sb
    assert sa.dealer.info["name"] == "Alpha Motors" and sb.dealer.info["name"] == "Beta Cars"
    for mine, theirs in (
        (a.gateway, b.gateway),
        (a.gateway.limiter, b.gateway.limiter),
        (a.gateway.agent, b.gateway.agent),
        (a.gateway.agent.deps, b.gateway.agent.deps),
        (a.gateway.stores, b.gateway.stores),
        (a.gateway.stores.db, b.gateway.stores.db),
        (a.gateway.stores.reads, b.gateway.stores.reads),
        (a.gateway.stores.inventory, b.gateway.stores.inventory),
    ):
        assert mine is not theirs
    assert (a.gateway.stores.tenant, b.gateway.stores.tenant) == ("dealer-a", "dealer-b")
    # A tenant reads the primary through its own view, the same one its stores write through.
    assert a.gateway.stores.reads.primary is a.gateway.stores.db
    # The skill table is one, and it cannot be written to.
    assert a.gateway.agent._handlers is b.gateway.agent._handlers is DEFAULT_HANDLERS
    with pytest.raises(TypeError):
        DEFAULT_HANDLERS["inventory.search"] = dealer_information.run  # type: ignore[index]


def test_tenants_with_different_settings_get_different_sections(platform) -> None:
    client, _ = platform
    a, c = runtime_of(client, "dealer-a", "alpha.example"), runtime_of(client, "dealer-c", "gamma.example")
    sa, sc = a.gateway.settings, c.gateway.settings
    assert (sc.rate_limit.per_minute, sc.rate_limit.burst) == (30, 10)
    assert sa.rate_limit is not sc.rate_limit and sa.rate_limit != sc.rate_limit
    assert sc.leads.consent_clock_skew_seconds == 300 != sa.leads.consent_clock_skew_seconds
    assert sa.leads is not sc.leads
    assert a.gateway.limiter.rule is sa.rate_limit and c.gateway.limiter.rule is sc.rate_limit
    # What they hold alike is still held once.
    assert sa.mcp is sc.mcp and sa.web is sc.web and sa.search is sc.search


def test_a_section_that_could_change_is_never_shared() -> None:
    sections = SharedSections()

    @dataclasses.dataclass
    class Open:  # not frozen: hashes by identity or not at all
        values: list[str]

    one, two = Open(["x"]), Open(["x"])
    assert sections.section(one) is one and sections.section(two) is two
    assert sections.section(("a", ["b"])) is not None  # unhashable: handed back as it is
    assert len(sections) == 0


def test_registering_a_skill_changes_that_agent_alone(platform) -> None:
    client, _ = platform
    a, b = runtime_of(client, "dealer-a", "alpha.example"), runtime_of(client, "dealer-b", "beta.example")
    agent: DealerAgent = a.gateway.agent

    def other(*_: Any) -> dict[str, Any]:
        return {}

    agent.register("dealer.information", other)
    assert agent._handlers["dealer.information"] is other
    assert b.gateway.agent._handlers["dealer.information"] is dealer_information.run
    assert DEFAULT_HANDLERS["dealer.information"] is dealer_information.run


def test_a_tenant_only_searched_builds_only_what_a_search_needs(platform) -> None:
    client, _ = platform
    search(client, "beta.example")
    runtime = runtime_of(client, "dealer-b", "beta.example")
    built = set(vars(runtime.gateway.stores))
    assert "inventory" in built
    assert not built & {"leads", "poppy", "feeds", "console", "lead_inbox", "lead_pipeline", "inventory_browser"}
    assert [runtime.surfaces[i].name for i in runtime._built] == ["a2a"]


def test_a_store_asked_for_by_threads_at_once_is_built_once(tmp_path: Path) -> None:
    stores = Stores(open_platform_database(f"sqlite:///{tmp_path}/one.db"))
    seen: list[int] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        seen.append(id(stores.lead_pipeline))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1 and stores.lead_pipeline.inbox is stores.lead_inbox
    stores.close()


def test_a_tenants_reads_go_through_its_own_view_of_the_primary(tmp_path: Path) -> None:
    db = open_platform_database(f"sqlite:///{tmp_path}/p.db")
    reads = ReadRouter(db)
    mine = db.for_tenant("dealer-a")
    assert reads.for_tenant("dealer-a", mine).primary is mine
    with pytest.raises(ValueError):
        reads.for_tenant("dealer-b", mine)  # another tenant's view is never read through
    db.close()


def test_a_tenants_settings_with_shared_sections_travel_to_worker_processes(platform) -> None:
    client, registry = platform
    settings = runtime_of(client, "dealer-c", "gamma.example").gateway.settings
    for value in (settings, registry.deployment):
        assert pickle.loads(pickle.dumps(value)) == value


def test_a_dropped_runtime_without_lifespans_is_closed_at_once(platform) -> None:
    client, _ = platform
    runtimes = client.app.state.platform.runtimes  # type: ignore[attr-defined]
    search(client, "alpha.example")  # the A2A surface only: nothing entered that outlives a request
    client.post("/mcp", headers={"host": "beta.example"}, json={})  # MCP's session manager: entered
    a, b = runtime_of(client, "dealer-a", "alpha.example"), runtime_of(client, "dealer-b", "beta.example")
    assert not a.lingering and b.lingering

    def drop(tenant_id: str) -> int:
        async def run() -> int:
            return runtimes.drop(tenant_id)

        return client.portal.call(run)

    assert drop("dealer-a") == 1
    assert a.closed and not runtimes._closing and "dealer-a" not in runtimes._stores
    assert drop("dealer-b") == 1
    assert not b.closed and len(runtimes._closing) == 1  # its requests in flight get the grace
    search(client, "alpha.example")  # built again, on its next request
    assert runtime_of(client, "dealer-a", "alpha.example") is not a
