"""Fetch a feed's bytes from where the dealer's provider puts them: https, sftp, or a path.

Every fetch is conditional on what the source looked like at the last
successful import (:class:`Validators`): an https server is asked with
``If-None-Match`` / ``If-Modified-Since`` (RFC 9110 §13.1) and a ``304`` means
"unchanged"; a body identical to the last one (same SHA-256) is unchanged too;
an sftp or local file with the same size and modification time is not read
again. Unchanged feeds are not imported (a no-op in the history).

Credentials come from environment variables named in the configuration,
read here when the fetch happens; they never appear in messages or logs.
Error messages name the source as :func:`display_source` shows it: without its
user name, and with the values of query parameters that look like secrets
(``?api_key=``, ``token``, ``signature``...) replaced.

A fetch cannot be turned against the server (docs/feeds.md, "Fetching"): it
ends at an overall deadline and when the transfer falls below a minimum rate;
every redirect is checked like the source (https, and plain http only to a
loopback host as configured); and every connection goes through
:mod:`aap.netguard`, which refuses link-local addresses always and loopback or
private ones unless the feed allows them (``private_network``), after the name
is resolved and on the socket actually connected. The configured source may
name a loopback host itself (local development); a redirect may not.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urljoin, urlsplit

import httpcore
import httpx

from aap import __version__, telemetry
from aap.config.credentials import SecretValues
from aap.config.feeds import source_problem, source_scheme
from aap.loopback import is_loopback_host
from aap.netguard import (
    LOCAL,
    Reach,
    RefusedAddress,
    Resolve,
    guarded_transport,
    host_refusal,
    peer_refusal,
    refused_cause,
    vetted_addresses,
)
from aap.util.rfc3339 import to_utc_z
from aap.work import Work

MAX_FEED_BYTES = 1 << 30  # a feed larger than 1 GiB (as transferred) is refused
MAX_REDIRECTS = 5
RATE_GRACE_SECONDS = 30.0  # the minimum transfer rate applies after this long
USER_AGENT = f"aap/{__version__} (inventory feed fetcher)"
#: Query parameter names whose values are shown as ``***``: anything naming a key, token,
#: secret, password, signature, credential or session (``api_key``, ``X-Amz-Signature``, ``sig``).
_SECRET_PARAMETER = re.compile(r"key|token|secret|pass|pwd|sig|auth|credential|session", re.IGNORECASE)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchError(Exception):
    """The source could not be fetched; the message is safe to log (no credentials)."""


@dataclass(frozen=True)
class Credentials:
    """Where a fetch finds its secrets (environment variable names, or a platform tenant's secret
    names and their values) and trust anchors (paths)."""

    username_env: str | None = None
    password_env: str | None = None
    token_env: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    ca_file: str | None = None
    username_secret: str | None = None
    password_secret: str | None = None
    token_secret: str | None = None
    secrets: SecretValues = field(default_factory=SecretValues, repr=False)

    def value(self, stem: str, what: str) -> str | None:
        """The ``stem`` secret's value (``username``, ``password``, ``token``), None when not named."""
        secret = getattr(self, f"{stem}_secret")
        if secret is not None:
            found = self.secrets.get(secret)
            if not found:
                raise FetchError(f"{self.secrets.missing(secret)} ({what})")
            return found
        return _env(getattr(self, f"{stem}_env"), what)


@dataclass(frozen=True)
class FetchRules:
    """How long a fetch may take, how slow it may be, and where it may connect."""

    deadline_seconds: float = 300.0  # the whole fetch: connections, redirects, every byte
    min_bytes_per_second: float = 1024.0  # average since the start, once RATE_GRACE_SECONDS have passed
    private_network: bool = False  # loopback and private addresses allowed (a feed inside the network)
    #: The deployment's outbound policy (``Settings.outbound``): what no feed setting goes beyond.
    ceiling: Reach = LOCAL
    #: The resolver (tests give their own; None: the system's).
    resolve: Resolve | None = None

    def reach(self, host: str, *, first_hop: bool = True) -> Reach:
        """Where a connection to ``host`` may go: the configured source may name a loopback host
        itself (local development), a redirect may not; ``private_network`` opens both."""
        loopback = self.private_network or (first_hop and is_loopback_host(host))
        return Reach(loopback=loopback, private=self.private_network).within(self.ceiling)

    def refused(self, what: str) -> str:
        """``what``, and the setting that would allow it when the deployment lets a feed have it
        (a platform's tenant cannot: docs/platform.md, "Limits and decisions")."""
        return what + ("; refused (private_network allows it)" if self.ceiling.private else "; refused")


