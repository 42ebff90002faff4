"""The console's lead pages: the inbox, one lead in full, the pipeline, retry, handled, CSV export.

Each person sees the leads of their scope (:meth:`aap.accounts.Accounts.scope_of`),
applied in the query; a lead outside it answers 404, as if it did not exist.
Viewing the inbox or a lead, and exporting, each write an audit entry (the
filters used, never a search text: it may be a customer's name). Retrying
goes through :func:`aap.leads.operations.retry_deliveries`, the code behind
``aap leads retry``. The pipeline (status, owner, follow-up, notes) is
:mod:`aap.store.lead_pipeline`'s; each change is audited, without a note's
text. Every instant is shown in the lead's rooftop's zone, and the date
filters read days in the viewer's zone (docs/console.md, "Local time").
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, tzinfo
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from aap.config.localtime import day_range_ms, local_today, zone_named
from aap.config.notifications import NOTIFY_KIND
from aap.console.auth import Refused, Visit
from aap.console.core import Console
from aap.leads.erasure import DIGEST_SECRET, ErasureRefused, Subject, erase
from aap.leads.operations import RetryRefused, retry_deliveries
from aap.leads.pipeline import LeadUpdate, PipelineRefused, owners_for, update_lead
from aap.paths import CONSOLE_PREFIX, VEHICLE_PAGE_PREFIX
from aap.store.console import User
from aap.store.keyset import BadCursor, Cursor
from aap.store.lead_inbox import DELIVERY_FILTERS, LEAD_STATUSES, InboxFilter, LeadScope
from aap.store.lead_pipeline import (
    FOLLOW_UPS,
    NOTE_LIMIT,
    SORT_LABELS,
    SORTS,
    STAGE_GROUPS,
    STAGE_LABELS,
    STAGES,
    PipelineFilter,
    PipelineRow,
)
from aap.util.rfc3339 import parse_rfc3339, to_rfc3339
from aap.web.pages import url

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
    "pipeline_status",
    "owner",
    "follow_up",
    "first_response_minutes",
)


def _day(text: str, problems: list[str], label: str) -> date | None:
    """A ``YYYY-MM-DD`` date (what a date input sends)."""
    try:
        return date.fromisoformat(text) if len(text) == 10 else None
    except ValueError:
        pass
    problems.append(f"{label}: enter a date as YYYY-MM-DD.")
    return None


def read_filter(
    params: QueryParams | Any, console: Console, scope: LeadScope, zone: tzinfo
) -> tuple[InboxFilter, list[str]]:
    """The inbox filter of a query string (or form), and what was wrong with it; days are read in ``zone``."""
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
    first = _day(text("from"), problems, "From") if text("from") else None
    last = _day(text("to"), problems, "To") if text("to") else None
    start, end = day_range_ms(first, last, zone)  # the "to" day is included
    handled = {"open": False, "handled": True}.get(text("handled"))
    query = text("q")[:200] or None
    return InboxFilter(
        status or None, dealer_id, text("rooftop") or None, start, end, delivery or None, handled, query
    ), problems


def read_pipeline(params: QueryParams | Any, visit: Visit, zone: tzinfo) -> tuple[PipelineFilter, str, list[str]]:
    """The pipeline part of the inbox filter and the sort, and what was wrong with them."""
    problems: list[str] = []

    def text(name: str) -> str:
        value = params.get(name)
        return value.strip() if isinstance(value, str) else ""

    stage = text("stage")
    if stage and stage not in STAGES and stage not in STAGE_GROUPS:
        problems.append("Pipeline status: choose one of the listed statuses.")
        stage = ""
    owner: str | None = text("owner")[:320] or None
    if owner == "me":
        owner = visit.email
    elif owner == "none":
        owner = ""
    follow_up = text("follow_up")
    if follow_up and follow_up not in FOLLOW_UPS:
        problems.append("Follow-up: choose one of the listed choices.")
        follow_up = ""
    sort = text("sort") or "newest"
    if sort not in SORTS:
        problems.append("Sort: choose one of the listed orders.")
        sort = "newest"
    today = local_today(zone).isoformat()
    return PipelineFilter(stage or None, owner, follow_up or None, today), sort, problems


def _filter_detail(wanted: InboxFilter, pipeline: PipelineFilter | None = None, sort: str = "newest") -> dict[str, Any]:
    """The audit log's record of a filter: every field but the search text (only whether there was one)."""
    out: dict[str, Any] = {k: v for k, v in vars(wanted).items() if v is not None and k != "query"}
    if wanted.query:
        out["search"] = True
    if pipeline is not None:
        out.update({k: v for k, v in vars(pipeline).items() if v is not None and k != "today"})
    if sort != "newest":
        out["sort"] = sort
    return out


