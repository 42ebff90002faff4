"""``aap tenants add|update|domains|check|list|show|remove|secrets|suspend|resume|audit|events``: a
platform's tenants (docs/platform.md).

The commands work on the registry in the platform deployment's database (SQLite or
PostgreSQL) through :class:`aap.tenants.TenantRegistry`, the same rules the provisioning API
applies, so that every problem of a tenant is listed at once and nothing half-made is ever
registered. A change is served by every worker within seconds, without a restart.

Two files are involved: the platform deployment's own (``[server]``, ``[database]``,
``[platform]``), found as every aap command finds its configuration (``aap tenants --config
FILE``, else ``$AAP_CONFIG``, else ``./aap.toml``), and a tenant's configuration, which
``add``, ``update`` and ``check`` read from their own ``--config FILE``.

Every change is written to the platform's audit log as made by ``cli:USER`` (the operating
system's user running the command); ``aap tenants audit`` reads it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

import click
import orjson
from rich.text import Text

from aap.cli.common import (
    CONFIG_ENV,
    DEFAULT_CONFIG,
    console,
    database_option,
    fail,
    load_platform_or_fail,
    open_registry_or_fail,
)
from aap.platform.views import secret_view, stamp, tenant_state, tenant_urls, tenant_view

if TYPE_CHECKING:
    from aap.config.platform import PlatformSettings
    from aap.store.platform import TenantRecord
    from aap.store.platform_events import EventStore
    from aap.tenants import TenantRegistry

#: Tenants read from the registry per page by ``aap tenants list``.
PAGE = 500
#: Audit entries ``aap tenants audit`` shows unless told otherwise, and the most it reads.
AUDIT_DEFAULT, AUDIT_MAX = 50, 10_000


def cli_actor() -> str:
    """Who the audit log says made a change with ``aap tenants``: ``cli:`` and the OS user."""
    import getpass
    import os

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's): its number
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"cli:{user}"[:200]


platform_config_option = click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help=f"The platform deployment's file ([server], [database], [platform]). Default: ${CONFIG_ENV}, else"
    f" ./{DEFAULT_CONFIG}.",
)
tenant_config_option = click.option(
    "--config",
    "tenant_file",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="The tenant's configuration: the dealer-level tables of aap.toml (`aap init --tenant FILE` writes one).",
)
domain_option = click.option(
    "--domain",
    "domains",
    multiple=True,
    metavar="HOST",
    help="A host name the tenant's agent is served at, e.g. www.dealer.example (repeatable), whose DNS points"
    " at the platform's proxy.",
)


def _deployment_config(ctx: click.Context, config: str | None = None) -> tuple[str | None, dict[str, Any] | None]:
    """The platform's configuration file and overrides: a subcommand's own ``--config``, else the group's."""
    found = ctx.parent  # the `aap tenants` group's options, above `secrets` for its commands
    while found is not None and found.info_name != "tenants":
        found = found.parent
    group = found.params if found is not None else {}
    database = group.get("database")
    return config or group.get("config"), {"database": database} if database else None


@contextmanager
def _registry(ctx: click.Context, config: str | None = None) -> Iterator[TenantRegistry]:
    path, overrides = _deployment_config(ctx, config)
    with open_registry_or_fail(load_platform_or_fail(path, overrides)) as registry:
        yield registry


@contextmanager
def _refusing(what: str) -> Iterator[None]:
    """The registry's refusal (a TenantError) inside: the command fails with ``what`` and its problems."""
    from aap.tenants import TenantError

    try:
        yield
    except TenantError as exc:
        fail(f"{what}: {len(exc.problems)} problem(s)", exc.problems)


def _read(path: str) -> str:
    """The tenant file's text, read no further than the registry accepts."""
    from aap.tenants import MAX_CONFIG_BYTES

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        fail(f"{path}: no such file (`aap init --tenant {path}` writes a template).")
    except OSError as exc:
        fail(f"Cannot read {path}: {exc.strerror}")
    if len(data) > MAX_CONFIG_BYTES:
        fail(f"{path} is larger than a tenant's configuration may be ({MAX_CONFIG_BYTES // 1024} KiB).")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{path} is not UTF-8 text (TOML is UTF-8): byte {exc.start} cannot be read.")


