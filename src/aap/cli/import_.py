"""``aap import``: a feed in any format, from a file or a URL, checked whole, imported safely.

Exit status: 0 imported (or unchanged, or a dry run that would import),
1 rejected or refused (nothing was imported), 2 a usage error. ``--json``
prints the run as recorded in the history (for cron and CI).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import click
import orjson
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from aap.cli.common import (
    claim_for_demo,
    config_option,
    console,
    database_option,
    is_demo,
    load_agent_or_fail,
    open_stores_or_fail,
    tenant_option,
)

FORMAT_CHOICES = ("aap", "google-vehicle", "meta-vehicle", "dealer-csv", "jsonl", "csv")


def _is_url(source: str) -> bool:
    return "://" in source


@click.command("import")
@click.argument("source")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMAT_CHOICES),
    default=None,
    help="Feed format (docs/feeds.md). Default: detected from the header or document "
    "(jsonl and csv are the aap format).",
)
@click.option(
    "--mapping",
    type=click.Path(dir_okay=False),
    default=None,
    help="A mapping file (TOML): source column -> AAP field, transforms, defaults.",
)
@click.option(
    "--replace",
    is_flag=True,
    help="Full replace: listings missing from the feed are removed (only the "
    "--dealer-id dealer's, when given). Default: upsert.",
)
@click.option(
    "--dealer-id",
    default=None,
    metavar="ID",
    help="Seller of every listing without a dealer_id (required per listing in "
    "aggregate scope); with --replace, only this dealer's inventory is replaced.",
)
@click.option(
    "--skip-invalid", is_flag=True, help="Import the valid rows; write the rejected ones to the rejects file."
)
@click.option(
    "--rejects",
    "rejects_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write rejected rows (CSV). Default with --skip-invalid: "
    "<feed name>.rejects.csv in the current directory.",
)
@click.option("--dry-run", is_flag=True, help="Check and count everything; write nothing.")
@click.option(
    "--allow-shrink", is_flag=True, help="Let --replace remove more than --max-removed-share of the inventory."
)
@click.option(
    "--max-removed-share",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="The largest share of the inventory a --replace may remove.",
)
@click.option("--strict", is_flag=True, help="A wrong VIN check digit is an error, not a warning.")
@click.option(
    "--allow-field-loss",
    is_flag=True,
    help="Import although many published listings would lose a price, mileage, photos, condition or "
    "stock number, or the format feeds none of the required fields (docs/feeds.md, Safety).",
)
@click.option(
    "--max-field-loss-share",
    type=click.FloatRange(0, 1),
    default=0.2,
    show_default=True,
    help="The content guard: the largest share of updated listings that may lose one of those fields.",
)
@click.option("--rooftop", default=None, metavar="NAME", help="The rooftop of rows that name none.")
@click.option(
    "--timeout",
    type=click.FloatRange(1, 86400),
    default=300.0,
    show_default=True,
    help="A URL: the whole fetch must end within this many seconds.",
)
@click.option(
    "--allow-private-network",
    is_flag=True,
    help="A URL: let it (and its redirects) reach loopback and private addresses.",
)
@click.option("--encoding", default=None, help="The file's encoding (default: detected).")
@click.option("--delimiter", default=None, help="The cell delimiter (default: sniffed).")
@click.option("--force", is_flag=True, help="Import a URL even if it has not changed since the last import.")
@click.option("--username-env", default=None, metavar="VAR", help="https basic auth: user name variable.")
@click.option("--password-env", default=None, metavar="VAR", help="https basic auth or sftp: password variable.")
@click.option("--token-env", default=None, metavar="VAR", help="https: bearer token variable.")
@click.option("--key-file", default=None, help="sftp: private key file.")
@click.option("--known-hosts", default=None, help="sftp: known_hosts file (default ~/.ssh/known_hosts).")
@click.option("--ca-file", default=None, help="https: a private certificate authority (PEM).")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@tenant_option
@database_option
@config_option
def command(
    source: str,
    fmt: str | None,
    mapping: str | None,
    replace: bool,
    dealer_id: str | None,
    skip_invalid: bool,
    rejects_path: str | None,
    dry_run: bool,
    allow_shrink: bool,
    max_removed_share: float,
    strict: bool,
    allow_field_loss: bool,
    max_field_loss_share: float,
    rooftop: str | None,
    timeout: float,
    allow_private_network: bool,
    encoding: str | None,
    delimiter: str | None,
    force: bool,
    username_env: str | None,
    password_env: str | None,
    token_env: str | None,
    key_file: str | None,
    known_hosts: str | None,
    ca_file: str | None,
    as_json: bool,
    tenant: str | None,
    database: str | None,
    config: str | None,
) -> None:
    """Import an inventory feed from a file or an https:// or sftp:// URL.

    Formats: aap (JSON Lines or CSV of InventoryListing objects), google-vehicle,
    meta-vehicle, dealer-csv, or any file with a --mapping. Every row is checked
    first; any problem rejects the whole feed (unless --skip-invalid) and the
    stored inventory stays as it was.
    """
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.config.feeds import source_problem
    from aap.feeds.fetch import Credentials, FetchRules, Validators, display_source
    from aap.feeds.job import ImportRequest
    from aap.inventory.formats import MappingError, read_mapping
    from aap.store.inventory import ContentGuard

    if _is_url(source):
        problem = source_problem(source)
        if problem:
            raise click.BadParameter(f"{display_source(source)} {problem}", param_hint="SOURCE")
    elif not os.path.isfile(source):
        raise click.BadParameter(f"{source}: no such file", param_hint="SOURCE")
    if delimiter is not None:
        delimiter = "\t" if delimiter in ("\\t", "tab") else delimiter
        if len(delimiter) != 1:
            raise click.BadParameter("must be one character", param_hint="--delimiter")
    if mapping and fmt:
        raise click.BadParameter("give either --format or --mapping", param_hint="--mapping")
    feed_format = None
    if mapping:
        try:
            feed_format = read_mapping(mapping)
        except MappingError as exc:
            _usage(f"Mapping file {mapping} rejected: {len(exc.problems)} problem(s)", exc.problems)
    settings = load_agent_or_fail(config, tenant, {"database": database})
    request = ImportRequest(
        source=source,
        trigger="cli",
        format="aap" if fmt in ("jsonl", "csv") else fmt,
        mapping=feed_format,
        encoding=encoding,
        delimiter=delimiter,
        dealer_id=dealer_id,
        replace=replace,
        partial=skip_invalid,
        strict=strict,
        dry_run=dry_run,
        max_removed_share=None if allow_shrink else max_removed_share,
        credentials=Credentials(username_env, password_env, token_env, key_file, known_hosts, ca_file),
        rules=FetchRules(timeout, private_network=allow_private_network),
        rooftop=rooftop,
        allow_field_loss=allow_field_loss,
        guard=ContentGuard(max_share=max_field_loss_share),
    )
    if rooftop is not None:
        names = {r["name"] for p in settings.all_profiles() for r in p.rooftops}
        if rooftop not in names:
            raise click.BadParameter(f"{rooftop!r} is not a configured rooftop", param_hint="--rooftop")
    stores = open_stores_or_fail(settings)
    if is_demo(settings) and not dry_run:
        claim_for_demo(stores, settings)  # a feed loaded as the demo's: the demo may serve it
    try:
        key = "url:" + display_source(source) if _is_url(source) else None
        token = None
        previous = Validators()
        if key is not None:
            token = stores.feeds.claim(key, _now_ms(), 3_600_000, due_only=False)
            if token is None:
                _usage(f"Another import of {display_source(source)} is running; try again later.", code=1)
            state = stores.feeds.state(key)
            if state is not None and not force:
                previous = Validators(state.etag, state.last_modified, state.fingerprint)
        result = None
        try:
            result = _run(stores, settings, request, previous, as_json)
        finally:
            if key is not None and token is not None:
                success = bool(result and result.ok and not dry_run)
                validators = result.fetched.validators if success and result and result.fetched else previous
                stores.feeds.release(
                    key,
                    token,
                    now_ms=_now_ms(),
                    next_run_ms=0,
                    outcome=result.run.outcome if result else "failed",
                    success=success,
                    failures=0,
                    etag=validators.etag,
                    last_modified=validators.last_modified,
                    fingerprint=validators.fingerprint,
                )
    finally:
        stores.close()
    written = None
    report = result.report
    if report is not None and report.rejected and (rejects_path or (skip_invalid and not dry_run)):
        # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
        from aap.inventory.formats.rejects import write_rejects

        written = rejects_path or f"{os.path.basename(report.member or source.rsplit('/', 1)[-1])}.rejects.csv"
        write_rejects(written, report.rejected)
    if as_json:
        summary = result.run.to_json()
        summary["rejects_file"] = written
        click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    else:
        _print(result, source, written, rooftop)
    raise SystemExit(0 if result.ok else 1)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _usage(title: str, problems: list[str] | tuple[str, ...] = (), code: int = 2) -> None:
    console.print(Text(title, style="bold red"))
    for problem in problems:
        console.print(Text(f"  - {problem}"))
    raise SystemExit(code)


def _run(stores: Any, settings: Any, request: Any, previous: Any, quiet: bool) -> Any:
    """Run the import, with a progress line on stderr unless ``quiet``."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.work import Work

    work = Work.for_database(stores.db.in_process)  # this command is its own composition root
    try:
        return _import(stores, settings, request, previous, quiet, work)
    finally:
        work.close()


