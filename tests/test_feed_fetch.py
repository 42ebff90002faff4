"""Feeds fetched where providers put them, on a schedule: https with ETag, sftp, local paths.

The https feed comes from a TLS server on loopback with a certificate the test
makes (trusted through the feed's ``ca_file``); the sftp feed from an asyncssh
SFTP server on loopback (password login, host key pinned in a known_hosts
file). Two schedulers sharing one PostgreSQL database import each feed once.
"""

from __future__ import annotations

import asyncio
import time

import asyncssh
import httpx
import orjson
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import feed_samples as samples
from aap.cli.main import main
from aap.config.feeds import FeedSettings, parse_schedule
from aap.feeds.scheduler import FeedScheduler
from aap.store import open_stores
from aap.work import Work
from certs import self_signed
from http_helpers import Deployment, LiveServer, make_settings

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

COUNT = 12


# -- an https feed server ----------------------------------------------------------------------


def _certificate(directory) -> tuple[str, str]:
    cert, key = self_signed(directory, "127.0.0.1")
    return str(cert), str(key)


class FeedServer:
    """Serves ``/feed.tsv`` over TLS with an ETag, answering ``If-None-Match`` with 304."""

    def __init__(self, directory) -> None:
        self.body = b""
        self.requests: list[dict[str, str]] = []
        self.cert, key = _certificate(directory)
        self.live = LiveServer().start(Starlette(routes=[Route("/feed.tsv", self.feed)]), certificate=(self.cert, key))
        self.url = f"{self.live.base_url}/feed.tsv"

    @property
    def etag(self) -> str:
        return f'"{len(self.body)}-{hash(self.body) & 0xFFFF:x}"'

    async def feed(self, request: Request) -> Response:
        self.requests.append(dict(request.headers))
        if request.headers.get("if-none-match") == self.etag:
            return Response(status_code=304, headers={"ETag": self.etag})
        return Response(
            self.body,
            media_type="text/tab-separated-values",
            headers={"ETag": self.etag, "Last-Modified": "Tue, 14 Jan 2025 08:00:00 GMT"},
        )

    def stop(self) -> None:
        self.live.stop()


@pytest.fixture(scope="module")
def feed_server(tmp_path_factory):
    server = FeedServer(tmp_path_factory.mktemp("tls"))
    yield server
    server.stop()


def feed(name: str, source: str, **extra) -> FeedSettings:
    schedule = parse_schedule(extra.pop("schedule", "every 6h"))
    assert not isinstance(schedule, str)
    return FeedSettings(name=name, source=source, schedule=schedule, **extra)


def test_aap_import_of_a_url_is_conditional(feed_server, tmp_path):
    db = f"sqlite:///{tmp_path}/aap.db"
    feed_server.body = samples.google_tsv(samples.vehicles(COUNT))
    args = ["import", feed_server.url, "--ca-file", feed_server.cert, "--database", db, "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    summary = orjson.loads(first.stdout)
    assert (summary["outcome"], summary["inserted"], summary["format"]) == ("imported", COUNT, "google-vehicle")
    assert summary["details"]["file_time"] == "2025-01-14T08:00:00Z"  # Last-Modified: the default updated_at
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0
    assert orjson.loads(second.stdout)["outcome"] == "unchanged"
    assert feed_server.requests[-1]["if-none-match"] == feed_server.etag
    forced = CliRunner().invoke(main, [*args, "--force"])
    assert orjson.loads(forced.stdout)["outcome"] == "imported"
    stores = open_stores(db)
    try:
        assert [r.outcome for r in stores.feeds.runs()] == ["imported", "unchanged", "imported"]
    finally:
        stores.close()


async def test_scheduled_https_feed_runs_when_due_and_skips_an_unchanged_feed(feed_server, tmp_path):
    items = samples.vehicles(COUNT, seed=21)
    feed_server.body = samples.google_tsv(items)
    clock = [time.time()]
    settings = make_settings(
        "https://dealer.example",
        f"sqlite:///{tmp_path}/aap.db",
        feeds=(feed("google", feed_server.url, ca_file=feed_server.cert, schedule="every 1h"),),
    )
    stores = open_stores(settings.database_url)
    try:
        scheduler = FeedScheduler(stores, settings, clock=lambda: clock[0], work=WORK)
        (first,) = await scheduler.run_due()
        assert first.run.outcome == "imported" and stores.inventory.count() == COUNT
        assert await scheduler.run_due() == []  # not due again for an hour
        clock[0] += 3601
        (second,) = await scheduler.run_due()
        assert second.run.outcome == "unchanged"
        state = stores.feeds.state("google")
        assert state.etag == feed_server.etag and state.failures == 0
        assert state.next_run_ms == pytest.approx((clock[0] + 3600) * 1000, abs=2000)
    finally:
        stores.close()


async def test_a_failing_feed_keeps_the_inventory_and_backs_off(tmp_path):
    path = tmp_path / "inventory.csv"
    items = samples.vehicles(COUNT, seed=22)
    path.write_bytes(samples.dealer_csv(items))
    clock = [time.time()]
    settings = make_settings(
        "https://dealer.example", f"sqlite:///{tmp_path}/aap.db", feeds=(feed("local", str(path), retry_seconds=60.0),)
    )
    stores = open_stores(settings.database_url)
    try:
        scheduler = FeedScheduler(stores, settings, clock=lambda: clock[0], work=WORK)
        (ok,) = await scheduler.run_due()
        assert ok.run.outcome == "imported"
        path.write_bytes(b"")  # a truncated transfer
        clock[0] += 6 * 3600 + 1
        (bad,) = await scheduler.run_due()
        assert bad.run.outcome == "refused" and stores.inventory.count() == COUNT
        state = stores.feeds.state("local")
        assert state.failures == 1
        assert state.next_run_ms == pytest.approx((clock[0] + 60) * 1000, abs=2000)
        clock[0] += 61
        (again,) = await scheduler.run_due()
        assert again.run.outcome == "refused"
        assert stores.feeds.state("local").next_run_ms == pytest.approx((clock[0] + 120) * 1000, abs=2000)
    finally:
        stores.close()


# -- sftp ----------------------------------------------------------------------------------------


class _Login(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return username == "dealer" and password == "s3cret"


async def test_sftp_feed_on_a_schedule(tmp_path, monkeypatch):
    root = tmp_path / "sftp"
    (root / "outgoing").mkdir(parents=True)
    items = samples.vehicles(COUNT, seed=23)
    (root / "outgoing" / "inventory.csv.gz").write_bytes(samples.gzipped(samples.dealer_csv(items)))
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        server_factory=_Login,
        sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=str(root).encode()),
    )
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_bytes(f"[127.0.0.1]:{port} ".encode() + host_key.export_public_key())
    monkeypatch.setenv("PROVIDER_SFTP_PASSWORD", "s3cret")
    source = f"sftp://dealer@127.0.0.1:{port}/outgoing/inventory.csv.gz"
    settings = make_settings(
        "https://dealer.example",
        f"sqlite:///{tmp_path}/aap.db",
        feeds=(feed("provider", source, password_env="PROVIDER_SFTP_PASSWORD", known_hosts=str(known_hosts)),),
    )
    clock = [time.time()]
    stores = open_stores(settings.database_url)
    try:
        scheduler = FeedScheduler(stores, settings, clock=lambda: clock[0], work=WORK)
        (first,) = await scheduler.run_due()
        assert first.run.outcome == "imported", first.run.message
        assert first.run.source == f"sftp://127.0.0.1:{port}/outgoing/inventory.csv.gz"  # no user name
        assert stores.inventory.count() == COUNT
        clock[0] += 6 * 3600 + 1
        (second,) = await scheduler.run_due()
        assert second.run.outcome == "unchanged"  # same size and modification time: not read again
        # A wrong host key is refused: the feed fails and the inventory stays.
        known_hosts.write_bytes(
            f"[127.0.0.1]:{port} ".encode() + asyncssh.generate_private_key("ssh-ed25519").export_public_key()
        )
        clock[0] += 6 * 3600 + 1
        (third,) = await scheduler.run_due()
        assert third.run.outcome == "failed" and "host key" in third.run.message
        assert stores.inventory.count() == COUNT
    finally:
        stores.close()
        server.close()
        await server.wait_closed()


