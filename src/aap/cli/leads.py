"""``aap leads list|show|retry|status|assign|follow-up|note|history|erase|purge`` and ``aap deliver``.

Operating the lead outbox, and working the pipeline from a terminal with the
console's own rules (:mod:`aap.leads.pipeline`): a status from the documented
set, an owner who is a console account of the lead's rooftop, a follow-up
date, notes; each change is in the console's audit log, made by ``--as`` (a
console account) or ``cli:<login name>``.

``aap leads show`` and ``aap leads history`` are the only commands that print
a customer's name, contact data, message, consent text or a note (the staff
console shows them in a browser); ``list`` shows ids, states and routing only.
"""

from __future__ import annotations

import asyncio
import getpass
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aap.cli.common import (
    config_option,
    console,
    database_option,
    fail,
    load_agent_or_fail,
    log_options,
    open_stores_or_fail,
    tenant_option,
)
from aap.store.lead_pipeline import SORTS, STAGES, PipelineFilter  # the documented statuses and orders: one home
from aap.util.rfc3339 import ms_to_utc_z

if TYPE_CHECKING:
    from aap.store import Stores

DELIVERY_STATES = ("pending", "delivering", "delivered", "dead", "expired_consent")


def _stores(config: str | None, database: str | None, tenant: str | None) -> Stores:
    """The stores of the agent acted on (--database wins over the configuration's; --tenant: that
    tenant's namespace of the platform's database)."""
    return open_stores_or_fail(load_agent_or_fail(config, tenant, {"database": database} if database else None))


def _stamp(ms: int | None) -> str:
    if ms is None:
        return "-"
    return ms_to_utc_z(ms)


def _emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


@click.group("leads")
def leads() -> None:
    """List, inspect and re-send stored leads."""


