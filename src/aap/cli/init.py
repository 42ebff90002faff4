"""``aap init``: write a commented configuration template that loads as-is.

``aap init --tenant FILE`` writes the template of one tenant of a platform deployment instead
(:mod:`aap.config.tenant_template`): the dealer-level tables, which ``aap tenants add`` takes.
"""

from __future__ import annotations

import os

import click
from rich.text import Text

from aap.cli.common import console, fail
from aap.config.loader import TEMPLATE_CONFIG, packaged_toml


@click.command("init")
@click.argument("path", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--tenant",
    "tenant_path",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Write the template of a platform tenant's configuration to FILE instead (for `aap tenants add`).",
)
@click.option("--force", is_flag=True, help="Overwrite the file if it exists.")
def command(path: str | None, tenant_path: str | None, force: bool) -> None:
    """Write a commented configuration template to PATH (default: aap.toml)."""
    if path is not None and tenant_path is not None:
        raise click.UsageError("give PATH (a deployment's file) or --tenant FILE (a tenant's), not both")
    if tenant_path is not None:
        # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
        from aap.config.tenant_template import tenant_template

        target, text = tenant_path, tenant_template()
        done = f"Wrote {target}. Edit it, then run: aap tenants add ID --config {target} --domain HOST"
    else:
        target, text = path or "aap.toml", packaged_toml(TEMPLATE_CONFIG)
        done = f"Wrote {target}. Edit it, then run: aap serve --config {target}"
    if os.path.exists(target) and not force:
        fail(f"{target} already exists; use --force to overwrite it.")
    try:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        fail(f"Cannot write {target}: {exc.strerror}")
    console.print(Text(done))
