"""Idempotent and bulk provisioning, and a tenant's inventory through the API, on SQLite and
PostgreSQL: ``PUT /_platform/v1/tenants/{id}`` (create, replace, unchanged, 409, every problem),
``aap tenants add --from FILE.jsonl`` (every problem of every line, nothing changed; a re-run
changes nothing) and ``PUT|POST …/inventory`` over real HTTP on loopback (served by that tenant
only, a bad file publishes nothing, an oversize one is 413)."""

from __future__ import annotations

import gzip
import io
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from aap.cli.main import main
from aap.platform import bulk
from aap.secretbox import new_key
from aap.server.platform_api import provisioning_routes
from aap.store.console import ConsoleStore
from aap.store.db import Database
from http_helpers import AAP_HEADERS, send_message
from platform_support import PLATFORM_HOST, eventually, listings, tenant_config, tenant_stores, write
from test_platform_api import TENANTS, TOKEN, Api, conforms, start

ONE = TENANTS + "/{tenant_id}"
INVENTORY = TENANTS + "/{tenant_id}/inventory"
SEARCH = {"type": "inventory.search.request", "pagination": {"limit": 50}}


@pytest.fixture
def api(database_url, tmp_path) -> Iterator[Api]:
    keys = tmp_path / "secret-keys"
    keys.write_text(new_key() + "\n")
    yield from start(
        database_url,
        provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN}),
        secret_keys_file=str(keys),
    )


def audit(db: Database, tenant_id: str) -> list[str]:
    """The platform's audit log of one tenant, oldest first: its actions."""
    return [e.action for e in reversed(ConsoleStore(db).audit_entries(subject=tenant_id, limit=1000))]


# -- PUT: create or replace, idempotent ------------------------------------------------------------


def test_put_creates_replaces_and_leaves_an_equal_tenant_unchanged(api: Api) -> None:
    doc, one = api.document, f"{TENANTS}/dealer-a"
    body = {"config": tenant_config("Alpha Motors"), "domains": ["alpha.example"]}
    created = api.call("PUT", one, json=body)
    assert created.status_code == 201 and created.headers["location"] == one
    assert conforms(doc, "PUT", ONE, created)["revision"] == 1
    assert eventually(lambda: _card(api, "alpha.example") == "Alpha Motors")
    again = api.call("PUT", one, json=body)  # the same body: nothing written
    assert again.status_code == 200 and conforms(doc, "PUT", ONE, again)["revision"] == 1
    # Domains are a set: another order, another case, a trailing dot are the same tenant.
    same = api.call("PUT", one, json={**body, "domains": ["Alpha.Example."]})
    assert same.status_code == 200 and same.json()["revision"] == 1
    assert audit(api.stores.db, "dealer-a") == ["tenant.add"]

    changed = {"config": tenant_config("Alpha Group"), "domains": ["www.alpha.example", "alpha-cars.example"]}
    replaced = api.call("PUT", one, json=changed)
    answer = conforms(doc, "PUT", ONE, replaced)
    assert replaced.status_code == 200 and answer["revision"] == 2
    assert answer["domains"] == ["alpha-cars.example", "www.alpha.example"]
    assert eventually(lambda: _card(api, "www.alpha.example") == "Alpha Group")
    assert eventually(lambda: _card(api, "alpha.example") == 404)
    assert api.call("PUT", one, json=changed).json()["revision"] == 2
    # Without domains an existing tenant keeps its own.
    kept = api.call("PUT", one, json={"config": tenant_config("Alpha Group")})
    assert kept.status_code == 200 and kept.json()["revision"] == 2
    assert kept.json()["domains"] == ["alpha-cars.example", "www.alpha.example"]
    # One audit row per change, not per request (the replace of config and domains is one).
    assert audit(api.stores.db, "dealer-a") == ["tenant.add", "tenant.update"]
    entry = ConsoleStore(api.stores.db).audit_entries(subject="dealer-a", limit=1)[0]
    assert entry.actor == "api:AAP_PLATFORM_TOKEN"
    assert entry.detail == {
        "revision": 2,
        "added": ["www.alpha.example", "alpha-cars.example"],
        "removed": ["alpha.example"],
    }


