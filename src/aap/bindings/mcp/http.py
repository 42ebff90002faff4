"""The HTTP front of ``/mcp``: checks that belong to the deployment, then the SDK.

The SDK's Streamable HTTP session manager (stateless, JSON responses) serves
both protocol eras on one URL, routing by the ``MCP-Protocol-Version`` header.
In front of it this module adds, in order:

1. ``Host`` / ``Origin`` validation from :mod:`aap.bindings.mcp.policy`
   (421 / 403 with a JSON-RPC error body without ``id``);
2. ``405`` (``Allow: POST``) for anything but POST: there is nothing to push
   on a GET stream and no session to DELETE, in either era;
3. optional Bearer authentication (:mod:`aap.bindings.mcp.auth`);
4. ``Content-Type`` and ``Accept`` (415 / 406, :mod:`.envelope`);
5. the body, read once with the shared bounded reader (:mod:`aap.web.body`;
   the app's middleware has already refused anything over the limit), and its
   JSON-RPC envelope (:mod:`.envelope`): parse errors, batches and malformed
   messages are answered here, with fixed texts; a plain ``tools/call`` is then
   answered directly (:mod:`.fastpath`), everything else by the SDK
   (:mod:`.sdk`, loaded on the first such request) once it is within the
   request bounds (``-32602`` otherwise: the SDK's reader is the costliest
   part of refusing a large body);
6. body-primary era check: a request whose ``params._meta`` carries the
   2026-07-28 envelope but whose ``MCP-Protocol-Version`` header is missing or
   names a handshake revision is a modern request with a header mismatch
   (``-32020``, 400). The SDK routes by header only and would serve it as a
   legacy call;
7. the SDK's answers are edited on the way out (:mod:`.answers`): fixed error
   texts, every revision in ``-32022``, ``Retry-After`` on ``RATE_LIMITED``.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aap.bindings.jsonrpc import INTERNAL_ERROR, INVALID_REQUEST, error_response, error_shape
from aap.bindings.mcp.answers import editing_answers
from aap.bindings.mcp.auth import BearerAuth, remember_caller
from aap.bindings.mcp.envelope import (
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    Refusal,
    media_refusal,
    method_refusal,
    read_message,
    size_refusal,
)
from aap.bindings.mcp.fastpath import FastToolCalls
from aap.bindings.mcp.policy import OriginPolicy
from aap.bindings.mcp.sdk import LazySdk
from aap.errors import unexpected
from aap.web.accesslog import annotate
from aap.web.body import BodyTooLarge, read_body, replay, too_large_error

PROTOCOL_VERSION_HEADER = "mcp-protocol-version"


def envelope_mismatch(message: dict[str, Any], headers: Headers, versions: tuple[str, ...]) -> Response | None:
    """The modern answer for a modern-envelope request that the header routes to the legacy era.

    Header missing or different from the envelope's version: ``-32020``. Header
    equal to it (a handshake revision inside a modern envelope): ``-32022``.
    """
    version = headers.get(PROTOCOL_VERSION_HEADER)
    if version is not None and version not in HANDSHAKE_VERSIONS:
        return None  # routed to the SDK's modern ladder, which checks header against envelope
    if "id" not in message:
        return None
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or PROTOCOL_VERSION_META_KEY not in meta:
        return None
    request_id = message["id"]
    requested = meta[PROTOCOL_VERSION_META_KEY]
    if version is None or version != requested:
        message_text = f"{PROTOCOL_VERSION_HEADER} header does not match the request envelope's protocol version"
        return error_response(400, HEADER_MISMATCH, message_text, request_id)
    data = {"supported": list(versions), "requested": requested}
    message_text = "Unsupported protocol version: handshake revisions are served through initialize, not per request"
    return error_response(400, UNSUPPORTED_PROTOCOL_VERSION, message_text, request_id, data=data)


@dataclass(eq=False)
class McpHttpEndpoint:
    """ASGI app mounted at ``/mcp``."""

    manager: LazySdk
    policy: OriginPolicy
    auth: BearerAuth
    _: KW_ONLY
    max_body_bytes: int
    protocol_versions: tuple[str, ...]
    #: Answers plain ``tools/call`` requests itself (:mod:`.fastpath`); None: the SDK answers all.
    fast: FastToolCalls | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        annotate(scope, binding="mcp")
        response = await self.gate(scope)
        if response is not None:
            await response(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            await error_shape(413, too_large_error(self.max_body_bytes))(scope, receive, send)
            return
        except ClientDisconnect:
            return
        message = read_message(body)
        if isinstance(message, Refusal):
            await message.response()(scope, receive, send)
            return
        if self.fast is not None:
            answer = await self.fast.answer(scope, message)
            if answer is not None:
                await answer(scope, receive, send)
                return
        oversized = size_refusal(message)
        if oversized is not None:
            await oversized.response()(scope, receive, send)
            return
        mismatch = envelope_mismatch(message, headers, self.protocol_versions)
        if mismatch is not None:
            await mismatch(scope, receive, send)
            return
        await self.manager.handle_request(
            scope, replay(body, receive), editing_answers(scope, send, self.protocol_versions)
        )

    async def gate(self, scope: Scope) -> Response | None:
        """Host, Origin, method, credentials and media types: answered before the body is read."""
        headers = Headers(scope=scope)
        if not self.policy.host_allowed(headers.get("host")):
            return error_response(421, INVALID_REQUEST, "Host not allowed for this MCP endpoint")
        if not self.policy.origin_allowed(headers.get("origin")):
            return error_response(403, INVALID_REQUEST, "Origin not allowed for this MCP endpoint")
        if scope["method"] != "POST":
            return method_refusal().response(headers={"Allow": "POST"})
        authorization = headers.get("authorization")
        if authorization is not None:
            try:
                caller = await self.auth.verify(authorization)
            except Exception as exc:  # a verifier fault is ours, not the caller's: retryable, no detail
                unexpected(exc, binding="mcp", endpoint="bearer verification")
                message = "Credentials could not be checked; retry later"
                return error_response(503, INTERNAL_ERROR, message, headers={"Retry-After": "1"})
            if caller is None:
                return self.auth.challenge()
            remember_caller(scope, caller)
        refusal = media_refusal(headers)
        return refusal.response() if refusal is not None else None
