"""Serving static-per-deployment documents: content type, ETag, Cache-Control, HEAD.

Every discovery document (the agent card, llms.txt, poppy.json, ...) is
rendered from the settings when the app is built, so its ETag is a hash of the
exact bytes sent. Clients that revalidate
with ``If-None-Match`` get a body-less 304; ``HEAD`` gets the headers of the
``GET`` (RFC 9727 asks for both on the api-catalog).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

DEFAULT_MAX_AGE = 300


def etag_for(body: bytes) -> str:
    """A strong validator over the exact bytes served."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def etag_matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 §13.1.2: weak comparison, ``*`` matches anything."""
    if if_none_match.strip() == "*":
        return True
    wanted = etag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        if candidate.strip().removeprefix("W/") == wanted:
            return True
    return False


@dataclass(frozen=True)
class StaticDocument:
    """One rendered document with its media type and cache policy."""

    body: bytes
    media_type: str
    max_age: int = DEFAULT_MAX_AGE

    @property
    def etag(self) -> str:
        return etag_for(self.body)

    def headers(self) -> dict[str, str]:
        return {
            "Cache-Control": f"public, max-age={self.max_age}",
            "ETag": self.etag,
            "Access-Control-Allow-Origin": "*",
            "X-Content-Type-Options": "nosniff",
        }

    def respond(self, request: Request) -> Response:
        """200 (GET), header-only 200 (HEAD) or 304 (matching ``If-None-Match``)."""
        headers = self.headers()
        inm = request.headers.get("if-none-match")
        if inm is not None and etag_matches(inm, self.etag):
            return Response(status_code=304, headers=headers)
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(self.body))
            return Response(b"", headers=headers, media_type=self.media_type)
        return Response(self.body, headers=headers, media_type=self.media_type)