def test_put_refuses_a_taken_domain_with_409_and_every_problem_at_once(api: Api) -> None:
    doc = api.document
    assert api.call("PUT", f"{TENANTS}/dealer-a", json={"config": tenant_config("A"), "domains": ["a.example"]})
    assert api.call("PUT", f"{TENANTS}/dealer-b", json={"config": tenant_config("B")}).status_code == 201
    taken = api.call("PUT", f"{TENANTS}/dealer-b", json={"config": tenant_config("B"), "domains": ["a.example"]})
    assert taken.status_code == 409
    assert conforms(doc, "PUT", ONE, taken)["error"]["problems"] == [
        "domain 'a.example': already served by tenant 'dealer-a'"
    ]
    new = api.call("PUT", f"{TENANTS}/dealer-c", json={"config": tenant_config("C"), "domains": ["a.example"]})
    assert new.status_code == 409 and api.registry.store.tenant("dealer-c") is None

    bad = tenant_config("B").replace('timezone = "America/Los_Angeles"', 'timezone = "Nowhere/City"')
    refused = api.call("PUT", f"{TENANTS}/dealer-b", json={"config": bad, "domains": ["10.0.0.5", "a.example"]})
    assert refused.status_code == 400
    assert conforms(doc, "PUT", ONE, refused)["error"]["problems"] == [
        "domain '10.0.0.5': is an IP address; a tenant is served at a domain name",
        "domain 'a.example': already served by tenant 'dealer-a'",
        "dealer.rooftops[0].timezone: unknown IANA timezone",
    ]
    wrong_id = api.call("PUT", f"{TENANTS}/Dealer_X", json={"config": tenant_config("X")})
    assert wrong_id.status_code == 400 and "tenant id 'Dealer_X'" in wrong_id.json()["error"]["problems"][0]
    record = api.registry.get("dealer-b")
    assert (record.revision, record.domains, record.config) == (1, (), tenant_config("B"))
    assert audit(api.stores.db, "dealer-b") == ["tenant.add"]


def test_a_post_retried_with_an_idempotency_key_is_answered_as_the_first(api: Api) -> None:
    doc = api.document
    body = {"id": "dealer-a", "config": tenant_config("Alpha"), "domains": ["alpha.example"]}
    key = {"idempotency-key": "signup-4711"}
    first = api.call("POST", TENANTS, json=body, headers=key)
    retry = api.call("POST", TENANTS, json=body, headers=key)
    assert (first.status_code, retry.status_code) == (201, 201)
    assert conforms(doc, "POST", TENANTS, retry) == first.json() and retry.headers["location"] == f"{TENANTS}/dealer-a"
    assert audit(api.stores.db, "dealer-a") == ["tenant.add"]
    other = api.call("POST", TENANTS, json={**body, "config": tenant_config("Other")}, headers=key)
    assert other.status_code == 409 and conforms(doc, "POST", TENANTS, other)
    assert api.call("POST", TENANTS, json=body).status_code == 409  # without the header: as before
    long = api.call("POST", TENANTS, json=body, headers={"idempotency-key": "k" * 256})
    assert long.status_code == 400 and long.json()["error"]["problems"] == ["Idempotency-Key: 1 to 255 characters"]
    assert api.registry.get("dealer-a").revision == 1


# -- a tenant's inventory --------------------------------------------------------------------------


def _card(api: Api, host: str) -> str | int:
    answer = api.call("GET", "/.well-known/agent-card.json", host=host, token=None)
    return answer.json()["name"] if answer.status_code == 200 else answer.status_code


def _search(api: Api, host: str) -> dict[str, Any]:
    answer = api.call("POST", "/a2a", host=host, token=None, json=send_message(SEARCH), headers=AAP_HEADERS)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]["message"]["parts"][0]["data"]["data"]


def _jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


def _upload(
    api: Api, tenant_id: str, content: bytes, method: str = "PUT", media: str = "application/x-ndjson", **params
):
    path = f"{TENANTS}/{tenant_id}/inventory"
    return api.call(method, path, content=content, params=params, headers={"content-type": media})


