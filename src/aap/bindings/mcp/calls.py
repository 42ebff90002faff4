"""The call path of an MCP tool into the transport-free core, without the SDK.

:class:`ToolRunner` turns one ``tools/call`` (tool name, arguments, the HTTP
request it came in) into the ``CallToolResult`` in wire form: the AAP response
(or the ``aap.error``) as structured content, and a text block for clients that
read only text (:mod:`.results`). Both the SDK's server (:mod:`.server`) and the
direct answer to plain calls (:mod:`.fastpath`) use it, so a call means the same
whichever path answers it. Nothing here imports the MCP SDK: serving ``/a2a``,
or plain tool calls, never loads it.

The arguments are read as models send them (docs/mcp.md, "For LLM agents"): a
member whose value is ``null`` is absent (a strict-mode converter makes every
member required, so a model says "not given" with ``null``), and ``type`` may be
left out, the tool naming the request type; a ``type`` naming another skill is
refused. The A2A and Poppy bindings read the AAP request exactly as the seed
defines it.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import HTTPConnection

from aap import __version__
from aap.bindings.jsonrpc import pointer_to_field
from aap.bindings.mcp.answers import remember_retry_after
from aap.bindings.mcp.auth import VerifiedCaller, caller_of
from aap.bindings.mcp.results import render, summarized
from aap.errors import AapError, Problem, problem, unexpected
from aap.gateway import Caller, Gateway
from aap.jsontext import decoded, encode
from aap.ratelimit import retry_after_seconds
from aap.skills.catalog import SkillInfo
from aap.spec import problem_order
from aap.web.accesslog import annotate
from aap.web.callers import anonymous_caller

SERVER_NAME = "aap"
UNKNOWN_TOOL_MESSAGE = "Unknown tool: tools/list names the tools of this server"


def server_identity(gateway: Gateway) -> dict[str, Any]:
    """The MCP ``Implementation`` of this server, in wire form (``serverInfo``; the SDK's server
    is built from the same values, :func:`aap.bindings.mcp.server.make_server`)."""
    return {
        "name": SERVER_NAME,
        "title": gateway.settings.agent.name,
        "version": __version__,
        "websiteUrl": gateway.settings.public_url,
    }


def _result(value: Any, text: str | None, is_error: bool, *, encoded: bool = False) -> dict[str, Any]:
    """A ``CallToolResult`` in wire form: the object as structured content, and ``text`` (the
    object's JSON when None) as the text block.

    Built as a plain dict: the SDK validates and shapes every result per revision anyway,
    so a pydantic model here would only be built and dumped once more. ``value`` may hold
    stored documents as they are (:mod:`aap.jsontext`). ``encoded``: the result goes
    straight to ``orjson.dumps`` (the fast path), so the structured content is encoded once
    (``orjson.Fragment``, the very bytes of the JSON text when that is the text block);
    otherwise (the SDK's path) it is the plain value.
    """
    json_text = encode(value)
    return {
        "content": [{"type": "text", "text": json_text.decode() if text is None else text}],
        "structuredContent": orjson.Fragment(json_text) if encoded else decoded(value),
        "isError": is_error,
        "resultType": "complete",  # required at 2026-07-28; the SDK drops it for older revisions
    }


def success_result(
    response: dict[str, Any], *, encoded: bool = False, summaries: bool = True, json_text: bool = False
) -> dict[str, Any]:
    """A success: the AAP response (search listings as summaries unless ``summaries`` is off)
    and its compact rendering as text; ``json_text``: its JSON instead (a client of a revision
    before 2025-06-18 has no ``structuredContent``, so the text is all it reads)."""
    plain = decoded(response)
    value = summarized(plain) if summaries else plain
    return _result(value, None if json_text else render(value), False, encoded=encoded)


def error_result(error: AapError) -> dict[str, Any]:
    """A failure: the ``aap.error`` (its message naming each field to change) and its JSON."""
    body = error.to_dict()
    message = fix_message(error.errors)
    if message:
        body["message"] = f"{error.message} {message}"
    return _result(body, None, True)


def field_name(location: str) -> str:
    """A problem's JSON Pointer as a model writes the argument: ``/filters/make/0`` → ``filters.make[0]``."""
    return pointer_to_field(location, "").removeprefix(".") or "the arguments"


#: How many problems an error message names (``details.errors`` lists every one).
MESSAGE_PROBLEMS = 8


def fix_message(problems: list[Problem]) -> str:
    """What to change, field by field: ``Change: filters.make must be array; ...``."""
    if not problems:
        return ""
    named = [f"{field_name(p['instanceLocation'])} {p['error']}" for p in problems[:MESSAGE_PROBLEMS]]
    more = len(problems) - MESSAGE_PROBLEMS
    tail = f" (and {more} more in details.errors)" if more > 0 else ""
    return "Change: " + "; ".join(named) + tail + "."


def absent_nulls(value: Any) -> Any:
    """``value`` without the object members whose value is ``null`` (at any depth): on MCP a
    ``null`` member means "not given". A ``null`` array item stays, and is refused."""
    if isinstance(value, dict):
        return {k: absent_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [absent_nulls(v) for v in value]
    return value


def caller_key(caller: VerifiedCaller | None, request: HTTPConnection | None) -> str:
    """Rate-limit bucket: the verified caller when there is one, else the client address.

    A verified caller is a Poppy caller; its bucket is the one the Poppy API uses too.
    """
    if caller is not None:
        return "poppy:" + caller.caller_id
    return anonymous_caller(request)


class ToolRunner:
    """Turns a ``tools/call`` into a gateway call and its outcome into a result."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        #: The skill of each tool, by tool name, in skill-catalog order.
        self.tools: dict[str, SkillInfo] = {skill.tool_name: skill for skill in gateway.agent.skills}
        #: Search listings as summaries (``[mcp] search_listings``, docs/mcp.md).
        self.summaries = gateway.settings.mcp.search_listings == "summary"

    def payload(self, name: str, skill: SkillInfo, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """The AAP request: the arguments without their ``null`` members, ``type`` this tool's.

        A missing ``type`` is this tool's; a foreign one is a schema failure listing every
        problem of the arguments against this tool's request schema (never a dispatch to
        another skill).
        """
        payload = absent_nulls({} if arguments is None else arguments)
        expected = skill.request_type
        if "type" not in payload:
            return {"type": expected, **payload}
        if payload["type"] != expected:
            wrong = problem("/type", "const", f"must be {expected!r} for tool {name}, or left out")
            others = self.gateway.agent.refusal(skill, {**payload, "type": expected})  # bounds, schema, capabilities
            raise AapError(
                "SCHEMA_VALIDATION_FAILED",
                errors=sorted([wrong, *(others.errors if others else [])], key=problem_order),
                hint=f'Leave "type" out, or set it to "{expected}": {name} takes the AAP {expected} object.',
            )
        return payload

    async def run(
        self, name: str, skill: SkillInfo, arguments: dict[str, Any] | None, caller: Caller
    ) -> dict[str, Any]:
        """Rate limit, argument check, skill: the first token before the arguments are looked at."""
        await self.gateway.admit(caller)
        payload = self.payload(name, skill, arguments)
        return await self.gateway.call(caller, skill, payload, paid=1)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        request: HTTPConnection | None,
        *,
        encoded: bool = False,
        json_text: bool = False,
    ) -> dict[str, Any]:
        """The ``CallToolResult`` (wire form) of one call of tool ``name`` (one of :attr:`tools`).

        ``encoded``: the caller writes the result with ``orjson.dumps`` as it is (the fast
        path, :mod:`.fastpath`), so parts of it may stay encoded (``orjson.Fragment``);
        the SDK's path reads the result as plain JSON values. ``json_text``: the text block
        is the answer's JSON (a revision without ``structuredContent``).
        """
        skill = self.tools[name]
        scope = request.scope if request is not None else {}
        verified = caller_of(request)
        caller = Caller(
            "mcp",
            caller_key(verified, request),
            caller_id=verified.caller_id if verified else None,
            client_id=verified.client_id if verified else None,
        )
        try:
            response = await self.run(name, skill, arguments, caller)
            result = success_result(response, encoded=encoded, summaries=self.summaries, json_text=json_text)
        except AapError as exc:
            annotate(scope, skill=skill.id, aap_code=exc.code, error_id=exc.error_id)
            retry_after = retry_after_seconds(exc)
            if retry_after is not None:
                remember_retry_after(scope, retry_after)
            return error_result(exc)
        except Exception as exc:  # never a stack trace or customer data on the wire or in the log
            error = unexpected(exc, binding="mcp", skill=skill.id)
            annotate(scope, skill=skill.id, aap_code=error.code, error_id=error.error_id)
            return error_result(error)
        annotate(scope, skill=skill.id)
        return result
