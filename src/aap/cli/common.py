"""Options, configuration discovery and error reporting shared by the ``aap`` subcommands.

Every command that reads a deployment finds its configuration the same way
(:func:`find_config`): ``--config FILE``, else the file ``AAP_CONFIG`` names,
else ``./aap.toml``, else the built-in demo dealer group, and says on stderr
which one it uses. The demo keeps its data in its own database file
(``aap-demo.db``) and marks the database it loads (:func:`claim_for_demo`);
a real configuration refuses a database so marked (:func:`open_stores_or_fail`),
and the demo refuses to serve inventory it did not load, so demo listings and
rooftops never mix with a real deployment's (docs/configuration.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import click
from rich.console import Console
from rich.text import Text

from aap.config.loader import ConfigError, load_settings, read_toml
from aap.config.model import Settings

if TYPE_CHECKING:
    from aap.store import Stores
    from aap.store.db import Database
    from aap.tenants import TenantRegistry

#: Messages and progress go to stderr, so stdout stays clean for data.
console = Console(stderr=True, highlight=False, soft_wrap=True)

CONFIG_ENV = "AAP_CONFIG"
DEFAULT_CONFIG = "aap.toml"
#: The state-store mark a database seeded with the demo dealer group carries.
DEMO_MARK = "demo-dealer"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")

config_option = click.option(
    "--config",
    "config",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Deployment TOML file (see `aap init`). Default: ${CONFIG_ENV}, else ./{DEFAULT_CONFIG} "
    "if it exists, else the built-in demo dealer group.",
)
database_option = click.option(
    "--database",
    "database",
    envvar="AAP_DATABASE_URL",
    default=None,
    metavar="URL",
    help="Database URL, e.g. sqlite:///aap.db (also AAP_DATABASE_URL). Default: the configuration's `database`.",
)

tenant_option = click.option(
    "--tenant",
    "tenant",
    metavar="ID",
    default=None,
    help="On a platform deployment (a [platform] table): the tenant whose agent this acts on (aap tenants list).",
)


def log_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--log-level`` and ``--log-format`` (also ``AAP_LOG_LEVEL`` / ``AAP_LOG_FORMAT``).

    The choices are :mod:`aap.server.logconfig`'s, repeated here because
    importing ``aap.server`` loads the whole web stack.
    """
    func = click.option(
        "--log-format",
        type=click.Choice(LOG_FORMATS),
        default="json",
        show_default=True,
        envvar="AAP_LOG_FORMAT",
        help="Log lines as JSON objects (for a collector) or key=value text (also AAP_LOG_FORMAT).",
    )(func)
    func = click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS),
        default="info",
        show_default=True,
        envvar="AAP_LOG_LEVEL",
        help="Least severe level logged (also AAP_LOG_LEVEL).",
    )(func)
    return func


@dataclass(frozen=True)
class ConfigChoice:
    """Which configuration a command uses, and why."""

    path: str | None  # None: the built-in demo dealer group
    reason: str

    def describe(self) -> str:
        if self.path is None:
            return (
                f"Configuration: the built-in demo dealer group (no --config, no {CONFIG_ENV}, no ./{DEFAULT_CONFIG})"
            )
        return f"Configuration: {self.path} ({self.reason})"


def find_config(option: str | None, environ: Mapping[str, str] | None = None, cwd: str | None = None) -> ConfigChoice:
    """``--config``, else ``$AAP_CONFIG``, else ``./aap.toml`` when it exists, else the demo.

    A file named by the option or the variable is used even if it does not
    exist (loading then says so): an explicit choice never falls back to demo data.
    """
    env = os.environ if environ is None else environ
    if option:
        return ConfigChoice(option, "--config")
    if env.get(CONFIG_ENV):
        return ConfigChoice(env[CONFIG_ENV], CONFIG_ENV)
    local = os.path.join(cwd or os.getcwd(), DEFAULT_CONFIG)
    if os.path.isfile(local):
        return ConfigChoice(DEFAULT_CONFIG if cwd is None else local, "found in the current directory")
    return ConfigChoice(None, "demo")


