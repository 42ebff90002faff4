"""Poppy (Personal Agent Protocol 0.3) configuration: the ``[poppy]`` table.

Every limit that protects the guest issuer (:mod:`aap.poppy`) from a hostile
caller is a named, bounded setting here, so an operator can read what the
deployment enforces. Every problem is reported at once with its TOML path
(``poppy.excluded_tasks[1].task``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from aap.config.table import Problems, Table, schema_check

LOOPBACK_ENV = "AAP_ALLOW_LOOPBACK_CLIENTS"


@dataclass(frozen=True)
class ExcludedTask:
    """A task the dealer chose not to offer to personal agents, with an optional alternative."""

    task: str
    alternative: dict[str, Any] | None = None  # a PoppyAlternative object

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"task": self.task}
        if self.alternative is not None:
            out["alternative"] = self.alternative
        return out


@dataclass(frozen=True)
class PoppySettings:
    """What the Poppy binding publishes and enforces (defaults are production-safe)."""

    enabled: bool = True
    # Development switch: admit client metadata served from a loopback address
    # (still HTTPS with a verified certificate). Also AAP_ALLOW_LOOPBACK_CLIENTS=1.
    allow_loopback_clients: bool = False
    organization_name: str | None = None  # default: the dealer's name
    organization_domain: str | None = None  # default: the public URL's host
    access_token_ttl: int = 3600  # seconds; 60 ... 86400 (a day at most)
    session_idle_ttl: int = 7 * 86400  # a Session unused this long is over
    clock_skew: int = 30  # seconds tolerated on assertion iat/exp
    dpop_iat_window: int = 60  # |now - proof iat| must stay within this
    delegation_max_lifetime: int = 86400  # Poppy-Session (3.2) delegation exp - iat bound
    accept_poppy_session: bool = True  # accept the 3.2 Poppy-Session header on the API
    metadata_max_bytes: int = 100_000  # client metadata / JWKS document size cap
    metadata_timeout: float = 5.0  # seconds for one whole fetch
    metadata_cache_entries: int = 256  # clients kept in the per-process cache
    metadata_cache_min_ttl: int = 60
    metadata_cache_max_ttl: int = 86400
    metadata_failure_ttl: int = 30  # a failed fetch is remembered this long
    jwks_refresh_interval: int = 30  # at most one JWKS refetch per client per interval
    allowed_clients: tuple[str, ...] = ()  # non-empty: only these client_ids
    blocked_clients: tuple[str, ...] = ()  # refused at once, tokens included
    feedback_enabled: bool = True
    feedback_daily_limit: int = 100  # reports stored per (client, User ID) per 24 h
    # Native MCP for signed-in agents (docs/poppy.md, "MCP for signed-in agents"): an `mcp` entry in
    # poppy.json and RFC 8693 token exchange for short-lived Bearer tokens bound to the MCP URL.
    mcp_enabled: bool = True
    mcp_token_ttl: int = 600  # seconds; 60 ... 3600, never beyond the subject token
    excluded_tasks: tuple[ExcludedTask, ...] = ()

    @property
    def loopback_allowed(self) -> bool:
        return self.allow_loopback_clients or os.environ.get(LOOPBACK_ENV, "") == "1"

    def client_allowed(self, client_id: str) -> bool:
        """Policy first: exact client_id allow/block lists, before anything is fetched."""
        if client_id in self.blocked_clients:
            return False
        return not self.allowed_clients or client_id in self.allowed_clients


def parse_poppy_section(table: Table, problems: Problems) -> PoppySettings:
    """The ``[poppy]`` table (defaults when absent); every problem goes to ``problems``.

    Bounded limits come first, then switches, ``organization = {name, domain}``,
    the client lists and ``[[poppy.excluded_tasks]]``, so problems read in that order.
    """
    base = PoppySettings()
    values: dict[str, Any] = {
        "access_token_ttl": table.integer("access_token_ttl", base.access_token_ttl, minimum=60, maximum=86400),
        "session_idle_ttl": table.integer("session_idle_ttl", base.session_idle_ttl, minimum=300, maximum=30 * 86400),
        "clock_skew": table.integer("clock_skew", base.clock_skew, minimum=0, maximum=300),
        "dpop_iat_window": table.integer("dpop_iat_window", base.dpop_iat_window, minimum=5, maximum=600),
        "delegation_max_lifetime": table.integer(
            "delegation_max_lifetime", base.delegation_max_lifetime, minimum=60, maximum=30 * 86400
        ),
        "metadata_max_bytes": table.integer(
            "metadata_max_bytes", base.metadata_max_bytes, minimum=1024, maximum=1_000_000
        ),
        "metadata_timeout": table.number("metadata_timeout", base.metadata_timeout, minimum=0.5, maximum=30),
        "metadata_cache_entries": table.integer(
            "metadata_cache_entries", base.metadata_cache_entries, minimum=1, maximum=100_000
        ),
        "metadata_cache_min_ttl": table.integer(
            "metadata_cache_min_ttl", base.metadata_cache_min_ttl, minimum=0, maximum=86400
        ),
        "metadata_cache_max_ttl": table.integer(
            "metadata_cache_max_ttl", base.metadata_cache_max_ttl, minimum=60, maximum=7 * 86400
        ),
        "metadata_failure_ttl": table.integer(
            "metadata_failure_ttl", base.metadata_failure_ttl, minimum=0, maximum=3600
        ),
        "jwks_refresh_interval": table.integer(
            "jwks_refresh_interval", base.jwks_refresh_interval, minimum=0, maximum=3600
        ),
        "feedback_daily_limit": table.integer(
            "feedback_daily_limit", base.feedback_daily_limit, minimum=0, maximum=1_000_000
        ),
        "mcp_token_ttl": table.integer("mcp_token_ttl", base.mcp_token_ttl, minimum=60, maximum=3600),
    }
    for switch in ("enabled", "allow_loopback_clients", "accept_poppy_session", "feedback_enabled", "mcp_enabled"):
        values[switch] = table.boolean(switch, getattr(base, switch))
    values.update(_organization(table.table("organization")))
    for key in ("allowed_clients", "blocked_clients"):
        values[key] = _client_ids(table, key)
    values["excluded_tasks"] = _excluded_tasks(table)
    table.finish()
    if values["metadata_cache_min_ttl"] > values["metadata_cache_max_ttl"]:
        table.problem("metadata_cache_min_ttl", "must not exceed metadata_cache_max_ttl")
    return PoppySettings(**values)


def _organization(table: Table) -> dict[str, str | None]:
    """``organization = { name, domain }``: who the guest issuer says it is."""
    name = table.string("name")
    domain = table.string("domain")
    if domain is not None and not _is_hostname(domain):
        table.problem("domain", "must be a bare host name (no scheme, port or path)")
        domain = None
    table.finish()
    return {
        "organization_name": name.strip() if name else None,
        "organization_domain": domain.lower() if domain else None,
    }


def _is_hostname(value: str) -> bool:
    labels = value.split(".")
    return len(value) <= 253 and all(
        0 < len(label) <= 63
        and label.replace("-", "").isalnum()
        and label.isascii()
        and not label.startswith("-")
        and not label.endswith("-")
        for label in labels
    )


def _client_ids(table: Table, key: str) -> tuple[str, ...]:
    """Exact client_id URLs; all or nothing, so a typo never half-applies a policy."""
    ids = table.strings(key, (), min_items=0)
    if any(not client_id.startswith("https://") for client_id in ids):
        table.problem(key, "must be a list of https:// client_id URLs")
        return ()
    return ids


def _excluded_tasks(table: Table) -> tuple[ExcludedTask, ...]:
    """``[[poppy.excluded_tasks]]``: ``task`` plus an optional ``alternative`` (a PoppyAlternative, seed 000)."""
    tasks: list[ExcludedTask] = []
    for entry in table.tables("excluded_tasks"):
        task = entry.string("task", required=True)
        if task is not None and len(task) > 200:
            entry.problem("task", "must be at most 200 characters")
            task = None
        alternative = entry.raw("alternative", None)
        entry.finish()
        valid = alternative is None or schema_check(
            alternative, "poppy-alternative", entry.at("alternative"), entry.problems
        )
        if task is not None and valid:
            tasks.append(ExcludedTask(task, alternative))
    return tuple(tasks)
