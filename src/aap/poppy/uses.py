"""The single-use values of API calls, written in batches: one write for the calls in flight together.

Every call of the native API spends its DPoP proof's ``jti`` (and a
Poppy-Session's) in the replay cache every worker shares, before the call
runs: a write. Written one call at a time, each write also cost a hop to the
executor, and on SQLite it emptied the page cache of every other connection;
a Poppy search cost twice an A2A one (docs/benchmarks.md, "The HTTP path").

Calls that arrive while a batch is being written wait for the next batch, and
a batch is one transaction (:meth:`~aap.store.poppy.PoppyStore.use_sessions`),
in which each call's values are recorded — or refused as replayed — on their
own. A call that finds no batch being written starts one, written after one
more turn of the event loop (so a lone call waits no longer than that); under
load, the calls of one write's duration share the next.
"""

from __future__ import annotations

import asyncio
from weakref import WeakKeyDictionary

from aap.gateway import Gateway
from aap.store.poppy import PoppyStore, SessionUse

#: Calls written in one transaction at most.
BATCH = 64


class _Queue:
    """The calls waiting on one event loop, and whether a batch is being written."""

    def __init__(self) -> None:
        self.waiting: list[tuple[SessionUse, asyncio.Future[None]]] = []
        self.writing = False


class UseBatches:
    """Records calls' single-use values in batches (see the module docstring)."""

    def __init__(self, store: PoppyStore, gateway: Gateway) -> None:
        self.store = store
        self.gateway = gateway
        self._queues: WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = WeakKeyDictionary()

    async def record(self, use: SessionUse) -> None:
        """Spend ``use``'s values; :class:`~aap.store.poppy.Replayed` when one was spent before."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        future: asyncio.Future[None] = loop.create_future()
        queue.waiting.append((use, future))
        if not queue.writing:
            queue.writing = True
            loop.create_task(self._write(queue))
        await future

    async def _write(self, queue: _Queue) -> None:
        try:
            # One more turn of the event loop first: the calls it is handling at this moment join
            # this batch instead of each starting the next (Poppy at 16 connections: 0.53 ->
            # 0.50 ms of CPU per call); a lone call waits that one turn.
            await asyncio.sleep(0)
            while queue.waiting:
                batch, queue.waiting = queue.waiting[:BATCH], queue.waiting[BATCH:]
                try:
                    outcomes = await self.gateway.blocking(self.store.use_sessions, [use for use, _ in batch])
                except Exception as exc:  # the database failed: every call of the batch fails with it
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), replayed in zip(batch, outcomes):
                    if future.done():  # its caller went away
                        continue
                    if replayed is None:
                        future.set_result(None)
                    else:
                        future.set_exception(replayed)
        finally:
            queue.writing = False