def _served(registry: TenantRegistry, record: TenantRecord, verb: str) -> None:
    console.print(Text(f"Tenant {record.tenant_id} {verb} (revision {record.revision}).", style="bold green"))
    served = tenant_urls(registry, record)
    if served:
        console.print(Text("Served at " + ", ".join(served) + " within seconds, by every worker."))
    else:
        console.print(
            Text(
                "It has no domain yet and [platform] tenant_prefix is off: it is served nowhere until "
                f"`aap tenants domains {record.tenant_id} --add HOST`.",
                style="yellow",
            )
        )


@click.group(
    "tenants",
    epilog="""\b
A first tenant, step by step:
  aap init --tenant dealer-a.toml                       # a commented template; edit it
  aap tenants check dealer-a --config dealer-a.toml --domain www.dealer-a.example
  aap tenants add dealer-a --config dealer-a.toml --domain www.dealer-a.example
  aap import inventory.jsonl --tenant dealer-a          # or [[feeds]] in its configuration
  aap users add boss@dealer-a.example --tenant dealer-a --role admin
  aap tenants show dealer-a                             # its configuration, domains and URLs
""",
)
@platform_config_option
@database_option
def tenants(config: str | None, database: str | None) -> None:
    """The dealer agents a platform deployment hosts, each a complete agent on its own domains.

    A tenant is what one `aap serve` with its own aap.toml would be: its dealer profile and
    rooftops, search settings, lead routes, Poppy, MCP, rate limits, feeds, public page and
    console, with its data in a database namespace of its own. It is served at
    https://DOMAIN for each of its domains and at https://PLATFORM_HOST/t/ID/. The tenants are
    stored in the platform's database, never in its file; every change is checked whole (every
    problem listed at once) and served by every worker within seconds, without a restart.

    --config before the command names the platform deployment's file (default: $AAP_CONFIG,
    else ./aap.toml); `add`, `update` and `check` take the tenant's file as their own --config.
    """


