"""Two real ``aap serve`` processes on one PostgreSQL database share every piece of state.

Each process has its own memory, pool and caches; anything that must hold
across workers (idempotency records, cursors, inventory, spent DPoP jtis) lives in the
database, so a client bouncing between workers sees one dealer.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

import aap.config
from aap.store import open_stores
from http_helpers import AAP_HEADERS, aap_error_of, send_message
from lead_support import lead_request, race
from poppy_env import agent_host, poppy_ca  # noqa: F401 - session fixtures
from test_cli_serve import free_port, stop_server

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow


def start_server(
    url: str, *extra: str, log=subprocess.DEVNULL, port: int | None = None, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
    port = port or free_port()
    environment = {k: v for k, v in os.environ.items() if k not in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL")}
    env = environment | (env or {})
    env["AAP_DATABASE_URL"] = url  # the environment variable, as a container would set it
    process = subprocess.Popen(
        [sys.executable, "-m", "aap", "serve", "--port", str(port), *extra],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(900):  # bounded by count: seeding the demo feed can be slow on a busy box
        if process.poll() is not None:
            raise RuntimeError(f"aap serve exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    stop_server(process)
    raise RuntimeError("aap serve did not come up")


@pytest.fixture
def pg_url(pg_cluster):
    return pg_cluster.create_database()


@pytest.fixture
def two_servers(pg_url, tmp_path):
    """Worker A seeds the demo inventory; worker B finds it there and serves the same dealer."""
    logs = [open(tmp_path / name, "wb") for name in ("a.log", "b.log")]
    first = start_server(pg_url, log=logs[0])
    try:
        second = start_server(pg_url, "--workers", "2", log=logs[1])  # itself two uvicorn workers
    except BaseException:
        stop_server(first[0])
        raise
    yield pg_url, first[1], second[1]
    stop_server(first[0])
    stop_server(second[0])
    for handle in logs:  # shown by pytest when the test failed
        handle.close()
        print(handle.name, Path(handle.name).read_text(encoding="utf-8", errors="replace")[-5000:])


def a2a(base: str, data: dict) -> dict:
    reply = httpx.post(f"{base}/a2a", json=send_message(data), headers=AAP_HEADERS, timeout=60)
    assert reply.status_code == 200
    assert "result" in reply.json(), reply.json()
    return reply.json()["result"]["message"]["parts"][0]["data"]


def page(response: dict) -> dict:
    """A search page without its cursor (a cursor embeds its issue time)."""
    return {k: v for k, v in response["data"].items() if k != "next_cursor"}


def test_workers_serve_one_inventory_and_honour_each_others_cursors(two_servers):
    _, a, b = two_servers
    query = {
        "type": "inventory.search.request",
        "currency": "USD",
        "sort": {"field": "price", "order": "asc"},
        "pagination": {"limit": 5},
    }
    first = a2a(a, query)
    assert first["data"]["total"] > 0
    assert page(a2a(b, query)) == page(first)
    cursor = first["data"]["next_cursor"]
    following = a2a(b, query | {"pagination": {"limit": 5, "cursor": cursor}})  # signed by A
    assert following["type"] == "inventory.search.response"
    assert page(a2a(a, query | {"pagination": {"limit": 5, "cursor": cursor}})) == page(following)
    ids = {v["vehicle_id"] for v in first["data"]["vehicles"]}
    assert ids.isdisjoint(v["vehicle_id"] for v in following["data"]["vehicles"])


def test_identical_lead_submissions_across_workers_make_one_lead(two_servers):
    url, a, b = two_servers
    vehicle = a2a(a, {"type": "inventory.search.request", "currency": "USD", "pagination": {"limit": 1}})
    chosen = vehicle["data"]["vehicles"][0]
    body = lead_request(vehicle_of_interest={"vin": chosen["vin"]}, idempotency_key=str(uuid.uuid4()))
    count = 8
    replies = race(count, lambda i: a2a(a if i % 2 else b, body))
    assert {r["type"] for r in replies} == {"lead.submit.response"}, replies
    assert len({r["data"]["lead_id"] for r in replies}) == 1
    stores = open_stores(url)
    try:
        with stores.db.read() as tx:
            assert tx.fetchone("SELECT COUNT(*) FROM leads")[0] == 1
    finally:
        stores.close()


def test_two_delivery_processes_deliver_each_lead_once(pg_url, tmp_path):
    """Two ``aap deliver`` processes drain one outbox: every lead reaches the CRM exactly once."""
    from aap.agent import CallContext, DealerAgent
    from aap.config.loader import load_settings
    from lead_support import Receiver
    from test_aggregate import CONFIG, SHELBYVILLE, SPRINGFIELD

    springfield, shelbyville = Receiver(), Receiver()
    config = tmp_path / "aap.toml"
    config.write_text(
        CONFIG.format(database=pg_url, springfield=springfield.url, shelbyville=shelbyville.url).replace(
            "[leads.delivery]\n", "[leads.delivery]\nin_process = false\nbatch_size = 2\n"
        )
    )
    settings = load_settings(str(config), environ={})
    stores = open_stores(pg_url)
    processes: list[subprocess.Popen] = []
    try:
        stores.inventory.import_listings(SPRINGFIELD + SHELBYVILLE)
        agent = DealerAgent(settings, stores)
        vehicles = ["sh-1", "sh-2", "sf-1", "sf-2"]
        leads = {
            agent.handle(
                lead_request(vehicle_of_interest={"vehicle_id": vehicles[i % 4]}), CallContext(binding="test")
            )["data"]["lead_id"]
            for i in range(24)
        }
        assert len(leads) == 24
        env = {k: v for k, v in os.environ.items() if k not in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL")}
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "aap", "deliver", "--config", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            for _ in range(2)
        ]
        for _ in range(600):  # bounded by count
            if len(springfield.requests) + len(shelbyville.requests) >= len(leads):
                break
            time.sleep(0.1)
        time.sleep(2)  # long enough for a duplicate send to show up, were there one
        sent = [r["headers"]["X-AAP-Lead-Id"] for r in springfield.requests + shelbyville.requests]
        assert sorted(sent) == sorted(leads)  # each lead once, none twice
        assert stores.leads.delivery_counts() == {"delivered": 24}
    finally:
        for process in processes:
            stop_server(process)
        stores.close()
        springfield.close()
        shelbyville.close()


def test_a_dpop_jti_used_on_one_server_process_is_refused_by_another(pg_url, tmp_path, poppy_ca, agent_host):
    """The DPoP replay cache is in PostgreSQL: a proof jti spent on worker A is spent on worker B.

    Both ``aap serve`` processes publish one public URL (A's address, as workers behind one
    load balancer would), so a proof's ``htu`` is the same whichever worker receives it.
    """
    from poppy_client import PersonalAgent, PoppyClient, new_jti

    port = free_port()
    public = f"http://127.0.0.1:{port}"
    env = {
        "SSL_CERT_FILE": str(poppy_ca.ca_file),  # the agent host's certificate is from the test CA
        "AAP_ALLOW_LOOPBACK_CLIENTS": "1",
    }  # its client metadata is served on 127.0.0.1
    logs = [open(tmp_path / name, "wb") for name in ("a.log", "b.log")]
    servers: list[subprocess.Popen] = []
    client = PoppyClient(PersonalAgent(agent_host, name="multiprocess-agent"), public, poppy_ca.context())
    try:
        process, a = start_server(pg_url, "--public-url", public, port=port, env=env, log=logs[0])
        servers.append(process)
        process, b = start_server(pg_url, "--public-url", public, env=env, log=logs[1])
        servers.append(process)
        assert a == public and b != public

        client.discover()
        token_endpoint = client.issuer_metadata["token_endpoint"]
        assert token_endpoint == f"{public}/oauth/token"
        at_b = lambda url: b + url.removeprefix(public)  # noqa: E731 - the same public URL, B's socket

        # The token endpoint: the proof that got a token from A cannot get one from B, even
        # with fresh assertions (so the refusal is the proof's jti, not a replayed assertion).
        grant_proof = client.agent.dpop_proof(client.session_key, "POST", token_endpoint)
        granted = client.http.post(token_endpoint, data=client.grant_form(), headers={"DPoP": grant_proof})
        assert granted.status_code == 200, granted.text
        client.token = granted.json()["access_token"]
        replayed = client.http.post(at_b(token_endpoint), data=client.grant_form(), headers={"DPoP": grant_proof})
        assert replayed.status_code == 400, replayed.text
        assert replayed.json() == {"error": "invalid_dpop_proof", "error_description": "the proof jti was already used"}

        # The API: a proof (jti J) spent on A is refused by B, resent as is or signed anew with J.
        operation = client.operation_url("dealerInformation")
        assert operation.startswith(public)
        body = {"type": "dealer.information.request"}
        jti = new_jti()
        headers = client.auth_headers("POST", operation, jti=jti)
        assert client.http.post(operation, json=body, headers=headers).status_code == 200
        for proof in (headers, client.auth_headers("POST", operation, jti=jti)):
            replay = client.http.post(at_b(operation), json=body, headers=proof)
            assert replay.status_code == 401, replay.text
            assert replay.json() == {
                "error": "invalid_dpop_proof",
                "error_description": "the proof jti was already used",
            }
            assert replay.headers["www-authenticate"].startswith('DPoP error="invalid_dpop_proof"')

        # B is not refusing everything: a fresh jti with the token A issued is accepted ...
        fresh = client.auth_headers("POST", operation)
        accepted = client.http.post(at_b(operation), json=body, headers=fresh)
        assert accepted.status_code == 200, accepted.text
        assert accepted.json()["type"] == "dealer.information.response"
        # ... and then spent on A too: the cache is shared both ways.
        back = client.http.post(operation, json=body, headers=fresh)
        assert back.status_code == 401, back.text
        assert back.json() == {"error": "invalid_dpop_proof", "error_description": "the proof jti was already used"}
    finally:
        client.close()
        for process in servers:
            stop_server(process)
        for handle in logs:  # shown by pytest when the test failed
            handle.close()
            print(handle.name, Path(handle.name).read_text(encoding="utf-8", errors="replace")[-5000:])


def test_two_server_processes_share_one_rate_limit(pg_url, tmp_path):
    """One caller alternating between two ``aap serve`` processes draws from one bucket.

    Each process leases tokens in chunks and spends them locally, so neither writes per
    request; together they never admit more than the bucket holds (40, plus one token a
    second of refill), refuse with the time until a token is due, and let the caller
    through once it has waited that long.
    """
    demo = (Path(aap.config.__file__).parent / "demo.toml").read_text()
    limited = demo.replace(
        "enabled = true\nper_minute = 600\nburst = 120", "enabled = true\nper_minute = 60\nburst = 40"
    )
    assert limited != demo
    config = tmp_path / "limited.toml"
    config.write_text(limited)
    logs = [open(tmp_path / name, "wb") for name in ("a.log", "b.log")]
    servers: list[subprocess.Popen] = []
    bases: list[str] = []
    try:
        for log in logs:
            process, base = start_server(pg_url, "--config", str(config), log=log)
            servers.append(process)
            bases.append(base)
        body = send_message({"type": "dealer.information.request"})
        started = time.monotonic()
        with httpx.Client(timeout=30, headers=AAP_HEADERS) as http:
            answers = [http.post(f"{bases[i % 2]}/a2a", json=body).json() for i in range(100)]
            elapsed = time.monotonic() - started
            admitted = [a for a in answers if "result" in a]
            errors = [aap_error_of(a) for a in answers if "result" not in a]
            assert 20 <= len(admitted) <= 40 + int(elapsed) + 1
            assert all(e is not None and e["code"] == "RATE_LIMITED" for e in errors)
            waits = [e["details"]["retry_after_ms"] for e in errors if e is not None]
            assert len(admitted) + len(waits) == 100 and all(0 < w <= 1000 for w in waits)
            time.sleep(1.05)  # the longest wait announced: a token is due, whichever process answers
            assert "result" in http.post(f"{bases[1]}/a2a", json=body).json()
    finally:
        for process in servers:
            stop_server(process)
        for handle in logs:
            handle.close()
            print(handle.name, Path(handle.name).read_text(encoding="utf-8", errors="replace")[-3000:])
