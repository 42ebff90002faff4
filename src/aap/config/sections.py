"""The core sections: top-level keys, ``[agent]``, ``[search]``, ``[[features]]``,
``[rate_limit]`` and ``[server]``, plus the rule that names the agent after the dealer.

Each parser takes its :class:`~aap.config.table.Table` (an empty,
``present=False`` one when the file omits the section, so defaults live in one
place) and returns the value of its Settings field(s).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from aap.config.credentials import credential
from aap.config.model import (
    ALL_FILTERS,
    ALL_SORT_FIELDS,
    DEFAULT_REPLICA_LAG_MS,
    AgentIdentity,
    ConnectionLimits,
    Feature,
    RateLimit,
    SearchCapabilities,
)
from aap.config.table import Problems, Table, schema_check

_FEATURE_CODE = re.compile(r"^[a-z][a-z0-9_]*$")


# -- top-level keys -------------------------------------------------------------


_POSTGRES = ("postgresql://", "postgres://")


def parse_root(root: Table) -> dict[str, Any]:
    """``id``, ``public_url``, ``database`` and ``a2a_tenant``.

    ``a2a_tenant`` is the A2A ``tenant`` routing value of the card's JSON-RPC interface (seed
    ``AgentInterface.tenant``); ``tenant``, its first name, is still read (docs/configuration.md).

    ``database`` is a URL, or a ``[database]`` table: ``url``, ``read_urls`` (PostgreSQL
    streaming replicas the read skills may use) and ``max_replica_lag_ms`` (a replica
    further behind is skipped); see docs/deployment.md, "Read replicas".
    """
    deployment_id = root.string("id", required=True)
    if deployment_id is not None and len(deployment_id) > 200:
        root.problem("id", "must be at most 200 characters")
    public_url = root.url("public_url", required=True)
    read_urls: tuple[str, ...] = ()
    max_lag_ms = DEFAULT_REPLICA_LAG_MS
    if isinstance(root.raw("database", None), dict):
        table, key = root.table("database"), "url"
        database = table.string("url", "sqlite:///aap.db")
        read_urls = table.strings("read_urls", (), min_items=0)
        max_lag_ms = table.integer("max_replica_lag_ms", DEFAULT_REPLICA_LAG_MS, minimum=0)
        table.finish()
    else:
        table, key = root, "database"
        database = root.string("database", "sqlite:///aap.db")
    if not database.startswith(("sqlite://",) + _POSTGRES):
        table.problem(key, "must be a sqlite:///path or postgresql:// URL")
    for i, url in enumerate(read_urls):
        if not url.startswith(_POSTGRES):
            table.problem("read_urls", f"item {i} must be a postgresql:// URL (replicas of a PostgreSQL primary)")
    if read_urls and not database.startswith(_POSTGRES):
        table.problem("read_urls", "read replicas need a PostgreSQL primary (url)")
    return {
        "deployment_id": deployment_id,
        "public_url": public_url,
        "database_url": database,
        "database_read_urls": read_urls,
        "max_replica_lag_ms": max_lag_ms,
        "a2a_tenant": _a2a_tenant(root),
    }


def _a2a_tenant(root: Table) -> str | None:
    value, old = root.string("a2a_tenant"), root.string("tenant")
    if value is not None and old is not None:
        root.problem("tenant", "is the old name of a2a_tenant: give one of them")
    return value if value is not None else old


# -- [agent] ----------------------------------------------------------------------


def parse_agent(table: Table, problems: Problems) -> dict[str, Any]:
    """The agent's self-description; name and description default from the dealer (see rules)."""
    values: dict[str, Any] = {
        "name": table.string("name"),
        "description": table.string("description"),
        "version": table.string("version", "1.0.0"),
        "documentation_url": table.url("documentation_url"),
        "icon_url": table.url("icon_url"),
        "signing_key": credential(table, "signing_key"),
        "signing_kid": table.string("signing_kid"),
    }
    provider = table.table("provider")
    if provider.present:
        values["provider_organization"] = provider.string("organization", required=True)
        values["provider_url"] = provider.url("url", required=True)
        provider.finish()
    table.finish()
    return values