def test_an_uploaded_feed_is_served_by_its_tenant_only(api: Api) -> None:
    doc = api.document
    for tenant_id, name, host in (("dealer-a", "Alpha", "alpha.example"), ("dealer-b", "Beta", "beta.example")):
        assert api.call("PUT", f"{TENANTS}/{tenant_id}", json={"config": tenant_config(name), "domains": [host]})
    assert eventually(lambda: _card(api, "beta.example") == "Beta")
    # Both tenants use the same vehicle ids: each import is its own tenant's.
    answer = _upload(api, "dealer-a", _jsonl(listings("car", "Honda", 4, "Alpha Main")))
    run = conforms(doc, "PUT", INVENTORY, answer)
    assert answer.status_code == 200, answer.text
    assert (run["outcome"], run["inserted"], run["total"], run["trigger"]) == ("imported", 4, 4, "api")
    alpha = _search(api, "alpha.example")
    assert alpha["total"] == 4 and {v["make"] for v in alpha["vehicles"]} == {"Honda"}
    assert _search(api, "beta.example")["total"] == 0

    # CSV, gzip-compressed, merged (POST): the others stay.
    csv = "vehicle_id,status,updated_at,make,model,year,price,rooftop\ncar-0,available,2026-11-30T08:00:00Z,Kia,Rio,2022,15000,Beta Main\n"
    merged = _upload(api, "dealer-b", gzip.compress(csv.encode()), "POST", "application/gzip")
    assert conforms(doc, "POST", INVENTORY, merged)["inserted"] == 1
    beta = _search(api, "beta.example")
    assert beta["total"] == 1 and {v["make"] for v in beta["vehicles"]} == {"Kia"}
    assert _search(api, "alpha.example")["total"] == 4

    # A replace with fewer rows removes the others (within the shrink guard), as aap import --replace.
    two = _upload(api, "dealer-a", _jsonl(listings("car", "Honda", 3, "Alpha Main")))
    assert (two.json()["removed"], two.json()["total"]) == (1, 3)
    dry = _upload(
        api, "dealer-a", _jsonl(listings("car", "Honda", 1, "Alpha Main")), dry_run="true", allow_shrink="true"
    )
    assert dry.status_code == 200 and dry.json()["outcome"] == "checked" and dry.json()["removed"] == 2
    assert _search(api, "alpha.example")["total"] == 3
    shrink = _upload(api, "dealer-a", _jsonl(listings("car", "Honda", 1, "Alpha Main")))
    assert shrink.status_code == 422 and conforms(doc, "PUT", INVENTORY, shrink)["error"]["run"]["outcome"] == "refused"
    assert _search(api, "alpha.example")["total"] == 3
    # Recorded in the tenant's own import history, never the other's.
    own = tenant_stores(api.registry, "dealer-a")
    other = tenant_stores(api.registry, "dealer-b")
    try:
        assert {r.trigger for r in own.feeds.runs(limit=10)} == {"api"} and len(own.feeds.runs(limit=10)) == 3
        assert len(other.feeds.runs(limit=10)) == 1
    finally:
        own.close()
        other.close()


def test_a_bad_feed_publishes_nothing_and_says_why(api: Api) -> None:
    doc = api.document
    assert api.call("PUT", f"{TENANTS}/dealer-a", json={"config": tenant_config("Alpha"), "domains": ["alpha.example"]})
    good = listings("car", "Honda", 3, "Alpha Main")
    assert _upload(api, "dealer-a", _jsonl(good)).status_code == 200
    rows = listings("new", "Mazda", 3, "Alpha Main")
    rows[1]["year"] = "soon"
    rows[2]["price"] = -5
    bad = _upload(api, "dealer-a", _jsonl(rows))
    error = conforms(doc, "PUT", INVENTORY, bad)["error"]
    assert bad.status_code == 422 and error["run"]["outcome"] == "rejected"
    assert error["run"]["rejected_lines"] == [2, 3] and len(error["problems"]) >= 2
    assert all("line 2" in p or "line 3" in p for p in error["problems"]), error["problems"]
    empty = _upload(api, "dealer-a", b"")
    assert empty.status_code == 422 and empty.json()["error"]["run"]["outcome"] == "refused"
    for vehicle in _search(api, "alpha.example")["vehicles"]:
        assert vehicle["make"] == "Honda"
    assert _search(api, "alpha.example")["total"] == 3

    # The request's own mistakes: every one at once, before anything is read.
    query = _upload(api, "dealer-a", _jsonl(good), format="xlsx", dry_run="yes", colour="red", rooftop="Nowhere")
    assert conforms(doc, "PUT", INVENTORY, query)["error"]["problems"] == [
        "colour: not a parameter of this request (parameters: format, dealer_id, rooftop, dry_run, skip_invalid,"
        " strict, allow_shrink, allow_field_loss)",
        "dry_run: must be true or false",
        "format: one of aap, google-vehicle, meta-vehicle, dealer-csv, jsonl, csv",
    ]
    rooftop = _upload(api, "dealer-a", _jsonl(good), rooftop="Nowhere")
    assert rooftop.status_code == 400 and "'Nowhere' is not one of the tenant's rooftops" in rooftop.text
    media = _upload(api, "dealer-a", _jsonl(good), media="image/png")
    assert media.status_code == 415 and conforms(doc, "PUT", INVENTORY, media)
    missing = _upload(api, "dealer-z", _jsonl(good))
    assert missing.status_code == 404 and conforms(doc, "PUT", INVENTORY, missing)
    assert api.call("POST", f"{TENANTS}/dealer-a/suspend").status_code == 200
    suspended = _upload(api, "dealer-a", _jsonl(good))
    assert suspended.status_code == 409 and "suspended" in suspended.text
    unknown_feed = api.call("POST", f"{TENANTS}/dealer-z/feeds/daily/run")
    assert unknown_feed.status_code == 404
    assert api.call("POST", f"{TENANTS}/dealer-a/resume").status_code == 200
    no_feed = api.call("POST", f"{TENANTS}/dealer-a/feeds/daily/run")
    assert no_feed.status_code == 404 and "no feed named 'daily'" in no_feed.text


