"""Requests bounded before the app: ``[server]``'s limits on the request line, the header
fields and the time a head or a body may take, kept by the server's own HTTP protocol
(aap.server.protocol) on the real runner, over raw sockets on loopback.

Each refusal is answered in the error shape of the path's surface (``aap.error`` on
``/poppy/v1/*``, JSON-RPC on ``/a2a`` and ``/mcp``, OAuth JSON on ``/oauth/*``, plain JSON
elsewhere) and closes the connection; a request at a limit is served. Timeouts are shown by
waiting for the server's answer (a read with a long deadline), never by timing it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aap.server.runner import SettingsSource
from aap.spec import validate
from runner_child import RunnerChild

LINE, FIELD, HEAD, FIELDS = 8192, 8192, 32768, 100  # the defaults
TIMEOUT = 2  # header_timeout_seconds and body_timeout_seconds of the served configuration


class Served(RunnerChild):
    """``aap.server.runner.run`` of the demo dealer group with ``[server]`` overrides, in a child."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None, **overrides: Any) -> None:
        super().__init__()
        source = SettingsSource(
            None,
            {"public_url": self.base, "database": f"sqlite:///{tmp_path}/aap.db", **overrides},
            environ={},
        )
        self.start(tmp_path, f"SettingsSource.from_json({source.to_json()!r})", env)

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.settimeout(60)  # a deadline for a broken server, never a measurement
        return sock

    def exchange(self, data: bytes) -> tuple[int, dict[str, str], bytes, bool]:
        """Send ``data``, read the answer: status, headers, body, and whether the server then
        closed the connection."""
        with self.connect() as sock:
            sock.sendall(data)
            return read_answer(sock)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes, bool]:
    """One HTTP/1.1 answer with a Content-Length, and whether the connection then closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the connection closed without an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    try:
        closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    return int(status_line.split()[1]), headers, body[:length], closed


def request(
    target: str = "/healthz",
    *,
    method: str = "GET",
    fields: list[tuple[str, str]] = (),
    body: bytes = b"",
    close: bool = False,
) -> bytes:
    """The bytes of one request; ``close`` adds ``Connection: close`` (an answer we expect served)."""
    fields = [*fields, ("Connection", "close")] if close else list(fields)
    lines = [f"{method} {target} HTTP/1.1", "Host: x", *(f"{name}: {value}" for name, value in fields)]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    server = Served(
        tmp_path_factory.mktemp("limits"),
        **{
            "server.header_timeout_seconds": TIMEOUT,
            "server.body_timeout_seconds": TIMEOUT,
            "server.keep_alive_seconds": 1,
        },
    )
    yield server
    server.stop()


# -- the head: one oversized header field, in every surface's shape ---------------------------------


POPPY_SESSION = "e" * 268_000  # a 268 KB Poppy-Session header


@pytest.mark.parametrize(
    "path", ["/poppy/v1/dealer.information", "/a2a", "/mcp", "/oauth/token", "/healthz", "/console/login"]
)
def test_a_268_kb_poppy_session_header_is_431_in_the_surfaces_shape(served, path):
    status, headers, body, closed = served.exchange(
        request(path, method="POST", fields=[("Poppy-Session", POPPY_SESSION)], body=b"{}")
    )
    assert status == 431 and closed and headers["connection"] == "close"
    assert "strict-transport-security" not in headers  # an http public_url
    answer = json.loads(body)
    message = f"The request header fields are larger than this server accepts ({HEAD} bytes in all)."
    if path.startswith("/poppy/v1/"):
        assert validate(answer, "error") == [] and answer["code"] == "SCHEMA_VALIDATION_FAILED"
        assert answer["message"] == message and answer["details"]["errors"][0]["keyword"] == "maxLength"
    elif path in ("/a2a", "/mcp"):
        assert answer == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    elif path.startswith("/oauth/"):
        assert answer == {"error": "invalid_request", "error_description": message}
        assert headers["cache-control"] == "no-store"
    else:
        assert answer == {"error": {"status": 431, "message": message}}
    assert POPPY_SESSION[:64] not in body.decode()


def test_the_refusal_is_logged_and_counted(served):
    served.exchange(request("/a2a", fields=[("X-Big", "b" * 70_000)]))
    for _ in range(100):  # the line is written as the answer leaves; bounded by count
        lines = [
            line
            for line in served.lines()
            if (line.get("status"), line.get("path"), line.get("method")) == (431, "/a2a", "GET")
        ]
        if lines:
            break
        time.sleep(0.05)
    assert lines and lines[0]["event"] == "request" and lines[0]["logger"] == "aap.access"
    metrics = httpx.get(served.base + "/metrics").text
    assert 'status="431"' in metrics


# -- each limit, at and past it ------------------------------------------------------------------


def test_a_header_field_at_the_limit_is_served_one_byte_more_is_431(served):
    name = "X-Pad"
    assert served.exchange(request(fields=[(name, "p" * (FIELD - len(name)))], close=True))[0] == 200
    status, _, body, closed = served.exchange(request(fields=[(name, "p" * (FIELD - len(name) + 1))]))
    assert status == 431 and closed
    assert json.loads(body)["error"]["message"] == (
        f"A request header field is larger than this server accepts ({FIELD} bytes)."
    )


def test_header_fields_at_the_count_limit_are_served_one_more_is_431(served):
    pads = [(f"X-{i}", "v") for i in range(FIELDS - 2)]  # and Host, and Connection
    assert served.exchange(request(fields=pads, close=True))[0] == 200
    status, _, body, closed = served.exchange(request(fields=[*pads, ("X-Last", "v"), ("X-More", "v")]))
    assert status == 431 and closed
    assert json.loads(body)["error"]["message"] == (
        f"The request has more header fields than this server accepts ({FIELDS})."
    )


def test_a_head_at_the_limit_is_served_one_byte_more_is_431(served):
    line = len("GET") + len("/healthz") + 10  # method, target, two spaces and HTTP/1.1
    used = line + len("Host") + len("x") + len("Connection") + len("close")
    fields = []
    while used < HEAD:
        value = "v" * min(FIELD - 4, HEAD - used - 4)
        fields.append((f"X{len(fields):03d}", value))
        used += 4 + len(value)
    assert used == HEAD and len(fields) < FIELDS
    assert served.exchange(request(fields=fields, close=True))[0] == 200
    fields[-1] = (fields[-1][0], fields[-1][1] + "v")
    status, _, body, closed = served.exchange(request(fields=fields, close=True))
    assert status == 431 and closed
    assert json.loads(body)["error"]["message"].endswith(f"({HEAD} bytes in all).")


def test_a_request_line_at_the_limit_is_served_one_byte_more_is_414(served):
    query = "?q=" + "a" * (LINE - len("GET") - len("/healthz?q=") - 10)
    assert served.exchange(request("/healthz" + query, close=True))[0] == 200
    status, _, body, closed = served.exchange(request("/healthz" + query + "a"))
    assert status == 414 and closed
    assert json.loads(body) == {
        "error": {"status": 414, "message": f"The request line is longer than this server accepts ({LINE} bytes)."}
    }
    # The query had begun, so the path is known and picks the shape.
    for overrun in (10, 100_000):  # past what one read holds, and past what the URL parser takes
        status, _, body, _ = served.exchange(request("/a2a" + query + "a" * overrun, method="POST", body=b"{}"))
        assert status == 414 and json.loads(body)["error"]["code"] == -32600
    # A path cut short is no path: the plain shape, and nothing of it in the log.
    status, _, body, _ = served.exchange(request("/" + "p" * LINE))
    assert status == 414 and json.loads(body)["error"]["status"] == 414
    time.sleep(0.2)  # lets the access-log line reach the file; what is checked is its content
    assert "p" * 100 not in served.log_path.read_text()


def test_a_header_that_never_ends_is_refused_unread_while_healthz_answers(served):
    """The attack of 256 MB in one header field: the server stops reading after the limit, so
    the sender is cut off long before it is done, and the server goes on answering."""
    outcome: dict[str, Any] = {"sent": 0}
    piece = b"a" * (1 << 20)

    def attack() -> None:
        with served.connect() as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nPoppy-Session: ")
                while outcome["sent"] < 256 * len(piece):
                    sock.sendall(piece)
                    outcome["sent"] += len(piece)
                outcome["answer"] = read_answer(sock)
            except OSError as exc:  # cut off: a reset or a broken pipe
                outcome["error"] = type(exc).__name__
                try:
                    outcome["answer"] = read_answer(sock)
                except (OSError, AssertionError):
                    pass

    thread = threading.Thread(target=attack)
    thread.start()
    health = [httpx.get(served.base + "/healthz", timeout=30).status_code for _ in range(5)]
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert health == [200] * 5
    assert "error" in outcome, outcome  # the server closed the connection before 256 MiB were taken
    assert outcome["sent"] < 64 * len(piece)
    if "answer" in outcome:
        assert outcome["answer"][0] == 431


# -- time ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_head_that_stops_coming_is_answered_408_and_closed(served):
    with served.connect() as sock:
        sock.sendall(b"GET /a2a HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        status, headers, body, closed = read_answer(sock)
    assert status == 408 and closed
    assert json.loads(body)["error"] == {
        "code": -32600,
        "message": f"The request header fields did not arrive within {TIMEOUT} seconds.",
    }


@pytest.mark.slow
def test_a_connection_that_sends_nothing_is_closed(served):
    with served.connect() as sock:
        assert sock.recv(100) == b""  # closed by the server, without an answer


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_that_stops_coming_is_answered_408_in_the_surfaces_shape(served, chunked):
    framing = 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"a":' if chunked else 'Content-Length: 100\r\n\r\n{"a":'
    for path in ("/a2a", "/poppy/v1/inventory.search"):
        with served.connect() as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}".encode())
            status, _, body, closed = read_answer(sock)
        assert status == 408 and closed
        message = f"The request body did not arrive within {TIMEOUT} seconds."
        answer = json.loads(body)
        if path == "/a2a":
            assert answer["error"] == {"code": -32600, "message": message}
        else:
            assert validate(answer, "error") == [] and answer["message"] == message and answer["retryable"] is True


@pytest.mark.slow
def test_an_idle_connection_between_requests_is_closed(served):
    with served.connect() as sock:
        sock.sendall(request())
        status, headers = read_answer_open(sock)
        assert status == 200 and headers.get("connection") != "close"
        assert sock.recv(100) == b""  # the server ended the idle connection (keep_alive_seconds)


def read_answer_open(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """One answer on a connection that stays open: status and headers."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"the connection closed without an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("the connection closed in the middle of an answer")
        body += chunk
    return int(status_line.split()[1]), headers


@pytest.mark.slow
def test_an_upgrade_request_is_answered_like_any_other(served):
    """No surface speaks WebSocket: asking to upgrade changes nothing."""
    upgrade = [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13")]
    status, _, body, _ = served.exchange(request(fields=upgrade))
    assert status == 200 and json.loads(body)["status"] == "ok"


def test_pipelined_requests_and_a_large_body_are_served(served):
    """Requests within the limits are untouched: two in one write, and a body in many reads."""
    with served.connect() as sock:
        sock.sendall(request() + request(close=True))
        answers = b""
        while chunk := sock.recv(65536):  # until the second answer closes the connection
            answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2
    padding = "p" * 900_000
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"x": padding}}).encode()
    with served.connect() as sock:
        head = request("/a2a", method="POST", fields=[("Content-Type", "application/json")], close=True, body=b"")
        head = head.replace(b"Content-Length: 0", f"Content-Length: {len(body)}".encode())
        sock.sendall(head)
        for start in range(0, len(body), 65_536):  # many reads, well within body_timeout_seconds
            sock.sendall(body[start : start + 65_536])
        status, _, answer, _ = read_answer(sock)
    assert status == 200 and json.loads(answer)["id"] == 1
