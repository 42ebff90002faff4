"""One outbound policy for every destination a configuration names (docs/deployment.md,
"Outbound connections"): what a platform's tenant may name is refused when it is checked
(``aap tenants check|add|update``, the provisioning API) and again on the connection, after the
name is resolved, for CRM targets (ADF over HTTP, webhooks, SMTP), the new-lead notifications,
feeds and Poppy client metadata; a deployment that is one agent keeps its local CRMs.

No test resolves a real name: each gives the guard its own resolver (``resolve=``)."""

from __future__ import annotations

import asyncio
import dataclasses
import tomllib
from collections.abc import Sequence

import httpx
import pytest
from aiosmtpd.controller import Controller

from aap import netguard
from aap.agent import CallContext, DealerAgent
from aap.config.leads import AdfHttpTarget, Route, SmtpTarget, WebhookTarget
from aap.config.poppy import PoppySettings
from aap.feeds.fetch import FetchError, FetchRules, fetch
from aap.leads.worker import DeliveryWorker
from aap.netguard import LOCAL, PUBLIC, Reach, host_refusal
from aap.poppy.client_metadata import ClientMetadataError, ClientRegistry
from aap.store import open_platform_database, open_stores
from aap.tenants import TenantError, TenantRegistry
from aap.work import Work
from lead_support import NOW, Receiver, free_port, lead_request, lead_settings
from platform_support import platform_settings, tenant_config
from test_platform_api import TOKEN, start
from test_tenants_cli import platform  # noqa: F401  (the fixture)

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

LOOPBACK, PRIVATE, LINK_LOCAL = "a loopback address", "a private address", "a link-local address"
MULTICAST, RESERVED = "a multicast address", "a reserved address"

#: Every class of address a tenant may not name, as a URL's host writes it, IPv4 and IPv6.
CLASSES: list[tuple[str, str]] = [
    ("127.0.0.1", LOOPBACK),
    ("127.9.9.9", LOOPBACK),
    ("127.1", LOOPBACK),  # the short forms getaddrinfo reads
    ("0x7f000001", LOOPBACK),
    ("[::1]", LOOPBACK),
    ("localhost", LOOPBACK),
    ("crm.localhost", LOOPBACK),
    ("[::ffff:127.0.0.1]", LOOPBACK),
    ("[2002:7f00:1::]", LOOPBACK),  # 6to4 of 127.0.0.1
    ("10.0.0.5", PRIVATE),
    ("172.16.3.4", PRIVATE),
    ("192.168.1.10", PRIVATE),
    ("100.64.0.1", PRIVATE),  # shared address space (CGNAT), RFC 6598
    ("100.100.100.200", PRIVATE),  # a cloud's metadata service in the shared space
    ("192.0.0.8", PRIVATE),  # IETF protocol assignments, RFC 6890
    ("198.18.0.1", PRIVATE),  # benchmarking
    ("[fd00::5]", PRIVATE),  # unique-local, RFC 4193
    ("[fd00:ec2::254]", PRIVATE),  # a cloud's IPv6 metadata service
    ("[fec0::1]", PRIVATE),  # site-local
    ("[::ffff:10.0.0.1]", PRIVATE),
    ("169.254.169.254", LINK_LOCAL),  # the cloud metadata service
    ("[fe80::1]", LINK_LOCAL),
    ("224.0.0.1", MULTICAST),
    ("[ff02::1]", MULTICAST),
    ("0.0.0.0", RESERVED),
    ("[::]", RESERVED),
    ("240.0.0.1", RESERVED),
    ("255.255.255.255", RESERVED),
]
PUBLIC_HOSTS = ["93.184.216.34", "[2606:4700:4700::1111]", "crm.dealer.example", "localhost.example"]


@pytest.mark.parametrize(("host", "why"), CLASSES)
def test_every_class_of_address_is_refused_to_a_tenant_and_the_local_network_kept_for_a_deployment(host, why):
    assert host_refusal(host, PUBLIC) == why
    never = why in (LINK_LOCAL, MULTICAST, RESERVED)
    assert host_refusal(host, LOCAL) == (why if never else None)
    # A platform run on one machine for development: loopback, and nothing more.
    assert host_refusal(host, Reach(loopback=True)) == (None if why == LOOPBACK else why)


@pytest.mark.parametrize("host", PUBLIC_HOSTS)
def test_public_addresses_and_names_pass_until_they_are_resolved(host):
    assert host_refusal(host, PUBLIC) is None


