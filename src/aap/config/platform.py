"""The ``[platform]`` table: one deployment hosting many dealer agents (docs/platform.md).

```toml
[platform]
host = "agents.platform.example"   # the platform's own host name (no scheme, no path)
api_token_env = "AAP_PLATFORM_TOKEN"  # the provisioning API's bearer token comes from this variable
tenant_prefix = true               # also serve every tenant at https://HOST/t/ID/
tenants_in_memory = 2000           # tenant agents a worker keeps built (least recently used go first)
settings_in_memory = 100000        # tenants whose loaded settings a worker keeps, packed, to build again
changes_poll_ms = 500              # how often a worker looks for tenant changes in the database
allow_loopback_destinations = false  # development only: tenants' CRMs and feeds on this machine
tenant_concurrency = 2             # a tenant's requests served at once in a worker (at most half its threads)
tenant_queue = 256                 # a tenant's requests waiting for one of those, in a worker
tenant_queue_ms = 1000             # the longest such a wait; then, as when the queue is full: RATE_LIMITED
secret_keys_env = "AAP_SECRET_KEYS"  # the keys sealing tenants' secrets (the first seals)...
# secret_keys_file = "/etc/aap/secret-keys"  # ...or a file holding them (it wins over the variable)
events_url = "https://ops.platform.example/aap-events"  # told of tenants' events (docs/platform.md, "Events")
events_secret_env = "AAP_EVENTS_SECRET"  # the secret signing them...
# events_secret_file = "/etc/aap/events-secret"  # ...or a file holding it (it wins over the variable)
# events_types = ["feed.failed", "lead.delivery_dead", "tenant.broken"]  # only these (default: all)
events_max_attempts = 12           # attempts before an event is given up (dead)
events_retry_seconds = 30          # the first retry's wait, doubled at each (at most an hour)
```

Without the table a deployment serves the one agent its file describes, exactly as
before. With it, the file keeps only what the tenants share (``[server]``,
``[database]``, ``[platform]``) and the tenants — each a complete agent, with its own
``[dealer]``, ``[[rooftops]]``, ``[leads]``, ``[poppy]``, ``[[feeds]]``… — live in
the database, managed with ``aap tenants`` or the provisioning API.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

from aap.config.table import Problems, Table
from aap.netguard import Reach, host_refusal

#: A host name as a browser sends it in ``Host`` (RFC 1123 labels), lower case, no port.
HOST_NAME = re.compile(r"^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")
#: A tenant id: what ``/t/ID/``, the CLI and the API name a tenant by (lower case, digits, ``-``).
TENANT_ID = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,46}[a-z0-9])?$")


#: The events a platform is told of (docs/platform.md, "Events"), by type.
EVENT_TYPES = (
    "tenant.added",
    "tenant.updated",
    "tenant.removed",
    "tenant.suspended",
    "tenant.resumed",
    "tenant.broken",
    "feed.failed",
    "lead.delivery_dead",
)
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


#: A tenant's slots in a worker by default. A flooded tenant's requests take turns on the event
#: loop with another's, which waits for one step of each of them at each of its own: with two
#: slots it keeps about three times its idle latency (docs/benchmarks.md, "Noisy neighbours").
TENANT_SLOTS = 2


@dataclass(frozen=True)
class PlatformSettings:
    """The deployment-level settings of platform hosting."""

    host: str
    api_token_env: str = "AAP_PLATFORM_TOKEN"
    tenant_prefix: bool = True
    tenants_in_memory: int = 2_000
    #: Tenants whose Settings a worker keeps packed once loaded (0: none), so that building a
    #: dropped tenant's agent again reads and parses nothing (docs/platform.md, "Sizing").
    settings_in_memory: int = 100_000
    changes_poll_ms: int = 500
    #: Development and tests only: tenants' destinations (CRM targets, feeds, Poppy client
    #: metadata) may be loopback addresses; private, link-local and the rest never are.
    allow_loopback_destinations: bool = False
    #: Fair sharing (:mod:`aap.fairshare`): a tenant's requests at work at once in one worker;
    #: None: :data:`TENANT_SLOTS`, and at most half the worker's executor threads.
    tenant_concurrency: int | None = None
    #: A tenant's requests that may wait for one of its slots in one worker, and for how long.
    tenant_queue: int = 256
    tenant_queue_ms: int = 1000

    def tenant_slots(self, threads: int) -> int:
        """A tenant's slots in a worker whose executor has ``threads`` threads."""
        return self.tenant_concurrency or max(1, min(TENANT_SLOTS, threads // 2))

    #: Where the keys sealing tenants' secrets are (docs/platform.md, "Secrets"): this file when
    #: set, else this environment variable; one or more keys, the first seals.
    secret_keys_env: str = "AAP_SECRET_KEYS"
    secret_keys_file: str | None = None

    #: Where the platform is told of its tenants' events (None: nowhere; they are only listed by
    #: ``aap tenants events``), the secret signing them (this file when set, else this
    #: variable), the types it is told of (None: all), and how often an event is tried.
    events_url: str | None = None
    events_secret_env: str = "AAP_EVENTS_SECRET"
    events_secret_file: str | None = None
    events_types: tuple[str, ...] | None = None
    events_max_attempts: int = 12
    events_retry_seconds: float = 30.0

    @property
    def base_url(self) -> str:
        """The platform's own public origin (the proxy in front terminates TLS)."""
        return f"https://{self.host}"

    def prefix_url(self, tenant_id: str) -> str:
        """A tenant's public base URL under the platform host."""
        return f"{self.base_url}/t/{tenant_id}"

    @property
    def outbound(self) -> Reach:
        """Where a tenant's destinations may be (docs/deployment.md, "Outbound connections")."""
        return Reach(loopback=self.allow_loopback_destinations)


#: The longest text read as a domain: a 253-character name and a few characters around it;
#: anything longer is refused as it is, before IDNA mapping costs anything.
MAX_DOMAIN_TEXT = 300


def normalise_domain(text: str) -> tuple[str, str | None]:
    """``(the domain as it is served, why it cannot be one or None)``.

    A domain is kept as the A-label form a browser sends in ``Host`` and Caddy asks about
    (IDNA 2008 with the UTS #46 mapping: ``Bücher.Example`` → ``xn--bcher-kva.example``), lower
    case and without a trailing dot (``alpha.example.`` is ``alpha.example``). An IP address is
    never a domain (every plain request to that address would be the tenant's, and a
    certificate would be asked for it): IPv4 in any form a resolver reads (a last label of
    digits alone), IPv6 with or without brackets. ``localhost`` and its subdomains are this
    machine (RFC 6761 §6.3), a port or a path is not part of a domain.
    """
    if len(text) > MAX_DOMAIN_TEXT:
        return text[:MAX_DOMAIN_TEXT], "is longer than a host name can be"
    host = text.strip()
    if not host or any(c.isspace() or c in "/@\\?#" for c in host):
        return host, "must be a host name alone: no scheme, port or path"
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare:
        try:
            ipaddress.IPv6Address(bare.split("%")[0])
        except ValueError:
            return host, "must be a host name alone: no scheme, port or path"
        return host, "is an IP address; a tenant is served at a domain name"
    if host.endswith("."):
        host = host[:-1]
    try:
        name = idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError):
        return host, "is not a valid host name (IDNA 2008)"
    if not HOST_NAME.match(name):
        return name, "is not a valid host name"
    if name.rsplit(".", 1)[-1].isdigit():
        return name, "is an IP address; a tenant is served at a domain name"
    if name == "localhost" or name.endswith(".localhost"):
        return name, "is this machine (localhost), not a domain"
    if "." not in name:
        return name, "must be a fully qualified host name (with a dot)"
    return name, None


def host_problem(host: str) -> str | None:
    """Why ``host`` is not a host name a tenant or the platform can be served at as written
    (in the normal form of :func:`normalise_domain`), or None."""
    name, problem = normalise_domain(host)
    if problem is None and name != host:
        return f"must be written as {name!r}"
    return problem


def tenant_id_problem(tenant_id: str) -> str | None:
    """Why ``tenant_id`` cannot name a tenant, or None."""
    if not TENANT_ID.match(tenant_id):
        return "must be 1 to 48 lower-case letters, digits or '-', starting and ending with a letter or digit"
    return None


def parse_platform_section(table: Table, problems: Problems) -> PlatformSettings | None:
    """The ``[platform]`` table, or None when the file has none (one agent per deployment)."""
    if not table.present:
        table.finish()
        return None
    host = table.string("host", required=True) or ""
    if host:
        problem = host_problem(host)
        if problem:
            table.problem("host", problem)
    token_env = table.string("api_token_env") or "AAP_PLATFORM_TOKEN"
    if not re.match(r"^[A-Z_][A-Z0-9_]*$", token_env):
        table.problem("api_token_env", "must be an environment variable name (A-Z, 0-9, _)")
    keys_env = table.string("secret_keys_env") or "AAP_SECRET_KEYS"
    if not re.match(r"^[A-Z_][A-Z0-9_]*$", keys_env):
        table.problem("secret_keys_env", "must be an environment variable name (A-Z, 0-9, _)")
    keys_file = table.string("secret_keys_file")
    allow_loopback = table.boolean("allow_loopback_destinations", False)
    events_url = table.url("events_url", endpoint=True)
    if events_url:
        refused = host_refusal(urlsplit(events_url).hostname or "", Reach(loopback=allow_loopback))
        if refused:
            table.problem("events_url", f"is {refused}: outside the platform's outbound connections")
    events_env = table.string("events_secret_env") or "AAP_EVENTS_SECRET"
    if not ENV_NAME.match(events_env):
        table.problem("events_secret_env", "must be an environment variable name (A-Z, 0-9, _)")
    settings = PlatformSettings(
        host=host,
        api_token_env=token_env,
        tenant_prefix=table.boolean("tenant_prefix", True),
        tenants_in_memory=table.integer("tenants_in_memory", 2_000, minimum=1, maximum=1_000_000),
        settings_in_memory=table.integer("settings_in_memory", 100_000, minimum=0, maximum=10_000_000),
        changes_poll_ms=table.integer("changes_poll_ms", 500, minimum=50, maximum=60_000),
        allow_loopback_destinations=allow_loopback,
        tenant_concurrency=table.integer("tenant_concurrency", 0, minimum=1, maximum=10_000) or None,
        tenant_queue=table.integer("tenant_queue", 256, minimum=0, maximum=100_000),
        tenant_queue_ms=table.integer("tenant_queue_ms", 1000, minimum=0, maximum=60_000),
        secret_keys_env=keys_env,
        secret_keys_file=keys_file,
        events_url=events_url,
        events_secret_env=events_env,
        events_secret_file=table.string("events_secret_file"),
        events_types=table.strings("events_types", None, choices=EVENT_TYPES),
        events_max_attempts=table.integer("events_max_attempts", 12, minimum=1, maximum=100),
        events_retry_seconds=table.number("events_retry_seconds", 30.0, minimum=0, maximum=3600),
    )
    table.finish()
    return settings
