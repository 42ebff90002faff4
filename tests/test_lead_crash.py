"""Crash safety: a real server process killed with SIGKILL around delivery.

The server (``aap.server.runner.run`` with the delivery worker in its lifespan)
runs in its own process on a SQLite file; the lead goes in over ``/a2a`` and
the CRM is an HTTP receiver in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from aap.agent import CallContext, DealerAgent
from aap.store import open_stores
from aap.work import Work
from lead_support import free_port, http_route, lead_request, lead_settings

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("lead_server.py")
AAP_HEADERS = {"A2A-Version": "1.0", "A2A-Extensions": "https://autoagentprotocol.org/extensions/aap/v3.1"}


class ServerProcess:
    def __init__(
        self, tmp_path: Path, crm_url: str, *, poll_seconds: float, timeout_seconds: float = 5, lease_seconds: float = 6
    ) -> None:
        self.port = free_port()
        self.database_url = f"sqlite:///{tmp_path}/crash.db"
        self.config = tmp_path / "server.json"
        self.config.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "database_url": self.database_url,
                    "crm_url": crm_url,
                    "poll_seconds": poll_seconds,
                    "timeout_seconds": timeout_seconds,
                    "lease_seconds": lease_seconds,
                }
            )
        )
        self.log = tmp_path / "server.log"
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(SERVER), str(self.config)], stdout=log, stderr=subprocess.STDOUT, env=env
            )
        for _ in range(600):  # bounded: up to ~30 s on a loaded machine
            if self.process.poll() is not None:
                raise RuntimeError("server exited:\n" + self.log.read_text())
            try:
                if httpx.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not start:\n" + self.log.read_text())

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def submit(self, body: dict) -> dict:
        envelope = {
            "jsonrpc": "2.0",
            "id": "lead-1",
            "method": "SendMessage",
            "params": {
                "message": {
                    "messageId": "m-1",
                    "role": "ROLE_USER",
                    "parts": [{"data": body, "mediaType": "application/vnd.autoagent.lead-submit-request+json"}],
                },
                "configuration": {"acceptedOutputModes": ["application/vnd.autoagent.lead-submit-response+json"]},
            },
        }
        response = httpx.post(self.base_url + "/a2a", json=envelope, headers=AAP_HEADERS, timeout=30)
        assert response.status_code == 200
        reply = response.json()
        assert "result" in reply, reply
        return reply["result"]["message"]["parts"][0]["data"]["data"]


def wait_for(predicate, count: int = 600, step: float = 0.05) -> bool:
    for _ in range(count):
        if predicate():
            return True
        time.sleep(step)
    return False


def delivery_rows(database_url: str) -> list[tuple]:
    stores = open_stores(database_url)
    try:
        with stores.db.read() as tx:
            return tx.fetchall("SELECT lead_id, status, attempts FROM lead_deliveries")
    finally:
        stores.close()


def drain_in_process(server: ServerProcess, crm_url: str) -> int:
    """One more worker pass from another process's point of view: nothing may be left to send."""
    import asyncio

    from aap.leads.worker import DeliveryWorker

    settings = lead_settings(routes=[http_route(crm_url)], database_url=server.database_url)
    stores = open_stores(server.database_url)
    try:

        async def run() -> int:
            async with httpx.AsyncClient() as client:
                return await DeliveryWorker(stores.leads, settings, work=WORK).drain(client)

        return asyncio.run(run())
    finally:
        stores.close()


def test_killed_after_acknowledging_and_before_delivery_delivers_exactly_once_after_restart(tmp_path, receiver):
    # The worker made its start-up pass before the lead existed and then sleeps for an hour,
    # so the lead is acknowledged and not yet delivered when the process dies.
    server = ServerProcess(tmp_path, receiver.url, poll_seconds=3600).start()
    try:
        data = server.submit(lead_request())
        lead_id = data["lead_id"]
        assert data["status"] == "received"
        server.kill()
        assert receiver.requests == []
        assert delivery_rows(server.database_url) == [(lead_id, "pending", 0)]  # durable before the answer

        server.start()  # same database; the new worker's first pass finds the lead
        assert wait_for(lambda: delivery_rows(server.database_url) == [(lead_id, "delivered", 1)])
        assert drain_in_process(server, receiver.url) == 0
    finally:
        server.stop()
    assert [r["headers"]["X-AAP-Lead-Id"] for r in receiver.requests] == [lead_id]
    # A replay after the restart is answered from the database, with no new delivery.
    stores = open_stores(server.database_url)
    try:
        assert stores.leads.count_leads() == 1
    finally:
        stores.close()


def test_killed_in_the_middle_of_a_delivery_is_resent_with_the_same_lead_id(tmp_path, receiver):
    receiver.hang.set()  # the CRM accepts the connection and never answers
    server = ServerProcess(tmp_path, receiver.url, poll_seconds=0.1, timeout_seconds=5, lease_seconds=6).start()
    try:
        lead_id = server.submit(lead_request())["lead_id"]
        assert wait_for(lambda: len(receiver.requests) == 1)
        server.kill()  # mid-send: the row is claimed ("delivering") by a dead worker
        receiver.hang.clear()
        (row,) = delivery_rows(server.database_url)
        assert row[:2] == (lead_id, "delivering")

        server.start()  # the claim lapses after lease_seconds and the new worker takes it over
        assert wait_for(lambda: delivery_rows(server.database_url)[0][1] == "delivered", count=900)
    finally:
        receiver.release.set()
        server.stop()
    assert len(receiver.accepted()) == 1  # one acknowledged delivery
    sent = receiver.requests
    assert {r["headers"]["X-AAP-Lead-Id"] for r in sent} == {lead_id}
    assert {r["headers"]["Idempotency-Key"] for r in sent} == {lead_id}
    assert ET.fromstring(sent[-1]["body"]).find("prospect").get("status") == "resend"


def test_a_restarted_process_replays_instead_of_creating_a_second_lead(tmp_path, receiver):
    server = ServerProcess(tmp_path, receiver.url, poll_seconds=3600).start()
    body = lead_request()
    try:
        first = server.submit(body)
        server.kill()
        server.start()
        again = server.submit(body)
    finally:
        server.stop()
    assert again.pop("replayed") is True
    assert again == first
    agent = DealerAgent(lead_settings(database_url=server.database_url), open_stores(server.database_url))
    try:
        assert agent.stores.leads.count_leads() == 1
        assert agent.handle(body, CallContext(binding="test"))["data"]["lead_id"] == first["lead_id"]
    finally:
        agent.stores.close()
