"""A large feed read and imported at once: reading in a child process, storing in this one.

Reading (decode, transform, check every row) and storing (one transaction)
each take about half an import's time, and Python runs one of them at a
time in a process. For a large feed the reading runs in a child process
(``forkserver``: safe in a process with threads, such as ``aap serve``) that
sends accepted listings in batches over a pipe, while this process writes
them in the import transaction. The rules stay those of the sequential path
(:mod:`aap.feeds.job`): a bad row in an all-or-nothing import makes the
child say so at once and the transaction rolls back; a feed without listings
rolls back too; the child's final report (problems, warnings, rejected rows)
is the same report the sequential path gives.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson

from aap.inventory.formats import FeedReport, ReadOptions, read_feed_bytes
from aap.inventory.listing_rules import FeedError, FeedProblem
from aap.store import Stores
from aap.store.inventory import Carried, ImportStats

#: Feeds at least this large (bytes, as fetched) are read in a child process.
PIPELINE_MIN_BYTES = 4 << 20

_BATCH, _REJECT, _FINAL = b"B", b"R", b"F"


class Rejected(Exception):
    """The child found a bad row in an all-or-nothing import (the import rolls back)."""


class Unavailable(Exception):
    """The reading process could not be started (the caller reads in this process instead)."""


class Empty(Exception):
    """The feed gave no listing (the import rolls back)."""


@dataclass
class Outcome:
    """What the pipelined import ended with."""

    report: FeedReport | None
    stats: ImportStats | None = None
    error: BaseException | None = None  # Rejected, Empty, ShrinkRefused, InventoryImportError
    file_error: FeedError | None = None
    lines: list[int] | None = None


class _PipeSink:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def batch(self, listings: list[dict[str, Any]], lines: list[int], carried: list[str] | None) -> None:
        self.conn.send_bytes(_BATCH + orjson.dumps([listings, lines, carried]))

    def reject(self) -> None:
        self.conn.send_bytes(_REJECT)


def _child(data: bytes, name: str, options: ReadOptions, conn: Connection) -> None:
    """The reading process: batches of listings, then the final report (or the file's problems)."""
    try:
        report = read_feed_bytes(data, name, options, sink=_PipeSink(conn))
        final: tuple[str, Any] = ("report", report)
    except FeedError as exc:
        final = ("error", (exc.problems, exc.total, exc.source))
    except Exception as exc:  # reported to the parent by type only
        final = ("error", ([FeedProblem(1, "", f"the feed could not be read ({type(exc).__name__})")], 1, name))
    conn.send_bytes(_FINAL + pickle.dumps(final))
    conn.close()


def available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def read_and_import(
    stores: Stores,
    data: bytes,
    name: str,
    options: ReadOptions,
    import_kwargs: dict[str, Any],
    progress: Callable[[int], None] | None = None,
) -> Outcome:
    """Read ``data`` in a child process while importing its listings here (blocking: run in a thread)."""
    context = multiprocessing.get_context("forkserver")
    # The fork server loads the reader once; each child is then a cheap fork of it.
    context.set_forkserver_preload(["aap.feeds.pipeline"])
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(data, name, options, sender), daemon=True)
    try:
        process.start()
    except (OSError, EOFError) as exc:
        receiver.close()
        sender.close()
        raise Unavailable(type(exc).__name__) from None
    sender.close()
    lines: list[int] = []
    final: list[tuple[str, Any]] = []
    carried = Carried()  # what the feed carries, as the child reads it

    def listings() -> Iterator[dict[str, Any]]:
        count = 0
        while True:
            message = receiver.recv_bytes()
            kind = message[:1]
            if kind == _BATCH:
                batch, batch_lines, fields = orjson.loads(message[1:])
                carried.update(fields)
                lines.extend(batch_lines)
                yield from batch
                count += len(batch)
                if progress is not None:
                    progress(count)
            elif kind == _REJECT:
                raise Rejected()
            else:
                final.append(pickle.loads(message[1:]))
                break
        if count == 0 or final[0][0] == "error":
            raise Empty()

    outcome = Outcome(None)
    try:
        try:
            outcome.stats = stores.inventory.import_listings(listings(), carried=carried, **import_kwargs)
        except Exception as exc:  # the import rolled back; the caller reports why
            outcome.error = exc
        while not final:  # the rest of the child's messages, up to its report
            message = receiver.recv_bytes()
            if message[:1] == _FINAL:
                final.append(pickle.loads(message[1:]))
    except EOFError:
        final.append(("error", ([FeedProblem(1, "", "the reading process ended early")], 1, name)))
    finally:
        receiver.close()
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
    kind, value = final[0]
    if kind == "error":
        problems, total, source = value
        outcome.file_error = FeedError(problems, total, source)
    else:
        outcome.report = value
    outcome.lines = lines
    return outcome
