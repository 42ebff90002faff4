"""Options and error reporting shared by the ``aap`` subcommands."""

from __future__ import annotations

from typing import Any, Iterable, NoReturn

import click
from rich.console import Console
from rich.text import Text

from aap.config.loader import ConfigError, load_settings
from aap.config.model import Settings

#: Messages and progress go to stderr, so stdout stays clean for data.
console = Console(stderr=True, highlight=False, soft_wrap=True)

config_option = click.option(
    "--config", "config", type=click.Path(dir_okay=False), default=None,
    help="Deployment TOML file (see `aap init`). Default: the built-in demo dealer group.",
)
database_option = click.option(
    "--database", "database", envvar="AAP_DATABASE_URL", default=None, metavar="URL",
    help="Database URL, e.g. sqlite:///aap.db (also AAP_DATABASE_URL). "
         "Default: the configuration's `database`, else sqlite:///aap.db.",
)


def fail(title: str, problems: Iterable[str] = (), *, more: int = 0, code: int = 1) -> NoReturn:
    """Print ``title`` and one line per problem (never markup-interpreted), then exit."""
    console.print(Text(title, style="bold red"))
    for problem in problems:
        console.print(Text(f"  - {problem}"))
    if more:
        console.print(Text(f"  ... and {more} more", style="red"))
    raise SystemExit(code)


def load_or_fail(config: str | None, overrides: dict[str, Any] | None = None) -> Settings:
    """Settings from ``config`` (or the demo), or exit listing every configuration problem."""
    try:
        return load_settings(config, overrides=overrides)
    except ConfigError as exc:
        where = f" in {exc.source}" if exc.source else ""
        fail(f"Configuration rejected{where}: {len(exc.problems)} problem(s)", exc.problems)
