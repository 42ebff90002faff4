"""Fetch a feed's bytes from where the dealer's provider puts them: https, sftp, or a path.

Every fetch is conditional on what the source looked like at the last
successful import (:class:`Validators`): an https server is asked with
``If-None-Match`` / ``If-Modified-Since`` (RFC 9110 §13.1) and a ``304`` means
"unchanged"; a body identical to the last one (same SHA-256) is unchanged too;
an sftp or local file with the same size and modification time is not read
again. Unchanged feeds are not imported (a no-op in the history).

Credentials come from environment variables named in the configuration,
read here when the fetch happens; they never appear in messages or logs.
Error messages name the source without its user name.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx

from aap import __version__
from aap.config.feeds import source_scheme
from aap.util.rfc3339 import to_utc_z

MAX_FEED_BYTES = 1 << 30  # a feed larger than 1 GiB is refused
USER_AGENT = f"aap/{__version__} (inventory feed fetcher)"


class FetchError(Exception):
    """The source could not be fetched; the message is safe to log (no credentials)."""


@dataclass(frozen=True)
class Credentials:
    """Where a fetch finds its secrets (environment variable names) and trust anchors (paths)."""

    username_env: str | None = None
    password_env: str | None = None
    token_env: str | None = None
    key_file: str | None = None
    known_hosts: str | None = None
    ca_file: str | None = None
    timeout_seconds: float = 300.0


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
    """``source`` without user information (for messages, logs and the history)."""
    if "://" not in source:
        return source
    parts = urlsplit(source)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=host).geturl()


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


async def _fetch_http(source: str, previous: Validators, credentials: Credentials) -> Fetched:
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip"}
    if previous.etag:
        headers["If-None-Match"] = previous.etag
    if previous.last_modified:
        headers["If-Modified-Since"] = previous.last_modified
    auth: Any = None
    token = _env(credentials.token_env, "bearer token")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif credentials.username_env or credentials.password_env:
        auth = httpx.BasicAuth(
            _env(credentials.username_env, "user name") or "", _env(credentials.password_env, "password") or ""
        )
    verify: Any = True
    if credentials.ca_file:
        verify = ssl.create_default_context(cafile=credentials.ca_file)
    shown = display_source(source)
    name = unquote(urlsplit(source).path.rsplit("/", 1)[-1]) or "feed"
    try:
        async with httpx.AsyncClient(
            verify=verify, timeout=credentials.timeout_seconds, follow_redirects=True
        ) as client:
            async with client.stream("GET", source, headers=headers, auth=auth) as response:
                if response.status_code == 304:
                    return Fetched(None, name, previous)
                if response.status_code != 200:
                    raise FetchError(f"{shown} answered HTTP {response.status_code}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_FEED_BYTES:
                        raise FetchError(f"{shown} is larger than 1 GiB")
                    chunks.append(chunk)
                data = b"".join(chunks)
                etag = response.headers.get("ETag")
                last_modified = response.headers.get("Last-Modified")
    except httpx.HTTPError as exc:
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


async def _fetch_sftp(source: str, previous: Validators, credentials: Credentials) -> Fetched:
    import asyncssh  # loaded only for an sftp feed

    parts = urlsplit(source)
    path = unquote(parts.path)
    name = path.rsplit("/", 1)[-1] or "feed"
    shown = display_source(source)
    options: dict[str, Any] = {
        "username": unquote(parts.username) if parts.username else None,
        "known_hosts": credentials.known_hosts if credentials.known_hosts else (),
        "connect_timeout": min(credentials.timeout_seconds, 60.0),
    }
    if credentials.known_hosts is None:
        options.pop("known_hosts")  # asyncssh's default: ~/.ssh/known_hosts
    password = _env(credentials.password_env, "password")
    if password is not None:
        options["password"] = password
    if credentials.key_file:
        options["client_keys"] = [credentials.key_file]
    else:
        options["agent_path"] = None
        if password is not None:
            options["client_keys"] = []
    try:
        async with asyncssh.connect(parts.hostname or "", parts.port or 22, **options) as conn:
            async with conn.start_sftp_client() as sftp:
                attrs = await sftp.stat(path)
                size, mtime = attrs.size or 0, attrs.mtime or 0
                fingerprint = f"{size}:{mtime}"
                file_time = to_utc_z(datetime.fromtimestamp(mtime, tz=UTC)) if mtime else None
                if previous.fingerprint == fingerprint:
                    return Fetched(None, name, previous, file_time)
                if size > MAX_FEED_BYTES:
                    raise FetchError(f"{shown} is larger than 1 GiB")
                async with sftp.open(path, "rb") as handle:
                    content: Any = await handle.read()
                data = content if isinstance(content, bytes) else str(content).encode()
    except asyncssh.HostKeyNotVerifiable:
        raise FetchError(f"{shown}: the server's host key is not in known_hosts") from None
    except asyncssh.PermissionDenied:
        raise FetchError(f"{shown}: authentication failed") from None
    except asyncssh.SFTPError as exc:
        raise FetchError(f"{shown}: {exc.reason}") from None
    except (TimeoutError, OSError, asyncssh.Error) as exc:
        raise FetchError(f"{shown}: {type(exc).__name__}") from None
    return Fetched(data, name, Validators(fingerprint=fingerprint), file_time)


async def fetch(source: str, previous: Validators = Validators(), credentials: Credentials = Credentials()) -> Fetched:
    """The feed at ``source`` (a path, ``https://`` or ``sftp://`` URL), unless unchanged."""
    scheme = source_scheme(source)
    if scheme == "file":
        return await asyncio.to_thread(_fetch_file, source, previous)
    if scheme in ("https", "http"):
        return await _fetch_http(source, previous, credentials)
    if scheme == "sftp":
        return await _fetch_sftp(source, previous, credentials)
    raise FetchError(f"cannot fetch {display_source(source)}: unsupported scheme {scheme}")
