"""aap.server.runner.run(): several uvicorn workers loading their settings from one
SettingsSource, and TLS served directly so https://localhost:PORT deployments work.
Each live test starts the server as a subprocess on 127.0.0.1 and stops it by its own pid."""

from __future__ import annotations

import dataclasses
import os
import signal
import ssl
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from aap.discovery.agent_card import build_agent_card
from aap.server import runner as server
from aap.server.runner import SettingsSource
from aap.skills.catalog import SKILLS
from aap.spec import validate
from certs import self_signed
from factories import free_port
from http_helpers import assert_valid_response, make_settings, send_message


# -- settings travel to workers as their source ---------------------------------------------------
def sources(tmp_path) -> list[SettingsSource]:
    config = tmp_path / "aap.toml"
    config.write_text(
        textwrap.dedent("""
        id = "round-trip"
        public_url = "https://dealer.example"
        tenant = "t-1"
        [rate_limit]
        enabled = false
        per_minute = 5
        burst = 1
        [search]
        filters = ["make", "near"]
        [agent]
        name = "Round trip"
        description = "A dealer whose settings are loaded twice."
        [dealer]
        name = "Round Trip Motors"
        [[dealer.rooftops]]
        name = "Round Trip Motors"
        """)
    )
    database = {"database": f"sqlite:///{tmp_path}/a.db"}
    return [
        SettingsSource(None, {**database, "public_url": "https://dealer.example"}, environ={}),
        SettingsSource(None, {**database, "public_url": "http://127.0.0.1:8000", "rate_limit.enabled": False}),
        SettingsSource(str(config), database, environ={"AAP_PUBLIC_URL": "https://other.example"}),
    ]


def test_settings_source_json_round_trip(tmp_path):
    """What a worker receives loads to the very settings the parent loaded."""
    for source in sources(tmp_path):
        copy = SettingsSource.from_json(source.to_json())
        assert copy == source
        original, loaded = source.load(), copy.load()
        assert loaded == original
        assert isinstance(loaded.search.filters, tuple) and isinstance(loaded.search.default_sort, tuple)
        assert type(loaded.dealer) is type(original.dealer)
    from_file = sources(tmp_path)[2].load()
    assert from_file.a2a_tenant == "t-1" and from_file.search.filters == ("make", "near")
    assert from_file.public_url == "https://other.example"  # the environment given, not the process's


def test_settings_source_refuses_anything_else():
    for data in (
        b'{"__dataclass__": "subprocess:Popen", "args": "true"}',
        b"[]",
        b'{"config": 1, "overrides": {}, "environ": null}',
        b'{"config": null, "overrides": {}, "environ": {"A": 1}}',
    ):
        with pytest.raises(ValueError, match="not a serialised SettingsSource"):
            SettingsSource.from_json(data)


def test_app_from_env(tmp_path, monkeypatch):
    source = SettingsSource(
        None,
        {"database": f"sqlite:///{tmp_path}/a.db", "public_url": "https://dealer.example", "a2a_tenant": "x"},
        environ={},
    )
    monkeypatch.setenv(server.SOURCE_ENV, source.to_json().decode())
    app = server.app_from_env()
    assert app.state.settings == source.load()
    assert app.state.settings.a2a_tenant == "x"
    app.state.stores.close()


def test_run_refuses_bad_input(tmp_path):
    settings = make_settings("https://dealer.example", "sqlite:///:memory:")
    with pytest.raises(ValueError, match="in-memory"):
        server.run(settings, workers=2)
    on_file = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path}/a.db")
    with pytest.raises(ValueError, match="SettingsSource"):
        server.run(on_file, workers=2)  # a Settings object cannot reach worker processes
    with pytest.raises(ValueError, match="both"):
        server.run(settings, ssl_certfile="cert.pem")
    with pytest.raises(ValueError, match="HTTPS"):
        server.run(dataclasses.replace(settings, public_url="http://dealer.example"))


