"""Single-use values written in batches: one transaction for the API calls in flight together,
each call recorded or refused as replayed on its own. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from aap.agent import DealerAgent
from aap.gateway import Gateway
from aap.poppy.uses import UseBatches
from aap.store import open_stores
from aap.store.poppy import Replayed, SessionUse
from aap.work import Work
from conftest import make_settings
from test_ratelimit import WriteCounter


@pytest.fixture
def stores(database_url):
    opened = open_stores(database_url)
    yield opened
    opened.close()


def use(*entries: str) -> SessionUse:
    expires = time.time() + 300
    return SessionUse(None, tuple(("dpop:client", entry, expires) for entry in entries))


def recorded(stores) -> set[str]:
    with stores.db.read() as tx:
        return {row[0] for row in tx.fetchall("SELECT entry FROM poppy_replay")}


def test_a_batch_records_each_call_or_refuses_it_alone(stores):
    """A replayed call in the batch leaves none of its own values behind, and every other call
    of the batch is recorded, in one write."""
    stores.poppy.use_sessions([use("seen")])
    counter = WriteCounter(stores.db)
    outcomes = stores.poppy.use_sessions([use("a1", "a2"), use("b1", "seen"), use("c1"), use("a1")])
    assert counter.writes == 1
    assert [type(o).__name__ if o else None for o in outcomes] == [None, "Replayed", None, "Replayed"]
    assert recorded(stores) == {"seen", "a1", "a2", "c1"}  # not b1: its call was refused whole


def test_calls_in_flight_together_share_writes_and_keep_their_own_answers(stores):
    """Sixteen concurrent calls (one replaying another's jti) cost far fewer than sixteen writes;
    each call gets its own answer."""
    work = Work(inline=True, threads=2)
    batches = UseBatches(stores.poppy, Gateway.of(DealerAgent(make_settings(), stores), work))
    counter = WriteCounter(stores.db)

    async def calls() -> list[object]:
        entries = [f"j{i}" for i in range(15)] + ["j3"]
        results = await asyncio.gather(*(batches.record(use(e)) for e in entries), return_exceptions=True)
        await batches.record(use("after"))  # a lone call afterwards is written at once
        return results

    results = asyncio.run(calls())
    work.close()
    refused = [r for r in results if isinstance(r, Replayed)]
    assert len(refused) == 1 and results.count(None) == 15
    assert recorded(stores) == {f"j{i}" for i in range(15)} | {"after"}
    assert counter.writes <= 3  # the first call's own write, the rest together, and "after"