def _import(stores: Any, settings: Any, request: Any, previous: Any, quiet: bool, work: Any) -> Any:
    from aap.feeds.job import run_import

    if quiet:
        return asyncio.run(run_import(stores, settings, request, work=work, previous=previous))
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("Fetching", total=None)

        def progress(stage: str, count: int) -> None:
            bar.update(task, description=f"{stage.capitalize()}: {count:,} rows")

        return asyncio.run(run_import(stores, settings, request, work=work, previous=previous, progress=progress))


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _print(result: Any, source: str, rejects: str | None, rooftop: str | None = None) -> None:
    run = result.run
    report = result.report
    if report is not None:
        how = (
            "detected from the " + {"xml": "document", "jsonl": "content"}.get(report.kind, "header")
            if report.detected
            else "as given"
        )
        details = [f"format {report.format} ({how})", f"encoding {report.encoding}"]
        if report.delimiter:
            details.append("delimiter " + ("tab" if report.delimiter == "\t" else repr(report.delimiter)))
        if report.archive:
            details.append(f"{report.archive} archive" + (f" ({report.member})" if report.member else ""))
        console.print(Text(f"Read {run.source}: {', '.join(details)}; {_count(report.rows, 'row')}."))
        for name, count in sorted(report.defaults.items()):
            value = {"status": "available", "updated_at": report.file_time, "rooftop": rooftop or ""}.get(name, "")
            note = " (the feed's own time)" if name == "updated_at" else ""
            console.print(Text(f"Default {name} = {value or 'from the mapping'}{note} for {_count(count, 'row')}."))
        for column, fate in report.columns.items():
            console.print(Text(f'Column "{column}": {fate}.'))
        if report.warning_total:
            console.print(Text(f"{_count(report.warning_total, 'warning')}:", style="yellow"))
            for warning in report.warnings[:20]:
                console.print(Text(f"  - {warning}"))
            if report.warning_total > 20:
                console.print(Text(f"  ... and {report.warning_total - 20} more"))
    if run.outcome == "unchanged":
        console.print(Text(f"{run.source} has not changed since the last import; nothing to do."))
        return
    if not result.ok:
        console.print(Text(f"{run.source} {run.outcome}: {run.message}", style="bold red"))
        problems = result.file_problems or (report.problems if report else [])
        total = report.problem_total if report and not result.file_problems else len(problems)
        for problem in problems:
            console.print(Text(f"  - {problem}"))
        if total > len(problems):
            console.print(Text(f"  ... and {total - len(problems)} more", style="red"))
        if rejects:
            console.print(Text(f"Rejected rows written to {rejects}."))
        return
    stats = result.stats
    verb = "Would import" if run.dry_run else "Imported"
    skipped = (
        f"; {_count(run.skipped, 'row')} skipped" + (f" (see {rejects})" if rejects else "") if run.skipped else ""
    )
    console.print(
        Text(
            f"{verb} {_count(report.accepted, 'listing')} from {run.source}: {stats.inserted} new, "
            f"{stats.updated} updated, {stats.unchanged} unchanged, {stats.removed} removed{skipped}; "
            f"{stats.total} available in total." + (" Dry run: nothing was written." if run.dry_run else "")
        )
    )
    if stats.matched:
        console.print(
            Text(f"{_count(stats.matched, 'listing')} matched a published car by VIN or stock number (its id kept).")
        )
    if stats.kept_fields:
        kept = ", ".join(f"{name} ({count:,})" for name, count in sorted(stats.kept_fields.items()))
        console.print(Text(f"Kept as published (this feed has no column for them): {kept}."))
