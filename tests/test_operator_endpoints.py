"""What the operator keeps from the public, on the real runner: ``/metrics`` behind a bearer
token and on a listen address of its own (``[server] metrics_token_env``, ``metrics_listen``),
``Strict-Transport-Security`` on every answer of an https deployment, at most
``max_connections`` open connections, and stderr that holds nothing but JSON with JSON logs on
(another library's logger included)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from test_request_limits import Served, read_answer_open, request
from test_server_runner import free_port

TOKEN = "metrics-s3cret-token"
MAX_CONNECTIONS = 16


@pytest.fixture(scope="module")
def operator(tmp_path_factory) -> Iterator[tuple[Served, str]]:
    metrics_port = free_port()
    server = Served(
        tmp_path_factory.mktemp("operator"),
        env={"OPERATOR_METRICS_TOKEN": TOKEN},
        **{
            "public_url": "https://dealer.example",  # behind a TLS proxy: the card says https
            "server.metrics_listen": f"127.0.0.1:{metrics_port}",
            "server.metrics_token_env": "OPERATOR_METRICS_TOKEN",
            "server.max_connections": MAX_CONNECTIONS,
            "server.keep_alive_seconds": 60,
        },
    )
    yield server, f"http://127.0.0.1:{metrics_port}"
    server.stop()


def test_metrics_answer_only_the_operators_bearer_token(operator):
    _, metrics = operator
    missing = httpx.get(metrics + "/metrics")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="metrics"'
    assert "aap_requests_total" not in missing.text
    for wrong in (f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}"):
        refused = httpx.get(metrics + "/metrics", headers={"Authorization": wrong})
        assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]
    served = httpx.get(metrics + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert served.status_code == 200 and "aap_requests_total" in served.text


def test_metrics_are_on_their_own_listen_address_only(operator):
    server, metrics = operator
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(server.base + "/metrics", headers=auth).status_code == 404
    assert httpx.get(server.base + "/healthz").status_code == 200
    assert httpx.get(server.base + "/.well-known/agent-card.json").status_code == 200
    # The operator's address serves the operator's two paths and nothing else.
    assert httpx.get(metrics + "/healthz").status_code == 200
    for path in ("/.well-known/agent-card.json", "/", "/console/", "/a2a"):
        assert httpx.get(metrics + path).status_code == 404, path


def test_an_https_deployment_sends_hsts_on_every_answer(operator):
    server, _ = operator
    expected = "max-age=31536000"
    assert httpx.get(server.base + "/healthz").headers["strict-transport-security"] == expected
    assert httpx.get(server.base + "/nowhere").headers["strict-transport-security"] == expected
    status, headers, _, _ = server.exchange(request(fields=[("X-Big", "b" * 40_000)]))
    assert status == 431 and headers["strict-transport-security"] == expected  # refused before the app too


def test_connections_past_the_limit_are_answered_503_and_closed(operator):
    server, _ = operator
    held: list[socket.socket] = []
    statuses = []
    try:
        for _ in range(MAX_CONNECTIONS + 1):
            sock = server.connect()
            held.append(sock)
            sock.sendall(request())
            status, headers = read_answer_open(sock)
            statuses.append(status)
            if status == 503:
                break
    finally:
        for sock in held:
            sock.close()
    # The connections the suite's other requests left (closing as they go) may take a seat or two.
    assert statuses[-1] == 503 and len(statuses) >= MAX_CONNECTIONS - 2, statuses
    assert set(statuses[:-1]) == {200}


def test_stderr_is_json_with_json_logs_on(operator):
    """The multipart form parser logs a warning of its own for a broken form; it is JSON too."""
    server, _ = operator
    broken = httpx.post(
        server.base + "/console/login",
        content=b"--xyzQ",
        headers={"Content-Type": "multipart/form-data; boundary=xyz"},
    )
    assert broken.status_code == 400
    httpx.get(server.base + "/healthz")  # a line after it, so the warning has been written
    text = server.log_path.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines
    for line in lines:
        json.loads(line)  # every line
    loggers = {json.loads(line)["logger"] for line in lines}
    assert any(name.startswith("python_multipart") for name in loggers), loggers
