"""The console's lead pages: the inbox, one lead in full, retry, handled, CSV export.

Each person sees the leads of their scope (:meth:`aap.accounts.Accounts.scope_of`),
applied in the query; a lead outside it answers 404, as if it did not exist.
Viewing the inbox or a lead, and exporting, each write an audit entry (the
filters used, never a search text: it may be a customer's name). Retrying
goes through :func:`aap.leads.operations.retry_deliveries`, the code behind
``aap leads retry``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from aap.console.auth import Refused, Visit
from aap.leads.operations import RetryRefused, retry_deliveries
from aap.paths import CONSOLE_PREFIX, VEHICLE_PAGE_PREFIX
from aap.store.lead_inbox import DELIVERY_FILTERS, LEAD_STATUSES, InboxFilter, InboxRow, LeadScope
from aap.util.rfc3339 import parse_rfc3339, to_rfc3339

if TYPE_CHECKING:
    from aap.console import Console

PAGE_SIZE = 50
INBOX = CONSOLE_PREFIX + "leads"
CSV_COLUMNS = (
    "lead_id",
    "received_at",
    "dealer_id",
    "rooftop",
    "status",
    "first_name",
    "last_name",
    "email",
    "phone",
    "vehicle",
    "source_agent",
    "appointment_status",
    "delivery_state",
    "handled_at",
)


def _day_ms(text: str, problems: list[str], label: str) -> int | None:
    """A ``YYYY-MM-DD`` date (UTC) as epoch milliseconds at its start."""
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        problems.append(f"{label}: enter a date as YYYY-MM-DD.")
        return None
    return int(day.timestamp() * 1000)


def read_filter(params: QueryParams | Any, console: Console, scope: LeadScope) -> tuple[InboxFilter, list[str]]:
    """The inbox filter of a query string (or form), and what was wrong with it."""
    problems: list[str] = []

    def text(name: str) -> str:
        value = params.get(name)
        return value.strip() if isinstance(value, str) else ""

    status = text("status")
    if status and status not in LEAD_STATUSES:
        problems.append("Status: choose one of the listed states.")
        status = ""
    delivery = text("delivery")
    if delivery and delivery not in DELIVERY_FILTERS:
        problems.append("Delivery: choose one of the listed states.")
        delivery = ""
    dealer_id = text("seller") or None
    if dealer_id is not None and console.settings.profile_for(dealer_id) is None:
        problems.append("Seller: choose one of the listed sellers.")
        dealer_id = None
    start = _day_ms(text("from"), problems, "From") if text("from") else None
    end = _day_ms(text("to"), problems, "To") if text("to") else None
    if end is not None:
        end += 86_400_000  # the "to" day is included
    handled = {"open": False, "handled": True}.get(text("handled"))
    query = text("q")[:200] or None
    return InboxFilter(
        status or None, dealer_id, text("rooftop") or None, start, end, delivery or None, handled, query
    ), problems


def _filter_detail(wanted: InboxFilter) -> dict[str, Any]:
    """The audit log's record of a filter: every field but the search text (only whether there was one)."""
    out: dict[str, Any] = {k: v for k, v in vars(wanted).items() if v is not None and k != "query"}
    if wanted.query:
        out["search"] = True
    return out


def _rooftop_choices(console: Console, scope: LeadScope) -> list[str]:
    if scope.rooftops is not None:
        return sorted({name for _, name in scope.rooftops})
    profiles = [console.settings.profile_for(scope.dealer_id)] if scope.dealer_id else console.settings.all_profiles()
    return sorted({r["name"] for p in profiles if p is not None for r in p.rooftops})


def _seller_choices(console: Console, scope: LeadScope) -> list[tuple[str, str]]:
    if console.settings.scope != "aggregate" or scope.dealer_id is not None:
        return []
    return [(p.dealer_id, p.name) for p in console.settings.dealers if p.dealer_id]


_BEFORE = re.compile(r"(\d{1,15})\.([A-Za-z0-9_-]{1,64})")


def _parse_before(value: str | None, problems: list[str]) -> tuple[int, str] | None:
    """The keyset of an "Older" link (``RECEIVED_MS.LEAD_ID``); a problem when it is not one."""
    if not value:
        return None
    found = _BEFORE.fullmatch(value)
    if found is None:
        problems.append("This page link is not valid: open the inbox again.")
        return None
    return int(found.group(1)), found.group(2)


