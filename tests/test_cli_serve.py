"""``aap serve`` for real: a subprocess serving the demo dealer group on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from aap.config.loader import load_settings
from aap.spec import validate
from factories import free_port

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow


def stop_server(process: subprocess.Popen) -> None:
    """Stop ``aap serve`` as an operator would (SIGINT: its graceful shutdown), killing it after 20 s."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


@pytest.fixture
def demo_server(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AAP_DATABASE_URL", "AAP_PUBLIC_URL")}
    process = subprocess.Popen(
        [sys.executable, "-m", "aap", "serve", "--port", str(port), "--database", f"sqlite:///{tmp_path}/demo.db"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # bounded by count: seeding 2,000 listings can be slow on a busy box
            if process.poll() is not None:
                raise RuntimeError(process.stdout.read().decode())
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("aap serve did not come up")
        yield base
    finally:
        stop_server(process)


def send(base: str, data: dict) -> dict:
    skill = data["type"].removesuffix(".request")
    stem = {"inventory.vehicle": "vehicle-detail"}.get(skill, skill.replace(".", "-"))
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "parts": [{"data": data, "mediaType": f"application/vnd.autoagent.{stem}-request+json"}],
            }
        },
    }
    reply = httpx.post(f"{base}/a2a", json=body, timeout=30).json()
    return reply["result"]["message"]["parts"][0]["data"]


def test_serve_without_config_serves_the_seeded_demo_dealer(demo_server):
    info = send(demo_server, {"type": "dealer.information.request"})
    assert validate(info, "dealer-information-response") == []
    assert info["data"] == load_settings(environ={}).dealer.info

    found = send(
        demo_server,
        {
            "type": "inventory.search.request",
            "currency": "CAD",
            "filters": {"vehicle_type": ["motorcycle"], "fuel": ["bev"]},
        },
    )
    assert validate(found, "inventory-search-response") == []
    assert found["data"]["total"] > 0
    assert {v["rooftop"] for v in found["data"]["vehicles"]} == {"Demo Motors Vancouver"}

    everything = send(demo_server, {"type": "inventory.search.request", "currency": "USD"})
    cad = send(demo_server, {"type": "inventory.search.request", "currency": "CAD"})
    assert everything["data"]["total"] + cad["data"]["total"] == 2000

    card = httpx.get(f"{demo_server}/.well-known/agent-card.json", timeout=10).json()
    assert card["supportedInterfaces"][0]["url"].startswith(demo_server)
