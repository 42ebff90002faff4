"""Optional Bearer authentication on the MCP endpoint.

AAP's MCP endpoint is ``public_read``: no call needs a token, and
``lead.submit`` carries its consent in the payload. A caller *may* present a
Bearer token resource-bound to the MCP URL (a signed-in Poppy agent exchanges
its Session token for one: docs/poppy.md, "MCP for signed-in agents"); a
verified identity then scopes lead idempotency and the rate limit exactly as on
the other bindings. A token that is presented but not valid is refused the way
MCP authorization prescribes: ``401`` with ``WWW-Authenticate: Bearer
error="invalid_token"`` (RFC 6750 §3), never silently downgraded to an
anonymous call.

Verification is a :data:`Verifier` handed to :func:`aap.bindings.mcp.build`:
``verifier(authorization_header, resource_url)`` returns the verified caller
(an object with ``caller_id`` and ``client_id``) or ``None``; it runs in a
worker thread. The composition root passes :func:`aap.poppy.mcp_verifier`,
whose issuer publishes the RFC 9728 metadata of this endpoint; only then does
the challenge name it in ``resource_metadata`` (RFC 9728 §5.1). Without a
verifier no token is valid and the challenge names no metadata.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import Scope

CALLER_STATE_KEY = "aap.mcp.caller"


class VerifiedCaller(Protocol):
    @property
    def caller_id(self) -> str: ...

    @property
    def client_id(self) -> str | None: ...


Verifier = Callable[[str, str], "VerifiedCaller | None"]
#: Runs a call off the event loop and awaits it (``Gateway.blocking``: the worker's executor).
Blocking = Callable[..., Awaitable[Any]]


def caller_of(request: HTTPConnection | None) -> VerifiedCaller | None:
    """The verified caller the HTTP front stored on this request, if any."""
    if request is None:
        return None
    caller: VerifiedCaller | None = request.scope.get("state", {}).get(CALLER_STATE_KEY)
    return caller


def remember_caller(scope: Scope, caller: VerifiedCaller) -> None:
    scope.setdefault("state", {})[CALLER_STATE_KEY] = caller


class BearerAuth:
    """Checks an ``Authorization`` header with the verifier, and words the refusal."""

    def __init__(
        self, resource_url: str, metadata_url: str, verifier: Verifier | None, blocking: Blocking | None = None
    ) -> None:
        """``blocking`` runs the verifier off the event loop (the worker's :class:`~aap.work.Work`)."""
        self.resource_url = resource_url
        self.metadata_url = metadata_url if verifier is not None else None
        self.verifier = verifier
        self.blocking = blocking

    async def verify(self, authorization: str) -> VerifiedCaller | None:
        if self.verifier is None:
            return None
        if self.blocking is None:
            return self.verifier(authorization, self.resource_url)
        caller: VerifiedCaller | None = await self.blocking(self.verifier, authorization, self.resource_url)
        return caller

    def challenge(self) -> Response:
        """The ``401`` for a token that is not valid here."""
        description = "The access token is invalid, expired, revoked or not issued for this MCP endpoint."
        header = f'Bearer error="invalid_token", error_description="{description}"'
        if self.metadata_url is not None:
            header += f', resource_metadata="{self.metadata_url}"'
        body = orjson.dumps({"error": "invalid_token", "error_description": description})
        return Response(
            body,
            status_code=401,
            media_type="application/json",
            headers={"WWW-Authenticate": header, "Cache-Control": "no-store"},
        )