@leads.command("list")
@config_option
@database_option
@tenant_option
@click.option("--status", type=click.Choice(["received", "rejected"]), default=None, help="Lead status.")
@click.option(
    "--delivery",
    type=click.Choice(DELIVERY_STATES),
    default=None,
    help="Only leads with a delivery in this state (e.g. dead).",
)
@click.option(
    "--stage",
    type=click.Choice((*STAGES, "open", "closed")),
    default=None,
    help="Pipeline status (open: not sold or lost).",
)
@click.option("--owner", default=None, help="Owned by this console account ('none': by nobody).")
@click.option("--follow-up", "follow_up", type=click.Choice(["due", "upcoming", "none"]), default=None)
@click.option(
    "--sort",
    type=click.Choice(list(SORTS)),
    default="newest",
    show_default=True,
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_command(
    config: str | None,
    database: str | None,
    tenant: str | None,
    status: str | None,
    delivery: str | None,
    stage: str | None,
    owner: str | None,
    follow_up: str | None,
    sort: str,
    limit: int,
    as_json: bool,
) -> None:
    """Leads in pipeline order or newest first: ids, routing, states and owners (no customer data)."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.config.localtime import dealer_zone, local_today
    from aap.store.lead_inbox import InboxFilter, LeadScope

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None)
    stores = open_stores_or_fail(settings)
    try:
        who = None if owner is None else ("" if owner == "none" else owner.strip().casefold())
        today = local_today(dealer_zone(settings.dealer)).isoformat()
        page, _ = stores.lead_pipeline.page(
            LeadScope(),
            InboxFilter(status=status, delivery=delivery),
            PipelineFilter(stage, who, follow_up, today),
            sort=sort,
            limit=limit,
        )
        rows = stores.lead_pipeline.summaries([r.lead.lead_id for r in page])
    finally:
        stores.close()
    if as_json:
        _emit_json(rows)
        return
    click.echo(_render(lead_table(rows), _width()))


def lead_table(rows: list[dict[str, Any]]) -> Table:
    """The table of ``aap leads list``: every lead id whole, other values folded, never cut."""
    table = Table(title=f"{len(rows)} lead(s)", show_lines=False)
    for column in (
        "lead",
        "received",
        "dealer",
        "rooftop",
        "status",
        "stage",
        "owner",
        "follow-up",
        "appointment",
        "vehicle",
        "source agent",
        "deliveries",
    ):
        if column == "lead":  # whole, on one line, whatever the width: it is what `leads show` takes
            longest = max((len(str(row["lead_id"])) for row in rows), default=4)
            table.add_column(column, no_wrap=True, min_width=longest, overflow="ignore")
        else:  # folded onto more lines where the width is short, never cut with "…"
            table.add_column(column, overflow="fold")
    for row in rows:
        deliveries = ", ".join(f"{state} {count}" for state, count in sorted(row["deliveries"].items())) or "none"
        table.add_row(
            *(
                Text(str(v))
                for v in (
                    row["lead_id"],
                    row["received_at"],
                    row["dealer_id"],
                    row["rooftop"] or "-",
                    row["status"],
                    row["stage"],
                    row["owner"] or "-",
                    row["follow_up"] or "-",
                    row["appointment_status"] or "-",
                    row["vehicle_link"],
                    row["source_agent"],
                    deliveries,
                )
            )
        )
    return table


#: The width a table is laid out in when the output is not a terminal: one line per row, as
#: wide as its values (a pipe to grep, awk or a file gets every value whole).
UNBOUNDED_WIDTH = 10_000


def _width() -> int:
    """The terminal's width, or :data:`UNBOUNDED_WIDTH` when the output is not a terminal."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((200, 24)).columns
    return UNBOUNDED_WIDTH


def _render(table: Table, width: int = 200) -> str:
    capture = Console(width=width, highlight=False, force_terminal=False, color_system=None)
    with capture.capture() as out:
        capture.print(table)
    return out.get().rstrip("\n")


@leads.command("show")
@click.argument("lead_id")
@config_option
@database_option
@tenant_option
@click.option("--json", "as_json", is_flag=True, help="The whole stored record as JSON.")
def show_command(lead_id: str, config: str | None, database: str | None, tenant: str | None, as_json: bool) -> None:
    """One lead in full: customer, consent record, request, result and deliveries (contains PII)."""
    stores = _stores(config, database, tenant)
    try:
        lead = stores.leads.get_lead(lead_id)
    finally:
        stores.close()
    if lead is None:
        fail(f"No lead {lead_id}.")
    if as_json:
        _emit_json(lead)
        return
    request = lead["request"]
    customer = request.get("customer", {})
    consent = lead["consent"] or {}
    lines = [
        f"Lead {lead['lead_id']}  ({lead['status']})",
        f"  received      {lead['received_at']}  via {lead['binding']}, caller {lead['caller_id']}",
        f"  dealer        {lead['dealer_id']}  rooftop {lead['rooftop'] or '-'}",
        f"  source agent  {lead['source_agent']}  idempotency key {lead['idempotency_key']}",
        f"  vehicle       {lead['vehicle_link']}" + (f" ({lead['vehicle_id']})" if lead["vehicle_id"] else ""),
        "Customer",
        f"  name          {customer.get('first_name', '')} {customer.get('last_name', '')}",
        f"  email         {customer.get('email', '-')}",
        f"  phone         {customer.get('phone', '-')}",
        f"  preferred     {customer.get('preferred_contact', '-')}",
        "Consent",
        f"  granted at    {consent.get('granted_at')}",
        f"  expires at    {consent.get('expires_at') or '-'}",
        f"  channels      {', '.join(consent.get('allowed_channels') or [])}",
        f"  scope         {', '.join(consent.get('scope') or [])}",
        f"  text          {consent.get('consent_text')}",
    ]
    if request.get("message"):
        lines += ["Message", f"  {request['message']}"]
    if lead["appointment"]:
        appt = lead["appointment"]
        lines += [
            "Appointment",
            f"  {appt.get('appointment_id')}  {appt.get('appointment_type')}  {appt.get('status')}"
            f"  rooftop {appt.get('rooftop') or '-'}",
            f"  requested     {appt.get('requested_at') or '-'}",
            f"  confirmed at  {appt.get('confirmed_at') or '-'}",
            f"  proposed      {', '.join(appt.get('proposed_times') or []) or '-'}",
        ]
    lines.append("Deliveries")
    if not lead["deliveries"]:
        lines.append("  none")
    for d in lead["deliveries"]:
        lines.append(
            f"  {d['delivery_id']}  {d['target']} ({d['kind']})  {d['status']}  attempts {d['attempts']}"
            f"  next {_stamp(d['next_attempt_ms']) if d['status'] == 'pending' else '-'}"
            f"  delivered {_stamp(d['delivered_ms'])}"
        )
        if d["last_error"]:
            lines.append(f"      last error: {d['last_error']}")
    click.echo("\n".join(lines))


@leads.command("retry")
@click.argument("lead_id")
@config_option
@database_option
@tenant_option
@click.option("--all", "include_delivered", is_flag=True, help="Also re-send deliveries that succeeded.")
def retry_command(
    lead_id: str, config: str | None, database: str | None, tenant: str | None, include_delivered: bool
) -> None:
    """Make a lead's dead (or waiting) deliveries due now; the worker sends them on its next pass."""
    # The leads package: loaded only when a command needs it. The console retries through it too.
    from aap.leads.operations import RetryRefused, retry_deliveries

    stores = _stores(config, database, tenant)
    try:
        count = retry_deliveries(stores.leads, lead_id, datetime.now(UTC), include_delivered=include_delivered)
    except RetryRefused as refused:
        if refused.reason == "not_found":
            fail(f"No lead {lead_id}.")
        if refused.reason == "consent_expired":
            fail(f"Lead {lead_id} cannot be re-sent: the customer's consent expired at {refused.expired_at}.")
        fail(f"Lead {lead_id} has no delivery to retry (use --all to re-send delivered ones).")
    finally:
        stores.close()
    console.print(Text(f"{count} delivery(ies) of {lead_id} queued."))


# -- the pipeline -------------------------------------------------------------------------
as_option = click.option(
    "--as",
    "actor",
    default=None,
    metavar="EMAIL",
    help="The console account making the change (default: cli:<your login name>).",
)


def _actor(stores: Stores, actor: str | None) -> str:
    if actor is None:
        try:
            return f"cli:{getpass.getuser()}"
        except (KeyError, OSError):
            return "cli"
    email = actor.strip().casefold()
    if stores.console.user_by_email(email) is None:
        stores.close()
        fail(f"No console account {email}.", ["aap users list shows the accounts."])
    return email


def _work(
    config: str | None, database: str | None, tenant: str | None, lead_id: str, actor: str | None, **changes: Any
) -> None:
    """Apply one change with the console's rules, and say what changed."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.accounts import Accounts
    from aap.leads.pipeline import LeadUpdate, PipelineRefused, update_lead

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None)
    stores = open_stores_or_fail(settings)
    try:
        who = _actor(stores, actor)
        accounts = Accounts(stores.console, settings)
        change = update_lead(stores, accounts, lead_id, who, int(time.time() * 1000), LeadUpdate(**changes))
    except PipelineRefused as refused:
        stores.close()
        if refused.missing:
            fail(f"No lead {lead_id}.")
        fail(f"Lead {lead_id} was not changed:", refused.problems)
    stores.close()
    if not change.events:
        console.print(Text(f"Lead {lead_id}: nothing changed."))
    for event in change.events:
        console.print(Text(f"Lead {lead_id}: {_event_text(event)}"))


def _event_text(event: Any) -> str:
    if event.kind == "note":
        return "note added"
    what = {"stage": "status", "owner": "owner", "follow_up": "follow-up"}[event.kind]
    return f"{what} {event.old_value or '-'} -> {event.new_value or '-'}"


@leads.command("status")
@click.argument("lead_id")
@click.argument("stage", type=click.Choice(STAGES))
@click.option("--note", default=None, help="A note to record with the change.")
@as_option
@config_option
@database_option
@tenant_option
def status_command(
    lead_id: str,
    stage: str,
    note: str | None,
    actor: str | None,
    config: str | None,
    database: str | None,
    tenant: str | None,
) -> None:
    """Move a lead to STAGE (new, contacted, appointment_set, showed, sold, lost)."""
    _work(config, database, tenant, lead_id, actor, stage=stage, note=note)


@leads.command("assign")
@click.argument("lead_id")
@click.argument("owner")
@as_option
@config_option
@database_option
@tenant_option
def assign_command(
    lead_id: str, owner: str, actor: str | None, config: str | None, database: str | None, tenant: str | None
) -> None:
    """Give a lead to OWNER, a console account of its rooftop ('none': to nobody)."""
    _work(config, database, tenant, lead_id, actor, owner=None if owner == "none" else owner)


@leads.command("follow-up")
@click.argument("lead_id")
@click.argument("day", metavar="DATE")
@as_option
@config_option
@database_option
@tenant_option
def follow_up_command(
    lead_id: str, day: str, actor: str | None, config: str | None, database: str | None, tenant: str | None
) -> None:
    """Set a lead's follow-up DATE (YYYY-MM-DD, the rooftop's calendar; 'none' clears it)."""
    _work(config, database, tenant, lead_id, actor, follow_up=None if day == "none" else day)


@leads.command("note")
@click.argument("lead_id")
@click.argument("text")
@as_option
@config_option
@database_option
@tenant_option
def note_command(
    lead_id: str, text: str, actor: str | None, config: str | None, database: str | None, tenant: str | None
) -> None:
    """Add a note to a lead (kept in its history; counts as a response)."""
    if not text.strip():
        fail("A note needs some text.")
    _work(config, database, tenant, lead_id, actor, note=text)


@leads.command("history")
@click.argument("lead_id")
@config_option
@database_option
@tenant_option
@click.option("--json", "as_json", is_flag=True, help="The history as JSON.")
def history_command(lead_id: str, config: str | None, database: str | None, tenant: str | None, as_json: bool) -> None:
    """A lead's place in the pipeline and every change and note, oldest first (notes may hold PII)."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.config.localtime import format_local, zone_for
    from aap.store.lead_inbox import LeadScope

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None)
    stores = open_stores_or_fail(settings)
    try:
        standing = stores.lead_pipeline.standing(lead_id, LeadScope())
        lead = stores.leads.get_lead(lead_id) if standing else None
        events = stores.lead_pipeline.history(lead_id) if standing else []
    finally:
        stores.close()
    if standing is None or lead is None:
        fail(f"No lead {lead_id}.")
    if as_json:
        _emit_json({"lead_id": lead_id, **asdict(standing), "events": [asdict(e) for e in events]})
        return
    zone = zone_for(settings, lead["dealer_id"], lead["rooftop"])
    lines = [
        f"Lead {lead_id}  {standing.stage}  owner {standing.owner or '-'}  follow-up {standing.follow_up or '-'}",
        f"  received        {format_local(lead['received_ms'], zone)}",
        "  first response  "
        + (format_local(standing.responded_ms, zone) if standing.responded_ms is not None else "none yet"),
    ]
    for event in events:
        lines.append(f"{format_local(event.at_ms, zone)}  {event.actor}  {_event_text(event)}")
        if event.note:
            lines += [f"    {line}" for line in event.note.splitlines()]
    click.echo("\n".join(lines))