async def inbox(console: Console, request: Request, visit: Visit) -> Response:
    scope = console.accounts.scope_of(visit.session.user)
    wanted, problems = read_filter(request.query_params, console, scope)
    before = _parse_before(request.query_params.get("before"), problems)
    rows, next_key = await console.blocking(
        console.stores.lead_inbox.page, scope, wanted, before=before, limit=PAGE_SIZE
    )
    await console.blocking(
        console.audit,
        visit.email,
        "leads.list",
        None,
        {**_filter_detail(wanted), "rows": len(rows), "older": before is not None},
    )
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "before"]
    return console.page(
        request,
        "leads.html",
        {
            "rows": rows,
            "filter": request.query_params,
            "problems": problems,
            "older": f"{INBOX}?{urlencode(kept + [('before', f'{next_key[0]}.{next_key[1]}')])}" if next_key else None,
            "newest": f"{INBOX}?{urlencode(kept)}" if before else None,
            "statuses": LEAD_STATUSES,
            "deliveries": DELIVERY_FILTERS,
            "rooftops": _rooftop_choices(console, scope),
            "sellers": _seller_choices(console, scope),
            "export_fields": kept,
        },
        visit=visit,
        status_code=400 if problems else 200,
    )


#: What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A field separator of some spreadsheet locale (``,``, or ``;`` where ``,`` is the decimal mark)
#: followed by a formula's first character: a program that splits the cell there starts a formula.
_SPLIT_FORMULA = re.compile(r"([;,] *)(?=[=+\-@\t\r])")
_NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def _csv_cell(value: Any) -> str:
    """A CSV cell no spreadsheet will run as a formula (OWASP "CSV injection"): a cell that begins
    with ``= + - @``, a tab or a carriage return gets a leading ``'``, and so does every part of it
    after a ``,`` or ``;`` that begins so (a spreadsheet that splits the cell at ``;``). A plain
    signed number (``+14155550123``, ``-5``) stays as it is: it is no formula in any program."""
    text = "" if value is None else str(value)
    if _NUMBER.fullmatch(text):
        return text
    text = _SPLIT_FORMULA.sub(r"\1'", text)
    return "'" + text if text.startswith(FORMULA_START) else text