@pytest.mark.slow
def test_an_oversize_feed_is_refused_with_413_before_it_is_imported(database_url, tmp_path) -> None:
    keys = tmp_path / "secret-keys"
    keys.write_text(new_key() + "\n")
    for api in start(database_url, provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN}), secret_keys_file=str(keys)):
        api.call("PUT", f"{TENANTS}/dealer-a", json={"config": tenant_config("Alpha"), "domains": ["alpha.example"]})
        feed = _jsonl(listings("car", "Honda", 20_000, "Alpha Main"))
        assert len(feed) > 1_048_576  # the platform's [server] max_body_bytes, by default
        answer = _upload(api, "dealer-a", feed)
        assert answer.status_code == 413
        streamed = api.call(
            "PUT",
            f"{TENANTS}/dealer-a/inventory",
            content=iter([feed[i : i + 65536] for i in range(0, len(feed), 65536)]),
            headers={"content-type": "application/x-ndjson"},
        )
        assert streamed.status_code == 413
        own = tenant_stores(api.registry, "dealer-a")
        try:
            assert own.feeds.runs(limit=10) == []
        finally:
            own.close()


# -- aap tenants add --from FILE.jsonl --------------------------------------------------------------


@pytest.fixture
def platform(tmp_path, database_url, monkeypatch):
    """A platform's ./aap.toml on the test's database; ``platform.aap(*args)`` runs aap."""
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "aap.toml", f'database = "{database_url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n')
    logger = logging.getLogger("aap")
    saved = (logger.handlers[:], logger.propagate, logger.level)
    runner = CliRunner()

    class Platform:
        directory = tmp_path

        @staticmethod
        def aap(*args: str, input: str | bytes | None = None):
            return runner.invoke(main, list(args), input=input)

        @staticmethod
        def db() -> Database:
            from aap.store import open_platform_database

            return open_platform_database(database_url)

    yield Platform
    logger.handlers[:], logger.propagate, logger.level = saved


def _lines(*entries: dict[str, Any]) -> str:
    return "".join(orjson.dumps(e).decode() + "\n" for e in entries)


def _tenants(db: Database) -> dict[str, tuple[int, tuple[str, ...]]]:
    from aap.store.platform import PlatformStore

    return {r.tenant_id: (r.revision, r.domains) for r in PlatformStore(db).tenants()}


