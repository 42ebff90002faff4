"""The outbox worker: claim due deliveries, send them, record the outcome.

Runs inside ``aap serve`` (:func:`delivery_lifespan`) or on its own
(``aap deliver``); any number of workers may share one database, because a row
is only sent by the worker whose claim token it carries, and a claim lapses
after ``lease_seconds`` so a killed worker's rows are picked up again.

Per row: consent expired → ``expired_consent`` (never sent); target no longer
configured → ``dead``; sent → ``delivered``; failed → ``pending`` again after
``base * 2^(attempts-1)`` seconds (capped), or ``dead`` after ``max_attempts``
or on a permanent failure (a definite refusal: a 3xx or a 4xx answer other than
408/409/425/429, a 5xx SMTP reply; :func:`aap.leads.transports.refusal`).
``aap leads retry`` brings a dead row back. Each row remembers whether an attempt
may have been accepted (``reached``): the attempts after it go out as resends.
A row of kind ``notify`` is the new-lead e-mail to the rooftop's sales people
(:mod:`aap.leads.notify`), under the same rules. Every sweep also erases the leads past
``[leads] retention_days`` (:meth:`DeliveryWorker.retain`, :mod:`aap.leads.erasure`).

Log lines name lead, delivery and target ids, states and error classes only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from aap import AAP_VERSION, telemetry
from aap.config.leads import LeadSettings
from aap.config.model import DealerProfile, Settings
from aap.config.notifications import NOTIFY_KIND
from aap.leads import adf, erasure, notify, transports
from aap.netguard import Resolve
from aap.store import Stores
from aap.store.erasure import ErasureStore
from aap.store.leads import Attempt, Delivery, LeadStore
from aap.work import Work

log = logging.getLogger("aap.leads.delivery")

SWEEP_INTERVAL_SECONDS = 600.0


def filtered_request(request: dict[str, Any]) -> dict[str, Any]:
    """The lead with customer contact limited to the consented channels."""
    out = dict(request)
    customer = dict(request.get("customer") or {})
    channels = set((request.get("consent") or {}).get("allowed_channels") or [])
    if "email" not in channels:
        customer.pop("email", None)
    if not channels & {"phone", "sms"}:
        customer.pop("phone", None)
    out["customer"] = customer
    return out


class DeliveryWorker:
    """One worker's view of the outbox (stateless apart from its settings)."""

    def __init__(
        self,
        store: LeadStore,
        settings: Settings,
        *,
        work: Work,
        clock: Callable[[], float] = time.time,
        resolve: Resolve | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.work = work  # the process's door for blocking work: the store's calls, SMTP sessions
        self.leads: LeadSettings = settings.leads
        self.clock = clock
        self.resolve = resolve  # the resolver of SMTP hosts (None: the system's; tests give theirs)

    def client(self) -> httpx.AsyncClient:
        """An HTTP client for this worker's deployment: connections within ``Settings.outbound``."""
        return transports.delivery_client(self.settings.outbound, self.resolve)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- what is sent ----------------------------------------------------------------
    def _profile(self, dealer_id: str) -> DealerProfile:
        return self.settings.profile_for(dealer_id) or self.settings.dealer

    def view(self, d: Delivery) -> adf.LeadView:
        profile = self._profile(d.dealer_id)
        rooftop = profile.rooftop(d.rooftop) if d.rooftop else None
        return adf.LeadView(
            lead_id=d.lead_id,
            source=f"AAP {self.settings.deployment_id}",
            received_at=d.received_at,
            request=d.request,
            listing=d.listing,
            appointment=d.appointment,
            vendor_name=(rooftop or {}).get("name") or profile.name,
            rooftop=rooftop,
            dealer_id=profile.dealer_id,
            resend=d.reached,
        )

    def document(self, d: Delivery) -> dict[str, Any]:
        """The JSON webhook body: the AAP lead, its original result and its routing."""
        return {
            "type": "aap.lead",
            "aap_version": AAP_VERSION,
            "lead_id": d.lead_id,
            "delivery_id": d.delivery_id,
            "dealer_id": d.dealer_id,
            "rooftop": d.rooftop,
            "received_at": d.received_at,
            "resend": d.reached,
            "vehicle_link": {"state": d.vehicle_link, "vehicle_id": d.vehicle_id},
            "appointment": d.appointment,
            "request": filtered_request(d.request),
            "response": d.response,
        }

    # -- one pass ----------------------------------------------------------------------
    async def run_once(self, client: httpx.AsyncClient) -> int:
        """Claim one batch of due rows and process them concurrently; returns the batch size.

        The claim is renewed every third of ``lease_seconds`` while the batch is sent (a killed
        worker's rows are free ``lease_seconds`` after its last renewal), and handed back at
        once when the pass is cancelled (a worker stopping): docs/leads.md, "Claims"."""
        policy = self.leads.delivery
        lease_ms = int(policy.lease_seconds * 1000)
        batch = await self.work.blocking(self.store.claim_due, self.now_ms(), lease_ms, policy.batch_size)
        if not batch:
            return 0
        token = batch[0].claim_token
        started: set[str] = set()
        heartbeat = asyncio.create_task(self._heartbeat(token, lease_ms))
        try:
            await asyncio.gather(*(self._attempt(client, d, started) for d in batch))
        except BaseException:  # cancelled (or broken): what this worker still holds goes back now
            released = await asyncio.shield(
                self.work.blocking(self.store.release, token, self.now_ms(), sorted(started))
            )
            if released:
                log.warning("deliveries handed back unfinished", extra={"fields": {"count": released}})
            raise
        finally:
            heartbeat.cancel()
        return len(batch)

    async def renew(self, token: str) -> int:
        """Extend the claim ``token`` by ``lease_seconds`` from now; returns the rows it holds."""
        lease_ms = int(self.leads.delivery.lease_seconds * 1000)
        return await self.work.blocking(self.store.renew, token, self.now_ms() + lease_ms)

    async def _heartbeat(self, token: str, lease_ms: int) -> None:
        while True:
            await asyncio.sleep(lease_ms / 3000)
            try:
                await self.renew(token)
            except Exception as exc:  # the database may be briefly unavailable: the next beat tries again
                log.warning("delivery claim not renewed", extra={"fields": {"error_type": type(exc).__name__}})

    async def drain(self, client: httpx.AsyncClient) -> int:
        """Process batches until nothing is due right now (``aap deliver --once``)."""
        total = 0
        while True:
            count = await self.run_once(client)
            total += count
            if count < self.leads.delivery.batch_size:
                return total

    async def _attempt(self, client: httpx.AsyncClient, d: Delivery, started: set[str] | None = None) -> str:
        """One delivery; with tracing on (:mod:`aap.telemetry`), in a span of the trace of the
        request that stored the lead: ids, target name, kind, attempt and outcome, nothing of the lead."""
        tracing = telemetry.active
        if tracing is None:
            return await self._deliver(client, d, started)
        attributes: dict[str, str | int | bool] = {
            "aap.lead.id": d.lead_id,
            "aap.delivery.id": d.delivery_id,
            "aap.delivery.target": d.target,
            "aap.delivery.kind": d.kind,
            "aap.delivery.attempt": d.attempts,
        }
        with tracing.delivery(d.trace_context, attributes) as span:
            outcome = await self._deliver(client, d, started)
            span.set_attribute("aap.delivery.outcome", outcome)
            if outcome != "delivered":
                tracing.failed(span, outcome)
            return outcome

    async def _deliver(self, client: httpx.AsyncClient, d: Delivery, started: set[str] | None = None) -> str:
        """Send ``d``; its id goes into ``started`` as the send begins (from then on a stop makes
        the next attempt a resend: it may have reached the target)."""
        policy = self.leads.delivery
        attempt = Attempt(self.now_ms())
        if d.consent_expires_ms is not None and d.consent_expires_ms <= self.now_ms():
            await self.work.blocking(self.store.mark_expired_consent, d, self.now_ms(), attempt)
            log.warning("delivery not sent: consent expired", extra=_fields(d))
            return "expired_consent"
        if d.kind == NOTIFY_KIND:
            return await self._notify(d, attempt, started)
        target = self.leads.target(d.target)
        if target is None:
            await self.work.blocking(
                self.store.mark_dead, d, self.now_ms(), f"target {d.target} is no longer configured", attempt
            )
            log.error("delivery dead: target no longer configured", extra=_fields(d))
            return "dead"
        try:
            view = self.view(d)
            lead = transports.Outgoing(
                adf.render(view), self.document(d), d.lead_id, d.delivery_id, f"{d.lead_id} ({view.vendor_name})"
            )
            kind = transports.transport(target)
            attempt = Attempt(attempt.started_ms, *kind.payload(target, lead))
            if started is not None:
                started.add(d.delivery_id)
            via = transports.Via(
                client, policy.timeout_seconds, self.work, self.settings.outbound, self.resolve, self.settings.secrets
            )
            await kind.send(target, lead, via)
        except transports.SendError as exc:
            return await self._failed(d, str(exc), exc.permanent, attempt, exc.reached)
        except Exception as exc:  # a bug must not stop the other deliveries; no text: it may hold data
            return await self._failed(d, f"{type(exc).__name__} while preparing the delivery", False, attempt, False)
        held = await self.work.blocking(self.store.mark_delivered, d, self.now_ms(), attempt)
        if held:
            log.info("delivery delivered", extra=_fields(d))
        else:
            log.warning(
                "delivery sent after its claim lapsed; another worker may resend it "
                "(the CRM can drop the duplicate by lead id)",
                extra=_fields(d),
            )
        return "delivered"

    async def _notify(self, d: Delivery, attempt: Attempt, started: set[str] | None = None) -> str:
        """The new-lead e-mail to the rooftop's sales people (:mod:`aap.leads.notify`)."""
        to = notify.recipients(self.settings, d) if self.leads.notifications.enabled else ()
        if not to:
            await self.work.blocking(
                self.store.mark_dead, d, self.now_ms(), "no notification recipients are configured any more", attempt
            )
            log.error("notification dead: no recipients configured", extra=_fields(d))
            return "dead"
        try:
            email = notify.message(self.settings, d, to)
            attempt = Attempt(attempt.started_ms, "text/plain; charset=utf-8", email.get_content())
            target = notify.smtp_target(self.leads.notifications, to)
            if started is not None:
                started.add(d.delivery_id)
            await transports.send_email(
                target,
                email,
                self.leads.delivery.timeout_seconds,
                self.settings.outbound,
                self.resolve,
                self.settings.secrets,
                work=self.work,
            )
        except transports.SendError as exc:
            return await self._failed(d, str(exc), exc.permanent, attempt, exc.reached)
        except Exception as exc:  # a bug must not stop the other deliveries; no text: it may hold data
            return await self._failed(
                d, f"{type(exc).__name__} while preparing the notification", False, attempt, False
            )
        await self.work.blocking(self.store.mark_delivered, d, self.now_ms(), attempt)
        log.info("notification sent", extra=_fields(d, recipients=len(to)))
        return "delivered"

    async def _failed(self, d: Delivery, error: str, permanent: bool, attempt: Attempt, reached: bool) -> str:
        """Record a failed attempt; ``reached``: it may have reached the CRM (later ones are resends)."""
        policy = self.leads.delivery
        now = self.now_ms()
        if permanent or d.tries >= policy.max_attempts:
            await self.work.blocking(self.store.mark_dead, d, now, error, attempt, reached=reached)
            log.error("delivery dead", extra=_fields(d, error=error))
            return "dead"
        delay = policy.backoff(d.tries)
        await self.work.blocking(
            self.store.mark_retry, d, now, now + int(delay * 1000), error, attempt, reached=reached
        )
        log.warning("delivery failed; will retry", extra=_fields(d, error=error, retry_in_s=round(delay, 1)))
        return "pending"

    async def sweep(self) -> int:
        removed = await self.work.blocking(self.store.sweep_idempotency, self.now_ms())
        if removed:
            log.info("expired idempotency keys forgotten", extra={"fields": {"count": removed}})
        await self.retain()
        return removed

    async def retain(self) -> int:
        """Erase the leads past ``[leads] retention_days`` (one bounded pass; the next sweep goes
        on where it stopped); returns how many were erased."""
        days = self.leads.retention_days
        if days is None:
            return 0
        result = await self.work.blocking(erasure.purge, ErasureStore(self.store.db), days, self.now_ms())
        if result.lead_ids:
            fields = {"count": len(result.lead_ids), "erasures": result.erasure_ids, "more": result.more}
            log.info("leads past their retention period erased", extra={"fields": fields})
        return len(result.lead_ids)


def _fields(d: Delivery, **more: object) -> dict[str, Any]:
    """The log fields of a delivery: ids and routing as values, never inside the message."""
    return {
        "fields": {
            "delivery_id": d.delivery_id,
            "lead_id": d.lead_id,
            "target": d.target,
            "kind": d.kind,
            "attempt": d.attempts,
            **more,
        }
    }


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))
    except TimeoutError:
        pass