@dataclass(frozen=True)
class Validators:
    """What the source looked like at the last successful import."""

    etag: str | None = None
    last_modified: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class Fetched:
    """A fetch's result: the bytes (None when unchanged), the name, the source's own time."""

    data: bytes | None
    name: str
    validators: Validators
    file_time: str | None = None  # RFC 3339: Last-Modified, or the file's modification time

    @property
    def unchanged(self) -> bool:
        return self.data is None


def display_source(source: str) -> str:
    """``source`` as it may be shown or logged: no user information, no fragment, and the value
    of every query parameter that looks like a secret replaced by ``***``."""
    if "://" not in source:
        return source
    try:
        parts = urlsplit(source)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:
        return source.split("://", 1)[0] + "://(an invalid URL)"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_PARAMETER.search(name) for name, _ in pairs):
            query = urlencode([(n, "***" if _SECRET_PARAMETER.search(n) else v) for n, v in pairs], safe="*")
    return parts._replace(netloc=host, query=query, fragment="").geturl()


def _env(name: str | None, what: str) -> str | None:
    if name is None:
        return None
    value = os.environ.get(name)
    if not value:
        raise FetchError(f"the environment variable {name} ({what}) is not set")
    return value


def _fetch_file(path: str, previous: Validators) -> Fetched:
    try:
        status = os.stat(path)
    except OSError as exc:
        raise FetchError(f"{path}: {exc.strerror}") from None
    fingerprint = f"{status.st_size}:{status.st_mtime_ns}"
    file_time = to_utc_z(datetime.fromtimestamp(status.st_mtime, tz=UTC))
    name = os.path.basename(path)
    if previous.fingerprint == fingerprint:
        return Fetched(None, name, previous, file_time)
    if status.st_size > MAX_FEED_BYTES:
        raise FetchError(f"{path} is larger than 1 GiB")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise FetchError(f"{path}: {exc.strerror}") from None
    return Fetched(data, name, Validators(fingerprint=fingerprint), file_time)


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    import certifi  # httpx's own trust store

    return ssl.create_default_context(cafile=certifi.where())


def _transport(context: ssl.SSLContext, reach: Reach, resolve: Resolve | None) -> httpx.AsyncHTTPTransport:
    """A transport whose every connection goes through the address guard (no proxy from the environment).

    Requests go to the transport itself, not through an ``httpx.AsyncClient``: the client logs
    each request's URL, and a feed URL may carry a secret in its query.
    """
    return guarded_transport(reach, context, max_connections=2, resolve=resolve)


@asynccontextmanager
async def _closing(response: httpx.Response) -> AsyncIterator[httpx.Response]:
    try:
        yield response
    finally:
        await response.aclose()


def _hop_problem(url: str, previous: str | None) -> str | None:
    """Why a redirect target may not be followed (the source's own rules, and no https -> http)."""
    problem = source_problem(url)
    if problem is None and source_scheme(url) not in ("https", "http"):
        problem = "must be an https:// URL"
    if (
        problem is None
        and previous is not None
        and source_scheme(previous) == "https"
        and source_scheme(url) != "https"
    ):
        problem = "leaves https for plain http"
    return problem


def _literal_refusal(host: str, reach: Reach) -> str | None:
    """An IP literal is vetted before any connection (a name, ``localhost`` too, when it is resolved)."""
    name = host.strip("[]").lower()
    return None if name == "localhost" or name.endswith(".localhost") else host_refusal(host, reach)


