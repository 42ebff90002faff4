"""``aap config check``: load a configuration the way ``aap serve`` does, without serving.

The same loader and the same start-up check as the server (every problem at
once with its TOML path: unknown keys, types and ranges, the dealer profile
against the AAP schema, IANA timezones, phone numbers that cannot be written
in E.164, URLs the discovery documents cannot carry, and environment
variables the file names for secrets that are not set). Exit status 0 when
``aap serve`` would start with it, 1 when not: a deploy pipeline runs it first.
"""

from __future__ import annotations

import click
from rich.text import Text

from aap.cli.common import config_option, console, is_demo, load_or_fail, redacted


@click.group("config")
def group() -> None:
    """Check a deployment's configuration."""


@group.command("check")
@config_option
def check(config: str | None) -> None:
    """Report every problem of the configuration at once; exit 1 if there is any."""
    settings = load_or_fail(config, require_secrets=True)
    rooftops = sum(len(profile.rooftops) for profile in settings.all_profiles())
    where = "the built-in demo dealer group" if is_demo(settings) else settings.source_path
    console.print(Text(f"{where}: OK", style="bold green"))
    for line in (
        f"deployment  {settings.deployment_id} ({settings.scope} scope, "
        f"{len(settings.all_profiles())} seller(s), {rooftops} rooftop(s))",
        f"public_url  {settings.public_url}",
        f"database    {redacted(settings.database_url)}",
        f"lead routes {len(settings.leads.routes)}"
        + ("" if settings.leads.routes else " (leads are stored, sent nowhere)"),
    ):
        console.print(Text(f"  {line}"))


command = group
