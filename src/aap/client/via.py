"""Send every request to one origin, whatever host its URL names: ``aap check --via``.

A platform operator checks a tenant before its domain points at the platform, or from
inside the platform, past the proxy: the URLs stay the agent's own
(``https://dealer.example/a2a``), so every document and every signature (a DPoP proof's
``htu``) is what a buyer agent would see, but the connection goes to ``--via``
(``http://127.0.0.1:8000``), with the URL's host in the ``Host`` header as the proxy
would forward it (docs/platform.md, "Checking a tenant"). Through an ``https://`` origin (the
platform's proxy, Caddy) the TLS handshake names the URL's host too (SNI, RFC 6066 §3), and the
certificate is verified for it: the proxy picks the tenant's certificate by that name.
"""

from __future__ import annotations

import httpx


def _redirect(request: httpx.Request, origin: httpx.URL) -> httpx.URL:
    """Point ``request`` at ``origin`` with its own host in ``Host`` (and in SNI over TLS);
    returns its original URL, which the caller puts back."""
    original = request.url
    request.headers["Host"] = original.netloc.decode("ascii")
    if origin.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": original.raw_host.decode("ascii")}
    request.url = original.copy_with(scheme=origin.scheme, host=origin.host, port=origin.port)
    return original


def origin_of(origin: str) -> httpx.URL:
    """``origin`` as a URL, or ValueError when it is not ``scheme://host[:port]``."""
    target = httpx.URL(origin)
    if target.scheme not in ("http", "https") or not target.host or target.path not in ("", "/"):
        raise ValueError("--via takes an origin such as http://127.0.0.1:8000 (no path)")
    return target


class ViaTransport(httpx.AsyncBaseTransport):
    """An httpx transport that connects to ``origin`` and keeps each request's own ``Host``."""

    def __init__(self, origin: str, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.origin = origin_of(origin)
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        original = _redirect(request, self.origin)
        try:
            return await self.inner.handle_async_request(request)
        finally:
            request.url = original

    async def aclose(self) -> None:
        await self.inner.aclose()


class ViaSyncTransport(httpx.BaseTransport):
    """:class:`ViaTransport` for a synchronous ``httpx.Client``."""

    def __init__(self, origin: str, inner: httpx.BaseTransport | None = None) -> None:
        self.origin = origin_of(origin)
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        original = _redirect(request, self.origin)
        try:
            return self.inner.handle_request(request)
        finally:
            request.url = original

    def close(self) -> None:
        self.inner.close()