async def _fetch_http(source: str, previous: Validators, credentials: Credentials, rules: FetchRules) -> Fetched:
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"}
    if previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    token = credentials.value("token", "bearer token")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif (
        credentials.username_env
        or credentials.password_env
        or credentials.username_secret
        or credentials.password_secret
    ):
        user = credentials.value("username", "user name") or ""
        password = credentials.value("password", "password") or ""
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    context = _ssl_context(credentials.ca_file)
    shown = display_source(source)
    name = unquote(urlsplit(source).path.rsplit("/", 1)[-1]) or "feed"
    deadline = rules.deadline_seconds
    timeout = httpx.Timeout(min(deadline, 60.0), connect=min(deadline, 30.0))
    origin = urlsplit(source)[:2]
    url = source
    started = time.monotonic()
    try:
        async with asyncio.timeout(deadline):
            for hop in range(MAX_REDIRECTS + 1):
                host = urlsplit(url).hostname or ""
                # The configured source may name a loopback host (local development); a redirect may not.
                reach = rules.reach(host, first_hop=hop == 0)
                why = _literal_refusal(host, reach)
                if why is not None:
                    raise FetchError(rules.refused(f"{shown}: {display_source(url)} is {why}"))
                if urlsplit(url)[:2] != origin:  # credentials never follow a redirect to another origin
                    headers.pop("Authorization", None)
                request = httpx.Request("GET", url, headers=headers, extensions={"timeout": timeout.as_dict()})
                async with (
                    _transport(context, reach, rules.resolve) as transport,
                    _closing(await transport.handle_async_request(request)) as response,
                ):
                    if response.status_code in _REDIRECTS and "location" in response.headers:
                        target = urljoin(url, response.headers["location"])
                        problem = _hop_problem(target, url)
                        if problem is not None:
                            raise FetchError(f"{shown}: redirected to {display_source(target)}, which {problem}")
                        url = target
                        continue
                    if response.status_code == 304:
                        return Fetched(None, name, previous)
                    if response.status_code != 200:
                        raise FetchError(f"{shown} answered HTTP {response.status_code}")
                    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
                    if encoding not in ("identity", "gzip", "x-gzip", ""):
                        raise FetchError(f"{shown}: unsupported Content-Encoding {encoding!r}")
                    body = bytearray()
                    async for chunk in response.aiter_raw():  # as sent: gzip is unpacked by the reader
                        body += chunk
                        if len(body) > MAX_FEED_BYTES:
                            raise FetchError(f"{shown} is larger than 1 GiB")
                        elapsed = time.monotonic() - started
                        if elapsed > RATE_GRACE_SECONDS and len(body) < rules.min_bytes_per_second * elapsed:
                            raise FetchError(
                                f"{shown}: transferring {len(body) / elapsed:.0f} bytes/s, below the minimum "
                                f"of {rules.min_bytes_per_second:g} (min_bytes_per_second)"
                            )
                    data = bytes(body)
                    etag = response.headers.get("ETag")
                    last_modified = response.headers.get("Last-Modified")
                    break
            else:
                raise FetchError(f"{shown}: more than {MAX_REDIRECTS} redirects")
    except TimeoutError:
        raise FetchError(f"{shown}: not fetched within {deadline:g} s (timeout_seconds)") from None
    except httpx.HTTPError as exc:
        cause = refused_cause(exc)
        if cause is not None:
            raise FetchError(
                rules.refused(f"{shown}: {cause.host} resolves to {cause.why} ({cause.address})")
            ) from None
        raise FetchError(f"{shown}: {type(exc).__name__}") from None
    fingerprint = "sha256:" + hashlib.sha256(data).hexdigest()
    file_time = None
    if last_modified:
        try:
            file_time = to_utc_z(parsedate_to_datetime(last_modified))
        except (TypeError, ValueError):
            file_time = None
    validators = Validators(etag, last_modified, fingerprint)
    if previous.fingerprint == fingerprint:
        return Fetched(None, name, validators, file_time)
    return Fetched(data, name, validators, file_time)


async def _fetch_sftp(source: str, previous: Validators, credentials: Credentials, rules: FetchRules) -> Fetched:
    shown = display_source(source)
    try:
        async with asyncio.timeout(rules.deadline_seconds):
            return await _sftp(source, previous, credentials, rules)
    except TimeoutError:
        raise FetchError(f"{shown}: not fetched within {rules.deadline_seconds:g} s (timeout_seconds)") from None