def agent_defaults(parsed: dict[str, Any], problems: Problems) -> None:
    """Rule: the agent is named and described after the dealer unless ``[agent]`` says otherwise."""
    values = parsed.get("agent") or {}
    dealer = parsed.get("dealer")
    dealer_name = dealer.name if dealer is not None else "AAP dealer"
    parsed["agent"] = AgentIdentity(
        name=values.get("name") or dealer_name,
        description=values.get("description")
        or (
            f"Auto Agent Protocol 3.1 agent of {dealer_name}: live vehicle inventory search, "
            "vehicle details and dealership information."
        ),
        version=values.get("version") or "1.0.0",
        provider_organization=values.get("provider_organization"),
        provider_url=values.get("provider_url"),
        documentation_url=values.get("documentation_url"),
        icon_url=values.get("icon_url"),
        signing_key_env=values["signing_key"].env if values.get("signing_key") else None,
        signing_key_secret=values["signing_key"].secret if values.get("signing_key") else None,
        signing_kid=values.get("signing_kid"),
    )


# -- [search] ---------------------------------------------------------------------


def parse_search(table: Table, problems: Problems) -> SearchCapabilities:
    base = SearchCapabilities()
    scope = table.string("scope", base.scope, choices=("dealer", "aggregate"))
    currencies = table.strings("currencies", base.currencies, choices=("USD", "CAD"))
    default_currency = table.string("default_currency", base.default_currency, choices=("USD", "CAD"))
    unit = table.string("default_mileage_unit", base.default_mileage_unit, choices=("mi", "km"))
    default_limit = table.integer("default_limit", base.default_limit, minimum=1, maximum=100)
    max_limit = table.integer("max_limit", base.max_limit, minimum=1, maximum=100)
    offset = table.boolean("offset", base.offset)
    sort_fields = table.strings("sort_fields", base.sort_fields, choices=ALL_SORT_FIELDS)
    # The default honours every filter, except rooftop names on an aggregate endpoint:
    # "Aggregate endpoints do not accept ambiguous rooftop-name filters"
    # (seed 004, ``InventoryCapabilities.scope``).
    default_filters = tuple(f for f in base.filters if scope != "aggregate" or f != "rooftops")
    filters = table.strings("filters", default_filters, choices=ALL_FILTERS, min_items=0)
    default_sort = base.default_sort
    sort = table.table("default_sort")
    if sort.present:
        default_sort = (
            sort.string("field", base.default_sort[0], required=True, choices=ALL_SORT_FIELDS),
            sort.string("order", base.default_sort[1], required=True, choices=("asc", "desc")),
        )
        sort.finish()
    table.finish()

    if default_limit > max_limit:
        table.problem("default_limit", f"must not exceed max_limit ({max_limit})")
    if default_currency not in currencies:
        table.problem("default_currency", "must be one of search.currencies")
    if scope == "aggregate" and "rooftops" in filters:
        table.problem(
            "filters",
            "'rooftops' is not allowed with scope = \"aggregate\" (rooftop names are ambiguous across dealers)",
        )
    if "distance_mi" in sort_fields and "near" not in filters:
        table.problem("sort_fields", "'distance_mi' needs the 'near' filter in search.filters")
    if default_sort[0] == "distance_mi":
        table.problem("default_sort.field", "must not be 'distance_mi' (an unfiltered search has no origin)")
    elif default_sort[0] not in sort_fields:
        table.problem("default_sort.field", "must be one of search.sort_fields")

    capabilities = SearchCapabilities(
        scope=scope,
        filters=filters,
        sort_fields=sort_fields,
        default_sort=default_sort,
        default_limit=default_limit,
        max_limit=max_limit,
        offset=offset,
        currencies=currencies,
        default_currency=default_currency,
        default_mileage_unit=unit,
    )
    schema_check(capabilities.to_json(), "inventory-capabilities", "search", problems)
    return capabilities


# -- [[features]] -----------------------------------------------------------------


def parse_features(tables: list[Table], problems: Problems) -> tuple[Feature, ...]:
    features: list[Feature] = []
    seen: dict[str, int] = {}
    for i, table in enumerate(tables):
        code = table.string("code", required=True)
        label = table.string("label", required=True)
        table.finish()
        if code is not None:
            if len(code) > 80 or not _FEATURE_CODE.match(code):
                table.problem("code", "must match ^[a-z][a-z0-9_]*$ (at most 80 characters)")
                code = None
            elif code in seen:
                table.problem("code", f"duplicates features[{seen[code]}].code")
                code = None
            else:
                seen[code] = i
        if label is not None and len(label) > 200:
            table.problem("label", "must be at most 200 characters")
            label = None
        if code is not None and label is not None:
            features.append(Feature(code, label))
    return tuple(features)


# -- [rate_limit] and [server] ----------------------------------------------------