# -- erasure and retention (docs/leads.md, "Erasure and retention") ------------------------------
def _erasure_lines(title: str, lead_ids: Sequence[str], counts: dict[str, int]) -> list[str]:
    """What an erasure erased (or would): every lead id whole, then the rows per table."""
    lines = [title]
    lines += [f"  {lead_id}" for lead_id in lead_ids]
    if lead_ids:
        lines.append("Rows:")
        lines += [f"  {table:<24} {count}" for table, count in counts.items() if table != "cancelled_deliveries"]
        lines.append(f"  pending deliveries cancelled: {counts.get('cancelled_deliveries', 0)}")
    return lines


@leads.command("erase")
@click.option("--email", default=None, metavar="ADDRESS", help="The customer's e-mail address.")
@click.option("--phone", default=None, metavar="NUMBER", help="The customer's phone number (E.164, or US national).")
@config_option
@database_option
@tenant_option
@click.option("--dry-run", is_flag=True, help="Show what would be erased; change nothing.")
@click.option("--yes", is_flag=True, help="Erase without asking (needed when not on a terminal).")
@as_option
@click.option("--json", "as_json", is_flag=True, help="The erasure record as JSON.")
def erase_command(
    email: str | None,
    phone: str | None,
    config: str | None,
    database: str | None,
    tenant: str | None,
    dry_run: bool,
    yes: bool,
    actor: str | None,
    as_json: bool,
) -> None:
    """Erase every lead of one customer (a privacy request): leads whose customer has this e-mail
    address or this phone number, with their consent records, appointments, deliveries (pending
    ones are cancelled), delivery attempts and notes. Recorded with a digest, never the address."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.leads.erasure import DIGEST_SECRET, ErasureRefused, Subject, erase, plan

    try:
        subject = Subject.parse(email, phone)
    except ErasureRefused as refused:
        fail("Nothing was erased:", refused.problems)
    stores = _stores(config, database, tenant)
    try:
        who = _actor(stores, actor)
        found = plan(stores.erasure, subject, actor=who, now_ms=int(time.time() * 1000))
        if as_json and dry_run:
            _emit_json(found.view())
            return
        if not as_json:
            title = f"{len(found.lead_ids)} lead(s) of this customer:"
            click.echo("\n".join(_erasure_lines(title, found.lead_ids, found.counts)))
        if dry_run:
            click.echo("Dry run: nothing was erased.")
            return
        if not yes:
            if not sys.stdin.isatty():
                fail("Nothing was erased: add --yes to erase (or --dry-run to only look).")
            if not click.confirm("Erase them?", default=False):
                fail("Nothing was erased.")
        key = stores.state.secret(DIGEST_SECRET)
        done = erase(stores.erasure, subject, key=key, actor=who, now_ms=int(time.time() * 1000))
    finally:
        stores.close()
    if as_json:
        _emit_json(done.view())
        return
    if set(done.lead_ids) != set(found.lead_ids):  # a lead came or went in between: say what was erased
        click.echo("\n".join(_erasure_lines("Erased instead:", done.lead_ids, done.counts)))
    click.echo(f"Erased {len(done.lead_ids)} lead(s); recorded as erasure {done.erasure_id}.")


@leads.command("purge")
@config_option
@database_option
@tenant_option
@click.option("--dry-run", is_flag=True, help="Show what would be erased; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="What was erased, as JSON.")
def purge_command(config: str | None, database: str | None, tenant: str | None, dry_run: bool, as_json: bool) -> None:
    """Erase now the leads older than [leads] retention_days (what the delivery worker does every
    few minutes); leads with a delivery still to send are kept until it is sent or dead."""
    # Loaded only when this command runs, not with every `aap` process (aap.cli.main).
    from aap.leads.erasure import Purge, purge

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None)
    days = settings.leads.retention_days
    if days is None:
        fail("No [leads] retention_days is set: leads are kept until erased (docs/leads.md).")
    stores = open_stores_or_fail(settings)
    total: Purge | None = None
    try:
        now_ms = int(time.time() * 1000)
        while total is None or (total.more and not dry_run):  # a dry run shows one pass: nothing changes
            result = purge(stores.erasure, days, now_ms, dry_run=dry_run)
            total = result if total is None else total.then(result)
    finally:
        stores.close()
    if as_json:
        _emit_json({**asdict(total), "dry_run": dry_run, "retention_days": days})
        return
    verb = "would be erased" if dry_run else "erased"
    title = f"{len(total.lead_ids)} lead(s) received before {_stamp(total.before_ms)} {verb}:"
    click.echo("\n".join(_erasure_lines(title, total.lead_ids, total.counts)))
    if total.erasure_ids:
        click.echo("Recorded as erasure(s) " + ", ".join(total.erasure_ids) + ".")
    if dry_run:
        click.echo(
            "Dry run: nothing was erased." + (" (More leads are due than one pass shows.)" if total.more else "")
        )


@click.command("deliver")
@config_option
@database_option
@tenant_option
@click.option("--once", is_flag=True, help="Send what is due now, then exit (for cron or tests).")
@log_options
def deliver(
    config: str | None, database: str | None, tenant: str | None, once: bool, log_level: str, log_format: str
) -> None:
    """Run the lead delivery worker (the same one `aap serve` runs unless in_process = false)."""

    from aap.leads.worker import DeliveryWorker, run_delivery_worker
    from aap.server.logconfig import configure_logging
    from aap.telemetry.setup import start as start_tracing
    from aap.telemetry.setup import stop as stop_tracing
    from aap.work import Work

    overrides = {"database": database} if database else None
    settings = load_agent_or_fail(config, tenant, overrides, require_secrets=True, serving=True)
    if not settings.leads.routes:
        console.print(Text("No [[leads.routes]] configured: leads are stored but never delivered.", style="yellow"))
    configure_logging(log_level, log_format)
    stores = open_stores_or_fail(settings)
    start_tracing()  # deliveries in their leads' traces when OTEL_* asks (docs/deployment.md, "Traces")

    work = Work.for_database(stores.db.in_process)  # this command is its own composition root

    async def main() -> int:
        if once:
            worker = DeliveryWorker(stores.leads, settings, work=work)
            async with worker.client() as client:
                await worker.sweep()
                return await worker.drain(client)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_delivery_worker(stores, settings, stop, work)
        return 0

    try:
        processed = asyncio.run(main())
    finally:
        stop_tracing()
        work.close()
        stores.close()
    if once:
        console.print(Text(f"{processed} delivery(ies) processed."))


__all__ = ["leads", "deliver"]
