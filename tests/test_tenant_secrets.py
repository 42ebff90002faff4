"""Tenant secrets in the platform's database (docs/platform.md, "Secrets"), on SQLite and PostgreSQL:
sealed with the platform's keys, set and listed through ``aap tenants secrets`` and the provisioning
API without a value ever shown back or logged, checked against the database when a tenant is
added, used by a delivery to a CRM stand-in on loopback without a restart, and rotated."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import orjson
import pytest
from click.testing import CliRunner
from joserfc.jwk import ECKey

from aap.cli.main import main
from aap.config.credentials import SecretValues
from aap.config.leads import WebhookTarget
from aap.config.loader import ConfigError, parse_settings
from aap.feeds.fetch import Credentials, FetchError
from aap.leads import transports
from aap.secretbox import Keyring, SecretKeyError, key_id, new_key
from aap.server.platform import create_platform_app
from aap.server.platform_api import provisioning_routes
from aap.store import Stores, open_platform_database
from aap.tenants import TenantError, TenantRegistry
from http_helpers import AAP_HEADERS, LiveServer, send_message
from lead_support import lead_request
from platform_support import (
    LOOPBACK_DESTINATIONS,
    PLATFORM_HOST,
    PlatformServer,
    crm_route,
    eventually,
    platform_settings,
    tenant_config,
    write,
)

TOKEN = "t" * 40  # the provisioning API's bearer token
VALUE = "crm-token-VALUE-0123456789"  # what must never appear in an output or a log line


# -- the sealing itself ----------------------------------------------------------------------------------


def test_a_sealed_value_opens_only_with_its_key_and_where_it_belongs() -> None:
    old, new = new_key(), new_key()
    ring = Keyring.parse(f"{old}\n", "test")
    sealed = ring.seal(VALUE, ("dealer-a", "crm-token"))
    assert VALUE not in sealed and sealed.startswith("v1." + ring.current + ".")
    assert ring.open(sealed, ("dealer-a", "crm-token")) == VALUE
    # Another tenant's row, or another name, does not open (the associated data binds it).
    for elsewhere in (("dealer-b", "crm-token"), ("dealer-a", "hook-secret"), ("dealer-acrm", "-token")):
        with pytest.raises(SecretKeyError, match="does not open"):
            ring.open(sealed, elsewhere)
    # A keyring with the new key first seals with it and still opens the old values.
    both = Keyring.parse(f"{new}, {old}", "test")
    assert both.current == key_id(Keyring.parse(new, "t").keys[0])
    assert both.open(sealed, ("dealer-a", "crm-token")) == VALUE
    # A keyring without the key says which key it lacks (ids only, never a key).
    with pytest.raises(SecretKeyError) as missing:
        Keyring.parse(new, "test").open(sealed, ("dealer-a", "crm-token"))
    assert ring.current in str(missing.value) and new not in str(missing.value) and old not in str(missing.value)
    assert old not in repr(ring) and new not in repr(both)


def test_a_malformed_keyring_is_refused_with_every_problem() -> None:
    with pytest.raises(SecretKeyError) as info:
        Keyring.parse(f"short {new_key()} !!!", "AAP_SECRET_KEYS")
    assert "key 1 is not 32 bytes" in str(info.value) and "key 3 is not 32 bytes" in str(info.value)
    with pytest.raises(SecretKeyError, match="holds no key"):
        Keyring.parse(" \n", "AAP_SECRET_KEYS")


def solo(extra: str) -> dict:
    """A deployment's own document (one agent) with ``extra``."""
    return {"id": "solo", "public_url": "https://solo.example", **tomllib.loads(tenant_config("Solo", extra=extra))}


