"""Feeds that cannot hurt the server: bombs, limits, redirects, private addresses, slow sources, links.

The https source is a TLS server on loopback with a certificate the test makes
(trusted through ``ca_file``); the slow sources are raw sockets that stall or
trickle. Nothing here depends on timing: a deadline test configures a small
deadline against a server that never finishes and asserts the refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import httpcore
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

import feed_samples as samples
from aap import netguard
from aap.cli.main import main
from aap.feeds.fetch import Credentials, FetchError, FetchRules, display_source, fetch
from aap.inventory.formats import ReadOptions, read_feed_bytes
from aap.inventory.formats.mapping import MappingError, parse_format, read_mapping
from aap.inventory.listing_rules import FeedError, ListingChecker
from aap.work import Work
from certs import self_signed
from http_helpers import LiveServer

#: The door for blocking work these tests' fetches are given.
WORK = Work.for_database(True)

COUNT = 6


def read(data: bytes, name: str = "feed.csv", **options: Any):
    return read_feed_bytes(data, name, ReadOptions(**options))


def file_problem(data: bytes, name: str = "feed.csv", **options: Any) -> str:
    with pytest.raises(FeedError) as info:
        read(data, name, **options)
    return str(info.value.problems[0])


# -- archives: a running cap, nested layers, memory bounded -------------------------------------


def _zip(data: bytes, name: str) -> bytes:
    return samples.zipped(data, name)


def test_archives_inside_archives_are_read_and_capped():
    feed = samples.dealer_csv(samples.vehicles(COUNT))
    nested = samples.gzipped(_zip(samples.gzipped(feed), "inventory.csv.gz"))
    report = read(nested, "inventory.zip.gz")
    assert (report.accepted, report.archive, report.member) == (COUNT, "gzip in zip in gzip", None)
    too_deep = samples.gzipped(nested)
    assert "more than 3 archives deep" in file_problem(too_deep)
    assert "expands to more than 1 MiB" in file_problem(samples.gzipped(b"\0" * (2 << 20)), max_expanded_bytes=1 << 20)
    zip_bomb = _zip(b"VIN,Make\n" + b"A" * (3 << 20), "big.csv")
    assert "expands to more than 1 MiB" in file_problem(zip_bomb, "big.zip", max_expanded_bytes=1 << 20)
    inner_bomb = _zip(samples.gzipped(b"B" * (3 << 20)), "big.csv.gz")
    assert "expands to more than 2 MiB" in file_problem(inner_bomb, "x.zip", max_expanded_bytes=2 << 20)


def _bomb(path: Path, inflated: int) -> None:
    """A gzip file of ``inflated`` zero bytes, written without holding them."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    chunk = b"\0" * (1 << 20)
    with path.open("wb") as handle:
        for _ in range(inflated >> 20):
            handle.write(compressor.compress(chunk))
        handle.write(compressor.flush())


_RSS_SCRIPT = """
import asyncio, resource, sys
import orjson
from aap.config.loader import load_settings
from aap.feeds.job import ImportRequest, run_import
from aap.store import open_stores
from aap.work import Work

WORK = Work.for_database(True)
settings = load_settings(environ={})
stores = open_stores(sys.argv[1])
small = asyncio.run(run_import(stores, settings, ImportRequest(sys.argv[3]), work=WORK))  # everything loaded once
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = asyncio.run(run_import(stores, settings, ImportRequest(sys.argv[2]), work=WORK))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(orjson.dumps({"small": small.run.outcome, "outcome": result.run.outcome, "message": result.run.message,
                    "grew_kib": after - before}).decode())
"""


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_with_memory_bounded(tmp_path):
    """2 MB that would inflate to 2 GiB: refused at the 1 GiB cap, the process growing by far less
    than 200 MB (peak RSS, measured in a process of its own, as the server would run it)."""
    bomb = tmp_path / "inventory.csv.gz"
    _bomb(bomb, 2 << 30)
    assert bomb.stat().st_size < 2_200_000
    small = tmp_path / "small.csv"
    small.write_bytes(samples.dealer_csv(samples.vehicles(COUNT)))
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, f"sqlite:///{tmp_path}/aap.db", str(bomb), str(small)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["small"] == "imported"
    assert result["outcome"] == "rejected" and "expands to more than 1 GiB" in result["message"]
    assert result["grew_kib"] < 200 * 1024