async def _sftp(source: str, previous: Validators, credentials: Credentials, rules: FetchRules) -> Fetched:
    import asyncssh  # loaded only for an sftp feed

    parts = urlsplit(source)
    path = unquote(parts.path)
    name = path.rsplit("/", 1)[-1] or "feed"
    shown = display_source(source)
    host = parts.hostname or ""
    reach = rules.reach(host)
    try:
        await vetted_addresses(host, parts.port or 22, reach, rules.resolve)
    except RefusedAddress as refused:
        raise FetchError(rules.refused(f"{shown}: {host} resolves to {refused.why}")) from None
    except httpcore.ConnectError:
        raise FetchError(f"{shown}: name resolution failed") from None
    options: dict[str, Any] = {
        "username": unquote(parts.username) if parts.username else None,
        "known_hosts": credentials.known_hosts if credentials.known_hosts else (),
        "connect_timeout": min(rules.deadline_seconds, 60.0),
    }
    if credentials.known_hosts is None:
        options.pop("known_hosts")  # asyncssh's default: ~/.ssh/known_hosts
    password = credentials.value("password", "password")
    if password is not None:
        options["password"] = password
    if credentials.key_file:
        options["client_keys"] = [credentials.key_file]
    else:
        options["agent_path"] = None
        if password is not None:
            options["client_keys"] = []
    try:
        async with asyncssh.connect(host, parts.port or 22, **options) as conn:
            why = peer_refusal(conn.get_extra_info("peername"), reach)
            if why is not None:  # the connection actually made
                raise FetchError(rules.refused(f"{shown}: {host} connected to {why}"))
            async with conn.start_sftp_client() as sftp:
                attrs = await sftp.stat(path)
                size, mtime = attrs.size or 0, attrs.mtime or 0
                fingerprint = f"{size}:{mtime}"
                file_time = to_utc_z(datetime.fromtimestamp(mtime, tz=UTC)) if mtime else None
                if previous.fingerprint == fingerprint:
                    return Fetched(None, name, previous, file_time)
                if size > MAX_FEED_BYTES:
                    raise FetchError(f"{shown} is larger than 1 GiB")
                started = time.monotonic()
                body = bytearray()
                async with sftp.open(path, "rb") as handle:
                    while chunk := await handle.read(1 << 16):
                        body += chunk if isinstance(chunk, bytes) else str(chunk).encode()
                        if len(body) > MAX_FEED_BYTES:
                            raise FetchError(f"{shown} is larger than 1 GiB")
                        elapsed = time.monotonic() - started
                        if elapsed > RATE_GRACE_SECONDS and len(body) < rules.min_bytes_per_second * elapsed:
                            raise FetchError(f"{shown}: transferring below {rules.min_bytes_per_second:g} bytes/s")
                data = bytes(body)
    except asyncssh.HostKeyNotVerifiable:
        raise FetchError(f"{shown}: the server's host key is not in known_hosts") from None
    except asyncssh.PermissionDenied:
        raise FetchError(f"{shown}: authentication failed") from None
    except asyncssh.SFTPError as exc:
        raise FetchError(f"{shown}: {exc.reason}") from None
    except (TimeoutError, OSError, asyncssh.Error) as exc:
        raise FetchError(f"{shown}: {type(exc).__name__}") from None
    return Fetched(data, name, Validators(fingerprint=fingerprint), file_time)


async def fetch(
    source: str,
    previous: Validators = Validators(),
    credentials: Credentials = Credentials(),
    rules: FetchRules = FetchRules(),
    *,
    work: Work,
) -> Fetched:
    """The feed at ``source`` (a path, ``https://`` or ``sftp://`` URL), unless unchanged; a
    file is read on ``work``'s executor of long calls."""
    tracing = telemetry.active
    if tracing is None:
        return await _fetch(source, previous, credentials, rules, work)
    with tracing.feed_fetch(source, source_scheme(source)) as span:  # aap.telemetry
        try:
            fetched = await _fetch(source, previous, credentials, rules, work)
        except FetchError:
            tracing.failed(span, "FetchError")
            raise
        span.set_attribute("aap.feed.unchanged", fetched.unchanged)
        return fetched


async def _fetch(source: str, previous: Validators, credentials: Credentials, rules: FetchRules, work: Work) -> Fetched:
    scheme = source_scheme(source)
    if scheme == "file":
        return await work.long(_fetch_file, source, previous)
    if scheme in ("https", "http"):
        return await _fetch_http(source, previous, credentials, rules)
    if scheme == "sftp":
        return await _fetch_sftp(source, previous, credentials, rules)
    raise FetchError(f"cannot fetch {display_source(source)}: unsupported scheme {scheme}")
