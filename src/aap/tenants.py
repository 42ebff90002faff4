"""The rules for adding, changing and removing a platform's tenants (docs/platform.md).

One set of rules for every way a tenant is managed — ``aap tenants``, the provisioning
API (``/_platform/v1/tenants``) and the platform console — so that none of them can
register a tenant the others would refuse:

- a tenant id is lower-case letters, digits and ``-`` (it names the ``/t/ID/`` prefix and
  keys the tenant's rows in the shared tables);
- its configuration is the dealer-level tables of ``aap.toml`` and passes every check
  ``aap config check`` makes (the loader's, with every problem at once and its TOML path),
  with the platform's ``[server]``;
- its secrets are tenant secrets (``X_secret = "NAME"``), set in the platform's database
  (:mod:`aap.tenant_secrets`) and checked there: set, readable with the platform's keys; a
  variable of the platform workers' environment (``X_env``) is refused;
- on a platform, a tenant's feeds and mapping files are fetched from ``https://`` or
  ``sftp://`` sources only: a local path would let whoever provisions a tenant read the
  platform host's files;
- no destination a tenant names (CRM targets, SMTP hosts, feeds) is a loopback, private,
  link-local or reserved address or ``localhost``: those are the platform's own network
  (:func:`destination_problems`; a name resolving to one is refused on the connection);
- a domain is a lower-case host name, served by one tenant only, never the platform's own
  host; the A2A routing value a tenant declares (``a2a_tenant = "..."``) is unique too.

Every write is one transaction in the platform's registry (:mod:`aap.store.platform`) with
a change row that every worker follows; a tenant's rows are deleted when it is removed (and
any left by an earlier tenant of the same id before it is added).
"""

from __future__ import annotations

import dataclasses
import os
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aap.config.credentials import environment_references, secret_name_problem, secret_references
from aap.config.environment import signing_problems
from aap.config.loader import ConfigError, parse_tenant
from aap.config.model import Settings
from aap.config.platform import MAX_DOMAIN_TEXT, PlatformSettings, normalise_domain, tenant_id_problem
from aap.config.shared import SharedSections
from aap.netguard import Reach, host_refusal
from aap.secretbox import SecretKeyError
from aap.store.db import Database
from aap.store.platform import DELIVERIES, FEEDS, UNNAMED, PlatformStore, TenantRecord
from aap.store.tenancy import TenantData
from aap.tenant_secrets import MAX_SECRET_BYTES, MAX_SECRETS, Rotation, SecretInfo, TenantSecrets

#: The most domains one tenant is served at.
MAX_DOMAINS = 20
#: The largest tenant configuration accepted (a dealer group's file is a few kilobytes).
MAX_CONFIG_BYTES = 256 * 1024


def destination_problems(doc: dict[str, Any], reach: Reach) -> list[str]:
    """Every destination a tenant's document names that is outside ``reach`` as written: an
    address literal or a ``localhost`` name of a CRM target's URL or SMTP host, the notifications'
    SMTP host or a feed's source (docs/deployment.md, "Outbound connections"). A name that
    resolves to such an address is refused when it is connected to (:mod:`aap.netguard`)."""
    from urllib.parse import urlsplit

    named: list[tuple[str, str]] = []  # (TOML path, host)

    def url_host(path: str, url: object) -> None:
        if isinstance(url, str):
            try:
                named.append((path, urlsplit(url).hostname or ""))
            except ValueError:
                pass  # the configuration check reports a malformed URL

    raw = doc.get("leads")
    leads: dict[str, Any] = raw if isinstance(raw, dict) else {}
    routes = leads.get("routes")
    for i, route in enumerate(routes if isinstance(routes, list) else []):
        targets = route.get("targets") if isinstance(route, dict) else None
        for j, target in enumerate(targets if isinstance(targets, list) else []):
            if not isinstance(target, dict):
                continue
            where = f"leads.routes[{i}].targets[{j}]"
            if target.get("type", "adf_http") == "smtp":
                if isinstance(target.get("host"), str):
                    named.append((f"{where}.host", target["host"]))
            else:
                url_host(f"{where}.url", target.get("url"))
    notifications = leads.get("notifications")
    if isinstance(notifications, dict) and isinstance(notifications.get("host"), str):
        named.append(("leads.notifications.host", notifications["host"]))
    feeds = doc.get("feeds")
    for i, feed in enumerate(feeds if isinstance(feeds, list) else []):
        if isinstance(feed, dict):
            url_host(f"feeds[{i}].source", feed.get("source"))
    problems = []
    for path, host in named:
        why = host_refusal(host, reach) if host else None
        if why is not None:
            problems.append(f"{path}: names {why}; a tenant's destinations are on the public internet")
    poppy = doc.get("poppy")
    if isinstance(poppy, dict) and poppy.get("allow_loopback_clients") is True and not reach.loopback:
        problems.append(
            "poppy.allow_loopback_clients: a tenant's Poppy clients are on the public internet "
            "(loopback is the platform's own machine)"
        )
    return problems


