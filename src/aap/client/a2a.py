"""AAP over A2A v1.0 JSON-RPC: ``SendMessage`` with one typed DataPart.

Raw JSON-RPC over httpx rather than the a2a-sdk client: the SDK keeps only the
first ErrorInfo's metadata of an error and drops the ``aap.error`` Struct
(docs/client.md, "Bindings"), and it sends every number as a double. Here the
Struct detail is found by ``@type`` and ``value.type`` (never by position) and
integers stay integers.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import orjson

from aap import EXTENSION_URI
from aap.client.errors import ProtocolError
from aap.client.transport import CallOutcome, answered_error, http_failure, json_body, rpc_failure
from aap.protocols import A2A_PROTOCOL_VERSION, STRUCT_TYPE
from aap.skills.catalog import SkillInfo

RETRYABLE_RPC = frozenset({-32603})


def envelope(
    skill: SkillInfo,
    payload: dict[str, Any],
    *,
    a2a_tenant: str | None = None,
    request_id: str | int | None = None,
    context_id: str | None = None,
) -> dict[str, Any]:
    """The JSON-RPC ``SendMessage`` request carrying ``payload`` as the single DataPart."""
    message: dict[str, Any] = {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": [{"data": payload, "mediaType": skill.request_media_type}],
    }
    if context_id:
        message["contextId"] = context_id
    params: dict[str, Any] = {
        "message": message,
        "configuration": {"acceptedOutputModes": [skill.response_media_type]},
    }
    if a2a_tenant is not None:
        params["tenant"] = a2a_tenant
    return {"jsonrpc": "2.0", "id": request_id or str(uuid.uuid4()), "method": "SendMessage", "params": params}


def default_headers() -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "A2A-Version": A2A_PROTOCOL_VERSION,
        "A2A-Extensions": EXTENSION_URI,
    }


def find_aap_error(error: Any) -> dict[str, Any] | None:
    """The ``aap.error`` inside a JSON-RPC error's ``data[]`` Struct detail, if any."""
    if not isinstance(error, dict) or not isinstance(error.get("data"), list):
        return None
    for detail in error["data"]:
        if (
            isinstance(detail, dict)
            and detail.get("@type") == STRUCT_TYPE
            and isinstance(detail.get("value"), dict)
            and detail["value"].get("type") == "aap.error"
        ):
            return detail["value"]
    return None


def response_part(result: Any, skill: SkillInfo) -> dict[str, Any] | None:
    """The AAP response object in ``result.message.parts[]`` (matched by its ``type``)."""
    message = result.get("message") if isinstance(result, dict) else None
    parts = message.get("parts") if isinstance(message, dict) else None
    if not isinstance(parts, list):
        return None
    for part in parts:
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and data.get("type") == skill.response_type:
            return data
    return None


class A2ATransport:
    name = "a2a"

    def __init__(self, http: httpx.AsyncClient, url: str, *, a2a_tenant: str | None = None) -> None:
        self.http = http
        self.url = url
        self.a2a_tenant = a2a_tenant

    async def post(self, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        """POST a raw JSON-RPC body (the checker uses this for header and envelope probes)."""
        merged = default_headers()
        for name, value in (headers or {}).items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        content = body if isinstance(body, (bytes, str)) else orjson.dumps(body)
        return await self.http.post(self.url, content=content, headers=merged)

    async def call(self, skill: SkillInfo, payload: dict[str, Any]) -> CallOutcome:
        request = envelope(skill, payload, a2a_tenant=self.a2a_tenant)
        outcome = CallOutcome(self.name, skill, request=request)
        response = await outcome.attempt(self.post(request), "A2A request failed")
        if response is None:
            return outcome
        body = json_body(response)
        outcome.record(response, body)
        self.interpret(outcome, response, body)
        return outcome

    def interpret(self, outcome: CallOutcome, response: httpx.Response, body: Any) -> None:
        skill = outcome.skill
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
            if response.status_code >= 400:
                outcome.error = http_failure(self.name, response, "A2A endpoint refused the request")
            else:
                outcome.error = ProtocolError(
                    "A2A endpoint did not answer with a JSON-RPC 2.0 object",
                    binding=self.name,
                    http_status=response.status_code,
                )
            return
        if "error" in body:
            error = body["error"]
            aap_error = find_aap_error(error)
            if aap_error is not None:
                outcome.error = answered_error(self.name, response, aap_error)
                return
            outcome.error = rpc_failure(self.name, response, error, retryable_codes=RETRYABLE_RPC)
            return
        data = response_part(body.get("result"), skill)
        if data is None:
            outcome.error = ProtocolError(
                f"A2A result carries no {skill.response_type} DataPart in result.message",
                binding=self.name,
                http_status=response.status_code,
            )
            return
        outcome.response = data

    async def aclose(self) -> None:
        return None
