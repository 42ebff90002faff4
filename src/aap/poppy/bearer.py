"""Verifying the MCP Bearer tokens this issuer exchanged (the MCP binding's verifier).

The MCP binding (:mod:`aap.bindings.mcp.auth`) takes any verifier
``(authorization header, resource URL) -> caller | None``; the composition root
hands it :class:`McpBearerVerifier` when the Poppy issuer exchanges MCP tokens
(:mod:`aap.poppy.exchange`). A token is accepted only when all of these hold
(RFC 6750 §2.1, RFC 8707, docs/poppy.md "MCP for signed-in agents"):

* ``Authorization: Bearer <token>`` (scheme case-insensitive, one token);
* the token is one this issuer signed and still knows: not expired, not
  revoked, its Session alive (revoking the Session's DPoP token, or ending or
  renewing the Session, ends its MCP tokens), its client still allowed;
* it is a Bearer token exchanged for MCP, never a DPoP Session token;
* its resource is exactly the URL being called.

The caller is then the same verified identity the native API derives
(:func:`aap.poppy.context.caller_identity`), so lead idempotency and rate limits
are per signed-in caller on MCP exactly as on ``/poppy/v1/*``. Blocking
(database reads): the binding calls it from a worker thread.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from aap.config.poppy import PoppySettings
from aap.gateway import Gateway
from aap.poppy import tokens
from aap.poppy.authn import TOUCH_EVERY
from aap.poppy.context import PoppyContext, caller_identity
from aap.poppy.oauth import OAuthError

# RFC 6750 §2.1: credentials = "Bearer" 1*SP b64token
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")


@dataclass(frozen=True)
class McpCaller:
    """A signed-in personal agent calling the MCP endpoint."""

    caller_id: str
    client_id: str
    session_id: str


class McpBearerVerifier:
    """Checks one ``Authorization`` header against the issuer's token records."""

    def __init__(self, gateway: Gateway, settings: PoppySettings | None = None) -> None:
        options = settings if settings is not None else gateway.settings.poppy
        self.ctx = PoppyContext(gateway, options, gateway.stores.poppy)

    def __call__(self, authorization: str, resource_url: str) -> McpCaller | None:
        match = _BEARER.fullmatch(authorization.strip())
        if match is None:
            return None
        now = time.time()
        try:
            record = tokens.check(self.ctx, match.group(1), now=now, token_type="Bearer")
        except OAuthError:
            return None
        if record.resource != resource_url:
            return None
        session = record.session
        if now - session.last_used_at > TOUCH_EVERY:  # MCP use keeps the Session alive, as API use does
            self.ctx.store.use_session(session.id, [], touch=True, now=now)
        return McpCaller(caller_identity(session.client_id, session.sub), session.client_id, session.id)


def mcp_verifier(gateway: Gateway) -> McpBearerVerifier | None:
    """The MCP binding's Bearer verifier, when this issuer exchanges MCP tokens; else None."""
    options = gateway.settings.poppy
    if not (options.enabled and options.mcp_enabled):
        return None
    return McpBearerVerifier(gateway, options)