def domains_of(texts: Sequence[str], *, check: bool = True) -> tuple[list[str], list[str]]:
    """``(the valid domains in normal form, each once, in order; the problems of the others)``
    (:func:`aap.config.platform.normalise_domain`: lower-case A-labels, no trailing dot, no IP
    address). ``check=False`` (domains to remove) reports no problem, and keeps a text that is not
    a domain as it is written, so that one registered before these rules can be removed."""
    names: list[str] = []
    problems: list[str] = []
    if check and len(texts) > MAX_DOMAINS:
        problems.append(f"domains: at most {MAX_DOMAINS} per tenant")
    for text in texts:
        name, problem = normalise_domain(text)
        if problem is not None and not check:  # a name stored before these rules can still go
            names.append(text.strip()[:MAX_DOMAIN_TEXT])
        elif problem is not None:
            problems.append(f"domain {text[:MAX_DOMAIN_TEXT]!r}: {problem}")
        elif name in names:
            if check:
                problems.append(f"domain {text!r}: given twice" + (f" (as {name!r})" if name != text else ""))
        else:
            names.append(name)
    return names, problems


def load_reason(exc: ConfigError | tomllib.TOMLDecodeError) -> str:
    """Why a stored configuration did not load, as an operator reads it: every problem of the
    configuration (its TOML paths and what is wrong: never a secret's value, never a customer's)."""
    if isinstance(exc, ConfigError):
        return "; ".join(exc.problems)
    return f"(syntax): {exc}"


class TenantError(Exception):
    """A tenant operation refused, with every problem found; ``status`` as an HTTP API answers it."""

    def __init__(self, problems: Sequence[str], status: int = 400) -> None:
        self.problems = list(problems)
        self.status = status
        super().__init__("; ".join(self.problems))


def refusal(problems: Sequence[str], conflicts: Sequence[str]) -> TenantError:
    """Every problem, 409 when each is a conflict with another tenant (a domain or A2A routing
    value it holds: RFC 9110 §15.5.10), else 400 (**decision**, docs/platform.md)."""
    only_conflicts = bool(problems) and all(p in conflicts for p in problems)
    return TenantError(problems, status=409 if only_conflicts else 400)


def _now_ms() -> int:
    return int(time.time() * 1000)