def test_bulk_file_with_errors_on_several_lines_reports_them_all_and_changes_nothing(platform) -> None:
    bad = tenant_config("C").replace('timezone = "America/Los_Angeles"', 'timezone = "Nowhere/City"')
    text = _lines(
        {"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]},
        {"id": "dealer-b", "config": 7, "colour": "red"},
    )
    text += "not json\n\n"  # a blank line is skipped, but counted
    text += _lines(
        {"id": "dealer-c", "config": bad, "domains": ["a.example", "192.168.1.1"]},
        {"id": "dealer-a", "config": tenant_config("A2")},
        ["dealer-e"],
        {"config": tenant_config("F")},
    )
    path = write(platform.directory / "tenants.jsonl", text)
    result = platform.aap("tenants", "add", "--from", path)
    assert result.exit_code == 1, result.output
    assert "nothing was changed, 7 problem(s)" in result.output
    for problem in (
        "line 2: config: must be a string",
        "line 2: colour: not a field of a line (fields: id, config, domains)",
        "line 3: not JSON",
        "line 5: domains: 'a.example' is on line 1 already",
        "line 6: id: 'dealer-a' is on line 1 already",
        "line 7: must be a JSON object with id, config, domains",
        "line 8: id: required",
    ):
        assert problem in result.output, (problem, result.output)
    db = platform.db()
    try:
        assert _tenants(db) == {}
    finally:
        db.close()
    # The shapes right, the registry's checks of every line, all at once: still nothing changed.
    text = _lines(
        {"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]},
        {"id": "dealer-c", "config": bad, "domains": ["192.168.1.1"]},
        {"id": "Dealer_D", "config": tenant_config("D")},
    )
    result = platform.aap("tenants", "add", "--from", "-", input=text)
    assert result.exit_code == 1
    assert "standard input: nothing was changed, 3 problem(s)" in result.output, result.output
    assert "line 2 (dealer-c): domain '192.168.1.1': is an IP address" in result.output
    assert "line 2 (dealer-c): dealer.rooftops[0].timezone: unknown IANA timezone" in result.output
    assert "line 3 (Dealer_D): tenant id 'Dealer_D'" in result.output
    db = platform.db()
    try:
        assert _tenants(db) == {}
        assert audit(db, "dealer-a") == []
    finally:
        db.close()


@pytest.mark.slow
def test_bulk_file_is_idempotent_refuses_changes_unless_update(platform) -> None:
    first = _lines(
        {"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]},
        {"id": "dealer-b", "config": tenant_config("B")},
    )
    path = write(platform.directory / "tenants.jsonl", first)
    added = platform.aap("tenants", "add", "--from", path)
    assert added.exit_code == 0, added.output
    assert "2 added, 0 updated, 0 unchanged, 0 refused" in added.output
    again = platform.aap("tenants", "add", "--from", path, "--json")
    assert again.exit_code == 0
    summary = orjson.loads(again.stdout)
    assert (summary["added"], summary["unchanged"], summary["dry_run"]) == (0, 2, False)
    assert [line["action"] for line in summary["lines"]] == ["unchanged", "unchanged"]

    second = _lines(
        {"id": "dealer-a", "config": tenant_config("A"), "domains": ["a.example"]},
        {"id": "dealer-b", "config": tenant_config("B2"), "domains": ["b.example"]},
        {"id": "dealer-c", "config": tenant_config("C")},
    )
    path = write(platform.directory / "tenants.jsonl", second)
    checked = platform.aap("tenants", "add", "--from", path, "--update", "--check")
    assert (
        checked.exit_code == 0 and "Would be (nothing was changed): 1 added, 1 updated, 1 unchanged" in checked.output
    )
    refused = platform.aap("tenants", "add", "--from", path)
    assert refused.exit_code == 1
    assert "1 added, 0 updated, 1 unchanged, 1 refused" in refused.output
    assert "line 2 (dealer-b): refused" in refused.output and "--update replaces it" in refused.output
    updated = platform.aap("tenants", "add", "--from", path, "--update")
    assert updated.exit_code == 0 and "0 added, 1 updated, 2 unchanged, 0 refused" in updated.output
    assert platform.aap("tenants", "add", "--from", path, "--update").exit_code == 0
    db = platform.db()
    try:
        assert _tenants(db) == {"dealer-a": (1, ("a.example",)), "dealer-b": (2, ("b.example",)), "dealer-c": (1, ())}
        assert audit(db, "dealer-a") == ["tenant.add"]
        assert audit(db, "dealer-b") == ["tenant.add", "tenant.update"]
        entry = ConsoleStore(db).audit_entries(subject="dealer-c", limit=1)[0]
        assert entry.actor.startswith("cli:")
    finally:
        db.close()
    usage = platform.aap("tenants", "add", "dealer-x", "--from", path)
    assert usage.exit_code == 2 and "takes no ID" in usage.output
    assert platform.aap("tenants", "add", "dealer-x").exit_code == 2


def test_bulk_input_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(bulk, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(bulk, "MAX_LINES", 2)
    line = b'{"id": "a", "config": ""}\n'
    long = b'{"id": "b", "config": "' + b"#" * 500 + b'"}\n'
    with pytest.raises(bulk.BulkError) as refused:
        bulk.read_lines(io.BytesIO(line + long + line.replace(b'"a"', b'"c"') + line.replace(b'"a"', b'"d"')))
    assert refused.value.problems == [
        "line 2: longer than 100 bytes",
        "line 4: more than 2 tenants in one file; split it",
    ]
    monkeypatch.setattr(bulk, "MAX_FILE_BYTES", 40)
    with pytest.raises(bulk.BulkError) as big:
        bulk.read_lines(io.BytesIO(line * 2))
    assert big.value.problems == ["(file): larger than 40 bytes; split it"]


@pytest.mark.slow
def test_a_configured_feed_runs_now_and_its_failure_is_reported(database_url, tmp_path) -> None:
    """``POST …/feeds/{name}/run``: the tenant's own feed, fetched now (here from a closed port on
    loopback, which the platform lets tenants name for tests only), its run recorded and answered."""
    keys = tmp_path / "secret-keys"
    keys.write_text(new_key() + "\n")
    routes = provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN})
    for api in start(database_url, routes, secret_keys_file=str(keys), allow_loopback_destinations=True):
        feed = '[[feeds]]\nname = "daily"\nsource = "https://127.0.0.1:1/feed.jsonl"\nschedule = "every 24h"\n'
        body = {"config": tenant_config("Alpha", extra=feed), "domains": ["alpha.example"]}
        assert api.call("PUT", f"{TENANTS}/dealer-a", json=body).status_code == 201
        answer = api.call("POST", f"{TENANTS}/dealer-a/feeds/daily/run")
        error = conforms(api.document, "POST", TENANTS + "/{tenant_id}/feeds/{name}/run", answer)["error"]
        assert answer.status_code == 502 and error["run"]["outcome"] == "failed"
        assert (error["run"]["feed"], error["run"]["trigger"]) == ("daily", "api")
        own = tenant_stores(api.registry, "dealer-a")
        try:
            assert [(r.feed, r.outcome) for r in own.feeds.runs(limit=10)] == [("daily", "failed")]
        finally:
            own.close()


@pytest.mark.slow
def test_aap_serve_with_two_workers_serves_an_uploaded_inventory_on_both(tmp_path, database_url) -> None:
    from platform_support import PlatformServer

    server = PlatformServer(tmp_path, database_url, workers=2, environ={"AAP_PLATFORM_TOKEN": TOKEN})
    try:
        with server.client() as http:
            auth = {"authorization": f"Bearer {TOKEN}"}
            base = f"https://{PLATFORM_HOST}{TENANTS}"
            for tenant_id, name, host in (("dealer-a", "Alpha", "alpha.example"), ("dealer-b", "Beta", "beta.example")):
                body = {"config": tenant_config(name), "domains": [host]}
                assert http.put(f"{base}/{tenant_id}", json=body, headers=auth).status_code == 201

            def totals(host: str) -> set[int | None]:  # several requests: both workers answer
                found = set()
                for _ in range(6):
                    answer = http.post(f"https://{host}/a2a", json=send_message(SEARCH), headers=AAP_HEADERS)
                    data = (
                        answer.json()["result"]["message"]["parts"][0]["data"]["data"]
                        if answer.status_code == 200
                        else {}
                    )
                    found.add(data.get("total"))
                return found

            assert eventually(lambda: totals("alpha.example") == {0}, attempts=100)
            feed = _jsonl(listings("car", "Honda", 5, "Alpha Main"))
            headers = {**auth, "content-type": "application/x-ndjson"}
            answer = http.put(f"{base}/dealer-a/inventory", content=feed, headers=headers)
            assert answer.status_code == 200 and answer.json()["inserted"] == 5, answer.text
            assert eventually(lambda: totals("alpha.example") == {5}, attempts=100)
            assert totals("beta.example") == {0}
    finally:
        server.stop()
