"""Read a deployment's TOML file into :class:`~aap.config.model.Settings`.

Every problem is collected with its TOML path (``dealer.rooftops[1].timezone``)
and reported at once in one :class:`ConfigError`, so an operator fixes a file in
one pass instead of one error per restart. Array indexes in paths count from 0.

Each top-level table is read by the parser its :class:`Section` in
:data:`SECTIONS` names; tables and keys no section reads are rejected, so a
typo never silently falls back to a default. :data:`RULES` then look at
several sections at once. Adding a section is a dataclass and a parser (see
:mod:`aap.config.mcp` for a small one), a Settings field, and one line here.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aap.config.credentials import references_of
from aap.config.dealer import parse_dealer, parse_dealers, scope_rules
from aap.config.environment import missing_variables
from aap.config.feeds import feed_rules, parse_feeds_section
from aap.config.leads import parse_leads_section
from aap.config.mcp import parse_mcp_section
from aap.config.model import AgentIdentity, DealerProfile, Settings
from aap.config.platform import parse_platform_section
from aap.config.poppy import parse_poppy_section
from aap.config.sections import (
    agent_defaults,
    parse_agent,
    parse_features,
    parse_rate_limit,
    parse_root,
    parse_search,
    parse_server,
)
from aap.config.table import Problems, Table
from aap.config.web import parse_web_section
from aap.netguard import PUBLIC

#: Environment variables that override one TOML key each (after the file, before ``overrides``).
ENV_OVERRIDES: dict[str, str] = {
    "AAP_DATABASE_URL": "database",
    "AAP_DATABASE_READ_URLS": "database.read_urls",  # comma-separated
    "AAP_PUBLIC_URL": "public_url",
}

DEMO_CONFIG = "demo.toml"
TEMPLATE_CONFIG = "template.toml"


class ConfigError(Exception):
    """An unusable configuration; ``problems`` holds every ``"path: message"`` found."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} configuration problem(s){where}:\n{lines}")


_SETTINGS_FIELDS = frozenset(f.name for f in dataclasses.fields(Settings))


@dataclass(frozen=True)
class Section:
    """How one top-level TOML table (or array of tables) becomes Settings field(s).

    ``parse(table, problems)`` receives a :class:`Table` (an empty,
    ``present=False`` one when the file omits the section, so defaults live in
    one place) or, for ``array=True`` (``[[name]]``), a list of them. It returns
    the value of Settings.<name>, or with several ``fields`` a dict holding each.
    """

    name: str
    parse: Callable[[Any, Problems], Any]
    fields: tuple[str, ...] = ()  # default: (name,)
    array: bool = False

    def __post_init__(self) -> None:
        if not self.fields:
            object.__setattr__(self, "fields", (self.name,))
        for target in self.fields:
            if target not in _SETTINGS_FIELDS:
                raise ValueError(f"Settings has no field {target!r} for section [{self.name}]")


#: Every top-level table, in the order its problems are reported.
SECTIONS: tuple[Section, ...] = (
    Section("agent", parse_agent),
    Section("search", parse_search),
    Section("features", parse_features, array=True),
    Section("rate_limit", parse_rate_limit),
    Section(
        "server",
        parse_server,
        fields=(
            "max_body_bytes",
            "cursor_ttl_seconds",
            "count_timeout_ms",
            "search_timeout_ms",
            "forwarded_allow_ips",
            "limits",
            "metrics_listen",
            "metrics_token_env",
            "hsts_max_age",
        ),
    ),
    Section("dealer", parse_dealer),
    Section("dealers", parse_dealers, array=True),
    Section("mcp", parse_mcp_section),
    Section("leads", parse_leads_section),
    Section("poppy", parse_poppy_section),
    Section("feeds", parse_feeds_section, array=True),
    Section("web", parse_web_section),
    Section("platform", parse_platform_section),
)

#: What a platform deployment's own file holds (docs/platform.md); everything else is a tenant's.
PLATFORM_SECTIONS = frozenset({"server", "platform"})
#: The root keys of a platform deployment's own file (its tenants' public URLs come from their hosts).
PLATFORM_ROOT_KEYS = frozenset({"id", "database"})
#: What a tenant's document may not hold: it is the deployment's, or derived from where it is served.
TENANT_FORBIDDEN = ("id", "public_url", "database", "server", "platform")

#: Rules run after every section was read, on the parsed values (Settings field
#: name -> value); they may fill in derived defaults.
RULES: tuple[Callable[[dict[str, Any], Problems], None], ...] = (agent_defaults, scope_rules, feed_rules)


