"""``POST /_platform/v1/tenants/{id}/erasures``: a platform operator erases one customer's leads
from one tenant, over real HTTP on loopback, on SQLite and PostgreSQL (docs/platform.md)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from aap.agent import CallContext, DealerAgent
from aap.server.platform import PlatformContext, create_platform_app
from aap.server.platform_services import sweep
from aap.store import Stores, open_platform_database
from lead_support import EMAIL, NOW, PHONE, lead_request, lead_settings
from platform_support import platform_settings, tenant_config, tenant_stores, write
from test_platform_api import TENANTS, Api, conforms
from test_platform_api import api as api  # the fixture: a platform app with the API on loopback
from test_tenants_cli import platform as platform  # the fixture: a platform deployment's ./aap.toml

#: A live server on both backends (pyproject.toml, the slow marker).
pytestmark = pytest.mark.slow


def lead_of(stores: Stores, at: datetime = NOW) -> str:
    """A lead stored at ``at`` (no delivery target: nothing waits to be sent)."""
    body = lead_request()
    body["consent"] = {**body["consent"], "granted_at": (at - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    agent = DealerAgent(lead_settings(), stores)
    lead_id: str = agent.handle(body, CallContext(binding="test", now=at))["data"]["lead_id"]
    return lead_id


def test_an_operator_erases_one_tenants_customer_and_no_other_tenants(api: Api) -> None:
    for tenant_id in ("dealer-a", "dealer-b"):
        assert api.call("POST", TENANTS, json={"id": tenant_id, "config": tenant_config(tenant_id)}).status_code == 201
    alpha, beta = tenant_stores(api.registry, "dealer-a"), tenant_stores(api.registry, "dealer-b")
    a, b = lead_of(alpha), lead_of(beta)
    path = f"{TENANTS}/dealer-a/erasures"
    template = f"{TENANTS}/{{tenant_id}}/erasures"

    dry = api.call("POST", path, json={"email": EMAIL.upper(), "dry_run": True})
    body = conforms(api.document, "POST", template, dry)
    assert dry.status_code == 200 and body["lead_ids"] == [a] and body["erasure_id"] is None
    assert alpha.leads.get_lead(a) is not None and alpha.erasure.records() == []

    done = api.call("POST", path, json={"email": EMAIL, "phone": PHONE})
    body = conforms(api.document, "POST", template, done)
    assert done.status_code == 201 and body["lead_ids"] == [a] and body["counts"]["leads"] == 1
    assert body["actor"] == "api:AAP_PLATFORM_TOKEN" and body["subject_digest"].startswith("hmac-sha256:")
    assert EMAIL not in done.text and PHONE not in done.text
    assert alpha.leads.get_lead(a) is None
    assert beta.leads.get_lead(b)["request"]["customer"]["email"] == EMAIL  # the other tenant's customer stays
    # audited in the tenant's log and in the platform's, with counts, never the address
    (tenant_audit,) = [e for e in alpha.console.audit_entries() if e.action == "leads.erased"]
    (platform_audit,) = [e for e in api.stores.console.audit_entries() if e.action == "tenant.erasure"]
    assert platform_audit.subject == "dealer-a" and platform_audit.detail["leads"] == 1
    assert tenant_audit.detail["erasure_id"] == platform_audit.detail["erasure_id"] == body["erasure_id"]
    text = orjson.dumps([tenant_audit.detail, platform_audit.detail]).decode()
    assert EMAIL not in text and PHONE not in text


def test_a_request_is_refused_with_every_problem_and_an_unknown_tenant_is_404(api: Api) -> None:
    template = f"{TENANTS}/{{tenant_id}}/erasures"
    refused = api.call("POST", f"{TENANTS}/dealer-a/erasures", json={"email": "nope", "phone": "1", "dry_run": "y"})
    body = conforms(api.document, "POST", template, refused)
    assert refused.status_code == 400 and len(body["error"]["problems"]) == 3
    empty = api.call("POST", f"{TENANTS}/dealer-a/erasures", json={})
    assert empty.status_code == 400
    missing = api.call("POST", f"{TENANTS}/nobody/erasures", json={"email": EMAIL})
    assert conforms(api.document, "POST", template, missing) and missing.status_code == 404
    unauthenticated = api.call("POST", f"{TENANTS}/dealer-a/erasures", json={"email": EMAIL}, token=None)
    assert unauthenticated.status_code == 401


def test_each_tenant_is_purged_by_its_own_retention_setting(database_url) -> None:
    """The platform's sweep erases old leads of a tenant that sets ``retention_days``, and only its."""
    contexts: list[PlatformContext] = []

    def capture(ctx: PlatformContext) -> list:
        contexts.append(ctx)
        return []

    deployment = platform_settings(database_url)
    stores = Stores(open_platform_database(database_url))
    try:
        create_platform_app(deployment, stores, platform_routes=[capture])
        (ctx,) = contexts
        ctx.registry.add("keeps", tenant_config("Keeps"))
        ctx.registry.add("forgets", tenant_config("Forgets", extra="[leads]\nretention_days = 1\n"))
        old = {t: lead_of(tenant_stores(ctx.registry, t), NOW - timedelta(days=3)) for t in ("keeps", "forgets")}
        new = lead_of(tenant_stores(ctx.registry, "forgets"), datetime.now(UTC))

        async def sweep_once() -> None:
            try:
                await sweep(ctx)
            finally:
                await ctx.runtimes.close()

        asyncio.run(sweep_once())
        forgets, keeps = tenant_stores(ctx.registry, "forgets"), tenant_stores(ctx.registry, "keeps")
        assert forgets.leads.get_lead(old["forgets"]) is None and forgets.leads.get_lead(new) is not None
        assert keeps.leads.get_lead(old["keeps"]) is not None
        (record,) = forgets.erasure.records()
        assert record.reason == "retention" and list(record.lead_ids) == [old["forgets"]]
    finally:
        stores.close()


def test_the_commands_act_on_the_tenant_named(platform) -> None:
    """``aap leads erase|purge --tenant ID`` on a platform: that tenant's leads and settings only."""
    write(platform.directory / "a.toml", tenant_config("Alpha Motors"))
    write(platform.directory / "b.toml", tenant_config("Beta Cars", extra="[leads]\nretention_days = 1\n"))
    for tenant_id, path in (("dealer-a", "a.toml"), ("dealer-b", "b.toml")):
        assert platform.aap("tenants", "add", tenant_id, "--config", path).exit_code == 0
    registry = platform.registry()
    try:
        alpha, beta = tenant_stores(registry, "dealer-a"), tenant_stores(registry, "dealer-b")
        a, b = lead_of(alpha), lead_of(beta)  # the same customer, long ago
        erased = platform.aap("leads", "erase", "--email", EMAIL, "--tenant", "dealer-a", "--yes")
        assert erased.exit_code == 0, erased.output
        assert f"  {a}\n" in erased.stdout and b not in erased.stdout
        assert alpha.leads.get_lead(a) is None and beta.leads.get_lead(b) is not None
        unset = platform.aap("leads", "purge", "--tenant", "dealer-a")
        assert unset.exit_code == 1 and "retention_days" in unset.output
        purged = platform.aap("leads", "purge", "--tenant", "dealer-b", "--json")
        assert purged.exit_code == 0, purged.output
        assert orjson.loads(purged.stdout)["lead_ids"] == [b] and beta.leads.get_lead(b) is None
    finally:
        registry.store.db.close()
