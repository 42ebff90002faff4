"""Personal-agent identity: the client metadata document at ``client_id`` and its JWKS.

A ``client_id`` is a URL chosen by whoever calls the token endpoint, so
fetching it is a server-side request forgery risk. Every fetch here is HTTPS
with certificates verified (system store, or ``SSL_CERT_FILE``), no redirects,
no cookies or proxies, a size cap and one overall deadline. Addresses are
checked when the socket is opened, on the address actually connected to, so a
name that resolves to a private, link-local or loopback address is refused
even if it resolved elsewhere a moment before (loopback only with the
development switch). Results are cached per process within bounds, and
failures are remembered briefly so a flood of assertions cannot force fetches.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import orjson

from aap.config.poppy import PoppySettings
from aap.netguard import LOCAL, Reach, RefusedAddress, Resolve, guarded_transport, refusal
from aap.poppy.jose import JoseProblem, public_p256_key
from aap.spec import validate
from aap.util.memo import Memo

MAX_KEYS = 20
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?", re.IGNORECASE)
DEFAULT_TTL = 300


class ClientMetadataError(Exception):
    """The client's identity documents are unusable; the message is safe to send back."""


@dataclass(frozen=True)
class ClientInfo:
    client_id: str
    client_name: str
    jwks_uri: str
    keys: tuple[dict[str, Any], ...]  # usable public signing JWKs
    expires_at: float
    jwks_fetched_at: float


def check_https_url(url: Any, what: str) -> tuple[str, int]:
    """An absolute HTTPS URL without credentials or fragment; returns (host, port)."""
    if not isinstance(url, str) or len(url) > 2048 or not url.startswith("https://"):
        raise ClientMetadataError(f"{what} must be an https:// URL")
    try:
        parts = urlsplit(url)
        port = parts.port or 443
    except ValueError as exc:
        raise ClientMetadataError(f"{what} is not a valid URL") from exc
    if not parts.hostname or parts.username is not None or parts.password is not None or "#" in url:
        raise ClientMetadataError(f"{what} must have a host and no credentials or fragment")
    if any(ch.isspace() for ch in url):
        raise ClientMetadataError(f"{what} must not contain whitespace")
    return parts.hostname.lower(), port


def cache_ttl(cache_control: str | None, settings: PoppySettings) -> float:
    """``max-age`` from Cache-Control, clamped to the configured bounds."""
    ttl = float(DEFAULT_TTL)
    if cache_control:
        match = _MAX_AGE.search(cache_control)
        if match:
            ttl = float(match.group(1))
        elif "no-store" in cache_control.lower() or "no-cache" in cache_control.lower():
            ttl = 0.0
    return max(float(settings.metadata_cache_min_ttl), min(ttl, float(settings.metadata_cache_max_ttl)))


def usable_keys(jwks: Any) -> tuple[dict[str, Any], ...]:
    """The ES256-capable public keys of a JWKS (others are ignored, never an error)."""
    if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
        raise ClientMetadataError("jwks_uri must serve a JWK Set with a keys array")
    if len(jwks["keys"]) > MAX_KEYS:
        raise ClientMetadataError(f"the JWK Set has more than {MAX_KEYS} keys")
    keys = []
    for jwk in jwks["keys"]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig" or jwk.get("alg", "ES256") != "ES256":
            continue
        try:
            public_p256_key(jwk)
        except JoseProblem:
            continue
        keys.append(jwk)
    return tuple(keys)