def resolver(table: dict[str, str]) -> netguard.Resolve:
    """A resolver of the names in ``table`` (no DNS): an unknown name does not resolve."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in table:
            raise OSError(f"{host}: unknown")
        return [table[host].strip("[]")]

    return resolve


# -- when a tenant is checked: aap tenants check|add|update and the provisioning API ----------------


def hostile_document() -> tuple[str, list[str]]:
    """A tenant document naming one class per destination (ADF, webhook, SMTP in turn) and the
    notifications' SMTP host; the TOML paths every refusal must name."""
    targets, paths = [], []
    for j, (host, _why) in enumerate(CLASSES):
        kind = ("adf_http", "webhook", "smtp")[j % 3]
        if kind == "smtp":
            where = f'host = "{host.strip("[]")}"\nfrom = "leads@dealer.example"\nto = ["crm@dealer.example"]'
            paths.append(f"leads.routes[0].targets[{j}].host")
        else:
            where = f'url = "https://{host}:8443/leads"'
            paths.append(f"leads.routes[0].targets[{j}].url")
        targets.append(f'[[leads.routes.targets]]\ntype = "{kind}"\nname = "t{j}"\n{where}\n')
    extra = (
        '[leads.notifications]\nhost = "169.254.169.254"\nfrom = "aap@dealer.example"\n'
        '[[leads.notifications.recipients]]\nrooftop = "*"\nto = ["sales@dealer.example"]\n'
        '[poppy]\nallow_loopback_clients = true\n[[leads.routes]]\nrooftop = "*"\n' + "".join(targets)
    )
    document = tenant_config("Hostile Motors", extra=extra)
    tomllib.loads(document)
    return document, [*paths, "leads.notifications.host", "poppy.allow_loopback_clients"]


def assert_every_destination_named(problems: Sequence[str], paths: Sequence[str]) -> None:
    text = "\n".join(problems)
    for path, (_, why) in zip(paths, CLASSES, strict=False):
        assert f"{path}: names {why}" in text, path
    assert "leads.notifications.host: names a link-local address" in text
    assert "poppy.allow_loopback_clients:" in text
    assert "private_network" not in text  # never a hint at what a tenant may not set


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_the_provisioning_api_refuses_every_class_at_once(database_url):
    document, paths = hostile_document()
    for api in start(database_url, _routes()):
        refused = api.call("POST", "/_platform/v1/tenants", json={"id": "hostile", "config": document})
        assert refused.status_code == 400, refused.text
        assert_every_destination_named(refused.json()["error"]["problems"], paths)
        assert api.call("GET", "/_platform/v1/tenants/hostile").status_code == 404
        good = tenant_config("Good Motors")
        assert api.call("POST", "/_platform/v1/tenants", json={"id": "good", "config": good}).status_code == 201
        changed = api.call("PUT", "/_platform/v1/tenants/good", json={"config": document})
        assert changed.status_code == 400
        assert_every_destination_named(changed.json()["error"]["problems"], paths)
        with pytest.raises(TenantError):
            api.registry.check("other", document)


def _routes():
    from aap.server.platform_api import provisioning_routes

    return provisioning_routes({"AAP_PLATFORM_TOKEN": TOKEN})


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
def test_aap_tenants_check_add_and_update_refuse_every_class(platform, tmp_path):  # noqa: F811
    document, paths = hostile_document()
    (tmp_path / "hostile.toml").write_text(document, encoding="utf-8")
    (tmp_path / "good.toml").write_text(tenant_config("Good Motors"), encoding="utf-8")
    # The test platform lets its tenants reach loopback (its CRMs are stand-ins on 127.0.0.1):
    # everything else is refused all the same.
    for command in ("check", "add"):
        result = platform.aap("tenants", command, "hostile", "--config", "hostile.toml")
        assert result.exit_code == 1, result.output
        output = " ".join(result.output.split())
        for path, (_, why) in zip(paths, CLASSES, strict=False):
            assert (f"{path}: names {why}" in output) is (why != LOOPBACK), path
    assert platform.aap("tenants", "add", "good", "--config", "good.toml").exit_code == 0
    updated = platform.aap("tenants", "update", "good", "--config", "hostile.toml")
    assert updated.exit_code == 1 and "leads.notifications.host: names a link-local address" in updated.output
    strict = TenantRegistry(platform_settings(platform.url), open_platform_database(platform.url), environ={})
    with pytest.raises(TenantError) as refused:
        strict.check("hostile", document)
    assert_every_destination_named(refused.value.problems, paths)


# -- on the connection: the address a name resolves to -------------------------------------------------


def tenant_like(database_url: str, routes: Sequence[Route], outbound: Reach = PUBLIC):
    settings = lead_settings(routes=routes, database_url=database_url)
    return dataclasses.replace(settings, outbound=outbound)


