"""aap.web.server.run(): several uvicorn workers from one Settings object, and TLS
served directly so https://localhost:PORT deployments work. Each test starts the
server as a subprocess on 127.0.0.1 and stops it by its own pid."""

from __future__ import annotations

import dataclasses
import datetime
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from aap.config.model import RateLimit
from aap.spec import validate
from aap.web import server
from http_helpers import assert_valid_response, make_settings, send_message


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- settings travel to workers intact ------------------------------------------------------------
def test_settings_json_round_trip(tmp_path):
    settings = make_settings("https://dealer.example", f"sqlite:///{tmp_path}/a.db")
    variants = [
        settings,
        dataclasses.replace(settings, tenant="t-1", rate_limit=RateLimit(enabled=False, per_minute=5, burst=1)),
        dataclasses.replace(settings, search=dataclasses.replace(settings.search, filters=("make", "near"))),
    ]
    for original in variants:
        copy = server.settings_from_json(server.settings_to_json(original))
        assert copy == original
        assert isinstance(copy.search.filters, tuple) and isinstance(copy.search.default_sort, tuple)
        assert type(copy.dealer) is type(original.dealer)


def test_settings_json_refuses_foreign_classes():
    with pytest.raises(ValueError, match="refusing"):
        server.settings_from_json(b'{"__dataclass__": "subprocess:Popen", "args": "true"}')


def test_app_from_env(tmp_path, monkeypatch):
    settings = make_settings("https://dealer.example", f"sqlite:///{tmp_path}/a.db", tenant="x")
    path = tmp_path / "settings.json"
    path.write_bytes(server.settings_to_json(settings))
    monkeypatch.setenv(server.SETTINGS_ENV, str(path))
    app = server.app_from_env()
    assert app.state.settings == settings
    app.state.stores.close()


def test_run_refuses_bad_input(tmp_path):
    settings = make_settings("https://dealer.example", "sqlite:///:memory:")
    with pytest.raises(ValueError, match="in-memory"):
        server.run(settings, workers=2)
    with pytest.raises(ValueError, match="both"):
        server.run(settings, ssl_certfile="cert.pem")
    with pytest.raises(ValueError, match="HTTPS"):
        server.run(dataclasses.replace(settings, public_url="http://dealer.example"))


# -- live subprocesses -------------------------------------------------------------------------------
class ServerProcess:
    """``run(...)`` in a child process; waits for /healthz, stops with SIGINT by pid."""

    def __init__(self, tmp_path: Path, public_url: str, port: int, **run_kwargs) -> None:
        script = textwrap.dedent(
            f"""
            from aap.config.loader import load_settings
            from aap.web.server import run
            settings = load_settings(None, overrides={{"public_url": {public_url!r},
                "database": "sqlite:///{tmp_path}/aap.db"}}, environ={{}})
            run(settings, host="127.0.0.1", port={port}, log_level="warning", **{run_kwargs!r})
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
        for answer in answers:
            assert answer.status_code == 200
            assert_valid_response(answer.json())
            assert "result" in answer.json()
        assert card["supportedInterfaces"][0]["url"] == base + "/a2a"
    finally:
        proc.stop()
    assert proc.proc.returncode is not None
    assert _settings_files() - before == set()  # the settings file is removed on exit


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


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
            card = http.get("/.well-known/agent-card.json").json()
            answer = http.post("/a2a", json=send_message({"type": "dealer.information.request"}))
    finally:
        proc.stop()
    assert validate(card, "agent-card") == []
    assert card["supportedInterfaces"][0]["url"] == base + "/a2a"
    assert card["capabilities"]["extensions"][0]["params"]["mcp"]["url"] == base + "/mcp"
    assert "result" in answer.json()
