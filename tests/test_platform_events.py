"""The platform's events (docs/platform.md, "Events"): recorded with their cause, sent signed to
``[platform] events_url`` by the workers' background runner, retried, never by two workers.

Over real HTTP to a receiver on 127.0.0.1, on SQLite and PostgreSQL. Waits are bounded by
counts of looks, never by time; a sender's retry waits run on a clock the test moves.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner

from aap.agent import CallContext, DealerAgent
from aap.cli.main import main
from aap.config.loader import ConfigError, parse_settings
from aap.leads.transports import delivery_client
from aap.platform.events import AT_ONCE, EventSender
from aap.server.platform import create_platform_app
from aap.server.platform_services import SERVICES
from aap.store import Stores, open_platform_database
from aap.store.feeds import FeedRun
from aap.store.platform import DELIVERIES
from aap.store.platform_events import TYPES, EventStore
from aap.tenants import TenantRegistry
from aap.work import Work
from http_helpers import LiveServer
from lead_support import EMAIL, FIRST, LAST, NOW, PHONE, Receiver, lead_request
from platform_support import (
    LOOPBACK_DESTINATIONS,
    PLATFORM_HOST,
    UNLOADABLE,
    PlatformServer,
    crm_route,
    eventually,
    platform_settings,
    tenant_config,
    write,
)

SECRET = "whsec-test-" + "s" * 32


def verified(request: dict[str, Any], secret: str = SECRET) -> dict[str, Any]:
    """The event a request carried, once its signature checks out as a receiver checks it."""
    headers = {k.lower(): v for k, v in request["headers"].items()}
    stamp = headers["x-aap-timestamp"]
    expected = (
        "sha256=" + hmac.new(secret.encode(), stamp.encode() + b"." + request["body"], hashlib.sha256).hexdigest()
    )
    assert hmac.compare_digest(headers["x-aap-signature"], expected)
    event = orjson.loads(request["body"])
    assert headers["x-aap-event-id"] == headers["idempotency-key"] == event["id"]
    assert headers["x-aap-event-type"] == event["type"]
    assert set(event) == {"id", "type", "tenant", "occurred_at", "data"}
    return event


def feed(url: str) -> str:
    return f"""