class TenantRegistry:
    """The tenants of one platform deployment (its ``Settings`` with ``[platform]``)."""

    def __init__(self, deployment: Settings, platform_db: Database, *, environ: Mapping[str, str] | None = None):
        if deployment.platform is None:
            raise ValueError("tenants need a deployment with a [platform] table")
        self.deployment = deployment
        self.platform: PlatformSettings = deployment.platform
        self.store = PlatformStore(platform_db)
        self.data = TenantData(platform_db)
        self.environ = environ
        self.secrets = TenantSecrets(self.store, self.platform, os.environ if environ is None else environ)
        #: The Settings sections this process's tenants hold alike, held once (by content).
        self.sections = SharedSections()

    # -- what a tenant is served as ---------------------------------------------------------
    def public_url(self, record: TenantRecord) -> str:
        """The tenant's primary public URL: its first domain, else its prefix on the platform host."""
        return f"https://{record.domains[0]}" if record.domains else self.platform.prefix_url(record.tenant_id)

    def settings_for(self, record: TenantRecord, public_url: str) -> Settings:
        """The Settings of ``record``'s agent as served at ``public_url`` (already checked when
        stored), with the values of the tenant secrets it names as they are now."""
        settings = parse_tenant(
            tomllib.loads(record.config),
            tenant_id=record.tenant_id,
            public_url=public_url,
            deployment=self.deployment,
            environ=self.environ,
            source=f"tenant {record.tenant_id}",
        )
        return self._with_secrets(self.sections.settings(settings), record.tenant_id)

    def _with_secrets(self, settings: Settings, tenant_id: str) -> Settings:
        names = {ref.credential.secret for ref in secret_references(settings) if ref.credential.secret}
        if not names:
            return settings
        return dataclasses.replace(settings, secrets=self.secrets.values(tenant_id, names))

    # -- checks -------------------------------------------------------------------------------
    def check(self, tenant_id: str, config: str, domains: Sequence[str] = ()) -> Settings:
        """The tenant's Settings, or a :class:`TenantError` naming every problem of the id, the
        configuration and the domains at once (nothing is written). ``domains`` are taken as
        :func:`domains` gives them (normalised); a caller that has not normalised them gets
        every problem of their text too."""
        problems: list[str] = []
        conflicts: list[str] = []  # with another tenant: 409 when they are all there is
        settings = None
        id_problem = tenant_id_problem(tenant_id)
        if id_problem:
            problems.append(f"tenant id {tenant_id!r}: {id_problem}")
        names, domain_problems = domains_of(domains)
        problems += domain_problems + self._own_host(names)
        conflicts += self._domain_conflicts(names, tenant_id)
        problems += conflicts
        doc = self._toml(config, problems)
        if doc is not None and not id_problem:
            url = f"https://{names[0]}" if names else self.platform.prefix_url(tenant_id)
            try:
                settings = parse_tenant(
                    doc,
                    tenant_id=tenant_id,
                    public_url=url,
                    deployment=self.deployment,
                    environ=self.environ,
                )
            except ConfigError as exc:
                problems += exc.problems
            if settings is not None:
                problems += self._secret_problems(settings, tenant_id)
            problems += self._source_problems(doc)
            problems += destination_problems(doc, self.platform.outbound)
            if settings is not None:
                a2a = self._a2a_problems(settings, tenant_id)
                conflicts += a2a
                problems += a2a
        if problems or settings is None:
            raise refusal(problems, conflicts)
        return settings

    def _secret_problems(self, settings: Settings, tenant_id: str) -> list[str]:
        """The tenant's secrets: none named by environment variable (that is the platform workers'
        environment, not the tenant's), each one named set in the database and readable."""
        problems = environment_references(settings)
        resolved = self._with_secrets(settings, tenant_id)
        for ref in secret_references(resolved):
            name = ref.credential.secret
            if name is not None and not resolved.secrets.get(name):
                hint = "" if name in self.secrets.names(tenant_id) else f" (aap tenants secrets set {tenant_id} {name})"
                problems.append(f"{ref.key}: {resolved.secrets.missing(name)}{hint}")
        if settings.agent.signing_key_secret is not None:
            problems += signing_problems(resolved, {})
        return problems

    def _toml(self, config: str, problems: list[str]) -> dict[str, Any] | None:
        if len(config.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
            problems.append(f"(configuration): larger than {MAX_CONFIG_BYTES // 1024} KiB")
            return None
        try:
            return tomllib.loads(config)
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"(syntax): {exc}")
            return None

    def _own_host(self, names: Sequence[str]) -> list[str]:
        return [
            f"domain {host!r}: is the platform's own host (tenants are served at /t/ID/ there)"
            for host in names
            if host == self.platform.host
        ]

    def _domain_conflicts(self, names: Sequence[str], tenant_id: str) -> list[str]:
        """The (normalised, valid) domains another tenant serves."""
        conflicts = []
        for host, owner in sorted(self.store.hosts_taken(list(names)).items()):
            if owner != tenant_id:
                conflicts.append(f"domain {host!r}: already served by tenant {owner!r}")
        return conflicts

    @staticmethod
    def _source_problems(doc: dict[str, Any]) -> list[str]:
        """Feeds that would read the platform host's files (looked at in the document itself, so
        these are reported with the configuration's other problems, whatever they are)."""
        from aap.config.feeds import source_scheme

        problems = []
        feeds = doc.get("feeds")
        for i, feed in enumerate(feeds if isinstance(feeds, list) else []):
            if not isinstance(feed, dict):
                continue
            source = feed.get("source")
            if isinstance(source, str) and source_scheme(source) not in ("https", "sftp"):
                problems.append(
                    f"feeds[{i}].source: a tenant's feed is fetched over https:// or sftp:// "
                    "(a local path would read the platform host's own files)"
                )
            for key in ("mapping", "key_file", "known_hosts", "ca_file"):
                if key in feed:
                    problems.append(
                        f"feeds[{i}].{key}: a tenant's configuration cannot name files on the platform host"
                    )
            if feed.get("private_network"):
                problems.append(
                    f"feeds[{i}].private_network: a tenant's feeds come from the public internet "
                    "(private and loopback addresses are the platform's own network)"
                )
        return problems

    def _a2a_problems(self, settings: Settings, tenant_id: str) -> list[str]:
        if not settings.a2a_tenant:
            return []
        owner = self.store.tenant_for_a2a(settings.a2a_tenant)
        if owner is not None and owner != tenant_id:
            return [
                f"a2a_tenant: the A2A routing value {settings.a2a_tenant!r} is declared by tenant {owner!r} already"
            ]
        return []

    # -- operations ---------------------------------------------------------------------------
    def get(self, tenant_id: str) -> TenantRecord:
        record = self.store.tenant(tenant_id)
        if record is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        return record

    def list(self, *, after: str = "", limit: int = 1000, matching: str | None = None) -> list[TenantRecord]:
        return self.store.tenants(after=after, limit=limit, matching=matching)

    def add(self, tenant_id: str, config: str, domains: Iterable[str] = (), *, by: str = UNNAMED) -> TenantRecord:
        given = list(domains)
        hosts, _ = domains_of(given)
        if self.store.tenant(tenant_id) is not None:
            raise TenantError([f"tenant {tenant_id!r} exists already (aap tenants update changes it)"], status=409)
        settings = self.check(tenant_id, config, given)
        # Rows of an earlier tenant of this id, had its removal stopped before its rows were
        # deleted, never come back as this one's.
        self.data.remove(tenant_id)
        try:
            record = self.store.add(tenant_id, config, settings.a2a_tenant, hosts, _now_ms(), actor=by)
            self._schedule(settings)
            return record
        except Exception as exc:  # a race with another add of the same id or host: say which
            if self.store.tenant(tenant_id) is not None:
                raise TenantError([f"tenant {tenant_id!r} exists already"], status=409) from exc
            taken = self.store.hosts_taken(hosts)
            if taken:
                raise TenantError(
                    [f"domain {h!r}: already served by tenant {t!r}" for h, t in sorted(taken.items())], status=409
                ) from exc
            raise

    def update(self, tenant_id: str, config: str, *, by: str = UNNAMED) -> TenantRecord:
        record = self.get(tenant_id)
        settings = self.check(tenant_id, config, record.domains)
        updated = self.store.update(tenant_id, config, settings.a2a_tenant, _now_ms(), actor=by)
        if updated is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        self._schedule(settings)
        return updated

    # -- idempotent provisioning: PUT of a whole tenant, bulk files (docs/platform.md) ------------
    @staticmethod
    def same(record: TenantRecord, config: str, domains: Sequence[str] | None) -> bool:
        """Whether ``record`` is already exactly this tenant: the same configuration text and, when
        ``domains`` are given, the same set of domains (in normal form, in any order)."""
        if record.config != config:
            return False
        if domains is None:
            return True
        names, problems = domains_of(domains)
        return not problems and sorted(names) == sorted(record.domains)

    def put(
        self, tenant_id: str, config: str, domains: Sequence[str] | None = None, *, by: str = UNNAMED
    ) -> tuple[str, TenantRecord]:
        """Make tenant ``tenant_id`` exactly this: ``("added", record)`` when it is new,
        ``("updated", …)`` when it was different (its configuration and, when ``domains`` are
        given, its set of domains replaced in one change), ``("unchanged", …)`` when it already
        was (nothing written, no audit row): the same call twice changes the registry once.
        ``domains=None`` keeps an existing tenant's domains (a new one gets none)."""
        record = self.store.tenant(tenant_id)
        if record is None:
            try:
                return "added", self.add(tenant_id, config, domains or (), by=by)
            except TenantError as exc:
                # Another put of this id made it first: this one replaces it, as if it came later.
                if exc.status != 409 or self.store.tenant(tenant_id) is None:
                    raise
                record = self.get(tenant_id)
        if self.same(record, config, domains):
            return "unchanged", record
        return "updated", self.replace(record, config, domains, by=by)

    def replace(
        self, record: TenantRecord, config: str, domains: Sequence[str] | None, *, by: str = UNNAMED
    ) -> TenantRecord:
        """``record``'s tenant with this configuration and (unless None) exactly these domains,
        checked whole and written as one change."""
        tenant_id = record.tenant_id
        wanted = list(record.domains) if domains is None else list(domains)
        settings = self.check(tenant_id, config, wanted)
        hosts, _ = domains_of(wanted)
        add = [h for h in hosts if h not in record.domains]
        remove = [h for h in record.domains if h not in hosts]
        try:
            updated = self.store.replace(tenant_id, config, settings.a2a_tenant, add, remove, _now_ms(), actor=by)
        except Exception as exc:  # a race with another change taking one of these hosts: say which
            taken = {h: t for h, t in self.store.hosts_taken(add).items() if t != tenant_id}
            if taken:
                raise TenantError(
                    [f"domain {h!r}: already served by tenant {t!r}" for h, t in sorted(taken.items())], status=409
                ) from exc
            raise
        if updated is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        self._schedule(settings)
        return updated

    def _schedule(self, settings: Settings) -> None:
        """A tenant with ``[[feeds]]`` is due for its scheduler at once (which then says when next)."""
        self.store.set_due(settings.deployment_id, FEEDS, _now_ms() if settings.feeds else None)

    def set_domains(
        self, tenant_id: str, add: Sequence[str] = (), remove: Sequence[str] = (), *, by: str = UNNAMED
    ) -> TenantRecord:
        record = self.get(tenant_id)
        adding_names, problems = domains_of(add)
        removing, remove_problems = domains_of(remove, check=False)
        problems += remove_problems
        kept = [h for h in record.domains if h not in removing]
        adding = [h for h in adding_names if h not in kept]
        if len(kept) + len(adding) > MAX_DOMAINS:
            problems.append(f"domains: at most {MAX_DOMAINS} per tenant")
        problems += self._own_host(adding)
        conflicts = self._domain_conflicts(adding, tenant_id)
        problems += conflicts
        problems += [f"domain {h!r}: not a domain of tenant {tenant_id!r}" for h in removing if h not in record.domains]
        if problems:
            raise refusal(problems, conflicts)
        updated = self.store.set_domains(
            tenant_id, adding, [h for h in removing if h in record.domains], _now_ms(), actor=by
        )
        if updated is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        return updated

    def remove(self, tenant_id: str, *, by: str = UNNAMED) -> None:
        """Unregister the tenant (every worker stops serving it), then delete its rows."""
        if not self.store.remove(tenant_id, _now_ms(), actor=by):
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        self.data.remove(tenant_id)

    # -- secrets (aap.tenant_secrets) -------------------------------------------------------------
    def secret_list(self, tenant_id: str) -> Sequence[SecretInfo]:
        """The names of the tenant's secrets and when each was set (never a value). A secret may
        be set before its tenant is added, so an id without a tenant lists what it has."""
        self._id_or_refuse(tenant_id)
        return self.secrets.listing(tenant_id)

    def set_secret(self, tenant_id: str, name: str, value: str) -> bool:
        """Seal and store ``value`` as the tenant's secret ``name`` (every worker rebuilds the tenant
        with it); returns whether the name is new. Refused with every problem at once; never the
        value in a problem."""
        self._id_or_refuse(tenant_id)
        problems = []
        name_problem = secret_name_problem(name)
        if name_problem:
            problems.append(f"secret name {name[:80]!r}: {name_problem}")
        size = len(value.encode("utf-8", "surrogatepass"))
        if not value.strip():
            problems.append("value: must not be empty")
        elif size > MAX_SECRET_BYTES:
            problems.append(f"value: larger than {MAX_SECRET_BYTES // 1024} KiB")
        elif any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            problems.append("value: is not UTF-8 text")
        if not problems:
            names = self.secrets.names(tenant_id)
            if name not in names and len(names) >= MAX_SECRETS:
                problems.append(f"secrets: at most {MAX_SECRETS} per tenant")
        if problems:
            raise TenantError(problems)
        try:
            return self.secrets.put(tenant_id, name, value)
        except SecretKeyError as exc:
            raise TenantError([str(exc)], status=503) from None

    def remove_secret(self, tenant_id: str, name: str) -> None:
        self._id_or_refuse(tenant_id)
        if not self.secrets.remove(tenant_id, name):
            raise TenantError([f"tenant {tenant_id!r} has no secret {name[:80]!r}"], status=404)

    def rotate_secrets(self) -> Rotation:
        """Seal every tenant's secrets again with the platform's current key (the first)."""
        try:
            return self.secrets.rotate()
        except SecretKeyError as exc:
            raise TenantError([str(exc)], status=503) from None

    @staticmethod
    def _id_or_refuse(tenant_id: str) -> None:
        problem = tenant_id_problem(tenant_id)
        if problem:
            raise TenantError([f"tenant id {tenant_id[:64]!r}: {problem}"], status=404)

    def suspend(self, tenant_id: str, *, by: str = UNNAMED) -> TenantRecord:
        """Stop serving the tenant without deleting anything: every worker answers 503 with
        ``Retry-After`` on every surface, its feeds and lead deliveries wait (docs/platform.md,
        "Operating tenants"). Suspending a suspended tenant changes nothing."""
        record = self.store.suspend(tenant_id, _now_ms(), actor=by)
        if record is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        return record

    def resume(self, tenant_id: str, *, by: str = UNNAMED) -> TenantRecord:
        """Serve a suspended tenant again; its deliveries and feeds are due at once (what waited
        while it was suspended goes out now)."""
        record = self.store.resume(tenant_id, _now_ms(), actor=by)
        if record is None:
            raise TenantError([f"no tenant {tenant_id!r}"], status=404)
        for work in (DELIVERIES, FEEDS):  # a tenant without feeds is let go by the feed runner's first look
            self.store.set_due(tenant_id, work, _now_ms())
        return record

    def load_problem(self, record: TenantRecord) -> str | None:
        """Why ``record``'s stored configuration does not load as it is served (every problem,
        ``; ``-separated), or None when it loads."""
        try:
            self.settings_for(record, self.public_url(record))
        except (ConfigError, tomllib.TOMLDecodeError) as exc:
            return load_reason(exc)
        return None
