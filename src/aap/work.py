"""Where the gateway runs the core's blocking work: on the event loop when it is short,
else on the worker's one small executor.

Handing every request to a thread pool costs more than most AAP reads do: with
16 requests in flight, 16 threads wake, contend for the GIL and switch several
times per request (docs/benchmarks.md, "The HTTP path"). On SQLite a typical
search is a few hundred microseconds of this process's own CPU, so running it
right on the event loop is the cheapest place; a long one (a first keyword
count, a count over most of the inventory, filtered facets before they are
cached) must not hold the loop, and neither may a write (a lead commit, a
rate-limit lease), which can wait for another process's write lock.

:class:`Work` decides by *shape* (:func:`aap.gateway.work_shape`:
the skill, the filters named, the sort field), whose cost barely depends on the
values: a shape runs inline once a run of it has been seen to cost at most
:data:`INLINE_BUDGET` of CPU; an unknown shape, a shape seen slow, a write and
anything on a database across the network (PostgreSQL, where every query waits)
run on the executor. A slow run counts at once; fast runs bring a shape's cost
back down by halves, so a shape that is sometimes slow mostly stays off the loop.
A request of a platform's tenant at its bound (:data:`OFF_LOOP`) runs on the
executor whatever its shape, so that a flood does not hold the loop the other
tenants are served on (docs/platform.md, "Fair sharing").

The composition root builds one :class:`Work` per worker process and gives it to the
gateway (:mod:`aap.gateway`), the one module that places work: every door of the app
shares its threads (each with its own database connection) and what it learned.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from functools import partial
from typing import Any, TypeVar

from aap import telemetry

T = TypeVar("T")

log = logging.getLogger("aap.work")

#: CPU seconds a run may take and still be run on the event loop next time.
INLINE_BUDGET = 0.001
#: Threads of a worker's executor on SQLite, where only long work and writes go there:
#: enough to overlap them, few enough that requests do not fight over the GIL. Each holds a
#: connection and its page cache: 8 threads held 4 MiB more than 2 under the 100k benchmark
#: (docs/benchmarks.md, "Memory").
THREADS = 4
#: On a database across the network every query goes there and mostly waits for the
#: server: as many threads as the connection pool has connections (store/postgres.py).
NETWORK_THREADS = 10
#: Shapes remembered (least recently used forgotten first).
SHAPES = 1024
#: Threads for long calls (:meth:`Work.long`): a feed's fetch and import, an SMTP session.
LONG_THREADS = 4
#: True while serving a request whose work must not run on the event loop, whatever its shape:
#: a request of a platform's tenant at its bound (docs/platform.md, "Fair sharing").
OFF_LOOP: ContextVar[bool] = ContextVar("aap_off_loop", default=False)


class Work:
    """Runs blocking calls inline or on a small executor, by what their shape has cost."""

    def __init__(self, *, inline: bool, threads: int | None = None, budget: float = INLINE_BUDGET) -> None:
        self.inline = inline
        self.budget = budget
        threads = threads or (THREADS if inline else NETWORK_THREADS)
        #: The executor's size (a platform derives a tenant's share of this worker from it).
        self.threads = threads
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="aap-work")
        self._cost: dict[Hashable, float] = {}
        self._lock = threading.Lock()
        self._flights: dict[Hashable, asyncio.Future[None]] = {}  # on the event loop only
        self._background: set[asyncio.Task[None]] = set()  # referenced until done
        self._long: ThreadPoolExecutor | None = None  # made on first use: most processes never need it

    @classmethod
    def for_database(cls, in_process: bool) -> Work:
        """The Work of a process whose database is in this process (SQLite) or not: what a
        command that is its own composition root (``aap deliver``, ``aap feeds run``) builds."""
        return cls(inline=in_process)

    def short(self, shape: Hashable | None) -> bool:
        """True when ``shape`` runs on the event loop."""
        if not self.inline or shape is None or OFF_LOOP.get():
            return False
        cost = self._cost.get(shape)  # one dict read: atomic, no lock needed
        return cost is not None and cost <= self.budget

    def seen(self, shape: Hashable | None) -> float | None:
        """The CPU seconds runs of ``shape`` were seen to cost here, or None when never seen."""
        return self._cost.get(shape) if shape is not None else None

    async def run(self, shape: Hashable | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: inline when ``shape`` is short, else on the executor; its cost is noted."""
        if self.short(shape):
            assert shape is not None
            started = time.thread_time()  # CPU: a busy machine's preemptions do not count
            try:
                return fn(*args)
            finally:
                self.note(shape, time.thread_time() - started)
        loop = asyncio.get_running_loop()
        tracing = telemetry.active
        if tracing is None:
            return await loop.run_in_executor(self.executor, self._timed, shape, fn, args)
        # Tracing: the executor's thread runs it in the request's context (its spans are children).
        return await loop.run_in_executor(self.executor, tracing.carried(partial(self._timed, shape, fn, args)))

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the executor, always (a write, a wait)."""
        call: Callable[[], T] = partial(fn, *args, **kwargs) if kwargs else partial(fn, *args)
        tracing = telemetry.active
        if tracing is not None:
            call = tracing.carried(call)
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def long(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the executor of long calls: a call that may wait seconds on the
        network or a big import (a feed's fetch and import, an SMTP session) never holds the
        threads the requests' reads and writes run on."""
        if self._long is None:
            self._long = ThreadPoolExecutor(LONG_THREADS, thread_name_prefix="aap-long")
        call: Callable[[], T] = partial(fn, *args)
        tracing = telemetry.active
        if tracing is not None:
            call = tracing.carried(call)
        return await asyncio.get_running_loop().run_in_executor(self._long, call)

    async def single_flight(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> bool:
        """``fn(*args)`` on the executor, unless a call with ``key`` is already running: then
        wait for that one instead. True when this call ran ``fn`` (its exception propagates),
        False when it waited for another's."""
        running = self._flights.get(key)
        if running is not None:
            await asyncio.wait([running])  # its outcome is its caller's; only the wait is ours
            return False
        flight: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flights[key] = flight
        try:
            await self.blocking(fn, *args)
            return True
        finally:
            del self._flights[key]
            flight.set_result(None)

    def in_background(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the executor without waiting for it, unless a call with ``key`` is
        already running. Its flight is registered at once, so a :meth:`single_flight` of the
        same key started meanwhile waits for it; a failure is logged by type only."""
        if key in self._flights:
            return
        loop = asyncio.get_running_loop()
        flight: asyncio.Future[None] = loop.create_future()
        self._flights[key] = flight

        async def run() -> None:
            try:
                await self.blocking(fn, *args)
            except Exception as exc:  # nobody awaits it: log, never raise into the loop
                log.warning("background %s failed: %s", getattr(fn, "__name__", "call"), type(exc).__name__)
            finally:
                del self._flights[key]
                flight.set_result(None)

        task = loop.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _timed(self, shape: Hashable | None, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        started = time.thread_time()  # this thread's CPU: not inflated by waiting for the GIL
        try:
            return fn(*args)
        finally:
            if shape is not None:
                self.note(shape, time.thread_time() - started)

    def note(self, shape: Hashable, seconds: float) -> None:
        """Record one run of ``shape``: a slow run counts at once, a fast one halves the way down."""
        with self._lock:
            cost = self._cost.pop(shape, None)  # re-inserted last: the dict keeps use order
            self._cost[shape] = seconds if cost is None or seconds >= cost else (cost + seconds) / 2
            if len(self._cost) > SHAPES:
                del self._cost[next(iter(self._cost))]

    def close(self) -> None:
        """Stop the executor's threads once their current calls end (the app is stopping)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self._long is not None:
            self._long.shutdown(wait=False, cancel_futures=True)