def test_a_deployment_that_is_one_agent_names_variables_not_tenant_secrets() -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(solo(crm_route("https://crm.example/adf", once=False, token_secret="crm-token")), environ={})
    assert any(
        p.startswith("leads.routes[0].targets[0].auth.token_secret: names a tenant secret") for p in info.value.problems
    )
    both = crm_route("https://crm.example/adf", once=False, token_env="CRM_TOKEN", token_secret="crm-token")
    with pytest.raises(ConfigError) as info:
        parse_settings(solo(both), environ={})
    assert any("give token_env or token_secret, not both" in p for p in info.value.problems)
    # The environment form is unchanged.
    settings = parse_settings(solo(crm_route("https://crm.example/adf", once=False, token_env="T")), environ={})
    assert settings.leads.routes[0].targets[0].auth.token_env == "T"  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_webhook_is_signed_with_its_tenant_secret_and_a_missing_one_says_so() -> None:
    crm = TokenCrm("unused")  # answers 503 to anything: the signature is what is looked at
    target = WebhookTarget("hook", crm.url, secret_secret="hook-secret")
    try:
        async with httpx.AsyncClient() as client:
            with pytest.raises(transports.SendError) as unset:
                await transports.send_webhook(client, target, {"lead_id": "l"}, "l", "d", 5, SecretValues())
            assert "the tenant secret hook-secret is not set (webhook secret)" in str(unset.value)
            unread = SecretValues({}, {"hook-secret": "sealed with the key 0123, not among the platform's keys"})
            with pytest.raises(transports.SendError, match="cannot be read"):
                await transports.send_webhook(client, target, {"lead_id": "l"}, "l", "d", 5, unread)
            with pytest.raises(transports.SendError, match="HTTP 503"):
                await transports.send_webhook(
                    client, target, {"lead_id": "l"}, "l", "d", 5, SecretValues({"hook-secret": "whsec"})
                )
        (stamp, signature) = crm.signatures[-1]
        body = orjson.dumps({"lead_id": "l"})
        assert signature == transports.webhook_signature("whsec", stamp, body)
    finally:
        crm.close()


def test_a_feeds_credentials_come_from_its_tenant_secrets() -> None:
    named = Credentials(token_secret="feed-token", secrets=SecretValues({"feed-token": "ftok"}))
    assert named.value("token", "bearer token") == "ftok"
    assert named.value("password", "password") is None  # not named at all
    with pytest.raises(FetchError, match="the tenant secret feed-token is not set"):
        Credentials(token_secret="feed-token").value("token", "bearer token")
    assert "ftok" not in repr(named)


# -- the registry, the CLI -------------------------------------------------------------------------------


@pytest.fixture
def platform(tmp_path, database_url, monkeypatch):
    """A platform's ./aap.toml on the test's database and its keys in AAP_SECRET_KEYS; ``aap(...)`` runs aap."""
    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AAP_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    key = new_key()
    monkeypatch.setenv("AAP_SECRET_KEYS", key)
    write(
        tmp_path / "aap.toml",
        f'database = "{database_url}"\n[platform]\nhost = "{PLATFORM_HOST}"\n{LOOPBACK_DESTINATIONS}',
    )
    runner = CliRunner()

    class Platform:
        url = database_url
        directory = tmp_path
        keys = key

        @staticmethod
        def aap(*args: str, input: str | None = None, env: dict[str, str] | None = None):
            return runner.invoke(main, list(args), input=input, env=env)

        @staticmethod
        def registry(keys: str | None = None) -> TenantRegistry:
            settings = platform_settings(database_url, allow_loopback_destinations=True)
            return TenantRegistry(
                settings, open_platform_database(database_url), environ={"AAP_SECRET_KEYS": keys or key}
            )

    return Platform


