"""Telling a platform what happened to its tenants: the events sender (docs/platform.md, "Events").

Events are recorded where they happen, each in the transaction of its cause, by one call to
:func:`aap.store.platform_events.emit`: a tenant added, updated, removed, suspended or resumed
(:mod:`aap.store.platform`, with its audit row), its stored configuration found broken, a feed
run that failed (:mod:`aap.store.feeds`), a lead delivery given up (:mod:`aap.store.leads`).
This module sends them: every worker of ``aap serve`` on a platform runs :meth:`EventSender.run_once`
in its background loop (:mod:`aap.server.platform_services`), and ``aap tenants events
--deliver`` runs one pass from the command line. Rows are claimed with a lease, so workers on
any number of hosts never post one event at once; a failed post is retried with a doubling
wait until ``events_max_attempts``, then the event is ``dead`` (``aap tenants events --retry``).

What is posted: ``{"id", "type", "tenant", "occurred_at", "data"}`` as JSON, signed as the lead
webhooks are (:func:`aap.leads.transports.signature_headers`: ``X-AAP-Timestamp``,
``X-AAP-Signature``), with ``X-AAP-Event-Id`` and ``Idempotency-Key`` set to the event's id so
a receiver drops a repeat (delivery is at least once: a post whose answer was lost is sent
again). ``data`` holds ids, states and reasons, never customer data.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson

from aap.config.platform import PlatformSettings
from aap.leads import transports
from aap.store.platform_events import RETENTION_MS, Event, EventStore
from aap.work import Work

log = logging.getLogger("aap.platform.events")

USER_AGENT = "aap-platform-events/1"
#: Events claimed per pass, and posted at once (the platform's endpoint is one service, not a
#: crowd of CRMs: a few connections at a time).
BATCH = 12
AT_ONCE = 4
#: How long a post may take; the claim's lease outlasts a whole batch of them
#: (``BATCH / AT_ONCE`` rounds of ``TIMEOUT_SECONDS`` at most).
TIMEOUT_SECONDS = 10.0
LEASE_MS = 60_000
#: The longest wait between two attempts of an event.
MAX_BACKOFF_SECONDS = 3600.0


def occurred_at(ms: int) -> str:
    """An instant as RFC 3339 (UTC, milliseconds)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def document(event: Event) -> dict[str, Any]:
    """What the platform is posted of ``event``."""
    return {
        "id": event.event_id,
        "type": event.type,
        "tenant": event.tenant_id,
        "occurred_at": occurred_at(event.occurred_ms),
        "data": event.data,
    }


class EventSender:
    """One worker's view of the platform's events (stateless apart from its settings)."""

    def __init__(
        self,
        store: EventStore,
        settings: PlatformSettings,
        *,
        work: Work,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.work = work
        self.clock = clock
        self.environ = os.environ if environ is None else environ

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def secret(self) -> str | None:
        """The signing secret, read at each pass (a file's new value is used without a restart)."""
        if self.settings.events_secret_file:
            try:
                with open(self.settings.events_secret_file, encoding="utf-8") as f:
                    return f.read(4096).strip() or None
            except OSError:
                return None
        return self.environ.get(self.settings.events_secret_env) or None

    def backoff(self, attempts: int) -> float:
        return min(MAX_BACKOFF_SECONDS, self.settings.events_retry_seconds * 2 ** max(0, attempts - 1))

    async def run_once(self, client: httpx.AsyncClient) -> int:
        """Claim one batch of due events and post them; returns the batch size."""
        if not await self.work.blocking(self.store.any_due, self.now_ms()):
            return 0
        batch = await self.work.blocking(self.store.claim_due, self.now_ms(), LEASE_MS, BATCH)
        if not batch:
            return 0
        secret = await self.work.blocking(self.secret)
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(event: Event) -> None:
            async with gate:
                await self._one(client, event, secret)

        try:
            await asyncio.gather(*(one(event) for event in batch))
        except BaseException:  # cancelled: what this worker still holds is due again at once
            await asyncio.shield(self.work.blocking(self.store.release, batch[0].claim_token or ""))
            raise
        return len(batch)

    async def drain(self, client: httpx.AsyncClient) -> int:
        """Passes until nothing is due right now (``aap tenants events --deliver``)."""
        total = 0
        while True:
            count = await self.run_once(client)
            total += count
            if count < BATCH:
                return total

    async def _one(self, client: httpx.AsyncClient, event: Event, secret: str | None) -> None:
        url = self.settings.events_url
        types = self.settings.events_types
        if url is None or (types is not None and event.type not in types):
            why = "no events_url is configured" if url is None else "its type is not in events_types"
            await self.work.blocking(self.store.mark_skipped, event, self.now_ms(), why)
            return
        try:
            if secret is None:
                where = self.settings.events_secret_file or f"environment variable {self.settings.events_secret_env}"
                raise transports.SendError(f"no signing secret ({where} is not set)")
            body = orjson.dumps(document(event))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                "Idempotency-Key": event.event_id,
                "X-AAP-Event-Id": event.event_id,
                "X-AAP-Event-Type": event.type,
                **transports.signature_headers(secret, body),
            }
            await transports.post(client, url, body, headers, None, TIMEOUT_SECONDS)
        except transports.SendError as exc:
            await self._failed(event, str(exc))
            return
        except Exception as exc:  # a bug must not stop the other events
            await self._failed(event, f"{type(exc).__name__} while posting the event")
            return
        await self.work.blocking(self.store.mark_delivered, event, self.now_ms())
        log.info("platform event delivered", extra=_fields(event))

    async def _failed(self, event: Event, error: str) -> None:
        """Every failure is retried (the platform's own endpoint may be down or misconfigured
        for a while) until the attempts run out."""
        now = self.now_ms()
        if event.attempts >= self.settings.events_max_attempts:
            await self.work.blocking(self.store.mark_dead, event, now, error)
            log.error("platform event dead", extra=_fields(event, error=error))
            return
        delay = self.backoff(event.attempts)
        await self.work.blocking(self.store.mark_retry, event, now + int(delay * 1000), error)
        log.warning("platform event failed; will retry", extra=_fields(event, error=error, retry_in_s=delay))

    async def prune(self) -> int:
        """Forget finished events past their retention."""
        return await self.work.blocking(self.store.prune, self.now_ms() - RETENTION_MS)


def _fields(event: Event, **more: object) -> dict[str, Any]:
    return {
        "fields": {
            "event_id": event.event_id,
            "event_type": event.type,
            "tenant": event.tenant_id,
            "attempt": event.attempts,
            **more,
        }
    }