def fail(title: str, problems: Iterable[str] = (), *, more: int = 0, code: int = 1) -> NoReturn:
    """Print ``title`` and one line per problem (never markup-interpreted), then exit."""
    console.print(Text(title, style="bold red"))
    for problem in problems:
        console.print(Text(f"  - {problem}"))
    if more:
        console.print(Text(f"  ... and {more} more", style="red"))
    raise SystemExit(code)


def fail_config(exc: ConfigError) -> NoReturn:
    where = f" in {exc.source}" if exc.source else ""
    fail(f"Configuration rejected{where}: {len(exc.problems)} problem(s)", exc.problems)


def load_or_fail(
    config: str | None, overrides: dict[str, Any] | None = None, *, announce: bool = True, require_secrets: bool = False
) -> Settings:
    """The settings :func:`find_config` picks, or exit listing every configuration problem.

    ``announce`` prints which configuration is used (on stderr);
    ``require_secrets`` is the start-up check of the commands that deliver
    leads (``aap serve``, ``aap deliver``, ``aap config check``): every secret
    variable the file names must be set.
    """
    choice = find_config(config)
    if announce:
        console.print(Text(choice.describe(), style="dim"))
    try:
        settings = load_settings(choice.path, overrides=overrides, require_secrets=require_secrets)
    except ConfigError as exc:
        fail_config(exc)
    if require_secrets and settings.platform is not None:
        # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
        from aap.config.environment import keyring_problems

        problems = keyring_problems(settings, os.environ)  # the keys sealing tenants' secrets
        if problems:
            fail_config(ConfigError(problems, settings.source_path))
    return settings


def reload_or_fail(settings: Settings, overrides: dict[str, Any]) -> Settings:
    """The same configuration as ``settings`` (file or demo) loaded again with ``overrides``."""
    try:
        return load_settings(settings.source_path, overrides=overrides)
    except ConfigError as exc:
        fail_config(exc)


def is_demo(settings: Settings) -> bool:
    return settings.source_path is None


def open_stores_or_fail(settings: Settings) -> Stores:
    """The deployment's stores; a real configuration never opens a database the demo seeded."""
    from aap.store import open_stores  # the store: loaded only when a command needs it

    try:
        stores = open_stores(
            settings.database_url,
            settings.database_read_urls,
            max_replica_lag_ms=settings.max_replica_lag_ms,
            tenant=settings.tenant_id,
        )
    except Exception as exc:  # noqa: BLE001 - a driver error: one line, not a traceback
        fail(f"Cannot open the database {redacted(settings.database_url)}", [f"{type(exc).__name__}: {exc}"])
    if not is_demo(settings) and stores.state.mark(DEMO_MARK) is not None:
        stores.close()
        fail(
            f"The database {redacted(settings.database_url)} holds the demo dealer group "
            f"(seeded by aap serve without a configuration); {settings.source_path} never "
            "serves demo data.",
            ["set `database` in the configuration (or --database) to another database, or delete this one"],
        )
    return stores


def claim_for_demo(stores: Stores, settings: Settings) -> bool:
    """Mark the database as the demo's if it is, or may become, the demo's (no inventory yet).

    False: it holds inventory the demo did not load (someone's real data, reached with
    ``--database``), which the demo must never serve as its own.
    """
    if stores.state.mark(DEMO_MARK) is not None:
        return True
    if stores.inventory.count():
        return False
    stores.state.set_mark(DEMO_MARK, settings.deployment_id)
    return True


