"""Platform hosting in one process: tenants routed by host and by /t/ID/, each its own agent.

The app is driven through Starlette's test client with the ``Host`` header a proxy forwards;
the end-to-end suite over real HTTP, with two workers and on PostgreSQL, is
tests/test_platform_e2e.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aap.server.platform import create_platform_app
from aap.spec import validate
from aap.store import Stores, open_platform_database
from aap.tenants import TenantError, TenantRegistry
from http_helpers import AAP_HEADERS, send_message
from platform_support import PLATFORM_HOST, eventually, listings, platform_settings, tenant_config, tenant_stores

SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 50}}


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[tuple[TestClient, TenantRegistry]]:
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example", "www.alpha.example"])
    registry.add("dealer-b", tenant_config("Beta Cars"), ["beta.example"])
    for tenant_id, make, count, rooftop in (
        ("dealer-a", "Honda", 3, "Alpha Motors Main"),
        ("dealer-b", "Kia", 5, "Beta Cars Main"),
    ):
        own = tenant_stores(registry, tenant_id)
        own.inventory.import_listings(listings(tenant_id, make, count, rooftop))
        own.close()
    app = create_platform_app(settings, stores)
    with TestClient(app, base_url="https://agents.platform.example") as client:
        yield client, registry
    stores.close()


def at(host: str) -> dict[str, str]:
    return {"host": host}


def search(client: TestClient, host: str, prefix: str = "") -> dict:
    answer = client.post(prefix + "/a2a", json=send_message(SEARCH), headers={**AAP_HEADERS, **at(host)})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]["message"]["parts"][0]["data"]["data"]


def test_each_domain_is_its_own_agent_with_its_own_urls(platform) -> None:
    client, _ = platform
    for host, name in (
        ("alpha.example", "Alpha Motors"),
        ("www.alpha.example", "Alpha Motors"),
        ("beta.example", "Beta Cars"),
    ):
        card = client.get("/.well-known/agent-card.json", headers=at(host))
        assert card.status_code == 200
        document = card.json()
        assert validate(document, "agent-card") == []
        assert document["name"] == name
        assert {i["url"] for i in document["supportedInterfaces"]} == {f"https://{host}/a2a"}
    alpha = search(client, "alpha.example")
    beta = search(client, "beta.example")
    assert alpha["total"] == 3 and {v["make"] for v in alpha["vehicles"]} == {"Honda"}
    assert beta["total"] == 5 and {v["make"] for v in beta["vehicles"]} == {"Kia"}


def test_another_method_at_a2a_is_refused_by_the_route_a_tenant_makes_only_then(platform) -> None:
    """A tenant's A2A surface answers ``POST /a2a`` on its direct path and makes its route only
    for a request off it (aap.web.parts): that route still refuses another method, as a
    deployment's does, for a tenant whose surface was built first and for one built after."""
    client, _ = platform
    search(client, "alpha.example")
    search(client, "beta.example")
    for host, prefix in (("alpha.example", ""), ("beta.example", ""), (PLATFORM_HOST, "/t/dealer-b")):
        refused = client.get(prefix + "/a2a", headers=at(host))
        assert refused.status_code == 405, (host, refused.text)
        assert refused.headers["allow"] == "POST" and refused.headers["content-type"].startswith("application/json")
        assert search(client, host, prefix)["total"] in (3, 5)  # and the direct path still answers


def test_the_prefix_on_the_platform_host_serves_the_same_agent_with_its_own_urls(platform) -> None:
    client, _ = platform
    card = client.get("/t/dealer-b/.well-known/agent-card.json", headers=at(PLATFORM_HOST))
    assert card.status_code == 200
    document = card.json()
    assert validate(document, "agent-card") == []
    base = f"https://{PLATFORM_HOST}/t/dealer-b"
    assert {i["url"] for i in document["supportedInterfaces"]} == {base + "/a2a"}
    assert search(client, PLATFORM_HOST, "/t/dealer-b")["total"] == 5
    llms = client.get("/t/dealer-b/llms.txt", headers=at(PLATFORM_HOST)).text
    assert base + "/a2a" in llms and "alpha" not in llms
    poppy = client.get("/t/dealer-b/.well-known/poppy.json", headers=at(PLATFORM_HOST))
    assert poppy.status_code == 200 and base in poppy.text
    # RFC 8414 §3: the issuer https://HOST/t/ID has its metadata under the host's well-known path.
    metadata = client.get("/.well-known/oauth-authorization-server/t/dealer-b", headers=at(PLATFORM_HOST))
    assert metadata.status_code == 200 and metadata.json()["issuer"] == base
    assert client.get("/t/dealer-b", headers=at(PLATFORM_HOST), follow_redirects=False).status_code == 308