def owner_choices(console: Console, scope: LeadScope, users: list[User]) -> list[str]:
    """The accounts the inbox's owner filter offers: those whose leads the viewer may see."""
    return [
        u.email
        for u in users
        if scope.dealer_id is None or console.accounts.scope_of(u).dealer_id in (None, scope.dealer_id)
    ]


def _rooftop_choices(console: Console, scope: LeadScope) -> list[str]:
    if scope.rooftops is not None:
        return sorted({name for _, name in scope.rooftops})
    profiles = [console.settings.profile_for(scope.dealer_id)] if scope.dealer_id else console.settings.all_profiles()
    return sorted({r["name"] for p in profiles if p is not None for r in p.rooftops})


def _seller_choices(console: Console, scope: LeadScope) -> list[tuple[str, str]]:
    if console.settings.scope != "aggregate" or scope.dealer_id is not None:
        return []
    return [(p.dealer_id, p.name) for p in console.settings.dealers if p.dealer_id]


async def inbox(console: Console, request: Request, visit: Visit) -> Response:
    scope = console.accounts.scope_of(visit.session.user)
    params = request.query_params
    zone = console.viewer_zone(visit, params.get("rooftop") or None)
    wanted, problems = read_filter(params, console, scope, zone)
    pipeline, sort, more = read_pipeline(params, visit, zone)
    problems += more
    after = None
    if params.get("before"):  # the "Older" links of before the pipeline's sorts: a page link no more
        problems.append("This page link is not valid any more; start from the first page.")
    if params.get("after"):
        try:
            after = Cursor.decode(params["after"], SORTS[sort])
        except BadCursor:
            problems.append("This page link is not valid any more; start from the first page.")
    rows, next_key = await console.blocking(
        console.stores.lead_pipeline.page, scope, wanted, pipeline, sort=sort, cursor=after, limit=PAGE_SIZE
    )
    await console.blocking(
        console.audit,
        visit.email,
        "leads.list",
        None,
        {**_filter_detail(wanted, pipeline, sort), "rows": len(rows), "older": after is not None},
    )
    users = await console.blocking(console.stores.console.users)
    kept = [(k, v) for k, v in params.multi_items() if k != "after"]
    active = [k for k, v in kept if v and k not in ("sort",)]
    return console.page(
        request,
        "leads.html",
        {
            "rows": rows,
            "filter": params,
            "problems": problems,
            "older": f"{url(request, INBOX)}?{urlencode(kept + [('after', next_key.encode())])}" if next_key else None,
            "newest": f"{url(request, INBOX)}?{urlencode(kept)}" if after else None,
            "statuses": LEAD_STATUSES,
            "deliveries": DELIVERY_FILTERS,
            "rooftops": _rooftop_choices(console, scope),
            "sellers": _seller_choices(console, scope),
            "stages": [(s, STAGE_LABELS[s]) for s in STAGES],
            "owners": owner_choices(console, scope, users),
            "sorts": list(SORT_LABELS.items()),
            "export_fields": kept,
            "active_filters": len(active),
            "mine": f"{url(request, INBOX)}?{urlencode({'owner': 'me', 'stage': 'open', 'sort': 'follow_up'})}",
            "zone": zone,
            "now_ms": console.now_ms(),
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


def csv_lines(rows: Iterator[PipelineRow]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for item in rows:
        row, standing = item.lead, item.standing
        handled = (
            to_rfc3339(datetime.fromtimestamp(row.handled_ms / 1000, tz=UTC)) if row.handled_ms is not None else ""
        )
        response = "" if standing.response_ms is None else str(standing.response_ms // 60_000)
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
                    standing.stage,
                    standing.owner,
                    standing.follow_up,
                    response,
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
    rooftop = visit.form.get("rooftop") if visit.form is not None else None
    zone = console.viewer_zone(visit, rooftop if isinstance(rooftop, str) and rooftop else None)
    wanted, problems = read_filter(visit.form, console, scope, zone)
    pipeline, sort, more = read_pipeline(visit.form, visit, zone)
    if problems or more:
        raise Refused(400, " ".join(problems + more), visit=visit)
    await console.blocking(console.audit, visit.email, "leads.export", None, _filter_detail(wanted, pipeline, sort))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return StreamingResponse(
        csv_lines(console.stores.lead_pipeline.export(scope, wanted, pipeline, sort=sort)),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="leads-{stamp}.csv"', "Cache-Control": "no-store"},
    )


async def _lead_or_404(console: Console, visit: Visit, lead_id: str) -> dict[str, Any]:
    lead = await console.blocking(
        console.stores.lead_inbox.lead, lead_id, console.accounts.scope_of(visit.session.user)
    )
    if lead is None:
        raise Refused(404, "There is no such lead, or it is not one of your leads.", visit=visit)
    return lead


def _consent_expired(lead: dict[str, Any]) -> bool:
    expires = parse_rfc3339((lead.get("consent") or {}).get("expires_at"))
    return expires is not None and expires <= datetime.now(UTC)


def delivery_state(lead: dict[str, Any]) -> str:
    """The deliveries' states in one string: the page reloads itself when it changes."""
    return ",".join(f"{d['delivery_id']}:{d['status']}:{d['attempts']}" for d in lead["deliveries"])


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
    scope = console.accounts.scope_of(visit.session.user)
    standing = await console.blocking(console.stores.lead_pipeline.standing, lead_id, scope)
    history = await console.blocking(console.stores.lead_pipeline.history, lead_id)
    zone = console.zone(lead["dealer_id"], lead["rooftop"])
    appointment = lead.get("appointment") or {}
    in_crm = [d for d in lead["deliveries"] if d["kind"] != NOTIFY_KIND and d["status"] == "delivered"]
    return console.page(
        request,
        "lead.html",
        {
            "zone": zone,
            # the zone the appointment was booked in (its rooftop's schedules), else its rooftop's
            "appointment_zone": zone_named(appointment.get("timezone"))
            or console.zone(lead["dealer_id"], appointment.get("rooftop") or lead["rooftop"]),
            "region": console.region(lead["dealer_id"], lead["rooftop"]),
            "standing": standing,
            "history": history,
            "stages": [(s, STAGE_LABELS[s]) for s in STAGES],
            "stage_labels": STAGE_LABELS,
            "owners": await console.blocking(
                owners_for, console.stores, console.accounts, lead["dealer_id"], lead["rooftop"]
            ),
            "in_crm": in_crm,
            "crm_deliveries": [d for d in lead["deliveries"] if d["kind"] != NOTIFY_KIND],
            "notifications": [d for d in lead["deliveries"] if d["kind"] == NOTIFY_KIND],
            "note_limit": NOTE_LIMIT,
            "responded": waited(standing.response_ms) if standing and standing.response_ms is not None else None,
            "waiting_for": (
                waited(console.now_ms() - lead["received_ms"]) if standing and standing.responded_ms is None else None
            ),
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
            "notice": _notice(request.query_params),
            "state": delivery_state(lead),
            "vehicle_page": (
                url(request, VEHICLE_PAGE_PREFIX + lead["vehicle_id"])
                if lead.get("vehicle_id") and console.settings.web.public_page
                else None
            ),
        },
        visit=visit,
    )


def _queued_notice(value: str | None) -> str | None:
    """The notice after a retry, from its count (never text taken from the link)."""
    if not value or not (value.isascii() and value.isdigit()) or len(value) > 6:
        return None
    count = int(value)
    return f"{count} deliver{'y' if count == 1 else 'ies'} queued; the page updates when they are sent."


#: The notices a redirect may ask the lead page for, by code (never text taken from the link).
NOTICES = {"saved": "Saved.", "unchanged": "Nothing changed."}


def _notice(params: Any) -> str | None:
    return _queued_notice(params.get("queued")) or NOTICES.get(params.get("notice") or "")


def waited(ms: int) -> str:
    """``2 h 5 min``, ``3 days 4 h``: how long a lead waited (or has been waiting) for its first answer."""
    minutes = max(0, ms) // 60_000
    if minutes < 1:
        return "under a minute"
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} day{'s' if days > 1 else ''}" + (f" {hours} h" if hours else "")
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _form_text(visit: Visit, name: str) -> str:
    value = visit.form.get(name) if visit.form is not None else None
    return value if isinstance(value, str) else ""


async def work(console: Console, request: Request, visit: Visit) -> Response:
    """POST: the lead's status, owner, follow-up date and a note, in one change (audited).

    The form shows the current values, so each field is taken as given: an empty owner is
    nobody, an empty date clears the follow-up."""
    lead_id = request.path_params["lead_id"]
    wanted = LeadUpdate(
        stage=_form_text(visit, "stage").strip(),
        owner=_form_text(visit, "owner").strip() or None,
        follow_up=_form_text(visit, "follow_up").strip() or None,
        note=_form_text(visit, "note") or None,
    )
    try:
        change = await console.blocking(
            update_lead,
            console.stores,
            console.accounts,
            lead_id,
            visit.email,
            console.now_ms(),
            wanted,
            scope=console.accounts.scope_of(visit.session.user),
        )
    except PipelineRefused as refused:
        raise Refused(404 if refused.missing else 400, str(refused), visit=visit) from None
    notice = "saved" if change.events else "unchanged"
    return RedirectResponse(url(request, f"{INBOX}/{lead_id}?notice={notice}#pipeline"), status_code=303)


async def state(console: Console, request: Request, visit: Visit) -> Response:
    """The deliveries' states (no customer data): what the lead page polls while a delivery waits."""
    lead = await _lead_or_404(console, visit, request.path_params["lead_id"])
    return JSONResponse({"state": delivery_state(lead)}, headers={"Cache-Control": "no-store"})


async def retry(console: Console, request: Request, visit: Visit) -> Response:
    lead_id = request.path_params["lead_id"]
    scope = console.accounts.scope_of(visit.session.user)
    if not await console.blocking(console.stores.lead_inbox.in_scope, lead_id, scope):
        raise Refused(404, "There is no such lead, or it is not one of your leads.", visit=visit)
    include_delivered = visit.form is not None and visit.form.get("all") == "1"
    try:
        count = await console.blocking(
            retry_deliveries, console.stores.leads, lead_id, datetime.now(UTC), include_delivered=include_delivered
        )
    except RetryRefused as refused:
        raise Refused(409, str(refused), visit=visit) from None
    await console.blocking(
        console.audit, visit.email, "lead.retry", lead_id, {"deliveries": count, "all": include_delivered}
    )
    return RedirectResponse(url(request, f"{INBOX}/{lead_id}?queued={count}"), status_code=303)


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
        raise Refused(404, "There is no such lead, or it is not one of your leads.", visit=visit)
    await console.blocking(console.audit, visit.email, "lead.handled" if done else "lead.reopened", lead_id, {})
    return RedirectResponse(url(request, f"{INBOX}/{lead_id}"), status_code=303)


async def erase_customer(console: Console, request: Request, visit: Visit) -> Response:
    """Erase every lead of this lead's customer (by its e-mail and phone), for an administrator who
    ticked the confirmation (docs/leads.md, "Erasure and retention"); the audit log shows the record."""
    lead_id = request.path_params["lead_id"]
    lead = await _lead_or_404(console, visit, lead_id)  # a lead out of one's scope is not named, even to say no
    if not visit.is_admin:
        raise Refused(403, "Only an administrator erases a customer's data.", visit=visit)
    if _form_text(visit, "confirm") != "erase":
        raise Refused(400, "Tick the box to confirm the erasure: nothing was erased.", visit=visit)
    customer = (lead.get("request") or {}).get("customer") or {}
    try:
        subject = Subject.parse(customer.get("email"), customer.get("phone"))
    except ErasureRefused:
        raise Refused(409, "This lead's customer has no e-mail or phone to erase by.", visit=visit) from None
    key = await console.blocking(console.stores.state.secret, DIGEST_SECRET)
    await console.blocking(erase, console.stores.erasure, subject, key=key, actor=visit.email, now_ms=console.now_ms())
    return RedirectResponse(url(request, AUDIT_PAGE), status_code=303)


#: Where an erasure's record is shown (the audit log of :mod:`aap.console.users`).
AUDIT_PAGE = CONSOLE_PREFIX + "audit"


def routes(console: Console) -> list[Route]:
    return [
        Route(INBOX, console.endpoint(inbox), methods=["GET"]),
        Route(INBOX + ".csv", console.endpoint(export), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}", console.endpoint(detail), methods=["GET"]),
        Route(INBOX + "/{lead_id:str}/state", console.endpoint(state), methods=["GET"]),
        Route(INBOX + "/{lead_id:str}/retry", console.endpoint(retry), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}/handled", console.endpoint(handled), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}/pipeline", console.endpoint(work), methods=["POST"]),
        Route(INBOX + "/{lead_id:str}/erase", console.endpoint(erase_customer), methods=["POST"]),
    ]