def csv_lines(rows: Iterator[InboxRow]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        handled = (
            to_rfc3339(datetime.fromtimestamp(row.handled_ms / 1000, tz=UTC)) if row.handled_ms is not None else ""
        )
        writer.writerow(
            [
                _csv_cell(v)
                for v in (
                    row.lead_id,
                    row.received_at,
                    row.dealer_id,
                    row.rooftop,
                    row.status,
                    row.first_name,
                    row.last_name,
                    row.email,
                    row.phone,
                    row.vehicle,
                    row.source_agent,
                    row.appointment_status,
                    row.delivery_state,
                    handled,
                )
            ]
        )
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


async def export(console: Console, request: Request, visit: Visit) -> Response:
    """POST (a form with a CSRF token): every lead of the filter, as CSV, streamed page by page."""
    scope = console.accounts.scope_of(visit.session.user)
    wanted, problems = read_filter(visit.form, console, scope)
    if problems:
        raise Refused(400, " ".join(problems))
    await console.blocking(console.audit, visit.email, "leads.export", None, _filter_detail(wanted))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return StreamingResponse(
        csv_lines(console.stores.lead_inbox.export(scope, wanted)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="leads-{stamp}.csv"', "Cache-Control": "no-store"},
    )


async def _lead_or_404(console: Console, visit: Visit, lead_id: str) -> dict[str, Any]:
    lead = await console.blocking(
        console.stores.lead_inbox.lead, lead_id, console.accounts.scope_of(visit.session.user)
    )
    if lead is None:
        raise Refused(404, "There is no such lead, or it is not one of your leads.")
    return lead


def _consent_expired(lead: dict[str, Any]) -> bool:
    expires = parse_rfc3339((lead.get("consent") or {}).get("expires_at"))
    return expires is not None and expires <= datetime.now(UTC)


def delivery_state(lead: dict[str, Any]) -> str:
    """The deliveries' states in one string: the page reloads itself when it changes."""
    return ",".join(f"{d['delivery_id']}:{d['status']}:{d['attempts']}" for d in lead["deliveries"])


def _queued_notice(value: str | None) -> str | None:
    """The notice after a retry, from its count (never text taken from the link)."""
    if not value or not value.isdigit() or len(value) > 6:
        return None
    count = int(value)
    return f"{count} deliver{'y' if count == 1 else 'ies'} queued; the page updates when they are sent."


async def detail(console: Console, request: Request, visit: Visit) -> Response:
    lead_id = request.path_params["lead_id"]
    lead = await _lead_or_404(console, visit, lead_id)
    await console.blocking(console.audit, visit.email, "lead.view", lead_id, {})
    access = await console.blocking(console.stores.console.audit_entries, subject=lead_id, limit=10)
    targets = {d["delivery_id"]: d["target"] for d in lead["deliveries"]}
    sent = [a for a in lead["attempts"] if a["payload"]]
    adf = next(
        (
            a
            for a in reversed(sent)
            if "xml" in (a["content_type"] or "") or (a["payload"] or "").lstrip().startswith("<?xml")
        ),
        None,
    )
    webhook = next((a for a in reversed(sent) if (a["content_type"] or "").startswith("application/json")), None)
    waiting = any(d["status"] in ("pending", "delivering") for d in lead["deliveries"])
    retryable = any(d["status"] in ("dead", "pending") for d in lead["deliveries"])
    return console.page(
        request,
        "lead.html",
        {
            "lead": lead,
            "request_body": lead["request"],
            "customer": lead["request"].get("customer") or {},
            "targets": targets,
            "adf": adf,
            "webhook": webhook,
            "waiting": waiting,
            "retryable": retryable and not _consent_expired(lead),
            "consent_expired": _consent_expired(lead),
            "access": access,
            "notice": _queued_notice(request.query_params.get("queued")),
            "state": delivery_state(lead),
            "vehicle_page": (
                VEHICLE_PAGE_PREFIX + lead["vehicle_id"]
                if lead.get("vehicle_id") and console.settings.web.public_page
                else None
            ),
        },
        visit=visit,
    )


async def state(console: Console, request: Request, visit: Visit) -> Response:
    """The deliveries' states (no customer data): what the lead page polls while a delivery waits."""
    lead = await _lead_or_404(console, visit, request.path_params["lead_id"])
    return JSONResponse({"state": delivery_state(lead)}, headers={"Cache-Control": "no-store"})


async def retry(console: Console, request: Request, visit: Visit) -> Response:
    lead_id = request.path_params["lead_id"]
    scope = console.accounts.scope_of(visit.session.user)
    if not await console.blocking(console.stores.lead_inbox.in_scope, lead_id, scope):
        raise Refused(404, "There is no such lead, or it is not one of your leads.")
    include_delivered = visit.form is not None and visit.form.get("all") == "1"
    try:
        count = await console.blocking(
            retry_deliveries, console.stores.leads, lead_id, datetime.now(UTC), include_delivered=include_delivered
        )
    except RetryRefused as refused:
        raise Refused(409, str(refused)) from None
    await console.blocking(
        console.audit, visit.email, "lead.retry", lead_id, {"deliveries": count, "all": include_delivered}
    )
    return RedirectResponse(f"{CONSOLE_PREFIX}leads/{lead_id}?queued={count}", status_code=303)


async def handled(console: Console, request: Request, visit: Visit) -> Response:
    lead_id = request.path_params["lead_id"]
    done = visit.form is not None and visit.form.get("handled") == "1"
    changed = await console.blocking(
        console.stores.lead_inbox.mark_handled,
        lead_id,
        console.accounts.scope_of(visit.session.user),
        visit.email if done else None,
        console.now_ms(),
    )
    if not changed:
        raise Refused(404, "There is no such lead, or it is not one of your leads.")
    await console.blocking(console.audit, visit.email, "lead.handled" if done else "lead.reopened", lead_id, {})
    return RedirectResponse(f"{CONSOLE_PREFIX}leads/{lead_id}", status_code=303)


def routes(console: Console) -> list[Route]:
    def bind(handler: Any) -> Any:
        async def endpoint(request: Request, visit: Visit) -> Response:
            response: Response = await handler(console, request, visit)
            return response

        return console.guarded(endpoint)

    return [
        Route(INBOX, bind(inbox), methods=["GET"]),
        Route(INBOX + ".csv", bind(export), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}", bind(detail), methods=["GET"]),
        Route(INBOX + "/{lead_id:str}/state", bind(state), methods=["GET"]),
        Route(INBOX + "/{lead_id:str}/retry", bind(retry), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}/handled", bind(handled), methods=["POST"]),
    ]
