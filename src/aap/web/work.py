"""Where a binding runs the core's blocking work: on the event loop when it is short,
else on the worker's one small executor.

Handing every request to a thread pool costs more than most AAP reads do: with
16 requests in flight, 16 threads wake, contend for the GIL and switch several
times per request (docs/benchmarks.md, "The HTTP path"). On SQLite a typical
search is a few hundred microseconds of this process's own CPU, so running it
right on the event loop is the cheapest place; a long one (a first keyword
count, a count over most of the inventory, filtered facets before they are
cached) must not hold the loop, and neither may a write (a lead commit, a
rate-limit lease), which can wait for another process's write lock.

:class:`Work` decides by *shape* (:meth:`~aap.agent.DealerAgent.work_shape`:
the skill, the filters named, the sort field), whose cost barely depends on the
values: a shape runs inline once a run of it has been seen to cost at most
:data:`INLINE_BUDGET` of CPU; an unknown shape, a shape seen slow, a write and
anything on a database across the network (PostgreSQL, where every query waits)
run on the executor. A slow run counts at once; fast runs bring a shape's cost
back down by halves, so a shape that is sometimes slow mostly stays off the loop.

One :class:`Work` per agent (:func:`work_for`), so the surfaces of one app share
its threads (each with its own database connection) and what it learned.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Hashable, TypeVar
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from aap.agent import DealerAgent

T = TypeVar("T")

#: CPU seconds a run may take and still be run on the event loop next time.
INLINE_BUDGET = 0.001
#: Threads of a worker's executor: enough to overlap long work and database waits,
#: few enough that requests do not fight over the GIL.
THREADS = 4
#: Shapes remembered (least recently used forgotten first).
SHAPES = 1024


class Work:
    """Runs blocking calls inline or on a small executor, by what their shape has cost."""

    def __init__(self, *, inline: bool, threads: int = THREADS, budget: float = INLINE_BUDGET) -> None:
        self.inline = inline
        self.budget = budget
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="aap-work")
        self._cost: dict[Hashable, float] = {}
        self._lock = threading.Lock()

    def short(self, shape: Hashable | None) -> bool:
        """True when ``shape`` runs on the event loop."""
        if not self.inline or shape is None:
            return False
        cost = self._cost.get(shape)  # one dict read: atomic, no lock needed
        return cost is not None and cost <= self.budget

    async def run(self, shape: Hashable | None, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``: inline when ``shape`` is short, else on the executor; its cost is noted."""
        if self.short(shape):
            assert shape is not None
            started = time.perf_counter()  # on the loop, the time it was held
            try:
                return fn(*args)
            finally:
                self.note(shape, time.perf_counter() - started)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._timed, shape, fn, args)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the executor, always (a write, a wait)."""
        call = partial(fn, *args, **kwargs) if kwargs else partial(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

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


_WORK: WeakKeyDictionary[DealerAgent, Work] = WeakKeyDictionary()
_WORK_LOCK = threading.Lock()


def work_for(agent: DealerAgent) -> Work:
    """The one :class:`Work` of ``agent``, made on first use."""
    with _WORK_LOCK:
        work = _WORK.get(agent)
        if work is None:
            work = _WORK[agent] = Work(inline=agent.stores.db.in_process)
        return work
