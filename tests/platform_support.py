"""Shared parts of the platform tests: a deployment file, tenant documents, listings per tenant."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from aap.config.loader import parse_settings
from aap.config.model import Settings
from aap.store import Stores
from aap.tenants import TenantRegistry

PLATFORM_HOST = "agents.platform.example"


def platform_settings(database_url: str, **platform: Any) -> Settings:
    """A platform deployment's own settings: ``[database]`` and ``[platform]``."""
    doc = {"database": database_url, "platform": {"host": PLATFORM_HOST, "changes_poll_ms": 50, **platform}}
    return parse_settings(doc, environ={})


def tenant_config(name: str, *, rooftop: str | None = None, extra: str = "") -> str:
    """A tenant's document: one dealer with one rooftop (and whatever ``extra`` adds)."""
    rooftop = rooftop or f"{name} Main"
    text = f'''
[dealer]
name = "{name}"
[[dealer.rooftops]]
name = "{rooftop}"
timezone = "America/Los_Angeles"
address = {{ city = "Sacramento", state = "CA", country = "US" }}
phones = [{{ name = "Sales", value = "+19165550100" }}]
{extra}
'''
    tomllib.loads(text)  # a typo here fails the test that uses it, not the code it tests
    return text


def listings(prefix: str, make: str, count: int, rooftop: str) -> list[dict[str, Any]]:
    """``count`` available listings of ``make`` at ``rooftop``, ids ``{prefix}-0`` …"""
    return [
        {
            "vehicle_id": f"{prefix}-{i}",
            "status": "available",
            "updated_at": "2026-11-30T08:00:00Z",
            "make": make,
            "model": "Model " + str(i % 3),
            "year": 2020 + i % 5,
            "price": 20_000 + 1_000 * i,
            "rooftop": rooftop,
        }
        for i in range(count)
    ]


def tenant_stores(registry: TenantRegistry, tenant_id: str) -> Stores:
    """The stores of a tenant's own namespace, as ``aap import --tenant`` opens them."""
    return Stores(registry.namespaces.open(tenant_id))


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)