# -- records: cells, rows, columns, nesting --------------------------------------------------------


def test_a_cell_longer_than_the_limit_is_refused_with_its_line():
    data = b"VIN,Stock #,Year,Make,Model,Internet Price\n1HGCM82633A004352,S1,2020,Honda,Accord,$1\n"
    data += b"1HGCM82633A004353,S2,2020,Honda," + b"x" * 140_000 + b",$1\n"
    report = read(data, partial=True)
    assert report.accepted == 1
    assert "line 3:" in str(report.problems[0]) and "a cell longer than 131,072 characters" in str(report.problems[0])


def test_a_row_longer_than_the_limit_is_refused():
    cells = ",".join(["y" * 100_000] * 12)
    data = b"VIN,Stock #,Year,Make,Model,Internet Price\n" + cells.encode() + b"\n"
    report = read(data, partial=True)
    assert "has a row longer than 1,048,576 characters" in str(report.problems[0])


def test_too_many_columns_are_refused_before_any_row():
    header = ",".join(f"c{i}" for i in range(2000)).encode()
    assert "has a header of 2,000 cells; at most 1,000 are read" in file_problem(header + b"\n" + b"1," * 1999 + b"1\n")


def test_a_json_lines_row_longer_than_the_limit_is_refused():
    line = orjson.dumps({"vin": "1HGCM82633A004352", "description": "d" * (1 << 20)})
    report = read(line + b"\n", "feed.jsonl", partial=True)
    assert "has a row longer than 1,048,576 characters" in str(report.problems[0])


def test_xml_nested_too_deep_or_too_long_is_refused():
    deep = b"<listings><listing>" + b"<a>" * 40 + b"x" + b"</a>" * 40 + b"</listing></listings>"
    assert "nests elements more than 32 deep" in file_problem(deep, "feed.xml", format="meta-vehicle")
    long = b"<listings><listing><vin>" + b"v" * 140_000 + b"</vin></listing></listings>"
    assert "more than 131,072 characters of text" in file_problem(long, "feed.xml", format="meta-vehicle")


def test_a_minified_xml_feed_on_one_line_is_read():
    """XML is read in pieces, not lines: a whole catalog on one line is fine."""
    data = samples.meta_xml(samples.vehicles(COUNT)).replace(b"\n", b"")
    assert read(data, "catalog.xml").accepted == COUNT


# -- links and photos ------------------------------------------------------------------------------------


def _listing(**fields: Any) -> dict[str, Any]:
    return {"vin": "1HGCM82633A004352", "status": "available", "updated_at": "2026-05-01T10:00:00Z", **fields}


@pytest.mark.parametrize(
    "link", ["javascript:alert(1)", "data:text/html,<b>x</b>", "/vdp/1", "https:///nohost", "ftp://x.example/a"]
)
def test_a_link_that_is_no_https_url_is_refused(link):
    assert ("/vdp_url", "is not an absolute https URL") in ListingChecker().check(_listing(vdp_url=link), 1)


def test_photos_that_are_no_urls_are_left_out_and_http_is_upgraded():
    listing = _listing(
        vdp_url="http://www.dealer.example/vdp/1",
        photos=[
            "javascript:alert(1)",
            "data:image/png;base64,AAAA",
            "http://cdn.example/1.jpg",
            "https://cdn.example/2.jpg",
        ],
    )
    warnings: list = []
    assert ListingChecker().check(listing, 1, warnings=warnings) == []
    assert listing["photos"] == ["https://cdn.example/1.jpg", "https://cdn.example/2.jpg"]
    assert listing["vdp_url"] == "https://www.dealer.example/vdp/1"
    assert ("/photos/0", "is no https URL; left out") in warnings and (
        "/photos/1",
        "is no https URL; left out",
    ) in warnings
    assert ("/vdp_url", "is over http://; published as https://") in warnings