def test_unknown_hosts_and_tenants_get_404_with_no_tenant_data(platform) -> None:
    client, _ = platform
    for host, path in (
        ("nobody.example", "/.well-known/agent-card.json"),
        ("nobody.example", "/a2a"),
        ("nobody.example.", "/"),
        ("127.0.0.1", "/"),
        (PLATFORM_HOST, "/t/dealer-z/.well-known/agent-card.json"),
        (PLATFORM_HOST, "/t/Bad_Id/a2a"),
        (PLATFORM_HOST, "/.well-known/agent-card.json"),
        ("alpha.example", "/no/such/path"),
    ):
        answer = client.get(path, headers=at(host))
        assert answer.status_code == 404, (host, path)
        assert "Alpha" not in answer.text and "Beta" not in answer.text


def test_tls_is_allowed_only_for_tenant_domains(platform) -> None:
    client, _ = platform
    local = TestClient(client.app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 40000))
    ask = lambda domain: local.get(f"/_platform/tls-allowed?domain={domain}")  # noqa: E731
    assert ask("alpha.example").status_code == 200
    assert ask("www.alpha.example").status_code == 200
    assert ask("beta.example").status_code == 200
    assert ask("evil.example").status_code == 404
    assert ask(PLATFORM_HOST).status_code == 404
    assert ask("").status_code == 404
    # Hidden from any other peer, at any host (tests/test_platform_certificates.py has the rest).
    for host in (PLATFORM_HOST, "alpha.example"):
        assert client.get("/_platform/tls-allowed?domain=alpha.example", headers=at(host)).status_code == 404


def test_changes_are_served_without_a_restart(platform) -> None:
    client, registry = platform
    assert search(client, "alpha.example")["total"] == 3  # built and cached
    registry.add("dealer-c", tenant_config("Gamma Autos"), ["gamma.example"])
    assert eventually(
        lambda: client.get("/.well-known/agent-card.json", headers=at("gamma.example")).status_code == 200
    )
    registry.update("dealer-a", tenant_config("Alpha Motors Renamed", rooftop="Alpha Motors Main"))
    assert eventually(
        lambda: (
            client.get("/.well-known/agent-card.json", headers=at("alpha.example")).json()["name"]
            == "Alpha Motors Renamed"
        )
    )
    registry.set_domains("dealer-a", add=["alpha.test.example"], remove=["www.alpha.example"])
    assert eventually(lambda: client.get("/llms.txt", headers=at("www.alpha.example")).status_code == 404)
    assert client.get("/llms.txt", headers=at("alpha.test.example")).status_code == 200
    registry.remove("dealer-b")
    assert eventually(lambda: client.get("/.well-known/agent-card.json", headers=at("beta.example")).status_code == 404)
    assert client.get("/t/dealer-b/llms.txt", headers=at(PLATFORM_HOST)).status_code == 404