async def deliver(settings, resolve) -> list[dict]:
    stores = open_stores(settings.database_url)
    try:
        agent = DealerAgent(settings, stores)
        lead_id = agent.handle(lead_request(), CallContext(binding="test", now=NOW))["data"]["lead_id"]
        worker = DeliveryWorker(stores.leads, settings, resolve=resolve, work=WORK)
        async with worker.client() as client:
            await worker.drain(client)
        return stores.leads.get_lead(lead_id)["deliveries"]
    finally:
        stores.close()


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_a_name_resolving_to_any_class_is_refused_when_a_lead_is_sent(database_url):
    table, targets = {}, []
    for j, (host, _why) in enumerate(CLASSES):
        name = f"crm{j}.dealer.example"
        table[name] = ipaddress_of(host)
        kind = (AdfHttpTarget, WebhookTarget, SmtpTarget)[j % 3]
        if kind is SmtpTarget:
            targets.append(SmtpTarget(f"t{j}", name, "leads@dealer.example", ("crm@dealer.example",)))
        else:
            targets.append(kind(name=f"t{j}", url=f"https://{name}/leads"))
    settings = tenant_like(database_url, [Route(targets=tuple(targets))])
    deliveries = {d["target"]: d for d in await deliver(settings, resolver(table))}
    for j, (host, why) in enumerate(CLASSES):
        row = deliveries[f"t{j}"]
        address = ipaddress_of(host).strip("[]")
        assert row["status"] == "dead", row  # a refusal no retry can change
        assert row["last_error"] == f"crm{j}.dealer.example resolves to {why} ({address}); refused", row


def ipaddress_of(host: str) -> str:
    """The address a written host stands for (``localhost`` names as 127.0.0.1, short forms expanded)."""
    import ipaddress
    import socket

    name = host.strip("[]")
    if name.endswith("localhost"):
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return str(ipaddress.IPv4Address(socket.inet_aton(name)))


class Inbox:
    def __init__(self) -> None:
        self.messages: list[bytes] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append(envelope.content)
        return "250 OK"


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_a_deployment_reaches_its_own_network_by_name_and_never_a_link_local_one(database_url):
    crm, inbox = Receiver(), Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        routes = [
            Route(
                targets=(
                    AdfHttpTarget(name="lan", url=f"http://crm.lan.example:{crm.port}/adf"),
                    SmtpTarget(
                        "mail", "mail.lan.example", "a@dealer.example", ("b@dealer.example",), controller.port, False
                    ),
                    WebhookTarget(name="metadata", url="https://metadata.example/latest"),
                )
            )
        ]
        table = {"crm.lan.example": "127.0.0.1", "mail.lan.example": "127.0.0.1", "metadata.example": "169.254.169.254"}
        rows = {d["target"]: d for d in await deliver(tenant_like(database_url, routes, LOCAL), resolver(table))}
        assert rows["lan"]["status"] == "delivered" and len(crm.accepted()) == 1
        assert rows["mail"]["status"] == "delivered" and len(inbox.messages) == 1
        assert rows["metadata"]["status"] == "dead"
        assert "resolves to a link-local address (169.254.169.254)" in rows["metadata"]["last_error"]
        # The same names for a platform's tenant allowed loopback (development): delivered too.
        rows = {
            d["target"]: d
            for d in await deliver(tenant_like(database_url, routes, Reach(loopback=True)), resolver(table))
        }
        assert rows["lan"]["status"] == "delivered" and rows["mail"]["status"] == "delivered"
        # ... and for one that may not: refused, on every transport, nothing sent.
        rows = {d["target"]: d for d in await deliver(tenant_like(database_url, routes), resolver(table))}
        assert {r["status"] for r in rows.values()} == {"dead"}
        assert rows["mail"]["last_error"] == "mail.lan.example resolves to a loopback address (127.0.0.1); refused"
        assert len(crm.accepted()) == 2 and len(inbox.messages) == 2
    finally:
        controller.stop()
        crm.close()


@pytest.mark.slow  # measured at 0.5 s or more (CONTRIBUTING.md, the fast lane)
async def test_the_notifications_smtp_server_is_vetted_on_the_connection(database_url):
    from aap.config.notifications import NotificationSettings, Recipients

    settings = tenant_like(database_url, [])
    notifications = NotificationSettings(
        enabled=True,
        host="smtp.provider.example",
        sender="aap@dealer.example",
        port=25,
        starttls=False,
        recipients=(Recipients(("sales@dealer.example",), rooftop="*"),),
    )
    settings = dataclasses.replace(settings, leads=dataclasses.replace(settings.leads, notifications=notifications))
    rows = await deliver(settings, resolver({"smtp.provider.example": "fd00::25"}))
    assert [(r["status"], r["last_error"]) for r in rows] == [
        ("dead", "smtp.provider.example resolves to a private address (fd00::25); refused")
    ]