# -- live subprocesses -------------------------------------------------------------------------------
class ServerProcess:
    """``run(...)`` in a child process; waits for /healthz, stops with SIGINT by pid."""

    def __init__(self, tmp_path: Path, public_url: str, port: int, **run_kwargs) -> None:
        self.source = SettingsSource(
            None, {"public_url": public_url, "database": f"sqlite:///{tmp_path}/aap.db"}, environ={}
        )
        script = textwrap.dedent(
            f"""
            from aap.server.runner import SettingsSource, run
            source = SettingsSource.from_json({self.source.to_json()!r})
            run(source, host="127.0.0.1", port={port}, log_level="warning", **{run_kwargs!r})
            """
        )
        self.log = open(tmp_path / "server.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, url: str, **client_kwargs) -> None:
        for _ in range(300):  # bounded by count (~30 s on a loaded machine)
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(url + "/healthz", timeout=2, **client_kwargs).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not become healthy: " + Path(self.log.name).read_text()[-2000:])

    def children(self) -> list[int]:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    status = Path(f"/proc/{entry}/status").read_text()
                except OSError:
                    continue
                if f"\nPPid:\t{self.proc.pid}\n" in status:
                    pids.append(int(entry))
        return pids

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _settings_files() -> set[Path]:
    import tempfile

    return set(Path(tempfile.gettempdir()).glob("aap-settings-*.json"))


@pytest.mark.slow
def test_two_workers(tmp_path):
    before = _settings_files()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = ServerProcess(tmp_path, base, port, workers=2)
    try:
        proc.wait_ready(base)
        workers = [pid for pid in proc.children() if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) >= 2
        with httpx.Client(base_url=base) as http:
            answers = [http.post("/a2a", json=send_message({"type": "dealer.information.request"})) for _ in range(6)]
            card = http.get("/.well-known/agent-card.json").json()
        # One connection each, so the kernel may hand them to either worker: every one serves the card
        # the parent's settings describe.
        cards = [httpx.get(base + "/.well-known/agent-card.json").json() for _ in range(6)]
        # Every worker keeps the [server] request limits: a header field over them is 431 on each.
        oversized = [
            httpx.get(base + "/healthz", headers={"Poppy-Session": "e" * 268_000}).status_code for _ in range(6)
        ]
        for answer in answers:
            assert answer.status_code == 200
            assert_valid_response(answer.json())
            assert "result" in answer.json()
        assert card["supportedInterfaces"][0]["url"] == base + "/a2a"
        expected = build_agent_card(proc.source.load(), SKILLS.values())
        assert all(served == expected for served in [card, *cards])
        assert oversized == [431] * 6
    finally:
        proc.stop()
    assert proc.proc.returncode is not None
    assert _settings_files() - before == set()  # no settings file is ever written


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path, "localhost")


@pytest.mark.slow
def test_tls_localhost_card_is_schema_valid(tmp_path):
    """With TLS served directly, https://localhost:PORT publishes a fully valid card."""
    cert, key = _self_signed(tmp_path)
    port = free_port()
    base = f"https://localhost:{port}"
    proc = ServerProcess(tmp_path, base, port, ssl_certfile=str(cert), ssl_keyfile=str(key))
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        proc.wait_ready(base, verify=trust)
        with httpx.Client(base_url=base, verify=trust) as http:
            card_answer = http.get("/.well-known/agent-card.json")
            card = card_answer.json()
            answer = http.post("/a2a", json=send_message({"type": "dealer.information.request"}))
        # Refused over TLS too, and answered before the connection closes.
        refused = httpx.get(base + "/a2a", headers={"X-Big": "b" * 100_000}, verify=trust)
    finally:
        proc.stop()
    assert card_answer.headers["strict-transport-security"] == "max-age=31536000"  # an https public_url
    assert refused.status_code == 431 and refused.json()["error"]["code"] == -32600
    assert refused.headers["strict-transport-security"] == "max-age=31536000"
    assert validate(card, "agent-card") == []
    assert card["supportedInterfaces"][0]["url"] == base + "/a2a"
    assert card["capabilities"]["extensions"][0]["params"]["mcp"]["url"] == base + "/mcp"
    assert "result" in answer.json()


@pytest.mark.slow
def test_one_scrape_sees_every_worker(tmp_path, monkeypatch):
    """Several workers share one metrics directory: any worker's /metrics counts every worker's requests."""
    import json as jsonlib

    from prometheus_client.mmap_dict import MmapedDict
    from prometheus_client.parser import text_string_to_metric_families

    shared = tmp_path / "metrics"
    shared.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(shared))  # the runner uses an operator's directory
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = ServerProcess(tmp_path, base, port, workers=2)
    body = send_message({"type": "dealer.information.request"})

    def served_per_worker() -> dict[str, float]:
        """A2A requests each worker counted, read from its own file (``counter_<pid>.db``)."""
        counts = {}
        for path in shared.glob("counter_*.db"):
            counts[path.stem] = sum(
                value
                for key, value, *_ in MmapedDict.read_all_values_from_file(str(path))
                if jsonlib.loads(key)[1] == "aap_requests_total" and jsonlib.loads(key)[2].get("binding") == "a2a"
            )
        return counts

    try:
        proc.wait_ready(base)
        sent = 0
        for _ in range(300):  # one connection per request until both workers have served some (bounded)
            assert "result" in httpx.post(base + "/a2a", json=body).json()
            sent += 1
            if sent >= 10 and sum(1 for n in served_per_worker().values() if n) >= 2:
                break
        per_worker = served_per_worker()
        assert sum(1 for n in per_worker.values() if n) >= 2, per_worker
        assert sum(per_worker.values()) == sent
        key = (
            "aap_requests_total",
            frozenset({"binding": "a2a", "skill": "dealer.information", "status": "200"}.items()),
        )
        for _ in range(4):  # whichever worker answers the scrape
            text = httpx.get(base + "/metrics").text
            values = {
                (s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
            }
            assert values[key] == sent
            assert values[("process_resident_memory_bytes", frozenset())] > 0
    finally:
        proc.stop()