def test_the_registry_lists_every_problem_at_once(platform) -> None:
    _, registry = platform
    bad = tenant_config(
        "Broken",
        extra='[search]\nmax_limit = "many"\n[[feeds]]\nname = "x"\nsource = "/etc/passwd"\nschedule = "every 1h"\nprivate_network = true\n',
    )
    with pytest.raises(TenantError) as refused:
        registry.add(
            "Bad_Id",
            bad + 'public_url = "https://x.example"\n',
            ["alpha.example", "10.0.0.5", "agents.platform.example"],
        )
    problems = "\n".join(refused.value.problems)
    assert "tenant id 'Bad_Id'" in problems
    assert "domain 'alpha.example': already served by tenant 'dealer-a'" in problems
    assert "domain '10.0.0.5': is an IP address" in problems
    assert "is the platform's own host" in problems
    with pytest.raises(TenantError) as refused:
        registry.add("dealer-x", bad, ["x.example"])
    problems = "\n".join(refused.value.problems)
    assert "search.max_limit" in problems
    assert "feeds[0].source" in problems
    assert "feeds[0].private_network" in problems
    internal = tenant_config(
        "Inside", extra='[[feeds]]\nname = "x"\nsource = "https://169.254.169.254/latest"\nschedule = "every 1h"\n'
    )
    with pytest.raises(TenantError) as refused:
        registry.add("dealer-i", internal)
    assert "feeds[0].source: names a link-local address" in str(refused.value)
    with pytest.raises(TenantError) as exists:
        registry.add("dealer-a", tenant_config("Again"))
    assert exists.value.status == 409
    with pytest.raises(TenantError) as missing:
        registry.update("dealer-q", tenant_config("Nobody"))
    assert missing.value.status == 404


def test_a_runtime_is_built_once_for_concurrent_first_requests(platform) -> None:
    client, _ = platform
    runtimes = client.app.state.platform.runtimes

    async def together() -> set[int]:
        built = await asyncio.gather(*(runtimes.get("dealer-a", "https://alpha.example") for _ in range(10)))
        return {id(r) for r in built}

    assert len(client.portal.call(together)) == 1


def test_one_a2a_endpoint_routes_by_the_tenant_its_card_declares(platform) -> None:
    client, registry = platform
    registry.add("dealer-t", 'tenant = "tee-motors"\n' + tenant_config("Tee Motors"), ["tee.example"])
    own = tenant_stores(registry, "dealer-t")
    own.inventory.import_listings(listings("dealer-t", "Mazda", 2, "Tee Motors Main"))
    own.close()
    card = client.get("/.well-known/agent-card.json", headers=at("tee.example")).json()
    assert validate(card, "agent-card") == []
    (interface,) = card["supportedInterfaces"]
    assert interface == {**interface, "url": f"https://{PLATFORM_HOST}/a2a", "tenant": "tee-motors"}
    routed = client.post(
        "/a2a", json=send_message(SEARCH, tenant="tee-motors"), headers={**AAP_HEADERS, **at(PLATFORM_HOST)}
    )
    data = routed.json()["result"]["message"]["parts"][0]["data"]["data"]
    assert data["total"] == 2 and {v["make"] for v in data["vehicles"]} == {"Mazda"}
    for params in ({"tenant": "nobody"}, {}):
        refused = client.post("/a2a", json=send_message(SEARCH, **params), headers={**AAP_HEADERS, **at(PLATFORM_HOST)})
        assert refused.status_code == 200 and refused.json()["error"]["code"] == -32602
        assert "Mazda" not in refused.text
    with pytest.raises(TenantError) as taken:
        registry.add("dealer-u", 'tenant = "tee-motors"\n' + tenant_config("You Motors"))
    assert "declared by tenant 'dealer-t'" in str(taken.value)


def test_the_log_and_the_metrics_name_a_tenant_by_its_id_only(platform, caplog) -> None:
    import logging

    client, _ = platform
    caplog.set_level(logging.INFO, logger="aap.access")
    search(client, "alpha.example")
    lines = [r.fields for r in caplog.records if r.name == "aap.access" and r.fields.get("binding") == "a2a"]
    assert lines and lines[-1]["tenant"] == "dealer-a"
    assert client.get("/metrics", headers=at(PLATFORM_HOST)).status_code == 404  # private by default
    local = TestClient(client.app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 40000))
    metrics = local.get("/metrics", headers=at(PLATFORM_HOST))
    assert metrics.status_code == 200
    assert 'aap_tenant_requests_total{status="2xx",tenant="dealer-a"}' in metrics.text
    assert "Alpha" not in metrics.text and "Honda" not in metrics.text
    assert client.get("/metrics", headers=at("alpha.example")).status_code == 404  # the platform's, not a tenant's
