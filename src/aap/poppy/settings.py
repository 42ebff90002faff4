"""Poppy (Personal Agent Protocol 0.3) configuration: the ``[poppy]`` table.

Every limit that protects the guest issuer from a hostile caller is a named,
bounded setting here, so an operator can read what the deployment enforces.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

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
    organization_name: str | None = None    # default: the dealer's name
    organization_domain: str | None = None  # default: the public URL's host
    access_token_ttl: int = 3600            # seconds; "hours, not days"
    session_idle_ttl: int = 7 * 86400       # a Session unused this long is over
    clock_skew: int = 30                    # seconds tolerated on assertion iat/exp
    dpop_iat_window: int = 60               # |now - proof iat| must stay within this
    delegation_max_lifetime: int = 86400    # Poppy-Session (3.2) delegation exp - iat bound
    accept_poppy_session: bool = True       # accept the 3.2 Poppy-Session header on the API
    metadata_max_bytes: int = 100_000       # client metadata / JWKS document size cap
    metadata_timeout: float = 5.0           # seconds for one whole fetch
    metadata_cache_entries: int = 256       # clients kept in the per-process cache
    metadata_cache_min_ttl: int = 60
    metadata_cache_max_ttl: int = 86400
    metadata_failure_ttl: int = 30          # a failed fetch is remembered this long
    jwks_refresh_interval: int = 30         # at most one JWKS refetch per client per interval
    allowed_clients: tuple[str, ...] = ()   # non-empty: only these client_ids
    blocked_clients: tuple[str, ...] = ()   # refused at once, tokens included
    feedback_enabled: bool = True
    feedback_daily_limit: int = 100         # reports stored per (client, User ID) per 24 h
    excluded_tasks: tuple[ExcludedTask, ...] = ()

    @property
    def loopback_allowed(self) -> bool:
        return self.allow_loopback_clients or os.environ.get(LOOPBACK_ENV, "") == "1"

    def client_allowed(self, client_id: str) -> bool:
        """Policy first: exact client_id allow/block lists, before anything is fetched."""
        if client_id in self.blocked_clients:
            return False
        return not self.allowed_clients or client_id in self.allowed_clients


_BOUNDS: dict[str, tuple[float, float]] = {
    "access_token_ttl": (60, 86400),
    "session_idle_ttl": (300, 30 * 86400),
    "clock_skew": (0, 300),
    "dpop_iat_window": (5, 600),
    "delegation_max_lifetime": (60, 30 * 86400),
    "metadata_max_bytes": (1024, 1_000_000),
    "metadata_timeout": (0.5, 30),
    "metadata_cache_entries": (1, 100_000),
    "metadata_cache_min_ttl": (0, 86400),
    "metadata_cache_max_ttl": (60, 7 * 86400),
    "metadata_failure_ttl": (0, 3600),
    "jwks_refresh_interval": (0, 3600),
    "feedback_daily_limit": (0, 1_000_000),
}


def parse_poppy_table(table: Any, path: str = "poppy") -> tuple[PoppySettings, list[str]]:
    """Build :class:`PoppySettings` from a TOML table; returns every problem found at once.

    ``organization = {name, domain}`` and ``[[poppy.excluded_tasks]]`` (``task`` plus an
    optional ``alternative`` table, a ``PoppyAlternative``) are nested; all else is flat.
    """
    problems: list[str] = []
    if table is None:
        table = {}
    if not isinstance(table, dict):
        return PoppySettings(), [f"{path}: must be a table"]
    known = {f.name: f for f in fields(PoppySettings)} | {"organization": None}
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = f"{path}.{key}"
        if key not in known or key in ("organization_name", "organization_domain"):
            problems.append(f"{where}: unknown setting")
            continue
        if key == "organization":
            _organization(value, where, values, problems)
        elif key == "excluded_tasks":
            values[key] = _excluded_tasks(value, where, problems)
        elif key in ("allowed_clients", "blocked_clients"):
            if isinstance(value, list) and all(isinstance(v, str) and v.startswith("https://") for v in value):
                values[key] = tuple(value)
            else:
                problems.append(f"{where}: must be a list of https:// client_id URLs")
        elif isinstance(PoppySettings.__dataclass_fields__[key].default, bool):
            if isinstance(value, bool):
                values[key] = value
            else:
                problems.append(f"{where}: must be true or false")
        else:
            low, high = _BOUNDS[key]
            is_float = isinstance(PoppySettings.__dataclass_fields__[key].default, float)
            ok_type = isinstance(value, (int, float)) if is_float else isinstance(value, int)
            if not ok_type or isinstance(value, bool) or not low <= value <= high:
                kind = "a number" if is_float else "an integer"
                problems.append(f"{where}: must be {kind} between {low:g} and {high:g}")
            else:
                values[key] = float(value) if is_float else value
    settings = PoppySettings(**values)
    if settings.metadata_cache_min_ttl > settings.metadata_cache_max_ttl:
        problems.append(f"{path}.metadata_cache_min_ttl: must not exceed metadata_cache_max_ttl")
    return settings, problems


def _organization(value: Any, where: str, values: dict[str, Any], problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(f"{where}: must be a table with name and domain")
        return
    for key, item in value.items():
        if key not in ("name", "domain"):
            problems.append(f"{where}.{key}: unknown setting")
        elif not isinstance(item, str) or not item.strip():
            problems.append(f"{where}.{key}: must be a non-empty string")
        elif key == "domain" and not _is_hostname(item):
            problems.append(f"{where}.domain: must be a bare host name (no scheme, port or path)")
        else:
            values[f"organization_{key}"] = item.strip() if key == "name" else item.lower()


def _is_hostname(value: str) -> bool:
    labels = value.split(".")
    return len(value) <= 253 and all(
        0 < len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii()
        and not label.startswith("-") and not label.endswith("-")
        for label in labels
    )


def _excluded_tasks(value: Any, where: str, problems: list[str]) -> tuple[ExcludedTask, ...]:
    from aap.spec import validate

    if not isinstance(value, list):
        problems.append(f"{where}: must be an array of tables")
        return ()
    tasks: list[ExcludedTask] = []
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{at}: must be a table with task and an optional alternative")
            continue
        unknown = set(entry) - {"task", "alternative"}
        for key in sorted(unknown):
            problems.append(f"{at}.{key}: unknown setting")
        task = entry.get("task")
        if not isinstance(task, str) or not 1 <= len(task) <= 200:
            problems.append(f"{at}.task: must be a string of 1 to 200 characters")
            continue
        alternative = entry.get("alternative")
        if alternative is not None:
            errors = validate(alternative, "poppy-alternative")
            if errors:
                for error in errors:
                    problems.append(f"{_toml_path(at + '.alternative', error['instanceLocation'])}: {error['error']}")
                continue
        tasks.append(ExcludedTask(task, alternative))
    return tuple(tasks)


def _toml_path(base: str, pointer: str) -> str:
    """``/references/0/url`` below ``base`` as ``base.references[0].url``."""
    path = base
    for token in pointer.split("/")[1:] if pointer else []:
        token = token.replace("~1", "/").replace("~0", "~")
        path = f"{path}[{token}]" if token.isdigit() else f"{path}.{token}"
    return path


def poppy_settings(agent_settings: Any, override: PoppySettings | None = None) -> PoppySettings:
    """The deployment's Poppy settings (``Settings.poppy``), or the defaults."""
    if override is not None:
        return override
    return getattr(agent_settings, "poppy", None) or PoppySettings()


def parse_poppy_section(table: Any, problems: Any) -> PoppySettings:
    """Adapter for ``aap.config.loader.register_section("poppy", ...)`` (its ``Table``/``Problems``)."""
    data = table.data if getattr(table, "present", True) else {}
    settings, found = parse_poppy_table(data, getattr(table, "path", "poppy") or "poppy")
    for item in found:
        where, _, message = item.partition(": ")
        problems.add(where, message)
    return settings


def _register_section() -> None:
    """Declare ``[poppy]`` to the config loader once ``Settings`` has its ``poppy`` field."""
    import dataclasses

    from aap.config.model import Settings

    if "poppy" in {f.name for f in dataclasses.fields(Settings)}:
        from aap.config.loader import register_section

        register_section("poppy", parse_poppy_section)


__all__ = ["ExcludedTask", "PoppySettings", "parse_poppy_table", "parse_poppy_section", "poppy_settings",
           "LOOPBACK_ENV"]

_register_section()