def parse_rate_limit(table: Table, problems: Problems) -> RateLimit:
    base = RateLimit()
    limit = RateLimit(
        enabled=table.boolean("enabled", base.enabled),
        per_minute=table.integer("per_minute", base.per_minute, minimum=1),
        burst=table.integer("burst", base.burst, minimum=1),
    )
    table.finish()
    return limit


def parse_server(table: Table, problems: Problems) -> dict[str, Any]:
    values: dict[str, Any] = {
        "max_body_bytes": table.integer("max_body_bytes", 1_048_576, minimum=1024, maximum=64 * 1024 * 1024),
        "cursor_ttl_seconds": table.integer("cursor_ttl_seconds", 86_400, minimum=60),
        "count_timeout_ms": table.integer("count_timeout_ms", 0, minimum=0, maximum=60_000),
        "search_timeout_ms": table.integer("search_timeout_ms", 10_000, minimum=0, maximum=600_000),
        "forwarded_allow_ips": _proxy_addresses(table),
        "limits": _connection_limits(table),
        "metrics_listen": _metrics_listen(table),
        "metrics_token_env": _env_name(table, "metrics_token_env"),
        "hsts_max_age": table.integer("hsts_max_age", 31_536_000, minimum=0, maximum=2 * 31_536_000),
    }
    table.finish()
    return values


def _connection_limits(table: Table) -> ConnectionLimits:
    """What the HTTP server reads of a request before the app sees it (docs/deployment.md,
    "Request limits"). Each bound has a floor that real clients need and a ceiling past
    which the bound no longer protects anything."""
    base = ConnectionLimits()
    limits = ConnectionLimits(
        max_request_line_bytes=table.integer(
            "max_request_line_bytes", base.max_request_line_bytes, minimum=1024, maximum=65_536
        ),
        max_header_field_bytes=table.integer(
            "max_header_field_bytes", base.max_header_field_bytes, minimum=1024, maximum=65_536
        ),
        max_head_bytes=table.integer("max_head_bytes", base.max_head_bytes, minimum=4096, maximum=262_144),
        max_header_fields=table.integer("max_header_fields", base.max_header_fields, minimum=16, maximum=1000),
        header_timeout_seconds=table.number(
            "header_timeout_seconds", base.header_timeout_seconds, minimum=1, maximum=300
        ),
        body_timeout_seconds=table.number("body_timeout_seconds", base.body_timeout_seconds, minimum=1, maximum=3600),
        keep_alive_seconds=table.number("keep_alive_seconds", base.keep_alive_seconds, minimum=1, maximum=300),
        max_connections=table.integer("max_connections", base.max_connections, minimum=16, maximum=100_000),
    )
    for key in ("max_request_line_bytes", "max_header_field_bytes"):
        if getattr(limits, key) > limits.max_head_bytes:
            table.problem(key, "must not exceed max_head_bytes (the request line and every field together)")
    return limits


def listen_address(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9100`` for IPv6) as (host, port); ValueError says what is wrong."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError("must be host:port (e.g. 127.0.0.1:9100)")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError("must be host:port, an IPv6 host in brackets ([::1]:9100)")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("must put an IPv6 host in brackets ([::1]:9100)")
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65_535:
        raise ValueError("must name a port from 1 to 65535")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise ValueError("must name an IP address (or localhost) to listen on") from None
    return host, int(port_text)


def _metrics_listen(table: Table) -> tuple[str, int] | None:
    value = table.string("metrics_listen")
    if value is None:
        return None
    try:
        return listen_address(value)
    except ValueError as exc:
        table.problem("metrics_listen", str(exc))
        return None


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_name(table: Table, key: str) -> str | None:
    value = table.string(key)
    if value is not None and not _ENV_NAME.match(value):
        table.problem(key, "must be an environment variable name (the secret itself never goes in the file)")
        return None
    return value


def _proxy_addresses(table: Table) -> tuple[str, ...]:
    """``forwarded_allow_ips``: the proxies whose ``X-Forwarded-For``/``-Proto`` are believed.

    IP addresses or networks (``10.0.0.0/8``), none by default (docs/deployment.md,
    "Behind a reverse proxy"). No ``"*"``: trusting every peer lets any client pick the
    address its rate limit is counted under; a network written out says what is meant.
    """
    values = table.strings("forwarded_allow_ips", (), min_items=0)
    good: list[str] = []
    for value in values:
        try:
            good.append(
                str(ipaddress.ip_network(value, strict=False)) if "/" in value else str(ipaddress.ip_address(value))
            )
        except ValueError:
            table.problem("forwarded_allow_ips", f"{value!r} is not an IP address or network (e.g. 10.0.0.0/8)")
    return tuple(good)
