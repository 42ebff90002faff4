"""A registered tenant as the provisioning API and ``aap tenants --json`` show it: one shape for both."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aap.store.platform import TenantRecord
from aap.tenant_secrets import SecretInfo
from aap.tenants import TenantRegistry


def stamp(ms: int) -> str:
    """An epoch-millisecond time as RFC 3339 UTC, to the second."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def tenant_urls(registry: TenantRegistry, record: TenantRecord) -> list[str]:
    """Where the tenant's agent is served: each of its domains, then its prefix on the platform host."""
    found = [f"https://{host}/" for host in record.domains]
    if registry.platform.tenant_prefix:
        found.append(registry.platform.prefix_url(record.tenant_id) + "/")
    return found


def tenant_state(record: TenantRecord) -> str:
    """``suspended`` (by the operator), ``broken`` (its configuration at this revision failed to
    load in a worker) or ``served``."""
    if record.suspended_ms is not None:
        return "suspended"
    return "broken" if record.broken is not None else "served"


def tenant_view(registry: TenantRegistry, record: TenantRecord, *, config: bool) -> dict[str, Any]:
    """The tenant as JSON; ``config``: with its configuration text as stored (one tenant, not a list)."""
    view: dict[str, Any] = {
        "id": record.tenant_id,
        "domains": list(record.domains),
        "urls": tenant_urls(registry, record),
        "a2a_tenant": record.a2a_tenant,
        "revision": record.revision,
        "created_at": stamp(record.created_ms),
        "updated_at": stamp(record.updated_ms),
        "state": tenant_state(record),
        "suspended_at": None if record.suspended_ms is None else stamp(record.suspended_ms),
        "broken_reason": record.broken,
        "broken_at": None if record.broken_ms is None else stamp(record.broken_ms),
    }
    if config:
        view["config"] = record.config
    return view


def secret_view(info: SecretInfo) -> dict[str, Any]:
    """A tenant secret as listed: its name, when it was set, the id of the key that sealed it
    (``aap tenants secrets rotate`` seals every value with the current key) — never its value."""
    return {"name": info.name, "set_at": stamp(info.set_ms), "key_id": info.key_id}