class ClientRegistry:
    """Fetches and caches client metadata + JWKS (one per process; bounded)."""

    def __init__(
        self,
        settings: PoppySettings,
        ssl_context: ssl.SSLContext | None = None,
        *,
        outbound: Reach = LOCAL,
        resolve: Resolve | None = None,
    ) -> None:
        self.settings = settings
        self.outbound = outbound
        self.resolve = resolve
        self._ssl = ssl_context
        entries = settings.metadata_cache_entries
        self._cache: Memo[str, ClientInfo] = Memo(entries, lru=True)
        self._failures: Memo[str, tuple[float, str]] = Memo(entries, lru=True)

    @property
    def reach(self) -> Reach:
        """Public addresses only; loopback with the development switch, when the deployment's
        outbound policy allows it at all (not for a platform's tenant: docs/deployment.md,
        "Outbound connections")."""
        return Reach(loopback=self.settings.loopback_allowed).within(self.outbound)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            # The system trust store; OpenSSL honours SSL_CERT_FILE / SSL_CERT_DIR.
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def get(self, client_id: str) -> ClientInfo:
        """The verified identity documents of ``client_id`` (cached)."""
        now = time.time()
        cached = self._cache.peek(client_id)
        if cached is not None and cached.expires_at > now:
            return cached
        failed = self._failures.peek(client_id)
        if failed is not None and failed[0] > now:
            raise ClientMetadataError(failed[1])
        try:
            info = await self._load(client_id, now)
        except ClientMetadataError as exc:
            self._failures.put(client_id, (now + self.settings.metadata_failure_ttl, str(exc)))
            self._cache.discard(client_id)
            raise
        self._failures.discard(client_id)
        self._cache.put(client_id, info)
        return info

    async def refresh_keys(self, info: ClientInfo) -> ClientInfo:
        """Refetch the JWKS after an unknown ``kid``, at most once per interval per client."""
        now = time.time()
        if now - info.jwks_fetched_at < self.settings.jwks_refresh_interval:
            return info
        try:
            jwks, _ = await self.fetch_json(info.jwks_uri, "jwks_uri")
            keys = usable_keys(jwks)
        except ClientMetadataError:
            keys = info.keys
        fresh = ClientInfo(info.client_id, info.client_name, info.jwks_uri, keys, info.expires_at, now)
        self._cache.put(info.client_id, fresh)
        return fresh

    async def _load(self, client_id: str, now: float) -> ClientInfo:
        host, _ = check_https_url(client_id, "client_id")
        metadata, ttl = await self.fetch_json(client_id, "client_id")
        problems = validate(metadata, "poppy-client-metadata")
        if problems:
            where = ", ".join(sorted({p["instanceLocation"] or "/" for p in problems}))
            raise ClientMetadataError(f"the client metadata document is not valid PoppyClientMetadata (at {where})")
        if metadata["client_id"] != client_id:
            raise ClientMetadataError("the client metadata client_id differs from the URL it was fetched from")
        jwks_host, _ = check_https_url(metadata["jwks_uri"], "jwks_uri")
        if jwks_host != host:
            raise ClientMetadataError("jwks_uri must be on the client_id host")
        for uri in metadata["redirect_uris"]:
            if uri.lower().startswith("https://") and check_https_url(uri, "redirect_uris")[0] != host:
                raise ClientMetadataError("redirect_uris must be on the client_id host or HTTP loopback")
        jwks, jwks_ttl = await self.fetch_json(metadata["jwks_uri"], "jwks_uri")
        keys = usable_keys(jwks)
        if not keys:
            raise ClientMetadataError("the JWK Set has no usable ES256 signing key")
        return ClientInfo(client_id, metadata["client_name"], metadata["jwks_uri"], keys, now + min(ttl, jwks_ttl), now)

    async def fetch_json(self, url: str, what: str) -> tuple[Any, float]:
        """GET ``url`` under every limit; returns the JSON value and its cache lifetime."""
        check_https_url(url, what)
        host = urlsplit(url).hostname or ""
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None and refusal(literal, self.reach):
            raise ClientMetadataError(f"{what} points at an address that is not allowed")
        limit = self.settings.metadata_max_bytes
        timeout = self.settings.metadata_timeout
        transport = guarded_transport(self.reach, self._context(), max_connections=4, resolve=self.resolve)
        try:
            with anyio.fail_after(timeout):
                async with httpx.AsyncClient(
                    transport=transport,
                    follow_redirects=False,
                    trust_env=False,
                    timeout=httpx.Timeout(timeout),
                    headers={"Accept": "application/json", "Accept-Encoding": "identity"},
                ) as client:
                    async with client.stream("GET", url) as response:
                        if response.status_code != 200:
                            raise ClientMetadataError(
                                f"{what} answered HTTP {response.status_code} (redirects are not followed)"
                            )
                        declared = response.headers.get("content-length")
                        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
                            raise ClientMetadataError(f"{what} document is larger than {limit} bytes")
                        body = bytearray()
                        async for chunk in response.aiter_raw():
                            body.extend(chunk)
                            if len(body) > limit:
                                raise ClientMetadataError(f"{what} document is larger than {limit} bytes")
                        if response.headers.get("content-encoding", "identity").lower() != "identity":
                            raise ClientMetadataError(f"{what} must be served without content encoding")
                        cache_control = response.headers.get("cache-control")
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise ClientMetadataError(f"{what} did not answer within {timeout:g} s") from exc
        except httpx.HTTPError as exc:
            if isinstance(exc.__cause__, RefusedAddress):  # httpx wraps the backend's error
                raise ClientMetadataError(f"{what} points at an address that is not allowed") from exc
            raise ClientMetadataError(f"{what} could not be fetched over verified HTTPS") from exc
        try:
            value = orjson.loads(bytes(body))
        except orjson.JSONDecodeError as exc:
            raise ClientMetadataError(f"{what} did not serve JSON") from exc
        return value, cache_ttl(cache_control, self.settings)