def _apply_override(doc: dict[str, Any], dotted: str, value: Any) -> None:
    # ``database`` is a URL or a [database] table: the URL goes where the file keeps it.
    if dotted == "database" and isinstance(doc.get("database"), dict):
        dotted = "database.url"
    elif dotted == "database.read_urls":
        if isinstance(doc.get("database"), str):
            doc["database"] = {"url": doc["database"]}
        if isinstance(value, str):
            value = [url.strip() for url in value.split(",") if url.strip()]
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def parse_settings(
    doc: dict[str, Any],
    *,
    source: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    require_secrets: bool = False,
    tenant: bool = False,
) -> Settings:
    """Validate a parsed TOML document (plus env and explicit overrides) into Settings.

    ``overrides`` maps dotted TOML keys (``"database"``, ``"public_url"``,
    ``"search.max_limit"``) to values; they win over the environment, which wins
    over the file. ``None`` values are ignored. ``require_secrets`` also
    reports every environment variable the file names for a secret that
    ``environ`` does not set (:mod:`aap.config.environment`). Only a platform's ``tenant`` names
    tenant secrets (``X_secret`` keys, :mod:`aap.config.credentials`).
    """
    env = os.environ if environ is None else environ
    applied = [(key, value, variable) for variable, key in ENV_OVERRIDES.items() if (value := env.get(variable))]
    applied += [(key, value, "override") for key, value in (overrides or {}).items() if value is not None]
    if applied:  # the caller's document is left as it was given
        doc = copy.deepcopy(doc)
    origins: dict[str, str] = {}
    for key, value, origin in applied:
        _apply_override(doc, key, value)
        origins[key] = origin

    problems = Problems(origins)
    if "platform" in doc:
        return _platform_settings(doc, problems, source)
    root = Table(doc, "", problems)
    parsed = parse_root(root)
    for section in SECTIONS:
        parsed.update(_section_fields(section, root, problems))
    root.finish()
    for rule in RULES:
        rule(parsed, problems)
    if not tenant:
        for ref in references_of(parsed["leads"], parsed["feeds"], parsed.get("agent")):
            if ref.credential.secret is not None:
                problems.add(
                    ref.key,
                    'names a tenant secret, which only a platform\'s tenant has (docs/platform.md, "Secrets"); '
                    f"name an environment variable with {ref.path.rsplit('.', 1)[-1]}_env",
                )
    if require_secrets:
        for path, message in missing_variables(parsed["leads"], env, metrics_token_env=parsed["metrics_token_env"]):
            problems.add(path, message)
    if problems:
        raise ConfigError(problems.render(), source)
    return Settings(**parsed, source_path=source)


#: The Settings fields of each section a file omits: its defaults, which depend on nothing but
#: the code, parsed once per process (a platform parses thousands of tenants' files that omit
#: most sections). Kept only when every value hashes by content, as immutable values do: an
#: agent cannot change what another agent shares with it.
_OMITTED: dict[str, dict[str, Any]] = {}


def _section_fields(section: Section, root: Table, problems: Problems) -> dict[str, Any]:
    """The Settings fields ``section`` gives: parsed from ``root``, or its defaults when the file
    omits it (:data:`_OMITTED`). The dict returned is read, never changed."""
    omitted = not root.has(section.name)
    if omitted and section.name in _OMITTED:
        return _OMITTED[section.name]
    found = len(problems)
    if section.array:
        result = section.parse(list(root.tables(section.name)), problems)
    else:
        result = section.parse(root.table(section.name), problems)
    fields = (
        {section.fields[0]: result} if len(section.fields) == 1 else {name: result[name] for name in section.fields}
    )
    if omitted and len(problems) == found and _immutable(fields.values()):
        _OMITTED[section.name] = fields
    return fields


def _immutable(values: Iterable[Any]) -> bool:
    """Whether every one of ``values`` hashes by content (a frozen dataclass of tuples does; a
    list or a dict inside does not)."""
    try:
        for value in values:
            hash(value)
    except TypeError:
        return False
    return True


def _platform_settings(doc: dict[str, Any], problems: Problems, source: str | None) -> Settings:
    """A platform deployment's own file: ``[server]``, ``[database]`` and ``[platform]`` only.

    The agents it serves are its tenants (:func:`parse_tenant`), so a dealer-level table here
    is refused with a pointer to where it belongs instead of being ignored. The Settings
    returned describe the platform itself: its id, its host as public URL, an empty profile.
    """
    for key in sorted(doc):
        if key not in PLATFORM_SECTIONS and key not in PLATFORM_ROOT_KEYS:
            problems.add(
                key,
                "belongs in a tenant's configuration on a platform deployment "
                "(aap init --tenant FILE, then aap tenants add ID --config FILE)",
            )
    root = Table({k: v for k, v in doc.items() if k in PLATFORM_SECTIONS or k in PLATFORM_ROOT_KEYS}, "", problems)
    platform = parse_platform_section(root.table("platform"), problems)
    host = platform.host if platform is not None else "platform.invalid"
    base = {"id": root.raw("id", host), "public_url": f"https://{host}"}
    if root.has("database"):
        base["database"] = root.raw("database")
    parsed = parse_root(Table(base, "", problems))
    server = parse_server(root.table("server"), problems)
    root.finish()
    if problems:
        raise ConfigError(problems.render(), source)
    name = f"AAP platform {host}"
    return Settings(
        **parsed,
        **server,
        agent=AgentIdentity(name=name, description=f"The dealer agents hosted at {host}."),
        dealer=DealerProfile({"name": name, "rooftops": []}),
        platform=platform,
        source_path=source,
    )