[[feeds]]
name = "stock"
source = "{url}"
format = "dealer-csv"
schedule = "0 * * * *"
"""


# -- every event type, through a live platform -----------------------------------------------------


@pytest.mark.slow
def test_every_event_type_reaches_the_platform_signed_and_without_customer_data(
    tmp_path: Path, database_url: str, receiver: Receiver, monkeypatch
) -> None:
    monkeypatch.setenv("AAP_EVENTS_SECRET", SECRET)
    crm = Receiver()
    crm.status = 500  # the tenant's CRM fails: its one attempt leaves the delivery dead
    closed = Receiver()
    closed_url = f"https://127.0.0.1:{closed.port}/stock.csv"
    closed.close()  # nothing listens there any more: the feed's fetch fails
    deployment = platform_settings(database_url, allow_loopback_destinations=True, events_url=receiver.url)
    stores = Stores(open_platform_database(database_url))
    app = create_platform_app(deployment, stores, services=SERVICES)
    server = LiveServer().start(app)
    registry = TenantRegistry(deployment, stores.db, environ={})
    try:
        registry.add("dealer-a", tenant_config("Alpha Motors", extra=crm_route(crm.url)), ["alpha.example"])
        registry.add("dealer-b", tenant_config("Beta Cars", extra=feed(closed_url)), ["beta.example"])
        registry.update("dealer-a", tenant_config("Alpha Motors", extra=crm_route(crm.url) + "\n"))
        registry.suspend("dealer-b")
        registry.resume("dealer-b")

        record = registry.get("dealer-a")
        agent = DealerAgent(
            registry.settings_for(record, registry.public_url(record)), Stores(registry.data.open("dealer-a"))
        )
        answer = agent.handle(copy.deepcopy(lead_request()), CallContext(binding="test", now=NOW))
        lead_id = answer["data"]["lead_id"]
        registry.store.set_due("dealer-a", DELIVERIES, int(time.time() * 1000))

        registry.add("dealer-c", tenant_config("Gamma Autos"), [])
        registry.store.update("dealer-c", UNLOADABLE, None, int(time.time() * 1000))  # past the checks
        registry.add("dealer-d", tenant_config("Delta Trucks"), [])
        registry.remove("dealer-d")

        def types() -> set[str]:
            return {orjson.loads(r["body"])["type"] for r in receiver.accepted()}

        recorded = EventStore(stores.db)

        def all_sent() -> bool:
            return types() == set(TYPES) and {e.state for e in recorded.recent()} == {"delivered"}

        assert eventually(all_sent, attempts=600), types()
        events = [verified(r) for r in receiver.accepted()]
        by_type: dict[str, list[dict[str, Any]]] = {}
        for event in events:
            by_type.setdefault(event["type"], []).append(event)
        added = {e["tenant"]: e["data"] for e in by_type["tenant.added"]}  # posted a few at once: any order
        assert sorted(added) == ["dealer-a", "dealer-b", "dealer-c", "dealer-d"]
        assert added["dealer-a"]["domains"] == ["alpha.example"]
        assert {e["data"]["change"] for e in by_type["tenant.updated"]} == {"configuration"}
        assert [e["tenant"] for e in by_type["tenant.suspended"]] == ["dealer-b"]
        assert [e["tenant"] for e in by_type["tenant.resumed"]] == ["dealer-b"]
        assert [e["tenant"] for e in by_type["tenant.removed"]] == ["dealer-d"]
        (broken,) = by_type["tenant.broken"]
        assert broken["tenant"] == "dealer-c" and "no_such_key" in broken["data"]["reason"]
        failed = by_type["feed.failed"][0]  # (a retry of the feed that fails again is told again)
        assert {e["tenant"] for e in by_type["feed.failed"]} == {"dealer-b"} and failed["data"]["feed"] == "stock"
        assert failed["data"]["outcome"] == "failed" and failed["data"]["run_id"]
        (dead,) = by_type["lead.delivery_dead"]
        assert dead["tenant"] == "dealer-a" and dead["data"]["lead_id"] == lead_id
        assert dead["data"]["target"] == "crm" and dead["data"]["reason"] == "HTTP 500"
        assert len({e["id"] for e in events}) == len(events)  # each once
        assert all(e["occurred_at"].endswith("Z") for e in events)
        for request in receiver.requests:  # no customer data in any event
            for value in (FIRST, LAST, EMAIL, PHONE):
                assert value.encode() not in request["body"]

        listed = CliRunner().invoke(
            main, ["tenants", "--config", _platform_file(tmp_path, database_url), "events", "--tenant", "dealer-a"]
        )
        assert listed.exit_code == 0, listed.output
        lines = [line.split("\t") for line in listed.stdout.splitlines()]
        assert {line[2] for line in lines} == {"tenant.added", "tenant.updated", "lead.delivery_dead"}
        assert {line[1] for line in lines} <= {e["id"] for e in events}  # full ids, as sent
        assert all(line[4] == "delivered" for line in lines)
    finally:
        server.stop()
        stores.close()
        crm.close()


@pytest.mark.slow
def test_two_serving_platforms_on_one_database_post_each_event_once(database_url, receiver, monkeypatch) -> None:
    """Two apps (as two workers or hosts would), each with its background runner, one database:
    every event reaches the receiver, and once (no claim lapses: the lease outlasts the test)."""
    monkeypatch.setenv("AAP_EVENTS_SECRET", SECRET)
    deployment = platform_settings(
        database_url, allow_loopback_destinations=True, events_url=receiver.url, events_retry_seconds=0
    )
    opened = [Stores(open_platform_database(database_url)) for _ in range(2)]
    servers = [LiveServer().start(create_platform_app(deployment, stores, services=SERVICES)) for stores in opened]
    try:
        registry = TenantRegistry(deployment, opened[0].db, environ={})
        for index in range(24):
            registry.add(f"dealer-{index}", tenant_config(f"Dealer {index}"), [])
        events = EventStore(opened[0].db)
        assert eventually(lambda: {e.state for e in events.recent()} == {"delivered"}, attempts=600), [
            (e.state, e.attempts, e.last_error) for e in events.recent() if e.state != "delivered"
        ]
        assert len(events.recent()) == 24
        ids = [verified(r)["id"] for r in receiver.accepted()]
        assert sorted(ids) == sorted(e.event_id for e in events.recent())  # each once, none twice
    finally:
        for server in servers:
            server.stop()
        for stores in opened:
            stores.close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["postgresql"])  # the other tests here run on both; this one is long
def test_aap_serve_with_two_workers_sends_the_events(tmp_path, database_url, receiver) -> None:
    """``aap serve --workers 2`` of a platform: the events of tenants added from elsewhere (as
    ``aap tenants add`` does) reach the receiver, signed with the workers' secret, each once."""
    server = PlatformServer(
        tmp_path,
        database_url,
        workers=2,
        environ={"AAP_EVENTS_SECRET": SECRET},
        platform=f'{LOOPBACK_DESTINATIONS}events_url = "{receiver.url}"\nevents_retry_seconds = 0\n',
    )
    db = open_platform_database(database_url)
    try:
        registry = TenantRegistry(platform_settings(database_url, allow_loopback_destinations=True), db, environ={})
        for index in range(6):
            registry.add(f"dealer-{index}", tenant_config(f"Dealer {index}"), [])
        events = EventStore(db)
        assert eventually(lambda: {e.state for e in events.recent()} == {"delivered"}, attempts=600), server.log_tail()
        sent = sorted(verified(r)["tenant"] for r in receiver.accepted())
        assert sent == [f"dealer-{index}" for index in range(6)]
    finally:
        db.close()
        server.stop()


