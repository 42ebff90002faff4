"""``aap leads list|show|retry`` and ``aap deliver``: operating the lead outbox.

``aap leads show`` is the only command that prints a customer's name, contact
data, message or consent text (the staff console shows them in a browser); ``list`` shows ids, states and routing only.
"""

from __future__ import annotations

import asyncio
import signal
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
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_command(
    config: str | None,
    database: str | None,
    tenant: str | None,
    status: str | None,
    delivery: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Newest leads first: ids, routing and delivery states (no customer data)."""
    stores = _stores(config, database, tenant)
    try:
        rows = stores.leads.list_leads(limit=limit, status=status, delivery_status=delivery)
    finally:
        stores.close()
    if as_json:
        _emit_json(rows)
        return
    table = Table(title=f"{len(rows)} lead(s)", show_lines=False)
    for column in (
        "lead",
        "received",
        "dealer",
        "rooftop",
        "status",
        "appointment",
        "vehicle",
        "source agent",
        "deliveries",
    ):
        table.add_column(column)
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
                    row["appointment_status"] or "-",
                    row["vehicle_link"],
                    row["source_agent"],
                    deliveries,
                )
            )
        )
    click.echo(_render(table))


def _render(table: Table) -> str:
    capture = Console(width=200, highlight=False, force_terminal=False, color_system=None)
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
    # httpx, the worker and the store: loaded only when this command runs.
    import httpx

    from aap.leads.worker import DeliveryWorker, run_delivery_worker
    from aap.server.logconfig import configure_logging

    settings = load_agent_or_fail(config, tenant, {"database": database} if database else None, require_secrets=True)
    if not settings.leads.routes:
        console.print(Text("No [[leads.routes]] configured: leads are stored but never delivered.", style="yellow"))
    configure_logging(log_level, log_format)
    stores = open_stores_or_fail(settings)

    async def main() -> int:
        if once:
            worker = DeliveryWorker(stores.leads, settings)
            async with httpx.AsyncClient() as client:
                await worker.sweep()
                return await worker.drain(client)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_delivery_worker(stores, settings, stop)
        return 0

    try:
        processed = asyncio.run(main())
    finally:
        stores.close()
    if once:
        console.print(Text(f"{processed} delivery(ies) processed."))


__all__ = ["leads", "deliver"]