class _Without(Mapping[str, str]):
    """``environ`` without the variables ``hidden`` names: a view, not a copy (a platform
    parses a tenant's file on every load, and the environment is the same each time)."""

    def __init__(self, environ: Mapping[str, str], hidden: Mapping[str, str]) -> None:
        self.environ, self.hidden = environ, hidden

    def __getitem__(self, key: str) -> str:
        if key in self.hidden:
            raise KeyError(key)
        return self.environ[key]

    def __iter__(self) -> Iterator[str]:
        return (key for key in self.environ if key not in self.hidden)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def parse_tenant(
    doc: dict[str, Any],
    *,
    tenant_id: str,
    public_url: str,
    deployment: Settings,
    environ: Mapping[str, str] | None = None,
    source: str | None = None,
) -> Settings:
    """A tenant's document (the dealer-level tables of ``aap.toml``) as the Settings of its agent.

    What the tenants share comes from the ``deployment``: the ``[server]`` limits and the
    trusted proxies. What is derived is set here: the id is the tenant id, the public URL
    is where the agent is served (``https://HOST`` or ``https://PLATFORM_HOST/t/ID``), and its
    rows are the tenant's in the platform's database and read replicas (docs/platform.md,
    "Isolation").
    Every problem is reported at once, with its TOML path, as for a deployment's file. The
    secrets it names are checked by the registry, against the platform's database
    (:class:`aap.tenants.TenantRegistry`), never against this process's environment.
    """
    problems = Problems({})
    for key in TENANT_FORBIDDEN:
        if key in doc:
            problems.add(
                key,
                "is the platform's, not a tenant's: "
                + {
                    "id": "the tenant id names the agent",
                    "public_url": "the agent is served at its domains and at /t/ID/ on the platform host",
                    "database": "every tenant has its own namespace in the platform's database",
                    "server": "[server] limits are shared by every tenant of the deployment",
                    "platform": "[platform] is the deployment's own table",
                }[key],
            )
    tenant_doc = {k: v for k, v in doc.items() if k not in TENANT_FORBIDDEN}
    tenant_doc.update({"id": tenant_id, "public_url": public_url, "database": deployment.database_url})
    env = _Without(os.environ if environ is None else environ, ENV_OVERRIDES)
    try:
        settings = parse_settings(tenant_doc, source=source, environ=env, tenant=True)
    except ConfigError as exc:
        raise ConfigError(problems.render() + exc.problems, source) from None
    if problems:
        raise ConfigError(problems.render(), source)
    shared_a2a = f"{deployment.platform.base_url}/a2a" if deployment.platform and settings.a2a_tenant else None
    return dataclasses.replace(
        settings,
        tenant_id=tenant_id,
        database_read_urls=deployment.database_read_urls,
        max_replica_lag_ms=deployment.max_replica_lag_ms,
        a2a_url=shared_a2a,
        max_body_bytes=deployment.max_body_bytes,
        cursor_ttl_seconds=deployment.cursor_ttl_seconds,
        count_timeout_ms=deployment.count_timeout_ms,
        search_timeout_ms=deployment.search_timeout_ms,
        forwarded_allow_ips=deployment.forwarded_allow_ips,
        outbound=deployment.platform.outbound if deployment.platform else PUBLIC,
    )


def read_toml(path: str) -> dict[str, Any]:
    """Parse a TOML file; unreadable or malformed files become a ConfigError."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(["(file): not found"], path) from None
    except OSError as exc:
        raise ConfigError([f"(file): cannot be read ({exc.strerror})"], path) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"(syntax): {exc}"], path) from None


def packaged_toml(name: str) -> str:
    """Text of a TOML file shipped inside the ``aap.config`` package."""
    return resources.files("aap.config").joinpath(name).read_text(encoding="utf-8")


def load_settings(
    path: str | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    require_secrets: bool = False,
) -> Settings:
    """Load ``path``, or the built-in demo dealer group when ``path`` is None."""
    if path is None:
        doc = tomllib.loads(packaged_toml(DEMO_CONFIG))
        return parse_settings(doc, source=None, overrides=overrides, environ=environ, require_secrets=require_secrets)
    doc = read_toml(path)
    return parse_settings(doc, source=str(path), overrides=overrides, environ=environ, require_secrets=require_secrets)