def _platform_file(directory: Path, database_url: str, extra: str = "") -> str:
    return write(
        directory / "platform.toml",
        f'database = "{database_url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n{LOOPBACK_DESTINATIONS}{extra}',
    )


# -- the sender, driven pass by pass ---------------------------------------------------------------


class Clock:
    """A sender's clock, a little ahead of the wall clock that stamps the events recorded."""

    def __init__(self) -> None:
        self.now = time.time() + 5

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(database_url: str) -> Iterator[TenantRegistry]:
    db = open_platform_database(database_url)
    try:
        yield TenantRegistry(platform_settings(database_url, allow_loopback_destinations=True), db, environ={})
    finally:
        db.close()


def _sender(registry: TenantRegistry, url: str | None, clock: Clock, **platform: Any) -> EventSender:
    settings = platform_settings(
        registry.store.db.url, allow_loopback_destinations=True, **({"events_url": url} if url else {}), **platform
    )
    assert settings.platform is not None
    work = Work(inline=True)
    return EventSender(
        EventStore(registry.store.db), settings.platform, work=work, clock=clock, environ={"AAP_EVENTS_SECRET": SECRET}
    )


def _pass(sender: EventSender) -> int:
    async def run() -> int:
        async with delivery_client(sender.settings.outbound) as client:
            return await sender.run_once(client)

    return asyncio.run(run())


def test_a_receiver_that_fails_then_recovers_gets_each_event_once(registry, receiver) -> None:
    clock = Clock()
    sender = _sender(registry, receiver.url, clock, events_retry_seconds=30)
    store = EventStore(registry.store.db)
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    receiver.status = 503
    assert _pass(sender) == 1
    (event,) = store.recent()
    assert event.state == "pending" and event.attempts == 1 and event.last_error == "HTTP 503"
    assert event.next_ms == pytest.approx(clock.now * 1000 + 30_000, abs=2)
    assert _pass(sender) == 0  # not due before its wait
    receiver.status = 200
    clock.now += 31
    assert _pass(sender) == 1
    assert _pass(sender) == 0
    (event,) = store.recent()
    assert event.state == "delivered" and event.attempts == 2
    assert len(receiver.accepted()) == 1 and len(receiver.requests) == 2
    assert verified(receiver.accepted()[0])["id"] == event.event_id
    # Each attempt is signed anew (its own timestamp), the id is the same: a receiver dedupes by it.
    assert {r["headers"]["X-AAP-Event-Id"] for r in receiver.requests} == {event.event_id}


def test_an_event_is_dead_after_its_attempts_and_comes_back_with_retry(registry, receiver, tmp_path) -> None:
    clock = Clock()
    sender = _sender(registry, receiver.url, clock, events_retry_seconds=1, events_max_attempts=3)
    store = EventStore(registry.store.db)
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    receiver.status = 404
    for _ in range(3):
        assert _pass(sender) == 1
        clock.now += 3600
    (event,) = store.recent()
    assert event.state == "dead" and event.attempts == 3 and len(receiver.requests) == 3
    assert store.recent(states=("dead",))[0].event_id == event.event_id
    assert store.retry(event.event_id, int(clock.now * 1000))
    receiver.status = 204
    assert _pass(sender) == 1
    assert store.get(event.event_id).state == "delivered"  # type: ignore[union-attr]
    assert len(receiver.accepted()) == 1