# -- many schedulers, one database -------------------------------------------------------------


async def test_two_schedulers_on_one_postgres_database_run_each_feed_once(pg_cluster, tmp_path):
    url = pg_cluster.create_database()
    paths = []
    for n in range(3):
        path = tmp_path / f"dealer-{n}.csv"
        path.write_bytes(samples.dealer_csv(samples.vehicles(COUNT, seed=30)[n * 4 : (n + 1) * 4]))
        paths.append(path)
    settings = make_settings(
        "https://dealer.example",
        url,
        feeds=tuple(feed(f"feed-{n}", str(p), replace=False) for n, p in enumerate(paths)),
    )
    stores = [open_stores(url), open_stores(url)]
    try:
        schedulers = [FeedScheduler(s, settings, work=WORK) for s in stores]
        results = await asyncio.gather(*(s.run_due() for s in schedulers))
        assert sum(len(r) for r in results) == 3
        runs = stores[0].feeds.runs()
        assert sorted(r.feed for r in runs) == ["feed-0", "feed-1", "feed-2"]
        assert all(r.outcome == "imported" for r in runs)
        assert stores[0].inventory.count() == 12
        # Nothing is due now, whoever asks.
        assert await asyncio.gather(*(s.run_due() for s in schedulers)) == [[], []]
    finally:
        for s in stores:
            s.close()


# -- aap serve: the background service, /healthz and /metrics ----------------------------------


@pytest.mark.slow
def test_serve_runs_feeds_and_reports_them(tmp_path):
    path = tmp_path / "inventory.csv"
    path.write_bytes(samples.dealer_csv(samples.vehicles(COUNT, seed=40)))
    feeds = (feed("nightly", str(path)), feed("stale", str(tmp_path / "missing.csv"), schedule="every 1m"))
    with Deployment(tmp_path, inventory=0, feeds=feeds) as dep:
        for _ in range(500):  # bounded by count: the scheduler starts with the app
            if len(dep.stores.feeds.runs()) >= 2:
                break
            time.sleep(0.02)
        assert dep.stores.inventory.count() == COUNT
        # "stale" never succeeded; pretend its first failure was long ago.
        with dep.stores.db.transaction() as tx:
            tx.execute("UPDATE feed_runs SET started_ms = started_ms - 3600000 WHERE feed = 'stale'")
        response = httpx.get(dep.base_url + "/healthz")
        assert response.status_code == 200  # an overdue feed is reported, not fatal
        health = response.json()
        assert health["status"] == "ok" and health["checks"]["feeds"] == "overdue"
        assert health["feeds"]["nightly"]["status"] == "ok"
        assert health["feeds"]["stale"]["status"] == "overdue"
        assert health["feeds"]["stale"]["last_outcome"] == "failed"
        metrics = httpx.get(dep.base_url + "/metrics").text
        assert 'aap_feed_last_outcome{feed="nightly",outcome="imported"} 1' in metrics
        assert 'aap_feed_overdue{feed="stale"} 1' in metrics
        success = next(
            line
            for line in metrics.splitlines()
            if line.startswith('aap_feed_last_success_timestamp_seconds{feed="nightly"}')
        )
        assert float(success.split()[-1]) > time.time() - 600