async def run_delivery_worker(stores: Stores, settings: Settings, stop: asyncio.Event, work: Work) -> None:
    """Deliver until ``stop`` is set: a pass, then sleep ``poll_seconds`` when idle."""
    worker = DeliveryWorker(stores.leads, settings, work=work)
    policy = worker.leads.delivery
    next_sweep = 0.0
    log.info("lead delivery worker started")
    async with worker.client() as client:
        while not stop.is_set():
            try:
                if time.monotonic() >= next_sweep:
                    await worker.sweep()
                    next_sweep = time.monotonic() + SWEEP_INTERVAL_SECONDS
                count = await worker.run_once(client)
            except Exception as exc:  # the database may be briefly unavailable; keep going
                log.error("lead delivery pass failed", extra={"fields": {"error_type": type(exc).__name__}})
                count = 0
            if count < policy.batch_size:
                await _wait(stop, policy.poll_seconds)
    log.info("lead delivery worker stopped")


@asynccontextmanager
async def delivery_lifespan(stores: Stores, settings: Settings, work: Work) -> AsyncIterator[None]:
    """Run the worker on ``stores`` while the context is entered (the app's lifetime).

    Does nothing when ``[leads.delivery] in_process = false`` (deliveries then
    come from a separate ``aap deliver`` process).
    """
    if not settings.leads.delivery.in_process:
        yield
        return
    stop = asyncio.Event()
    task = asyncio.create_task(run_delivery_worker(stores, settings, stop, work))
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=settings.leads.delivery.timeout_seconds + 5)
        except TimeoutError:
            task.cancel()