def test_a_javascript_link_in_a_google_feed_refuses_its_row():
    rows = samples.google_rows(samples.vehicles(2))
    rows[1][19] = "javascript:alert(document.cookie)"
    rows[2][17] = "javascript:alert(1)"  # image_link
    report = read(samples._delimited(rows, "\t").encode(), "google.tsv", partial=True)
    assert report.accepted == 1
    assert 'column "link": "javascript:alert(document.cookie)" is not an absolute https URL' in str(report.problems[0])
    assert any("javascript:alert(1)" in str(w) and "left out" in str(w) for w in report.warnings)


# -- secrets in URLs ---------------------------------------------------------------------------------------


def test_secrets_in_a_url_are_never_shown():
    url = "https://user:pw@feeds.example/dealer/12.csv?api_key=SECRET1&dealer=12&X-Amz-Signature=SECRET2&token=S3#frag"
    shown = display_source(url)
    assert shown == "https://feeds.example/dealer/12.csv?api_key=***&dealer=12&X-Amz-Signature=***&token=***"
    assert display_source("/var/lib/aap/feeds/x.csv") == "/var/lib/aap/feeds/x.csv"


# -- mapping files ---------------------------------------------------------------------------------------------


def test_every_mapping_file_problem_is_in_the_error_list(tmp_path):
    bad_utf8 = tmp_path / "latin.toml"
    bad_utf8.write_bytes('[columns]\n"Prix" = "price"\n"État" = "condition"\n'.encode("latin-1"))
    deep_array = tmp_path / "deep.toml"
    deep_array.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    deep_table = tmp_path / "tables.toml"
    deep_table.write_text("[columns]\n" + '"A" = ' + "{ a = " * 30 + "1" + " }" * 30 + "\n")
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    cases = {
        bad_utf8: "is not UTF-8 text",
        deep_array: "nests tables or arrays more than 8 deep",
        deep_table: "nests tables or arrays more than 8 deep",
        big: "is larger than 1 MiB",
    }
    for path, message in cases.items():
        with pytest.raises(MappingError) as info:
            read_mapping(str(path))
        assert message in info.value.problems[0]
        feed = tmp_path / "feed.csv"
        feed.write_bytes(b"VIN\n1HGCM82633A004352\n")
        result = CliRunner().invoke(main, ["import", str(feed), "--mapping", str(path), "--database", "sqlite://"])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


_keys = st.sampled_from(
    ["extends", "unknown", "encoding", "delimiter", "columns", "ignore", "defaults", "rooftops", "xml", "field"]
    + ["transform", "values", "otherwise", "unit", "decimal", "separator", "order", "insecure", "Prix", "price"]
) | st.text(max_size=4)
_leaf = (
    st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=6)
    | st.sampled_from(["dealer-csv", "km", ",", "drop", "dmy", "price", "vin", "money", "error"])
)
_toml = st.recursive(
    _leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=4), max_leaves=20
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(_keys, _toml, max_size=6))
def test_any_mapping_document_is_a_format_or_a_mapping_error(doc):
    try:
        parse_format(doc, "m.toml")
    except MappingError as exc:
        assert exc.problems and all(isinstance(p, str) for p in exc.problems)


# -- the address guard ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("169.254.169.254", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("127.0.0.2", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("192.168.0.9", "a private address"),
        ("100.64.0.1", "a private address"),
        ("fd00::5", "a private address"),
        ("::ffff:10.0.0.1", "a private address"),
        ("0.0.0.0", "a reserved address"),
        ("224.0.0.1", "a multicast address"),
        ("93.184.216.34", None),
    ],
)
def test_addresses_are_classified(address, why):
    assert netguard.refusal(address, netguard.Reach()) == why
    allowed = netguard.refusal(address, netguard.Reach(loopback=True, private=True))
    assert allowed == (why if why in ("a link-local address", "a reserved address", "a multicast address") else None)