def redacted(url: str) -> str:
    """The URL without its password (it may be printed to a deploy log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# -- the agent a command acts on: the deployment's own, or one tenant of a platform ------------


def load_agent_or_fail(
    config: str | None,
    tenant: str | None,
    overrides: dict[str, Any] | None = None,
    *,
    announce: bool = True,
    require_secrets: bool = False,
    platform_accounts: bool = False,
    serving: bool = False,
) -> Settings:
    """The settings of the agent a per-agent command (``aap import``, ``leads``, ``deliver``,
    ``feeds``, ``users``) acts on, or exit saying why there is none.

    Without ``tenant``: the deployment's own agent, as :func:`load_or_fail` loads it. A platform
    deployment has no agent of its own, so there the command is refused with a pointer to
    ``--tenant`` (``platform_accounts``: the platform's own namespace is what the command
    means, as for ``aap users`` of platform administrators). With ``tenant``: that tenant of
    the platform deployment, its settings as it is served at its primary public URL, its rows
    those of its ``tenant_id`` in the platform's database (docs/platform.md, "Isolation"), so
    that the command then opens its stores exactly as for a deployment that is one agent.
    ``serving``: the command does the tenant's background work (``aap deliver``, ``aap feeds
    run``), which waits while the tenant is suspended (docs/platform.md, "Operating tenants").
    """
    deployment = load_or_fail(config, overrides, announce=announce, require_secrets=require_secrets and not tenant)
    if tenant is None:
        if deployment.platform is not None and not platform_accounts:
            fail(
                f"{deployment.source_path} is a platform deployment: its agents are its tenants.",
                ["name the tenant this command acts on with --tenant ID (`aap tenants list` shows them)"],
            )
        return deployment
    if deployment.platform is None:
        where = deployment.source_path or "the built-in demo dealer group"
        fail(
            f"--tenant {tenant}: {where} is not a platform deployment (it has no [platform] table).",
            ["--tenant names a tenant of a deployment that hosts many agents (docs/platform.md)"],
        )
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.config.environment import environment_problems

    with open_registry_or_fail(deployment) as registry:
        require_moved(registry.store.db)
        record = registry.store.tenant(tenant)
        if record is None:
            fail(f"No tenant {tenant!r} on this platform (`aap tenants list` shows them).")
        if serving and record.suspended_ms is not None:
            fail(f"Tenant {tenant} is suspended: its deliveries and feeds wait (`aap tenants resume {tenant}`).")
        url = registry.public_url(record)
        try:
            settings = registry.settings_for(record, url)
        except ConfigError as exc:
            fail_config(exc)
    if announce:
        console.print(Text(f"Tenant: {tenant} ({url})", style="dim"))
    if require_secrets:
        problems = environment_problems(settings, os.environ)
        if problems:
            fail_config(ConfigError(problems, settings.source_path))
    return settings


def load_platform_or_fail(config: str | None, overrides: dict[str, Any] | None = None) -> Settings:
    """The settings of a platform deployment (``aap tenants``), or exit: this one has no ``[platform]``
    (said before anything else about the file, which may well be a tenant's given in its place)."""
    choice = find_config(config)
    console.print(Text(choice.describe(), style="dim"))
    try:
        doc = read_toml(choice.path) if choice.path is not None else {}
        if "platform" in doc:
            return load_settings(choice.path, overrides=overrides)
    except ConfigError as exc:
        fail_config(exc)
    where = choice.path or "the built-in demo dealer group"
    problems = [
        "tenants are the agents of a deployment that hosts many (docs/platform.md); its file holds "
        '[server], [database] and [platform] with host = "agents.platform.example"',
    ]
    if "dealer" in doc and "id" not in doc:
        problems.append(
            "it looks like a tenant's configuration: name the platform's file before the command "
            "(aap tenants --config PLATFORM.toml add ID --config TENANT.toml), or with $AAP_CONFIG"
        )
    fail(f"{where} is not a platform deployment: it has no [platform] table.", problems)


def require_moved(platform: Database) -> None:
    """Exit when tenants of a platform made before the shared tables still wait to be moved into
    them (their rows would be missing): ``aap db upgrade`` moves them."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store.upgrade import pending_tenants

    pending = pending_tenants(platform)
    if pending:
        fail(
            f"{len(pending)} tenant(s) of this platform are still in the layout of an earlier release "
            f"({', '.join(pending[:5])}{', …' if len(pending) > 5 else ''}).",
            ['run `aap db upgrade` to move them into the shared tables (docs/platform.md, "Upgrading")'],
        )


@contextmanager
def open_registry_or_fail(deployment: Settings) -> Iterator[TenantRegistry]:
    """The tenant registry of a platform deployment, on its own database (migrated), closed after."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.store import open_platform_database
    from aap.tenants import TenantRegistry

    try:
        db = open_platform_database(deployment.database_url)
    except Exception as exc:  # noqa: BLE001 - a driver error: one line, not a traceback
        fail(f"Cannot open the database {redacted(deployment.database_url)}", [f"{type(exc).__name__}: {exc}"])
    try:
        yield TenantRegistry(deployment, db)
    finally:
        db.close()
