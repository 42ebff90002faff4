"""``aap import``: check a whole feed, then load it in one transaction."""

from __future__ import annotations

import click
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from aap.cli.common import (
    claim_for_demo,
    config_option,
    console,
    database_option,
    fail,
    is_demo,
    load_or_fail,
    open_stores_or_fail,
)
from aap.inventory.feed import FeedError, feed_format, read_feed


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--replace", is_flag=True,
              help="Full replace: listings missing from the feed are removed (only the "
                   "--dealer-id dealer's, when given). Default: upsert.")
@click.option("--dealer-id", default=None, metavar="ID",
              help="Seller of every listing without a dealer_id (required per listing in "
                   "aggregate scope); with --replace, only this dealer's inventory is replaced.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default=None,
              help="Feed format. Default: csv for *.csv files, JSON Lines otherwise.")
@database_option
@config_option
def command(file: str, replace: bool, dealer_id: str | None, fmt: str | None,
            database: str | None, config: str | None) -> None:
    """Import a feed of AAP InventoryListing objects (JSON Lines or CSV).

    Every row is checked first; any problem rejects the whole feed (each problem
    is listed with its line number) and the stored inventory stays as it was.
    """
    from aap.store.inventory import InventoryImportError  # the store: loaded only when needed

    settings = load_or_fail(config, {"database": database})
    columns = (TextColumn("{task.description:<10}"), BarColumn(), TaskProgressColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        checking = bar.add_task("Checking", total=None)
        try:
            feed = read_feed(
                file, settings=settings, dealer_id=dealer_id, format=fmt or feed_format(file),
                progress=lambda done, total: bar.update(checking, completed=done, total=total),
            )
        except FeedError as exc:
            bar.stop()
            fail(f"{file} rejected: {exc.total} problem(s); nothing was imported.",
                 [str(p) for p in exc.problems], more=exc.total - len(exc.problems))
        except (OSError, UnicodeDecodeError) as exc:
            bar.stop()
            fail(f"Cannot read {file}: {exc}")
        importing = bar.add_task("Importing", total=len(feed))
        stores = open_stores_or_fail(settings)
        if is_demo(settings):
            claim_for_demo(stores, settings)  # a feed loaded as the demo's: the demo may serve it
        try:
            stats = stores.inventory.import_listings(
                feed.listings, dealer_id=dealer_id, replace=replace,
                progress=lambda done: bar.update(importing, completed=done),
            )
        except InventoryImportError as exc:
            bar.stop()
            line = feed.lines[exc.index] if 0 <= exc.index < len(feed.lines) else "?"
            fail(f"{file} rejected; nothing was imported.", [f"line {line}: {exc.reason}"])
        finally:
            stores.close()
    console.print(Text(
        f"Imported {len(feed)} listings from {file}: {stats.inserted} new, {stats.updated} "
        f"updated, {stats.removed} removed; {stats.total} available in total."
    ))