@tenants.command("add")
@click.argument("tenant_id", metavar="ID", required=False)
@click.option(
    "--config",
    "tenant_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="The tenant's configuration: the dealer-level tables of aap.toml (`aap init --tenant FILE` writes one).",
)
@domain_option
@click.option(
    "--from",
    "source",
    type=click.File("rb"),
    default=None,
    metavar="FILE.jsonl",
    help='Many tenants: one JSON object a line, {"id", "config", "domains"} as the API takes them (- for stdin).',
)
@click.option("--update", is_flag=True, help="With --from: replace an existing tenant that differs from its line.")
@click.option("--check", "dry_run", is_flag=True, help="With --from: check every line and say what would change.")
@click.option("--json", "as_json", is_flag=True, help="With --from: the outcome of every line as JSON.")
@click.pass_context
def add_command(
    ctx: click.Context,
    tenant_id: str | None,
    tenant_file: str | None,
    domains: tuple[str, ...],
    source: IO[bytes] | None,
    update: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Register tenant ID with the configuration in FILE, served at each --domain; or every
    tenant of a JSON Lines file with --from FILE.jsonl.

    ID is 1 to 48 lower-case letters, digits and '-' (it names https://PLATFORM_HOST/t/ID/ and
    the tenant's database namespace) and cannot change later. FILE passes every check
    `aap config check` makes; every tenant secret it names (X_secret = "NAME") is set
    (`aap tenants secrets set ID NAME` first) and opens with the platform's keys.

    With --from, every line is checked first and every problem of every line is listed, changing
    nothing; then each line is applied: a new id is added, a tenant already as its line says is
    unchanged, one that differs is refused unless --update. Exit 1 when anything is refused, so
    running the same file again is safe and changes nothing.
    """

    if source is not None:
        if tenant_id or tenant_file or domains:
            raise click.UsageError("--from FILE.jsonl takes no ID, --config or --domain (each line has them)")
        _add_many(ctx, source, update=update, dry_run=dry_run, as_json=as_json)
        return
    if update or dry_run or as_json:
        raise click.UsageError("--update, --check and --json go with --from FILE.jsonl")
    if not tenant_id or not tenant_file:
        raise click.UsageError("give ID and --config FILE (or --from FILE.jsonl for many tenants)")
    text = _read(tenant_file)
    with _registry(ctx) as registry:
        with _refusing(f"Tenant {tenant_id} not added"):
            record = registry.add(tenant_id, text, list(domains), by=cli_actor())
        _served(registry, record, "added")
    console.print(
        Text(
            f"Next: its inventory (aap import FEED --tenant {tenant_id}, or [[feeds]]) and its console accounts"
            f" (aap users add EMAIL --tenant {tenant_id} --role admin)."
        )
    )


def _add_many(ctx: click.Context, source: IO[bytes], *, update: bool, dry_run: bool, as_json: bool) -> None:
    """``aap tenants add --from FILE.jsonl`` (:mod:`aap.platform.bulk`)."""
    from aap.platform import bulk

    name = getattr(source, "name", "-")
    shown = "standard input" if name in ("-", "<stdin>") else str(name)
    try:
        lines = bulk.read_lines(source)
    except bulk.BulkError as exc:
        fail(f"{shown}: nothing was changed, {len(exc.problems)} problem(s)", exc.problems)
    with _registry(ctx) as registry:
        try:
            planned = bulk.plan(registry, lines, update=update)
        except bulk.BulkError as exc:
            fail(f"{shown}: nothing was changed, {len(exc.problems)} problem(s)", exc.problems)
        outcomes = planned if dry_run else bulk.apply(registry, lines, planned, by=cli_actor())
    counts = bulk.summary(outcomes)
    if as_json:
        body = {"dry_run": dry_run, **counts, "lines": [outcome.to_json() for outcome in outcomes]}
        click.echo(orjson.dumps(body).decode())
    else:
        for outcome in outcomes:
            if outcome.action == bulk.REFUSED:
                console.print(Text(f"line {outcome.line} ({outcome.tenant_id}): refused", style="red"))
                for problem in outcome.problems:
                    console.print(Text(f"  - {problem}"))
            elif outcome.action != bulk.UNCHANGED:
                console.print(Text(f"line {outcome.line} ({outcome.tenant_id}): {outcome.action}"))
        verb = "Would be (nothing was changed): " if dry_run else ""
        text = ", ".join(f"{counts[action]} {action}" for action in bulk.ACTIONS)
        console.print(Text(f"{shown}: {verb}{text}.", style="bold red" if counts[bulk.REFUSED] else "bold green"))
    if counts[bulk.REFUSED]:
        raise SystemExit(1)


@tenants.command("update")
@click.argument("tenant_id", metavar="ID")
@tenant_config_option
@click.pass_context
def update_command(ctx: click.Context, tenant_id: str, tenant_file: str) -> None:
    """Replace tenant ID's configuration with FILE (its data and domains stay).

    The new configuration is checked whole first; a refused one changes nothing.
    """

    text = _read(tenant_file)
    with _registry(ctx) as registry:
        with _refusing(f"Tenant {tenant_id} not updated"):
            record = registry.update(tenant_id, text, by=cli_actor())
        _served(registry, record, "updated")


@tenants.command("domains")
@click.argument("tenant_id", metavar="ID")
@click.option("--add", "add", multiple=True, metavar="HOST", help="Serve the tenant at HOST too (repeatable).")
@click.option("--remove", "remove", multiple=True, metavar="HOST", help="Stop serving it at HOST (repeatable).")
@platform_config_option
@click.pass_context
def domains_command(
    ctx: click.Context, tenant_id: str, add: tuple[str, ...], remove: tuple[str, ...], config: str | None
) -> None:
    """Add and remove the host names tenant ID is served at, in one change.

    A host is served by one tenant only and never is the platform's own host; the tenant stays
    reachable at https://PLATFORM_HOST/t/ID/ whatever its domains.
    """

    if not add and not remove:
        raise click.UsageError("give --add HOST and/or --remove HOST")
    with _registry(ctx, config) as registry:
        with _refusing(f"Domains of {tenant_id} not changed"):
            record = registry.set_domains(tenant_id, list(add), list(remove), by=cli_actor())
        _served(registry, record, "changed")


@tenants.command("check")
@click.argument("tenant_id", metavar="ID")
@tenant_config_option
@domain_option
@click.pass_context
def check_command(ctx: click.Context, tenant_id: str, tenant_file: str, domains: tuple[str, ...]) -> None:
    """Check FILE as tenant ID's configuration (and the --domain names) without changing anything.

    Exit 0 when `aap tenants add` (or `update`, for an existing tenant) would take it, else 1
    with every problem listed: for a deploy pipeline, before it provisions.
    """

    text = _read(tenant_file)
    with _registry(ctx) as registry:
        existing = registry.store.tenant(tenant_id)
        hosts = list(domains) or list(existing.domains if existing else ())
        with _refusing(f"{tenant_file} is refused as tenant {tenant_id}"):
            settings = registry.check(tenant_id, text, hosts)
    rooftops = sum(len(profile.rooftops) for profile in settings.all_profiles())
    console.print(Text(f"{tenant_file}: OK as tenant {tenant_id}", style="bold green"))
    for line in (
        f"agent       {settings.agent.name} ({settings.scope} scope, {len(settings.all_profiles())} seller(s),"
        f" {rooftops} rooftop(s))",
        f"public_url  {settings.public_url}",
        f"lead routes {len(settings.leads.routes)}"
        + ("" if settings.leads.routes else " (leads are stored, sent nowhere)"),
        f"feeds       {len(settings.feeds)}",
        "registry    " + ("an update of the existing tenant" if existing else "a new tenant"),
    ):
        console.print(Text(f"  {line}"))


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of the tenants (id, domains, urls, revision...).")
@platform_config_option
@click.pass_context
def list_command(ctx: click.Context, as_json: bool, config: str | None) -> None:
    """Every tenant in id order: domains, revision, last change, state (read a page at a time).

    The state is `served`, `suspended`, or `broken` with the reason its stored configuration
    failed to load in a serving worker."""
    count = 0
    with _registry(ctx, config) as registry:
        if as_json:
            click.echo("[", nl=False)
        after = ""
        while True:
            page = registry.list(after=after, limit=PAGE)
            for record in page:
                if as_json:
                    prefix = "\n" if count == 0 else ",\n"
                    click.echo(prefix + orjson.dumps(tenant_view(registry, record, config=False)).decode(), nl=False)
                else:
                    state = tenant_state(record)
                    click.echo(
                        f"{record.tenant_id}\t{','.join(record.domains) or '-'}\trevision {record.revision}"
                        f"\tupdated {stamp(record.updated_ms)}\t{state}"
                        + (f": {record.broken}" if record.broken else "")
                    )
                count += 1
            if len(page) < PAGE:
                break
            after = page[-1].tenant_id
        if as_json:
            click.echo("\n]" if count else "]")
    if count == 0 and not as_json:
        console.print(
            Text("No tenant yet: `aap init --tenant dealer.toml`, then `aap tenants add ID --config dealer.toml`.")
        )
    elif not as_json:
        console.print(Text(f"{count} tenant(s)."))


@tenants.command("show")
@click.argument("tenant_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The tenant as JSON, its configuration text included.")
@click.option("--toml", "as_toml", is_flag=True, help="Only its configuration, as stored (to edit and `update`).")
@platform_config_option
@click.pass_context
def show_command(ctx: click.Context, tenant_id: str, as_json: bool, as_toml: bool, config: str | None) -> None:
    """Tenant ID: its domains, the URLs it is served at, its revision and its configuration as stored."""

    if as_json and as_toml:
        raise click.UsageError("give --json or --toml, not both")
    with _registry(ctx, config) as registry:
        with _refusing(f"Tenant {tenant_id} not shown"):
            record = registry.get(tenant_id)
        summary = tenant_view(registry, record, config=True)
        secrets = [info.name for info in registry.secret_list(tenant_id)]  # names, never values
    if as_toml:
        click.echo(record.config, nl=not record.config.endswith("\n"))
        return
    if as_json:
        click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
        return
    lines = [
        f"Tenant {record.tenant_id}",
        f"  revision    {record.revision} (added {summary['created_at']}, changed {summary['updated_at']})",
        f"  domains     {', '.join(record.domains) or '- (none)'}",
        *(f"  url         {url}" for url in summary["urls"]),
        f"  a2a tenant  {record.a2a_tenant or '-'}",
        f"  secrets     {', '.join(secrets) or '- (none)'}",
        f"  state       {_state_line(record)}",
        *([f"  broken      {record.broken}"] if record.broken else []),
        "Configuration (as stored):",
        record.config.rstrip("\n"),
    ]
    click.echo("\n".join(lines))


def _state_line(record: TenantRecord) -> str:
    if record.suspended_ms is not None:
        line = f"suspended since {stamp(record.suspended_ms)} (503 everywhere; `aap tenants resume {record.tenant_id}`)"
        return line + ("; its configuration does not load either" if record.broken else "")
    if record.broken is not None:
        assert record.broken_ms is not None
        return (
            f"broken: revision {record.revision} did not load in a worker ({stamp(record.broken_ms)}); 503 everywhere"
        )
    return "served"


@tenants.command("suspend")
@click.argument("tenant_id", metavar="ID")
@platform_config_option
@click.pass_context
def suspend_command(ctx: click.Context, tenant_id: str, config: str | None) -> None:
    """Stop serving tenant ID without deleting anything: every surface answers 503 with
    Retry-After within seconds, its feeds and lead deliveries wait; `resume` serves it again."""
    with _registry(ctx, config) as registry, _refusing(f"Tenant {tenant_id} not suspended"):
        record = registry.suspend(tenant_id, by=cli_actor())
    assert record.suspended_ms is not None
    console.print(
        Text(
            f"Tenant {tenant_id} suspended since {stamp(record.suspended_ms)}: every worker answers 503 for it within"
            " seconds; its data is kept, its feeds and deliveries wait.",
            style="bold yellow",
        )
    )


@tenants.command("resume")
@click.argument("tenant_id", metavar="ID")
@platform_config_option
@click.pass_context
def resume_command(ctx: click.Context, tenant_id: str, config: str | None) -> None:
    """Serve suspended tenant ID again: what waited (lead deliveries, feeds) is due at once."""
    with _registry(ctx, config) as registry, _refusing(f"Tenant {tenant_id} not resumed"):
        registry.resume(tenant_id, by=cli_actor())
    console.print(Text(f"Tenant {tenant_id} is served again, by every worker within seconds.", style="bold green"))


@tenants.command("audit")
@click.argument("tenant_id", metavar="[ID]", required=False)
@click.option(
    "--limit", type=click.IntRange(1, AUDIT_MAX), default=AUDIT_DEFAULT, show_default=True, help="Entries to show."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (at, actor, action, tenant, detail).")
@platform_config_option
@click.pass_context
def audit_command(ctx: click.Context, tenant_id: str | None, limit: int, as_json: bool, config: str | None) -> None:
    """The platform's audit log, newest first: every change of a tenant (through `aap tenants`,
    the provisioning API or the platform console) and every platform administrator's visit to a
    tenant's console; with ID, that tenant's only (removed tenants' entries stay)."""
    from aap.store.console import ConsoleStore

    with _registry(ctx, config) as registry:
        entries = ConsoleStore(registry.store.db).audit_entries(subject=tenant_id, limit=limit)
    for entry in entries:
        if as_json:
            line = {
                "at": stamp(entry.at_ms),
                "actor": entry.actor,
                "action": entry.action,
                "tenant": entry.subject,
                "detail": entry.detail,
            }
            click.echo(orjson.dumps(line).decode())
        else:
            detail = " ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in entry.detail.items())
            click.echo(
                f"{stamp(entry.at_ms)}\t{entry.actor}\t{entry.action}\t{entry.subject or '-'}\t{detail}".rstrip()
            )
    if not entries and not as_json:
        console.print(Text("No audit entry" + (f" for {tenant_id}." if tenant_id else ".")))


@tenants.command("remove")
@click.argument("tenant_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (scripts).")
@platform_config_option
@click.pass_context
def remove_command(ctx: click.Context, tenant_id: str, yes: bool, config: str | None) -> None:
    """Stop serving tenant ID everywhere and DELETE its data (listings, leads, accounts, history).

    Every worker answers 404 for it within seconds. Its data cannot be recovered but from a
    backup: `aap db backup FILE --tenant ID` first.
    """
    with _registry(ctx, config) as registry, _refusing(f"Tenant {tenant_id} not removed"):
        record = registry.get(tenant_id)
        if not yes:
            console.print(
                Text(
                    f"Removing tenant {tenant_id} ({', '.join(record.domains) or 'no domain'}) stops serving its agent"
                    " and deletes its data from the database: listings, leads, console accounts, feed history. "
                    f"Back it up first if you may need it: aap db backup FILE --tenant {tenant_id}",
                    style="yellow",
                )
            )
            if not click.confirm(f"Remove tenant {tenant_id} and delete its data?", default=False, err=True):
                fail("Nothing removed.")
        registry.remove(tenant_id, by=cli_actor())
    console.print(Text(f"Tenant {tenant_id} removed; its data is deleted.", style="bold green"))


# -- secrets ---------------------------------------------------------------------------------------


@tenants.group("secrets")
def secrets_group() -> None:
    """A tenant's secrets: CRM tokens, SMTP and feed passwords, webhook and card signing keys.

    \b
    A tenant's file names a secret by name, never by value:
      auth = { type = "bearer", token_secret = "crm-token" }
    and the value is set here (from standard input, never the command line):
      printf %s "$TOKEN" | aap tenants secrets set dealer-a crm-token

    Values are sealed with the platform's keys ($AAP_SECRET_KEYS, or [platform]
    secret_keys_file) in the platform's database, never shown back, and used by every worker
    within seconds, without a restart (docs/platform.md, "Secrets").
    """


def _read_value() -> str:
    """The secret's value from standard input: typed without echo on a terminal, else read to the
    end (one trailing line break dropped, as `echo` adds one), no further than a secret may be."""
    from aap.tenant_secrets import MAX_SECRET_BYTES

    stdin = sys.stdin.buffer
    if stdin.isatty():
        value: str = click.prompt("Value (not echoed)", hide_input=True, err=True)
        return value
    data = stdin.read(MAX_SECRET_BYTES + 3)
    if len(data) > MAX_SECRET_BYTES + 2:
        fail(f"The value on standard input is larger than a secret may be ({MAX_SECRET_BYTES // 1024} KiB).")
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail("The value on standard input is not UTF-8 text.")


@secrets_group.command("set")
@click.argument("tenant_id", metavar="ID")
@click.argument("name", metavar="NAME")
@platform_config_option
@click.pass_context
def secret_set_command(ctx: click.Context, tenant_id: str, name: str, config: str | None) -> None:
    """Set tenant ID's secret NAME to the value on standard input (replacing an earlier one).

    NAME is what the tenant's file names (token_secret = "NAME"): lower-case letters, digits,
    '.', '_' and '-'. A secret may be set before its tenant is added, so that `aap tenants add`
    finds every secret its file names.
    """
    value = _read_value()
    with _registry(ctx, config) as registry:
        with _refusing(f"Secret {name} of {tenant_id} not set"):
            new = registry.set_secret(tenant_id, name, value)
        key = registry.secrets.keyring().current
    verb = "set" if new else "replaced"
    console.print(Text(f"Secret {name} of tenant {tenant_id} {verb} (sealed with key {key}).", style="bold green"))
    console.print(Text("Every worker uses it within seconds, without a restart."))


@secrets_group.command("list")
@click.argument("tenant_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="A JSON array: name, set_at, key_id (never a value).")
@platform_config_option
@click.pass_context
def secret_list_command(ctx: click.Context, tenant_id: str, as_json: bool, config: str | None) -> None:
    """The names of tenant ID's secrets, when each was set and the key that sealed it (never a value)."""
    with _registry(ctx, config) as registry, _refusing(f"Secrets of {tenant_id} not listed"):
        found = registry.secret_list(tenant_id)
    if as_json:
        click.echo(orjson.dumps([secret_view(info) for info in found], option=orjson.OPT_INDENT_2).decode())
        return
    for info in found:
        view = secret_view(info)
        click.echo(f"{view['name']}\tset {view['set_at']}\tkey {view['key_id']}")
    console.print(Text(f"{len(found)} secret(s) of tenant {tenant_id}."))


@secrets_group.command("remove")
@click.argument("tenant_id", metavar="ID")
@click.argument("name", metavar="NAME")
@platform_config_option
@click.pass_context
def secret_remove_command(ctx: click.Context, tenant_id: str, name: str, config: str | None) -> None:
    """Delete tenant ID's secret NAME (a delivery that needs it then fails until it is set again)."""
    with _registry(ctx, config) as registry, _refusing(f"Secret {name} of {tenant_id} not removed"):
        registry.remove_secret(tenant_id, name)
    console.print(Text(f"Secret {name} of tenant {tenant_id} removed.", style="bold green"))


@secrets_group.command("rotate")
@platform_config_option
@click.pass_context
def secret_rotate_command(ctx: click.Context, config: str | None) -> None:
    """Seal every tenant's secrets again with the platform's current key (the first of its keys).

    Run it once every worker has the new key first among its keys; afterwards the old key can be
    dropped (docs/platform.md, "Rotating the platform's key").
    """
    with _registry(ctx, config) as registry, _refusing("Secrets not rotated"):
        done = registry.rotate_secrets()
    console.print(
        Text(
            f"{done.resealed} secret(s) sealed again with key {done.key_id}; {done.current} already were.",
            style="bold green",
        )
    )


@secrets_group.command("new-key")
def secret_new_key_command() -> None:
    """Print a new random key for $AAP_SECRET_KEYS or [platform] secret_keys_file (32 bytes, base64url)."""
    from aap.secretbox import new_key

    click.echo(new_key())


# -- events ----------------------------------------------------------------------------------------

#: Events ``aap tenants events`` shows unless told otherwise, and the most it reads.
EVENTS_DEFAULT, EVENTS_MAX = 50, 10_000


@tenants.command("events")
@click.option("--tenant", "tenant_id", metavar="ID", default=None, help="That tenant's events only.")
@click.option("--pending", is_flag=True, help="Only events not delivered yet (pending, or being sent).")
@click.option("--dead", is_flag=True, help="Only events given up (dead).")
@click.option(
    "--limit", type=click.IntRange(1, EVENTS_MAX), default=EVENTS_DEFAULT, show_default=True, help="Events to show."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--retry", "retry_id", metavar="EVENT_ID", default=None, help="Make a dead or skipped event due again.")
@click.option("--deliver", is_flag=True, help="Send the events due now from this process, then list.")
@platform_config_option
@click.pass_context
def events_command(
    ctx: click.Context,
    tenant_id: str | None,
    pending: bool,
    dead: bool,
    limit: int,
    as_json: bool,
    retry_id: str | None,
    deliver: bool,
    config: str | None,
) -> None:
    """The platform's events, newest first, with their delivery state (docs/platform.md, "Events"):
    a tenant added, updated, removed, suspended, resumed or broken, a feed run failed, a lead
    delivery given up. Every worker of `aap serve` sends them to [platform] events_url."""
    import time

    from aap.store.platform_events import EventStore

    path, overrides = _deployment_config(ctx, config)
    deployment = load_platform_or_fail(path, overrides)
    assert deployment.platform is not None
    with open_registry_or_fail(deployment) as registry:
        store = EventStore(registry.store.db)
        if retry_id is not None:
            if not store.retry(retry_id, int(time.time() * 1000)):
                fail(f"No dead or skipped event {retry_id}.")
            console.print(Text(f"Event {retry_id} is due again.", style="bold green"))
        if deliver:
            sent = _deliver_events(store, deployment.platform)
            console.print(Text(f"{sent} event(s) handled.", style="bold green"))
        states = (("pending", "sending") if pending else ()) + (("dead",) if dead else ())
        found = store.recent(tenant=tenant_id, states=states, limit=limit)
    for event in found:
        if as_json:
            line = {
                "id": event.event_id,
                "type": event.type,
                "tenant": event.tenant_id,
                "occurred_at": stamp(event.occurred_ms),
                "state": event.state,
                "attempts": event.attempts,
                "last_error": event.last_error,
                "data": event.data,
            }
            click.echo(orjson.dumps(line).decode())
        else:
            fields = [stamp(event.occurred_ms), event.event_id, event.type, event.tenant_id, event.state]
            fields.append(str(event.attempts))
            fields.append(event.last_error or "-")
            click.echo("\t".join(fields))
    if not found and not as_json:
        console.print(Text("No event" + (f" for {tenant_id}." if tenant_id else ".")))


def _deliver_events(store: EventStore, platform: PlatformSettings) -> int:
    """One sender's passes until nothing is due, from this process (as a worker of `aap serve` does)."""
    import asyncio

    from aap.leads.transports import delivery_client
    from aap.platform.events import EventSender
    from aap.work import Work

    async def run() -> int:
        work = Work.for_database(store.db.in_process)  # this command is its own composition root
        try:
            async with delivery_client(platform.outbound) as client:
                return await EventSender(store, platform, work=work).drain(client)
        finally:
            work.close()

    return asyncio.run(run())


__all__ = ["tenants"]