@pytest.mark.slow
def test_secrets_set_listed_and_removed_from_the_cli_never_show_a_value(platform, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    outputs = []
    done = platform.aap("tenants", "secrets", "set", "dealer-a", "crm-token", input=VALUE + "\n")
    outputs.append(done.output)
    assert done.exit_code == 0, done.output
    assert "Secret crm-token of tenant dealer-a set" in done.output
    again = platform.aap("tenants", "secrets", "set", "dealer-a", "crm-token", input=VALUE + "-2")
    outputs.append(again.output)
    assert again.exit_code == 0 and "replaced" in again.output
    listed = platform.aap("tenants", "secrets", "list", "dealer-a", "--json")
    outputs.append(listed.output)
    rows = orjson.loads(listed.output[listed.output.index("[") :])
    assert [r["name"] for r in rows] == ["crm-token"] and set(rows[0]) == {"name", "set_at", "key_id"}
    assert rows[0]["key_id"] == key_id(Keyring.parse(platform.keys, "t").keys[0])
    registry = platform.registry()
    try:
        # The value went in whole (one trailing line break dropped), sealed in the database.
        stored = registry.store.secrets("dealer-a")
        assert len(stored) == 1 and VALUE not in stored[0].sealed
        assert registry.secrets.values("dealer-a", {"crm-token"}).get("crm-token") == VALUE + "-2"
    finally:
        registry.store.db.close()
    # Every problem at once, the value never quoted.
    refused = platform.aap("tenants", "secrets", "set", "dealer-a", "Bad Name!", input="   ")
    outputs.append(refused.output)
    assert refused.exit_code == 1
    assert "secret name 'Bad Name!'" in refused.output and "value: must not be empty" in refused.output
    removed = platform.aap("tenants", "secrets", "remove", "dealer-a", "crm-token")
    outputs.append(removed.output)
    assert removed.exit_code == 0, removed.output
    gone = platform.aap("tenants", "secrets", "remove", "dealer-a", "crm-token")
    assert gone.exit_code == 1 and "has no secret 'crm-token'" in gone.output
    assert "0 secret(s)" in platform.aap("tenants", "secrets", "list", "dealer-a").output
    for text in [*outputs, caplog.text]:
        assert VALUE not in text


@pytest.mark.slow
def test_without_the_platform_keys_a_secret_is_refused_with_where_they_go(platform, monkeypatch) -> None:
    monkeypatch.delenv("AAP_SECRET_KEYS")
    done = platform.aap("tenants", "secrets", "set", "dealer-a", "crm-token", input=VALUE)
    assert done.exit_code == 1 and VALUE not in done.output
    assert "AAP_SECRET_KEYS" in done.output and "aap tenants secrets new-key" in done.output
    key = platform.aap("tenants", "secrets", "new-key").output.strip()
    assert len(Keyring.parse(key, "new-key").keys) == 1
    # Keys that are set must be keys: `aap serve` (and `aap config check`) refuse to start otherwise.
    malformed = platform.aap("config", "check", env={"AAP_SECRET_KEYS": f"{key} not-a-key"})
    assert malformed.exit_code == 1
    assert "platform.secret_keys: the environment variable AAP_SECRET_KEYS: key 2 is not 32 bytes" in malformed.output
    assert key not in malformed.output
    assert platform.aap("config", "check", env={"AAP_SECRET_KEYS": key}).exit_code == 0
    assert platform.aap("config", "check").exit_code == 0  # no keys: tenants name no secret


@pytest.mark.slow
def test_a_tenants_file_names_secrets_and_they_are_checked_in_the_database(platform, monkeypatch) -> None:
    """The CLI's own environment is never where a tenant's secret is looked for."""
    monkeypatch.setenv("CRM_TOKEN", VALUE)  # set here, in the CLI's environment: it must not count
    with_env = write(
        platform.directory / "env.toml",
        tenant_config("Env", extra=crm_route("http://127.0.0.1:9/adf", once=False, token_env="CRM_TOKEN")),
    )
    refused = platform.aap("tenants", "add", "dealer-a", "--config", with_env)
    assert refused.exit_code == 1
    assert "leads.routes[0].targets[0].auth.token_env: names an environment variable of the platform's workers" in (
        refused.output
    )
    named = write(
        platform.directory / "a.toml",
        tenant_config("Alpha", extra=crm_route("http://127.0.0.1:9/adf", once=False, token_secret="crm-token")),
    )
    missing = platform.aap("tenants", "check", "dealer-a", "--config", named)
    assert missing.exit_code == 1
    assert (
        "leads.routes[0].targets[0].auth.token_secret: the tenant secret crm-token is not set "
        "(aap tenants secrets set dealer-a crm-token)" in missing.output
    )
    assert platform.aap("tenants", "add", "dealer-a", "--config", named).exit_code == 1
    # Set first (before the tenant exists), then added.
    assert platform.aap("tenants", "secrets", "set", "dealer-a", "crm-token", input=VALUE).exit_code == 0
    added = platform.aap("tenants", "add", "dealer-a", "--config", named)
    assert added.exit_code == 0, added.output
    registry = platform.registry()
    try:
        record = registry.get("dealer-a")
        settings = registry.settings_for(record, registry.public_url(record))
        assert settings.secrets.get("crm-token") == VALUE
        assert VALUE not in repr(settings) and "crm-token" in repr(settings.secrets)
        revision = record.revision
        registry.set_secret("dealer-a", "crm-token", VALUE + "-2")
        # A new value is a change of the tenant: every worker rebuilds it.
        changed = registry.get("dealer-a")
        assert changed.revision == revision + 1
        assert registry.store.changes_since(0)[-1].kind == "secrets"
        # Removing the tenant removes its secrets.
        registry.remove("dealer-a")
        assert registry.store.secrets("dealer-a") == []
    finally:
        registry.store.db.close()


@pytest.mark.slow
def test_rotation_seals_every_value_with_the_current_key(platform) -> None:
    old = platform.keys
    registry = platform.registry(old)
    try:
        for tenant in ("dealer-a", "dealer-b"):
            for name in ("crm-token", "hook-secret"):
                registry.set_secret(tenant, name, f"{VALUE}-{tenant}-{name}")
    finally:
        registry.store.db.close()
    new = new_key()
    new_id = key_id(Keyring.parse(new, "t").keys[0])
    # Step 2 of docs/platform.md, "Rotating the platform's key": NEW seals, OLD still opens.
    rotated = platform.aap("tenants", "secrets", "rotate", env={"AAP_SECRET_KEYS": f"{new} {old}"})
    assert rotated.exit_code == 0, rotated.output
    assert f"4 secret(s) sealed again with key {new_id}; 0 already were" in rotated.output
    again = platform.aap("tenants", "secrets", "rotate", env={"AAP_SECRET_KEYS": f"{new} {old}"})
    assert "0 secret(s) sealed again" in again.output and "4 already were" in again.output
    listed = platform.aap("tenants", "secrets", "list", "dealer-b", "--json", env={"AAP_SECRET_KEYS": new})
    assert {r["key_id"] for r in orjson.loads(listed.output[listed.output.index("[") :])} == {new_id}
    # The old key dropped: every value opens with the new one alone.
    registry = platform.registry(new)
    try:
        values = registry.secrets.values("dealer-b", {"crm-token", "hook-secret"})
        assert values.get("hook-secret") == f"{VALUE}-dealer-b-hook-secret"
    finally:
        registry.store.db.close()


@pytest.mark.slow
def test_a_wrong_key_gives_a_clear_error_naming_keys_by_id(platform) -> None:
    registry = platform.registry()
    try:
        registry.set_secret("dealer-a", "crm-token", VALUE)
    finally:
        registry.store.db.close()
    named = write(
        platform.directory / "a.toml",
        tenant_config("Alpha", extra=crm_route("http://127.0.0.1:9/adf", once=False, token_secret="crm-token")),
    )
    wrong = new_key()
    sealed_with = key_id(Keyring.parse(platform.keys, "t").keys[0])
    checked = platform.aap("tenants", "check", "dealer-a", "--config", named, env={"AAP_SECRET_KEYS": wrong})
    assert checked.exit_code == 1
    assert f"it was sealed with the key {sealed_with}, which is not among the platform's keys" in checked.output
    rotated = platform.aap("tenants", "secrets", "rotate", env={"AAP_SECRET_KEYS": wrong})
    assert rotated.exit_code == 1
    assert "tenant dealer-a, secret crm-token" in rotated.output and sealed_with in rotated.output
    for text in (checked.output, rotated.output):
        assert wrong not in text and platform.keys not in text and VALUE not in text
    # A worker that cannot open a secret still builds the tenant; the delivery says why.
    registry = platform.registry(wrong)
    try:
        values = registry.secrets.values("dealer-a", {"crm-token"})
        assert values.get("crm-token") is None and sealed_with in values.missing("crm-token")
    finally:
        registry.store.db.close()


@pytest.mark.slow
def test_the_registry_refuses_secrets_beyond_its_bounds(platform) -> None:
    registry = platform.registry()
    try:
        with pytest.raises(TenantError) as info:
            registry.set_secret("dealer-a", "crm-token", "x" * (16 * 1024 + 1))
        assert info.value.problems == ["value: larger than 16 KiB"]
        with pytest.raises(TenantError) as info:
            registry.set_secret("Not An Id", "crm-token", VALUE)
        assert info.value.status == 404
    finally:
        registry.store.db.close()


# -- the provisioning API --------------------------------------------------------------------------------


@pytest.fixture
def api(database_url, tmp_path) -> Iterator[tuple[httpx.Client, str]]:
    keys = tmp_path / "secret-keys"  # [platform] secret_keys_file: the keys in a file
    keys.write_text(new_key() + "\n")
    deployment = platform_settings(database_url, secret_keys_file=str(keys), allow_loopback_destinations=True)
    stores = Stores(open_platform_database(database_url))
    app = create_platform_app(deployment, stores, platform_routes=[provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN})])
    server = LiveServer().start(app)
    http = httpx.Client(
        base_url=server.base_url, headers={"host": PLATFORM_HOST, "authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    try:
        yield http, str(keys)
    finally:
        http.close()
        server.stop()
        stores.close()


def test_secrets_through_the_api_go_in_and_never_come_out(api, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    http, _ = api
    base = "/_platform/v1/tenants/dealer-a/secrets"
    created = http.put(f"{base}/crm-token", json={"value": VALUE})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"{base}/crm-token"
    assert set(created.json()) == {"name", "set_at", "key_id"}
    replaced = http.put(f"{base}/crm-token", json={"value": VALUE + "-2"})
    assert replaced.status_code == 200
    listed = http.get(base)
    assert [s["name"] for s in listed.json()["secrets"]] == ["crm-token"]
    # A tenant's file naming it is accepted through the API (checked against the database).
    config = tenant_config("Alpha", extra=crm_route("http://127.0.0.1:9/adf", once=False, token_secret="crm-token"))
    added = http.post("/_platform/v1/tenants", json={"id": "dealer-a", "config": config})
    assert added.status_code == 201, added.text
    unnamed = tenant_config("Beta", extra=crm_route("http://127.0.0.1:9/adf", once=False, token_secret="none-such"))
    refused = http.post("/_platform/v1/tenants", json={"id": "dealer-b", "config": unnamed})
    assert refused.status_code == 400
    assert "the tenant secret none-such is not set" in " ".join(refused.json()["error"]["problems"])
    bad = http.put(f"{base}/crm-token", json={"value": ""})
    assert bad.status_code == 400 and bad.json()["error"]["problems"] == ["value: must not be empty"]
    assert http.delete(f"{base}/crm-token").status_code == 204
    assert http.delete(f"{base}/crm-token").status_code == 404
    assert http.get(base).json() == {"secrets": []}
    for answer in (created, replaced, listed, bad):
        assert VALUE not in answer.text
    assert VALUE not in caplog.text


# -- end to end: aap serve with two workers --------------------------------------------------------------


def aap_cli(config: str, *args: str, value: str | None = None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")}
    return subprocess.run(
        [sys.executable, "-m", "aap", "tenants", "--config", config, *args],
        input=value,
        capture_output=True,
        text=True,
        env=base | env,
        timeout=120,
    )


class TokenCrm:
    """A CRM stand-in on 127.0.0.1 that takes an ADF post only with ``Bearer <expected>`` and
    answers 503 (try again later) to any other: a worker still holding an earlier value retries,
    so what the test asserts never depends on how soon the workers see a change."""

    def __init__(self, expected: str) -> None:
        self.expected = expected
        self.seen: list[tuple[str, int]] = []  # (Authorization, status answered)
        self.signatures: list[tuple[str, str]] = []  # (X-AAP-Timestamp, X-AAP-Signature)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                given = self.headers.get("Authorization", "")
                outer.signatures.append(
                    (self.headers.get("X-AAP-Timestamp", ""), self.headers.get("X-AAP-Signature", ""))
                )
                status = 200 if given == f"Bearer {outer.expected}" else 503
                outer.seen.append((given, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/adf"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def taken(self, token: str) -> int:
        return sum(1 for given, status in list(self.seen) if given == f"Bearer {token}" and status == 200)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_a_secret_set_while_serving_is_used_by_the_next_delivery_and_signs_the_card(tmp_path, database_url) -> None:
    keys = {"AAP_SECRET_KEYS": new_key(), "AAP_PLATFORM_TOKEN": TOKEN}
    receiver = TokenCrm("token-one")
    server = PlatformServer(tmp_path, database_url, workers=2, environ=keys, platform=LOOPBACK_DESTINATIONS)
    config = str(server.config)
    card_key = ECKey.generate_key("P-256")
    api = server.client(headers={"authorization": f"Bearer {TOKEN}"})
    http = server.client()
    try:
        base = f"https://{PLATFORM_HOST}/_platform/v1/tenants/dealer-a/secrets"
        assert api.put(f"{base}/crm-token", json={"value": "token-one"}).status_code == 201
        set_key = aap_cli(
            config, "secrets", "set", "dealer-a", "card-key", value=card_key.as_pem(private=True).decode(), env=keys
        )
        assert set_key.returncode == 0, set_key.stdout + set_key.stderr
        document = tenant_config(
            "Alpha",
            extra='[agent]\nsigning_key_secret = "card-key"\n'
            + crm_route(receiver.url, once=False, token_secret="crm-token")
            + "[leads.delivery]\nbase_backoff_seconds = 1\nmax_backoff_seconds = 2\n",
        )
        added = api.post(
            f"https://{PLATFORM_HOST}/_platform/v1/tenants",
            json={"id": "dealer-a", "config": document, "domains": ["alpha.example"]},
        )
        assert added.status_code == 201, added.text
        card = http.get("https://alpha.example/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json().get("signatures"), server.log_tail()

        def submit(key: str) -> str:
            lead = lead_request(idempotency_key=key)
            answer = http.post("https://alpha.example/a2a", json=send_message(lead), headers=AAP_HEADERS)
            assert answer.status_code == 200, answer.text
            return str(answer.json()["result"]["message"]["parts"][0]["data"]["data"]["lead_id"])

        submit("first-lead-0001")
        assert eventually(lambda: receiver.taken("token-one") == 1, attempts=1200), server.log_tail()
        # A new value, set from the command line while both workers serve: no restart. The CRM
        # takes only the new token from now on.
        receiver.expected = "token-two"
        changed = aap_cli(config, "secrets", "set", "dealer-a", "crm-token", value="token-two\n", env=keys)
        assert changed.returncode == 0, changed.stdout + changed.stderr
        submit("second-lead-0002")
        assert eventually(lambda: receiver.taken("token-two") == 1, attempts=1200), server.log_tail()
        assert receiver.taken("token-one") == 1
        listed = api.get(base).json()["secrets"]
        assert [s["name"] for s in listed] == ["card-key", "crm-token"]
        log = server.log_tail(1 << 20)
        for secret in ("token-one", "token-two", keys["AAP_SECRET_KEYS"]):
            assert secret not in log and secret not in changed.stdout + changed.stderr
    finally:
        api.close()
        http.close()
        server.stop()
        receiver.close()
