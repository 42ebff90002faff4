"""``aap init``: write a commented configuration template that loads as-is."""

from __future__ import annotations

import os

import click
from rich.text import Text

from aap.cli.common import console, fail
from aap.config.loader import TEMPLATE_CONFIG, packaged_toml


@click.command("init")
@click.argument("path", type=click.Path(dir_okay=False), default="aap.toml")
@click.option("--force", is_flag=True, help="Overwrite PATH if it exists.")
def command(path: str, force: bool) -> None:
    """Write a commented configuration template to PATH (default: aap.toml)."""
    if os.path.exists(path) and not force:
        fail(f"{path} already exists; use --force to overwrite it.")
    text = packaged_toml(TEMPLATE_CONFIG)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        fail(f"Cannot write {path}: {exc.strerror}")
    console.print(Text(f"Wrote {path}. Edit it, then run: aap serve --config {path}"))