class _Stream(httpcore.AsyncNetworkStream):
    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.closed = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True

    def get_extra_info(self, info: str) -> Any:
        return (self.peer, 443) if info == "server_addr" else None


class _Inner:
    def __init__(self, peer: str) -> None:
        self.stream = _Stream(peer)
        self.connected: list[str] = []

    async def connect_tcp(self, host: str, port: int, **kw: Any) -> _Stream:
        self.connected.append(host)
        return self.stream


def _resolving(monkeypatch, address: str) -> None:
    async def getaddrinfo(host: str, port: int, **kw: Any):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(netguard.anyio, "getaddrinfo", getaddrinfo)


def test_the_connection_actually_made_is_checked(monkeypatch):
    """A name vetted as public, then a socket to loopback (a rebinding resolver): refused, closed."""
    _resolving(monkeypatch, "93.184.216.34")
    backend = netguard.GuardedBackend(netguard.Reach())
    inner = _Inner("127.0.0.1")
    backend._inner = inner
    with pytest.raises(netguard.RefusedAddress, match="a loopback address"):
        asyncio.run(backend.connect_tcp("feeds.provider.example", 443))
    assert inner.connected == ["93.184.216.34"] and inner.stream.closed


@pytest.mark.parametrize(("address", "why"), [("10.0.0.7", "a private address"), ("169.254.169.254", "a link-local")])
def test_a_name_resolving_to_a_private_address_is_refused(monkeypatch, address, why):
    _resolving(monkeypatch, address)
    with pytest.raises(FetchError) as info:
        asyncio.run(fetch("https://feeds.provider.example/inventory.csv?api_key=SECRET", work=WORK))
    message = str(info.value)
    assert f"feeds.provider.example resolves to {why}" in message and "SECRET" not in message


# -- an https source that redirects --------------------------------------------------------------------------


def _certificate(directory: Path) -> tuple[str, str]:
    cert, key = self_signed(directory, "127.0.0.1")
    return str(cert), str(key)


class RedirectingServer:
    """``/feed.tsv`` over TLS, and ``/to?url=...`` answering 302 to that URL."""

    def __init__(self, directory: Path) -> None:
        self.cert, key = _certificate(directory)
        self.body = samples.google_tsv(samples.vehicles(COUNT))
        self.stopping = threading.Event()
        app = Starlette(routes=[Route("/feed.tsv", self.feed), Route("/to", self.to), Route("/slow", self.slow)])
        self.live = LiveServer().start(app, certificate=(self.cert, key))
        self.port = self.live.port
        self.base = self.live.base_url

    async def feed(self, request: Request) -> Response:
        return Response(self.body, media_type="text/tab-separated-values")

    async def to(self, request: Request) -> Response:
        return RedirectResponse(request.query_params["url"], status_code=302)

    async def slow(self, request: Request) -> Response:
        while not self.stopping.is_set():  # never answers, until the server stops
            await asyncio.sleep(0.05)
        return Response(b"")

    def stop(self) -> None:
        self.stopping.set()
        self.live.stop()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    server = RedirectingServer(tmp_path_factory.mktemp("tls"))
    yield server
    server.stop()


def _fetch(url: str, server: RedirectingServer, **rules: Any):
    return asyncio.run(fetch(url, credentials=Credentials(ca_file=server.cert), rules=FetchRules(**rules), work=WORK))


def test_the_configured_loopback_source_is_fetched(tls_server):
    assert _fetch(f"{tls_server.base}/feed.tsv", tls_server).data == tls_server.body


