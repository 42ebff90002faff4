"""Erasing a customer's leads on request, and every lead past the retention period.

A privacy request (GDPR art. 17, the right to erasure; the CCPA's right to delete) names the
customer by e-mail address and/or phone number. Both are read the way a lead's customer is
stored (:func:`aap.store.leads.customer_keys`: the e-mail casefolded, the phone's digits — a
phone number in the rooftops' national format is made E.164 first,
:func:`aap.config.phones.to_e164`), and every lead of the agent whose customer has either is
erased, in one transaction, as :mod:`aap.store.erasure` describes (docs/leads.md, "Erasure
and retention").

What the records keep of the customer is a keyed digest (HMAC-SHA256 with a secret of the
agent's own, :meth:`aap.store.state.StateStore.secret`) of the normalised e-mail and phone:
an operator can tell that a given address was erased by erasing it again (the digest is the
same), while the digest alone does not reveal the address to someone who reads the records.

``[leads] retention_days`` erases each lead that many days after it was received
(:func:`purge`), in batches, by the process that does the agent's background lead work; a lead
whose delivery is still to be sent waits until it is sent or given up (``dead``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass, field

from aap.config.phones import DEFAULT_REGION, to_e164
from aap.store.erasure import REQUEST, RETENTION, Erasure, ErasureStore
from aap.store.leads import customer_keys

#: The most leads one request erases (a customer with more is erased by repeating it).
MAX_LEADS = 10_000
#: The longest e-mail address accepted (RFC 5321 §4.5.3.1: 64 + 1 + 255).
MAX_EMAIL = 320
#: The longest phone number text accepted.
MAX_PHONE = 64
#: Leads per retention batch (one transaction each), and batches per pass.
PURGE_BATCH = 500
PURGE_BATCHES = 20
#: Who the records name for an erasure by the retention period.
RETENTION_ACTOR = "aap:retention"
#: The name of the agent's digest key (:meth:`aap.store.state.StateStore.secret`).
DIGEST_SECRET = "lead-erasure-digest"
DAY_MS = 86_400_000

log = logging.getLogger("aap.leads.erasure")


class ErasureRefused(ValueError):
    """A request that names no customer, or names one in a form that is not an address or a
    number; ``problems`` lists every problem at once."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Subject:
    """The customer of a request, by the keys a lead's customer is stored with."""

    email_key: str | None
    phone_key: str | None

    @classmethod
    def parse(cls, email: str | None, phone: str | None, *, region: str = DEFAULT_REGION) -> Subject:
        problems: list[str] = []
        email = (email or "").strip() or None
        phone = (phone or "").strip() or None
        if email is None and phone is None:
            problems.append("give the customer's e-mail address, phone number, or both")
        if email is not None:
            local, at, domain = email.rpartition("@")
            if len(email) > MAX_EMAIL:
                problems.append(f"email: at most {MAX_EMAIL} characters")
            elif not (at and local and domain) or any(c.isspace() for c in email):
                problems.append("email: not an e-mail address")
        e164 = None
        if phone is not None:
            e164 = to_e164(phone, region) if len(phone) <= MAX_PHONE else None
            if e164 is None:
                problems.append(f"phone: not a valid phone number (E.164, e.g. +14155550100, or {region} national)")
        if problems:
            raise ErasureRefused(problems)
        _, _, email_key, phone_key = customer_keys({"customer": {"email": email, "phone": e164}})
        return cls(email_key, phone_key)

    def digest(self, key: bytes) -> str:
        """The keyed digest the records keep instead of the address and number."""
        text = f"email:{self.email_key or ''}\nphone:{self.phone_key or ''}"
        return "hmac-sha256:" + hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def plan(store: ErasureStore, subject: Subject, *, actor: str, now_ms: int) -> Erasure:
    """What :func:`erase` would erase (a dry run: nothing is written — not even the digest's key,
    so a dry run's record has no digest)."""
    ids = store.leads_of(subject.email_key, subject.phone_key, limit=MAX_LEADS)
    return Erasure(None, now_ms, actor, REQUEST, None, tuple(ids), store.counts(ids))


def erase(store: ErasureStore, subject: Subject, *, key: bytes, actor: str, now_ms: int) -> Erasure:
    """Erase every lead of ``subject`` (up to :data:`MAX_LEADS`) and record it, in one transaction;
    the record is written even when no lead matched (the request was handled)."""
    ids = store.leads_of(subject.email_key, subject.phone_key, limit=MAX_LEADS)
    done = store.erase(ids, actor=actor, reason=REQUEST, subject_digest=subject.digest(key), now_ms=now_ms)
    fields = {"erasure_id": done.erasure_id, "count": len(done.lead_ids), "actor": actor}
    log.info("a customer's leads erased", extra={"fields": fields})  # ids and counts: never the customer
    return done


@dataclass
class Purge:
    """What one retention pass erased (or, for a dry run, would erase)."""

    before_ms: int
    lead_ids: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    erasure_ids: list[str] = field(default_factory=list)
    #: True when the pass stopped at its bound with more leads to erase (the next pass goes on).
    more: bool = False

    def add(self, erasure: Erasure) -> None:
        self.lead_ids += erasure.lead_ids
        for table, count in erasure.counts.items():
            self.counts[table] = self.counts.get(table, 0) + count
        if erasure.erasure_id is not None and erasure.lead_ids:
            self.erasure_ids.append(erasure.erasure_id)

    def then(self, later: Purge) -> Purge:
        """This pass followed by ``later`` (``aap leads purge`` runs passes to the end)."""
        self.lead_ids += later.lead_ids
        self.erasure_ids += later.erasure_ids
        for table, count in later.counts.items():
            self.counts[table] = self.counts.get(table, 0) + count
        self.more = later.more
        return self


def purge(
    store: ErasureStore,
    retention_days: int,
    now_ms: int,
    *,
    dry_run: bool = False,
    batch: int = PURGE_BATCH,
    batches: int = PURGE_BATCHES,
) -> Purge:
    """Erase the leads received more than ``retention_days`` before ``now_ms`` whose deliveries
    are all done, at most ``batches`` transactions of ``batch`` leads."""
    result = Purge(now_ms - retention_days * DAY_MS)
    if dry_run:
        ids = store.expired(result.before_ms, limit=batch * batches + 1)
        result.more = len(ids) > batch * batches
        ids = ids[: batch * batches]
        result.add(Erasure(None, now_ms, RETENTION_ACTOR, RETENTION, None, tuple(ids), store.counts(ids)))
        return result
    for _ in range(batches):
        ids = store.expired(result.before_ms, limit=batch)
        if not ids:
            return result
        erasure = store.erase(
            ids,
            actor=RETENTION_ACTOR,
            reason=RETENTION,
            subject_digest=None,
            now_ms=now_ms,
            received_before_ms=result.before_ms,
        )
        result.add(erasure)
        if len(ids) < batch:
            return result
    result.more = bool(store.expired(result.before_ms, limit=1))
    return result
