"""Working a lead: the one set of rules the console and ``aap leads`` apply (docs/console.md).

A change names any of the status (one of
:data:`~aap.store.lead_pipeline.STAGES`), the owner (a console account whose
scope includes the lead: "a console user of the rooftop"), the follow-up date
and a note; every problem is reported at once, nothing is written unless all
is well, and each change that changes something is one audit entry (who,
what; never a note's text, which may quote the customer). What was stored
for the CRM — the request, the result, the outbox — is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from aap.accounts import Accounts
from aap.store import Stores
from aap.store.lead_inbox import LeadScope
from aap.store.lead_pipeline import NOTE_LIMIT, STAGES, UNSET, Change


class PipelineRefused(ValueError):
    """A change with problems (each one a sentence for a person), or for a lead out of reach."""

    def __init__(self, problems: list[str], *, missing: bool = False) -> None:
        super().__init__(" ".join(problems))
        self.problems = problems
        self.missing = missing


@dataclass(frozen=True)
class LeadUpdate:
    """What a person asks of a lead; a field left :data:`UNSET` stays as it is."""

    stage: Any = UNSET
    owner: Any = UNSET  # an e-mail, or None for nobody
    follow_up: Any = UNSET  # a date, a YYYY-MM-DD string, or None to clear
    note: str | None = None


def owners_for(stores: Stores, accounts: Accounts, dealer_id: str | None, rooftop: str | None) -> list[str]:
    """The accounts that may own a lead of ``rooftop``: those whose scope includes it."""
    return [u.email for u in stores.console.users() if accounts.scope_of(u).allows(dealer_id, rooftop)]


def _follow_up(value: Any, problems: list[str]) -> Any:
    if value is UNSET or value is None:
        return value
    if isinstance(value, date):
        return value.isoformat()
    text = str(value).strip()
    if not text:
        return None
    try:
        return date.fromisoformat(text).isoformat() if len(text) == 10 else _bad(problems)
    except ValueError:
        return _bad(problems)


def _bad(problems: list[str]) -> Any:
    problems.append("Follow-up: enter a date as YYYY-MM-DD.")
    return UNSET


def update_lead(
    stores: Stores,
    accounts: Accounts,
    lead_id: str,
    actor: str,
    now_ms: int,
    update: LeadUpdate,
    *,
    scope: LeadScope | None = None,
) -> Change:
    """Apply ``update`` to the lead as ``actor`` (an account's e-mail, or ``cli:<user>``) within ``scope``;
    :class:`PipelineRefused` lists every problem, or says the lead is not there (``missing``)."""
    scope = scope or LeadScope()
    lead = stores.lead_inbox.lead(lead_id, scope)
    if lead is None:
        raise PipelineRefused(["There is no such lead, or it is not one of your leads."], missing=True)
    problems: list[str] = []
    if update.stage is not UNSET and update.stage not in STAGES:
        problems.append(f"Status: one of {', '.join(STAGES)}.")
    owner = update.owner
    if owner is not UNSET and owner is not None:
        owner = str(owner).strip().casefold()
        if owner not in owners_for(stores, accounts, lead["dealer_id"], lead["rooftop"]):
            problems.append("Owner: one of the console accounts that work this rooftop's leads.")
    follow_up = _follow_up(update.follow_up, problems)
    note = update.note.strip() if isinstance(update.note, str) and update.note.strip() else None
    if note is not None and len(note) > NOTE_LIMIT:
        problems.append(f"Note: at most {NOTE_LIMIT:,} characters.")
    if problems:
        raise PipelineRefused(problems)
    change = stores.lead_pipeline.change(
        lead_id, scope, actor, now_ms, stage=update.stage, owner=owner, follow_up=follow_up, note=note
    )
    if change is None:  # gone between the two reads
        raise PipelineRefused(["There is no such lead, or it is not one of your leads."], missing=True)
    detail: dict[str, Any] = {}
    for event in change.events:
        detail["note" if event.kind == "note" else event.kind] = True if event.kind == "note" else event.new_value
    if detail:
        stores.console.audit(actor, "lead.pipeline", lead_id, detail, now_ms)
    return change
