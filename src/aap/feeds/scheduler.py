"""The feed scheduler: run each ``[[feeds]]`` entry when due, once, across every worker and server.

Runs inside ``aap serve`` (:func:`feeds_lifespan`, one of ``server/app.py``'s
``SERVICES``) or on its own (``aap feeds run``). Any number of schedulers may
share one database: a feed is imported only by the scheduler holding its
lease (:meth:`aap.store.feeds.FeedStore.claim`, which re-checks "due and not
held"), the holder renews the lease while a long import runs, and a lease
that lapses (a killed process) lets another scheduler take the feed.

After a success the next run follows the schedule; after a failure (the
source unreachable, the feed rejected, a safety rule refusing it) the stored
inventory stays as it was and the feed is retried after ``retry_seconds``,
doubling with each failure and never later than its next scheduled run.

Log lines name feeds, outcomes and counts only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import replace

from aap.config.credentials import SecretValues
from aap.config.feeds import FeedSettings, retry_delay
from aap.config.model import Settings
from aap.feeds.fetch import Credentials, FetchRules, Validators, display_source
from aap.feeds.job import ImportRequest, ImportResult, run_import
from aap.inventory.formats import Formats, MappingError, read_mapping
from aap.netguard import LOCAL, Reach
from aap.store import Stores
from aap.store.feeds import FeedRun
from aap.store.inventory import ContentGuard
from aap.work import Work

log = logging.getLogger("aap.feeds")

MIN_LEASE_SECONDS = 120.0
MAX_IDLE_SECONDS = 60.0  # a scheduler looks at the feeds at least this often


def request_for(
    feed: FeedSettings,
    *,
    dry_run: bool = False,
    formats: Formats | None = None,
    outbound: Reach = LOCAL,
    secrets: SecretValues | None = None,
) -> ImportRequest:
    """The import a ``[[feeds]]`` entry asks for (its mapping file read now), its connections
    within the deployment's ``outbound`` policy, its tenant secrets' values from ``secrets``."""
    formats = formats if formats is not None else Formats()
    mapping = read_mapping(feed.mapping, formats) if feed.mapping else None
    return ImportRequest(
        source=feed.source,
        trigger="schedule",
        feed=feed.name,
        format=feed.format,
        mapping=mapping,
        encoding=feed.encoding,
        delimiter=feed.delimiter,
        dealer_id=feed.dealer_id,
        replace=feed.replace,
        partial=feed.skip_invalid,
        strict=feed.strict,
        dry_run=dry_run,
        max_removed_share=feed.max_removed_share,
        credentials=Credentials(
            feed.username_env,
            feed.password_env,
            feed.token_env,
            feed.key_file,
            feed.known_hosts,
            feed.ca_file,
            feed.username_secret,
            feed.password_secret,
            feed.token_secret,
            secrets or SecretValues(),
        ),
        rules=FetchRules(feed.timeout_seconds, feed.min_bytes_per_second, feed.private_network, outbound),
        formats=formats,
        rooftop=feed.rooftop,
        allow_field_loss=feed.allow_field_loss,
        guard=ContentGuard(feed.max_field_loss_share, feed.max_price_change),
    )


class FeedScheduler:
    """Runs the configured feeds of one deployment on its database."""

    def __init__(
        self, stores: Stores, settings: Settings, *, work: Work, clock: Callable[[], float] = time.time
    ) -> None:
        self.stores = stores
        self.settings = settings
        self.work = work  # the process's door for blocking work: the feed store's calls, imports
        self.clock = clock
        self.formats = Formats()  # the built-in format tables, parsed once for this scheduler

    def _ms(self) -> int:
        return int(self.clock() * 1000)

    def lease_seconds(self, feed: FeedSettings) -> float:
        return max(MIN_LEASE_SECONDS, feed.timeout_seconds / 2)

    async def run_feed(
        self, feed: FeedSettings, *, due_only: bool = True, trigger: str = "schedule"
    ) -> ImportResult | None:
        """Import ``feed`` if this scheduler gets its lease (and, with ``due_only``, it is due);
        ``trigger`` is what the history records as having started it (``console``: "run now")."""
        store = self.stores.feeds
        lease_ms = int(self.lease_seconds(feed) * 1000)
        token = await self.work.blocking(store.claim, feed.name, self._ms(), lease_ms, due_only=due_only)
        if token is None:
            return None
        state = await self.work.blocking(store.state, feed.name)
        previous = Validators(state.etag, state.last_modified, state.fingerprint) if state else Validators()
        failures = state.failures if state else 0
        heartbeat = asyncio.create_task(self._renew(feed.name, token, lease_ms))
        try:
            try:
                request = replace(
                    request_for(
                        feed, formats=self.formats, outbound=self.settings.outbound, secrets=self.settings.secrets
                    ),
                    trigger=trigger,
                )
            except MappingError as exc:
                result = ImportResult(self._failed_run(feed, f"mapping file: {exc}"))
                await self.work.blocking(store.record, result.run)
            else:
                result = await run_import(self.stores, self.settings, request, work=self.work, previous=previous)
        finally:
            heartbeat.cancel()
            with suppress(asyncio.CancelledError):
                await heartbeat
        now = self.clock()
        run = result.run
        if result.ok:
            validators = result.fetched.validators if result.fetched else previous
            await self.work.blocking(
                store.release,
                feed.name,
                token,
                now_ms=int(now * 1000),
                next_run_ms=int(feed.schedule.next_after(now) * 1000),
                outcome=run.outcome,
                success=True,
                failures=0,
                etag=validators.etag,
                last_modified=validators.last_modified,
                fingerprint=validators.fingerprint,
            )
            log.info(
                "feed %s: %s (%d new, %d updated, %d unchanged, %d removed, %d skipped)",
                feed.name,
                run.outcome,
                *run.changes,
            )
        else:
            failures += 1
            delay = retry_delay(feed, failures, now)
            await self.work.blocking(
                store.release,
                feed.name,
                token,
                now_ms=int(now * 1000),
                next_run_ms=int((now + delay) * 1000),
                outcome=run.outcome,
                success=False,
                failures=failures,
            )
            log.warning(
                "feed %s: %s (failure %d; retry in %.0fs): %s", feed.name, run.outcome, failures, delay, run.message
            )
        return result

    def _failed_run(self, feed: FeedSettings, message: str) -> FeedRun:
        now = self._ms()
        return FeedRun(
            trigger="schedule",
            source=display_source(feed.source),
            started_ms=now,
            finished_ms=now,
            outcome="failed",
            feed=feed.name,
            message=message,
            replace=feed.replace,
        )

    async def _renew(self, name: str, token: str, lease_ms: int) -> None:
        while True:
            await asyncio.sleep(lease_ms / 3000)
            held = await self.work.blocking(self.stores.feeds.renew, name, token, self._ms() + lease_ms)
            if not held:
                log.warning("feed %s: lease lost during the import", name)
                return

    async def run_due(self, *, due_only: bool = True, names: set[str] | None = None) -> list[ImportResult]:
        """One pass: every feed that is due (or every feed) and not held elsewhere."""
        feeds = [f for f in self.settings.feeds if names is None or f.name in names]
        await self.work.blocking(self.stores.feeds.ensure, [f.name for f in feeds], self._ms())
        results = []
        for feed in feeds:
            try:
                result = await self.run_feed(feed, due_only=due_only)
            except Exception as exc:  # one feed's bug must not stop the others; no text: may name data
                log.error("feed %s: run failed: %s", feed.name, type(exc).__name__)
                continue
            if result is not None:
                results.append(result)
        return results

    async def seconds_until_due(self) -> float:
        """How long until the earliest feed is due (bounded by :data:`MAX_IDLE_SECONDS`)."""
        states = await self.work.blocking(self.stores.feeds.states)
        names = {f.name for f in self.settings.feeds}
        due = [s.next_run_ms for s in states if s.feed in names]
        if not due:
            return MAX_IDLE_SECONDS
        return max(0.0, min(MAX_IDLE_SECONDS, (min(due) - self._ms()) / 1000 + 0.05))

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Run feeds as they fall due until ``stop`` is set."""
        log.info("feed scheduler started (%d feed(s))", len(self.settings.feeds))
        while not stop.is_set():
            try:
                await self.run_due()
                wait = await self.seconds_until_due()
            except Exception as exc:  # the database may be briefly unavailable; keep going
                log.error("feed scheduler pass failed: %s", type(exc).__name__)
                wait = MAX_IDLE_SECONDS
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.5))
        log.info("feed scheduler stopped")


@asynccontextmanager
async def feeds_lifespan(stores: Stores, settings: Settings, work: Work) -> AsyncIterator[None]:
    """Run the scheduler on ``stores`` while the context is entered, when there are ``[[feeds]]``."""
    if not settings.feeds:
        yield
        return
    stop = asyncio.Event()
    task = asyncio.create_task(FeedScheduler(stores, settings, work=work).run_forever(stop))
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, timeout=10)
        except TimeoutError:
            task.cancel()