@pytest.mark.parametrize(
    ("target", "refusal"),
    [
        ("http://127.0.0.2:{port}/feed.tsv", "which must use https://"),
        ("http://localhost:{port}/feed.tsv", "which leaves https for plain http"),
        ("https://127.0.0.1:{port}/feed.tsv", "is a loopback address"),
        ("https://localhost:{port}/feed.tsv", "localhost resolves to a loopback address"),
        ("https://10.20.30.40/feed.tsv", "is a private address"),
        ("http://169.254.169.254/latest/meta-data/", "which must use https://"),
        ("https://169.254.169.254/latest/meta-data/", "is a link-local address"),
        ("ftp://127.0.0.1/feed.tsv", "which must be an https:// or sftp:// URL"),
    ],
)
def test_a_redirect_is_checked_like_the_source(tls_server, target, refusal):
    url = f"{tls_server.base}/to?url={target.format(port=tls_server.port)}"
    with pytest.raises(FetchError) as info:
        _fetch(url, tls_server)
    assert refusal in str(info.value)


def test_private_network_allows_a_redirect_inside_it(tls_server):
    url = f"{tls_server.base}/to?url={tls_server.base}/feed.tsv"
    assert _fetch(url, tls_server, private_network=True).data == tls_server.body


def test_a_redirect_loop_ends(tls_server):
    url = f"{tls_server.base}/to?url={tls_server.base}/to"  # /to without url: 500 after the first hop
    with pytest.raises(FetchError):
        _fetch(url, tls_server, private_network=True)


@pytest.mark.slow
def test_a_source_that_never_answers_is_cut_off_at_the_deadline(tls_server):
    with pytest.raises(FetchError, match=r"not fetched within 1 s \(timeout_seconds\)"):
        _fetch(f"{tls_server.base}/slow", tls_server, deadline_seconds=1)


# -- a source that trickles ---------------------------------------------------------------------------------


class Trickle:
    """Plain http on loopback: a 200 with a large Content-Length, then one byte every ``every`` seconds."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/inventory.csv"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nContent-Type: text/csv\r\n\r\n")
                    while not self.stopping.wait(self.every):
                        conn.sendall(b"V")
                except OSError:
                    continue

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def trickle():
    server = Trickle(every=3.0)
    yield server
    server.stop()


@pytest.mark.slow
def test_a_one_byte_per_three_seconds_source_is_cut_off_at_the_deadline(trickle, tmp_path):
    with pytest.raises(FetchError, match="not fetched within 1 s"):
        asyncio.run(fetch(trickle.url, rules=FetchRules(deadline_seconds=1), work=WORK))
    result = CliRunner().invoke(
        main, ["import", trickle.url, "--timeout", "1", "--database", f"sqlite:///{tmp_path}/aap.db", "--json"]
    )
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "failed" and "not fetched within 1 s" in summary["message"]


def test_a_transfer_below_the_minimum_rate_is_cut_off(monkeypatch):
    import aap.feeds.fetch as fetching

    server = Trickle(every=0.01)
    try:
        monkeypatch.setattr(fetching, "RATE_GRACE_SECONDS", 0.0)
        with pytest.raises(FetchError, match="below the minimum of 1e\\+12"):
            asyncio.run(fetch(server.url, rules=FetchRules(min_bytes_per_second=1e12), work=WORK))
    finally:
        server.stop()


# -- secrets through the import history and the logs ------------------------------------------------------------


def test_a_secret_in_a_feed_url_is_in_no_history_message_or_log(tls_server, tmp_path, caplog):
    db = f"sqlite:///{tmp_path}/aap.db"
    url = f"{tls_server.base}/missing.tsv?api_key=SECRET-KEY-1"
    caplog.set_level(logging.INFO)
    result = CliRunner().invoke(main, ["import", url, "--ca-file", tls_server.cert, "--database", db, "--json"])
    assert result.exit_code == 1
    assert "SECRET-KEY-1" not in result.output
    summary = orjson.loads(result.stdout)
    assert summary["source"].endswith("/missing.tsv?api_key=***")
    from aap.store import open_stores

    stores = open_stores(db)
    try:
        runs = stores.feeds.runs()
        assert runs and all("SECRET" not in orjson.dumps(r.to_json()).decode() for r in runs)
        assert all("SECRET" not in s.feed for s in stores.feeds.states())
    finally:
        stores.close()
    ours = [r.getMessage() for r in caplog.records if not r.name.startswith("uvicorn")]  # not the test server's
    assert not any("SECRET-KEY-1" in line for line in ours)
