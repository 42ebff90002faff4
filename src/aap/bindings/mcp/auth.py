"""Optional Bearer authentication on the MCP endpoint.

AAP's MCP endpoint is ``public_read``: no call needs a token, and
``lead.submit`` carries its consent in the payload. A caller *may* present a
Bearer token resource-bound to the MCP URL; a verified identity then scopes
lead idempotency exactly as on the other bindings. A token that is presented
but not valid is refused the way MCP authorization prescribes: ``401`` with
``WWW-Authenticate: Bearer error="invalid_token", resource_metadata=...``,
never silently downgraded to an anonymous call.

Verification is a :data:`Verifier` handed to :func:`aap.bindings.mcp.build`:
``verifier(stores, settings, authorization_header, resource_url)`` returns
the verified identity (an object with ``caller_id`` and ``client_id``) or
``None``. This deployment's Poppy issuer mints no MCP-bound tokens (no RFC
8693 exchange; docs/poppy.md, "Native MCP and token exchange"), so the
composition root passes no verifier and no token can be valid.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import anyio
import orjson
from starlette.requests import HTTPConnection
from starlette.responses import Response

from aap.agent import DealerAgent
from aap.config.model import Settings
from aap.store import Stores

CALLER_STATE_KEY = "aap.mcp.caller"


class VerifiedCaller(Protocol):
    caller_id: str
    client_id: str | None


Verifier = Callable[[Stores, Settings, str, str], "VerifiedCaller | None"]


def caller_of(request: HTTPConnection | None) -> VerifiedCaller | None:
    """The verified caller the HTTP front stored on this request, if any."""
    if request is None:
        return None
    return request.scope.get("state", {}).get(CALLER_STATE_KEY)


def remember_caller(scope: dict[str, Any], caller: VerifiedCaller) -> None:
    scope.setdefault("state", {})[CALLER_STATE_KEY] = caller


class BearerAuth:
    """Checks an ``Authorization`` header against the Poppy issuer."""

    def __init__(self, agent: DealerAgent, resource_url: str, metadata_url: str, verifier: Verifier | None) -> None:
        self.agent = agent
        self.resource_url = resource_url
        self.metadata_url = metadata_url
        self.verifier = verifier

    async def verify(self, authorization: str) -> VerifiedCaller | None:
        if self.verifier is None:
            return None
        return await anyio.to_thread.run_sync(
            self.verifier, self.agent.stores, self.agent.settings, authorization, self.resource_url
        )

    def challenge(self) -> Response:
        """The ``401`` for a token that is not valid here."""
        description = "The access token is invalid, expired or not issued for this MCP endpoint."
        header = (
            f'Bearer error="invalid_token", error_description="{description}", '
            f'resource_metadata="{self.metadata_url}"'
        )
        body = orjson.dumps({"error": "invalid_token", "error_description": description})
        return Response(
            body,
            status_code=401,
            media_type="application/json",
            headers={"WWW-Authenticate": header, "Cache-Control": "no-store"},
        )
