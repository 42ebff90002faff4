"""``aap feeds run|history``: the scheduled ``[[feeds]]`` on their own, and the import history."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aap.cli.common import config_option, console, database_option, fail, load_agent_or_fail, tenant_option
from aap.util.rfc3339 import ms_to_utc_z


def _stamp(ms: int | None) -> str:
    if not ms:
        return "-"
    return ms_to_utc_z(ms)


@click.group("feeds")
def feeds() -> None:
    """Run the configured [[feeds]] and read the import history."""


@feeds.command("run")
@config_option
@database_option
@tenant_option
@click.option("--once", is_flag=True, help="Run each feed once now (ignoring its schedule), then exit.")
@click.option("--feed", "names", multiple=True, metavar="NAME", help="Only this feed (repeatable).")
def run_command(
    config: str | None, database: str | None, tenant: str | None, once: bool, names: tuple[str, ...]
) -> None:
    """Import the configured feeds on their schedules (one runner per feed across processes)."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.feeds.scheduler import FeedScheduler
    from aap.store import open_stores
    from aap.telemetry.setup import start as start_tracing
    from aap.telemetry.setup import stop as stop_tracing
    from aap.work import Work

    settings = load_agent_or_fail(config, tenant, {"database": database}, serving=True)
    known = {f.name for f in settings.feeds}
    if not known:
        fail("The configuration has no [[feeds]] tables (docs/feeds.md).", code=2)
    unknown = sorted(set(names) - known)
    if unknown:
        fail(f"Unknown feed(s): {', '.join(unknown)}; configured: {', '.join(sorted(known))}", code=2)
    stores = open_stores(settings.database_url, tenant=settings.tenant_id)
    work = Work.for_database(stores.db.in_process)  # this command is its own composition root
    scheduler = FeedScheduler(stores, settings, work=work)
    start_tracing()  # a span per fetch when OTEL_* asks (docs/deployment.md, "Traces")
    try:
        if once:
            results = asyncio.run(scheduler.run_due(due_only=False, names=set(names) or None))
            for result in results:
                run = result.run
                style = "green" if result.ok else "bold red"
                console.print(
                    Text(
                        f"{run.feed}: {run.outcome}"
                        + (f" ({run.message})" if run.message else "")
                        + f"; {run.inserted} new, {run.updated} updated, {run.unchanged} unchanged, "
                        f"{run.removed} removed, {run.skipped} skipped",
                        style=style,
                    )
                )
            held = len(set(names) or known) - len(results)
            if held:
                console.print(Text(f"{held} feed(s) were being imported by another process."))
            raise SystemExit(0 if all(r.ok for r in results) else 1)
        asyncio.run(_forever(scheduler))
    finally:
        stop_tracing()
        work.close()
        stores.close()


async def _forever(scheduler: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            # No signal handlers here (a platform without them, or not the main thread):
            # Ctrl-C still ends the loop as KeyboardInterrupt, which aap's CLI reports.
            pass
    await scheduler.run_forever(stop)


@feeds.command("history")
@config_option
@database_option
@tenant_option
@click.option("--feed", default=None, metavar="NAME", help="Only this scheduled feed's runs.")
@click.option("--run", "run_id", default=None, metavar="RUN_ID", help="One run, with its problems.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=30, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def history_command(
    config: str | None,
    database: str | None,
    tenant: str | None,
    feed: str | None,
    run_id: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Every import, newest first: when, source, format, counts, duration, outcome."""
    from aap.store import open_stores  # loaded only when a command runs

    settings = load_agent_or_fail(config, tenant, {"database": database})
    stores = open_stores(settings.database_url, tenant=settings.tenant_id)
    try:
        if run_id is not None:
            found = stores.feeds.run(run_id)
            if found is None:
                fail(f"No import run {run_id}.")
            runs = [found]
        else:
            runs = stores.feeds.runs(limit=limit, feed=feed)
    finally:
        stores.close()
    if as_json:
        click.echo(orjson.dumps([r.to_json() for r in runs], option=orjson.OPT_INDENT_2).decode())
        return
    if run_id is not None:
        run = runs[0]
        for key, value in run.to_json().items():
            if key not in ("problems", "rejected_lines", "details"):
                click.echo(f"{key}: {value}")
        for problem in run.problems:
            click.echo(f"  - {problem.get('text')}")
        if run.rejected_lines:
            click.echo("rejected lines: " + ", ".join(str(n) for n in run.rejected_lines[:200]))
        return
    table = Table(title=f"{len(runs)} import(s)")
    for column in (
        "started",
        "feed",
        "trigger",
        "source",
        "format",
        "outcome",
        "new",
        "updated",
        "unchanged",
        "removed",
        "skipped",
        "warnings",
        "seconds",
    ):
        table.add_column(column)
    for run in runs:
        table.add_row(
            *(
                Text(str(v))
                for v in (
                    _stamp(run.started_ms),
                    run.feed or "-",
                    run.trigger,
                    run.source,
                    run.format or "-",
                    run.outcome,
                    *run.changes,
                    run.warnings,
                    f"{(run.finished_ms - run.started_ms) / 1000:.1f}",
                )
            )
        )
    out = Console(width=200, highlight=False, soft_wrap=True)
    with out.capture() as captured:
        out.print(table)
    click.echo(captured.get())