def test_two_workers_never_post_one_event(registry, receiver) -> None:
    """A's posts are held at the receiver; B, passing meanwhile, finds nothing to claim."""
    clock = Clock()
    first, second = _sender(registry, receiver.url, clock), _sender(registry, receiver.url, clock)
    for index in range(AT_ONCE):
        registry.add(f"dealer-{index}", tenant_config(f"Dealer {index}"), [])
    receiver.hang.set()

    async def both() -> tuple[int, int]:
        async with delivery_client(first.settings.outbound) as client:
            held = asyncio.create_task(first.run_once(client))
            for _ in range(2000):  # until the receiver holds all of them
                if len(receiver.requests) == AT_ONCE:
                    break
                await asyncio.sleep(0.01)
            assert len(receiver.requests) == AT_ONCE
            other = await second.run_once(client)
            receiver.release.set()
            return await held, other

    assert asyncio.run(both()) == (AT_ONCE, 0)
    receiver.hang.clear()
    assert _pass(second) == 0 and _pass(first) == 0
    assert len(receiver.requests) == AT_ONCE
    assert {e.state for e in EventStore(registry.store.db).recent()} == {"delivered"}


def test_a_claim_left_by_a_dead_worker_is_taken_over_after_its_lease(registry, receiver) -> None:
    clock = Clock()
    sender = _sender(registry, receiver.url, clock)
    store = EventStore(registry.store.db)
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    (claimed,) = store.claim_due(int(clock.now * 1000), 60_000, 10)  # a worker that then died
    assert _pass(sender) == 0
    clock.now += 61
    assert _pass(sender) == 1
    assert not store.mark_delivered(claimed, int(clock.now * 1000))  # the dead worker's claim is gone
    assert store.get(claimed.event_id).state == "delivered"  # type: ignore[union-attr]
    assert len(receiver.accepted()) == 1


def test_filtered_types_and_no_url_are_skipped_not_sent(registry, receiver) -> None:
    clock = Clock()
    store = EventStore(registry.store.db)
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    registry.suspend("dealer-a")
    filtered = _sender(registry, receiver.url, clock, events_types=["tenant.suspended"])
    assert _pass(filtered) == 2
    states = {e.type: (e.state, e.last_error) for e in store.recent()}
    assert states["tenant.added"] == ("skipped", "its type is not in events_types")
    assert states["tenant.suspended"] == ("delivered", None)
    registry.resume("dealer-a")
    assert _pass(_sender(registry, None, clock)) == 1
    assert store.recent(limit=1)[0].state == "skipped"
    assert [verified(r)["type"] for r in receiver.accepted()] == ["tenant.suspended"]


def test_without_a_secret_an_event_waits_and_is_sent_once_one_is_set(registry, receiver, tmp_path) -> None:
    clock = Clock()
    secret_file = tmp_path / "events-secret"
    sender = _sender(registry, receiver.url, clock, events_secret_file=str(secret_file))
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    assert _pass(sender) == 1
    (event,) = EventStore(registry.store.db).recent()
    assert event.state == "pending" and "no signing secret" in (event.last_error or "")
    assert receiver.requests == []
    secret_file.write_text("from-a-file\n", encoding="utf-8")  # read at each pass: no restart
    clock.now += 3600
    assert _pass(sender) == 1
    assert verified(receiver.accepted()[0], "from-a-file")["tenant"] == "dealer-a"


def test_the_feed_and_delivery_hooks_are_in_their_transactions(registry) -> None:
    """A failed run and a dead delivery write their event with their own row; a dry run, a
    successful run and a single deployment's own agent write none."""
    registry.add("dealer-a", tenant_config("Alpha Motors"), [])
    tenant = Stores(registry.data.open("dealer-a"))
    now = int(time.time() * 1000)
    tenant.feeds.record(
        FeedRun("schedule", "https://feeds.example/a.csv", now, now, "failed", feed="a", message="HTTP 404")
    )
    tenant.feeds.record(FeedRun("schedule", "https://feeds.example/a.csv", now, now, "imported", feed="a"))
    tenant.feeds.record(FeedRun("cli", "a.csv", now, now, "rejected", feed="a", dry_run=True))
    own = Stores(registry.store.db)  # the platform's own agent (tenant "_")
    own.feeds.record(FeedRun("schedule", "https://feeds.example/a.csv", now, now, "failed", feed="a"))
    events = EventStore(registry.store.db).recent()
    assert [(e.type, e.tenant_id) for e in events] == [("feed.failed", "dealer-a"), ("tenant.added", "dealer-a")]
    assert events[0].data == {
        "feed": "a",
        "run_id": events[0].data["run_id"],
        "outcome": "failed",
        "reason": "HTTP 404",
    }