def test_the_socket_actually_connected_is_vetted_for_smtp():
    """A vetted address whose socket's peer is not (a rebinding between the two): closed, refused."""
    server = socketserver_on_loopback()
    try:
        with pytest.raises(netguard.RefusedAddress, match="a loopback address"):
            netguard.connect_socket("mail.example", ["127.0.0.1"], server.getsockname()[1], 5, PUBLIC)
        sock = netguard.connect_socket("mail.example", ["127.0.0.1"], server.getsockname()[1], 5, LOCAL)
        sock.close()
    finally:
        server.close()


def socketserver_on_loopback():
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    server.listen(4)
    return server


# -- feeds and Poppy client metadata: the same policy ---------------------------------------------------


@pytest.mark.parametrize(("host", "why"), [("127.0.0.1", LOOPBACK), ("10.9.8.7", PRIVATE), ("fe80::9", LINK_LOCAL)])
def test_a_tenants_feed_is_refused_on_the_connection_whatever_it_sets(host, why):
    for private_network in (False, True):  # a tenant cannot set it; the ceiling holds all the same
        rules = FetchRules(private_network=private_network, ceiling=PUBLIC, resolve=resolver({"feeds.example": host}))
        with pytest.raises(FetchError) as info:
            asyncio.run(fetch("https://feeds.example/inventory.csv", rules=rules, work=WORK))
        assert str(info.value).endswith(f"feeds.example resolves to {why} ({host}); refused")
    literal = f"[{host}]" if ":" in host else host
    with pytest.raises(FetchError, match=f"is {why}; refused$"):
        asyncio.run(fetch(f"https://{literal}/inventory.csv", rules=FetchRules(ceiling=PUBLIC), work=WORK))


def test_a_deployments_feed_hint_names_the_setting_that_allows_it():
    rules = FetchRules(resolve=resolver({"feeds.example": "10.9.8.7"}))
    with pytest.raises(FetchError, match=r"refused \(private_network allows it\)"):
        asyncio.run(fetch("https://feeds.example/inventory.csv", rules=rules, work=WORK))


def test_poppy_client_metadata_on_loopback_only_where_the_deployment_allows_it(monkeypatch):
    monkeypatch.setenv("AAP_ALLOW_LOOPBACK_CLIENTS", "1")
    settings = PoppySettings(allow_loopback_clients=True)
    tenant = ClientRegistry(settings, outbound=PUBLIC, resolve=resolver({"agent.example": "127.0.0.1"}))
    assert tenant.reach == PUBLIC
    for url in ("https://127.0.0.1:9/client.json", "https://agent.example:9/client.json"):
        with pytest.raises(ClientMetadataError):
            asyncio.run(tenant.fetch_json(url, "client_id"))
    assert ClientRegistry(settings).reach == Reach(loopback=True)


def test_a_refused_http_connection_never_reaches_the_transport():
    """The HTTP client of a tenant's worker: refused before any socket is opened."""
    transport = netguard.guarded_transport(PUBLIC, resolve=resolver({"crm.example": "192.168.7.7"}))

    async def post() -> None:
        async with httpx.AsyncClient(transport=transport) as client:
            await client.post("https://crm.example/leads", content=b"{}")

    with pytest.raises(httpx.ConnectError) as info:
        asyncio.run(post())
    refused = netguard.refused_cause(info.value)
    assert refused is not None and (refused.address, refused.why) == ("192.168.7.7", PRIVATE)


def test_a_tenants_settings_carry_the_platforms_policy_to_every_connection(tmp_path):
    from aap.config.loader import parse_settings
    from aap.feeds.scheduler import request_for

    url = f"sqlite:///{tmp_path}/platform.db"
    feed = '[[feeds]]\nname = "f"\nsource = "https://feeds.dealer.example/x.csv"\nschedule = "every 1h"\n'
    for switch, reach in ((False, PUBLIC), (True, Reach(loopback=True))):
        deployment = platform_settings(url, allow_loopback_destinations=switch)
        registry = TenantRegistry(deployment, open_platform_database(url), environ={})
        try:
            settings = registry.check("alpha", tenant_config("Alpha Motors", extra=feed))
        finally:
            registry.store.db.close()
        assert settings.outbound == reach
        assert request_for(settings.feeds[0], outbound=settings.outbound).rules.ceiling == reach
    single = parse_settings(
        {"id": "one", "public_url": "https://dealer.example", **tomllib.loads(tenant_config("One"))}, environ={}
    )
    assert single.outbound == LOCAL
