"""``aap demo-inventory``: write the deterministic demo feed (JSON Lines or CSV)."""

from __future__ import annotations

import sys

import click
import orjson
from rich.text import Text

from aap.cli.common import config_option, console, fail, load_agent_or_fail, tenant_option
from aap.inventory.demo import generate_listings
from aap.inventory.formats.aap import write_feed


@click.command("demo-inventory")
@click.option("--count", "-n", type=click.IntRange(min=0), default=2000, show_default=True, help="Number of listings.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Random seed; the same count and seed give the same feed."
)
@click.option(
    "--output",
    "-o",
    "output",
    required=True,
    metavar="FILE",
    help="Output file: JSON Lines, or CSV when FILE ends in .csv; '-' for stdout (JSON Lines).",
)
@config_option
@tenant_option
def command(count: int, seed: int, output: str, config: str | None, tenant: str | None) -> None:
    """Generate a realistic demo inventory feed for the configured rooftops (on a platform,
    those of the tenant --tenant names: aap import FILE --tenant ID then loads it)."""
    settings = load_agent_or_fail(config, tenant)
    listings = generate_listings(count, seed, settings=settings)
    if output == "-":
        out = sys.stdout.buffer
        for listing in listings:
            out.write(orjson.dumps(listing) + b"\n")
        out.flush()
        return
    try:
        written = write_feed(output, listings)
    except OSError as exc:
        fail(f"Cannot write {output}: {exc.strerror}")
    console.print(Text(f"Wrote {written} listings to {output}."))