def test_a_change_of_domains_or_secrets_is_a_tenant_update(registry) -> None:
    registry.add("dealer-a", tenant_config("Alpha Motors"), ["alpha.example"])
    registry.set_domains("dealer-a", add=["www.alpha.example"], remove=["alpha.example"])
    now = int(time.time() * 1000)
    registry.store.set_secret("dealer-a", "CRM_TOKEN", "sealed-value", "k1", now)  # sealed by the caller
    updated = [e for e in EventStore(registry.store.db).recent() if e.type == "tenant.updated"]
    assert [e.data for e in updated] == [
        {"change": "secrets"},  # never a secret's name or value
        {"change": "domains", "added": ["www.alpha.example"], "removed": ["alpha.example"]},
    ]


# -- configuration ---------------------------------------------------------------------------------


def test_events_settings_are_checked_with_every_problem_at_once() -> None:
    doc = {
        "database": "sqlite:///x.db",
        "platform": {
            "host": PLATFORM_HOST,
            "events_url": "https://10.0.0.7/hook",
            "events_secret_env": "not a name",
            "events_types": ["feed.failed", "lead.created"],
            "events_max_attempts": 0,
        },
    }
    with pytest.raises(ConfigError) as info:
        parse_settings(doc, environ={})
    text = "\n".join(info.value.problems)
    assert "platform.events_url: is a private address" in text
    assert "platform.events_secret_env: must be an environment variable name" in text
    assert "platform.events_types: unknown value 'lead.created'" in text
    assert "platform.events_max_attempts" in text
    for url in ("http://127.0.0.1:9/hook", "https://localhost/hook"):  # loopback: only when allowed
        with pytest.raises(ConfigError, match="events_url"):
            parse_settings({**doc, "platform": {"host": PLATFORM_HOST, "events_url": url}}, environ={})
        allowed = {"host": PLATFORM_HOST, "events_url": url, "allow_loopback_destinations": True}
        assert parse_settings({**doc, "platform": allowed}, environ={}).platform.events_url == url  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="must use https"):
        parse_settings({**doc, "platform": {"host": PLATFORM_HOST, "events_url": "http://ops.example/x"}}, environ={})


@pytest.mark.slow
def test_aap_tenants_events_lists_full_ids_and_delivers(tmp_path, database_url, receiver, monkeypatch) -> None:
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.setenv("AAP_EVENTS_SECRET", SECRET)
    config = _platform_file(tmp_path, database_url, f'events_url = "{receiver.url}"\n')
    runner = CliRunner()
    for tenant_id in ("dealer-a", "dealer-b"):
        path = write(tmp_path / f"{tenant_id}.toml", tenant_config(tenant_id.title()))
        added = runner.invoke(main, ["tenants", "--config", config, "add", tenant_id, "--config", path])
        assert added.exit_code == 0, added.output
    pending = runner.invoke(main, ["tenants", "--config", config, "events", "--pending"])
    assert pending.exit_code == 0, pending.output
    rows = [line.split("\t") for line in pending.stdout.splitlines()]
    assert [(r[2], r[3], r[4]) for r in rows] == [
        ("tenant.added", "dealer-b", "pending"),
        ("tenant.added", "dealer-a", "pending"),
    ]
    assert all(r[1].startswith("evt_") and len(r[1]) == 36 for r in rows)  # whole, never cut short
    sent = runner.invoke(main, ["tenants", "--config", config, "events", "--deliver", "--json", "--tenant", "dealer-a"])
    assert sent.exit_code == 0, sent.output
    (line,) = [orjson.loads(text) for text in sent.stdout.splitlines() if text.startswith("{")]
    assert line["id"] == rows[1][1] and line["state"] == "delivered" and line["data"] == {"domains": []}
    assert sorted(verified(r)["tenant"] for r in receiver.accepted()) == ["dealer-a", "dealer-b"]
    assert "No event." in runner.invoke(main, ["tenants", "--config", config, "events", "--pending"]).output
    unknown = runner.invoke(main, ["tenants", "--config", config, "events", "--retry", "evt_nothing"])
    assert unknown.exit_code == 1 and "No dead or skipped event evt_nothing" in unknown.output
    assert httpx.URL(receiver.url).host == "127.0.0.1"
