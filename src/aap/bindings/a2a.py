"""A2A 1.0 JSON-RPC binding: ``POST /a2a`` carrying one AAP DataPart per ``SendMessage``.

A thin adapter: it checks the JSON-RPC envelope, the A2A service parameters
(``A2A-Version``, ``A2A-Extensions``), the method and the ``SendMessage``
params, then hands the DataPart's ``data`` to the
:class:`~aap.agent.DealerAgent` and wraps the typed response in
``result.message``. Checks run in this order (docs/a2a.md, "Order of checks"):
parse (-32700), envelope (-32600), version (-32009), extensions (-32008),
rate limit, method (-32601 and the capability errors), params (-32602,
-32001, -32003, -32005), then the skill through the gateway (:mod:`aap.gateway`).

Every answer is HTTP 200 with a JSON-RPC body (the A2A SDK client discards the
body of any other status). An unexpected exception becomes ``INTERNAL_ERROR``
through :func:`aap.web.errors.unexpected`. Where the sources are silent the
binding decides; each decision is written down in docs/a2a.md and pinned in
tests/test_a2a_*.py.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from aap import EXTENSION_URI
from aap.bindings import jsonrpc as rpc
from aap.bindings.jsonrpc import RpcError
from aap.errors import AapError, unexpected
from aap.gateway import Caller, Gateway
from aap.jsontext import encode
from aap.paths import A2A_PATH
from aap.protocols import A2A_PROTOCOL_VERSION
from aap.ratelimit import anonymous_caller_key, retry_after_seconds
from aap.skills.catalog import SkillInfo
from aap.web.accesslog import annotate
from aap.web.body import read_body
from aap.web.parts import BindingParts

VERSION_HEADER = "A2A-Version"
EXTENSIONS_HEADER = "A2A-Extensions"
# A2A-Version "1.0" or "1.0.<patch>": patch numbers do not count in A2A negotiation (A2A §3.2.6).
_VERSION_RE = re.compile(re.escape(A2A_PROTOCOL_VERSION) + r"(\.\d+)?")

STREAMING_METHODS = frozenset({"SendStreamingMessage", "SubscribeToTask"})
PUSH_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)
TASK_METHODS = frozenset({"GetTask", "CancelTask"})
#: ListTasks page sizes (A2A v1.0 ``ListTasksRequest.page_size``: default 50, at most 100).
LIST_TASKS_DEFAULT_PAGE = 50
LIST_TASKS_MAX_PAGE = 100
DATA_FIELD = "message.parts[0].data"
# Output modes that can read an application/vnd.autoagent.*+json part.
_GENERIC_OUTPUT_MODES = frozenset({"*/*", "application/*", "application/json"})


@dataclass
class Outcome:
    """One JSON-RPC answer plus what the access log and metrics need to know."""

    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""  # the serialised payload
    skill: str | None = None
    aap_code: str | None = None
    rpc_code: int | None = None
    error_id: str | None = None


@dataclass
class SendCall:
    """The parts of a SendMessage request the binding acts on."""

    data: dict[str, Any]
    media_type: str | None
    context_id: str | None
    accepted_output_modes: list[str]


def _get(obj: dict[str, Any], camel: str) -> Any:
    """A ProtoJSON field by its lowerCamelCase name or its snake_case original."""
    if camel in obj:
        return obj[camel]
    return obj.get(_snake(camel))


@functools.cache
def _snake(camel: str) -> str:
    """``taskId`` → ``task_id``: the binding's own field names only (a fixed few), made once."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)


def _random_uuids(count: int) -> list[str]:
    """``count`` random UUIDs (RFC 9562 §5.4, version 4) from one read of the system's random
    source: ``uuid.uuid4()`` reads it once per id, and each read is a system call."""
    raw = bytearray(os.urandom(16 * count))
    ids = []
    for at in range(0, 16 * count, 16):
        raw[at + 6] = (raw[at + 6] & 0x0F) | 0x40  # version 4
        raw[at + 8] = (raw[at + 8] & 0x3F) | 0x80  # the variant of RFC 9562
        text = raw[at : at + 16].hex()
        ids.append(f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}")
    return ids


def _media_base(media_type: str) -> str:
    """``type/subtype`` without parameters, lower-cased (media types are case-insensitive)."""
    return media_type.split(";", 1)[0].strip().lower()


def _header(headers: Headers, name: str) -> str | None:
    values = headers.getlist(name)
    return ",".join(values) if values else None


#: The request a -32005 answer shows a client that sent prose (docs/a2a.md, "SendMessage params").
EXAMPLE_REQUEST = {
    "type": "inventory.search.request",
    "filters": {"make": ["Honda"], "price_max": 30000},
    "pagination": {"limit": 10},
}
#: Media types of a part whose text (or raw bytes) may hold the AAP request as JSON.
_JSON_TEXT_TYPES = frozenset({"application/json", "text/plain"})


def _json_request_text(part: dict[str, Any], media_type: Any) -> Any:
    """The JSON object a text part (or an ``application/json`` raw part) holds, else None.

    Stock A2A clients (an orchestrator's remote-agent tool) send text parts; one whose text
    is an AAP request object is answered as the same request in a DataPart would be.
    """
    base = _media_base(media_type) if isinstance(media_type, str) else None
    if base is not None and base not in _JSON_TEXT_TYPES and not base.endswith("+json"):
        return None
    text: Any = part.get("text")
    if text is None and base == "application/json" and isinstance(part.get("raw"), str):
        try:
            text = base64.b64decode(part["raw"], validate=True)
        except (binascii.Error, ValueError):
            return None
    if not isinstance(text, (str, bytes)) or text.strip()[:1] not in ("{", b"{"):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _echo_id(message: Any) -> Any:
    """The request id to echo: a string or number, else None (JSON-RPC: null when unreadable)."""
    if not isinstance(message, dict):
        return None
    request_id = message.get("id")
    if isinstance(request_id, (str, int, float)) and not isinstance(request_id, bool):
        return request_id
    return None


class A2ABinding:
    """The ``/a2a`` endpoint of one agent, through its :class:`~aap.gateway.Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.settings = gateway.settings

    # -- HTTP --------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /a2a``, as a plain ASGI callable: the router's route and, ahead of the router,
        the direct path (:mod:`aap.web.direct`) both call it, with no Request or Response object."""
        try:
            body = await read_body(receive, self.settings.max_body_bytes)  # the body limit read it already
        except ClientDisconnect:
            return  # nobody is listening for an answer
        client = scope.get("client")
        caller = Caller("a2a", anonymous_caller_key(client[0] if client else None))
        outcome = await self.process(body, Headers(scope=scope), caller)
        annotate(
            scope,
            binding="a2a",
            skill=outcome.skill,
            aap_code=outcome.aap_code,
            rpc_code=outcome.rpc_code,
            error_id=outcome.error_id,
        )
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in outcome.headers.items()]
        headers += [
            (b"content-length", str(len(outcome.content)).encode("latin-1")),
            (b"content-type", b"application/json"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": outcome.content})

    # -- the JSON-RPC call ---------------------------------------------------
    async def process(self, body: bytes, headers: Headers, caller: Caller) -> Outcome:
        """Answer one request body; the skill's work runs where the gateway places it."""
        outcome = await self._answer(body, headers, caller)
        try:
            outcome.content = encode(outcome.payload)
        except TypeError as exc:  # a skill returned something that is not JSON
            fallback = self._internal(outcome.payload.get("id"), exc, outcome.skill)
            fallback.headers = outcome.headers
            fallback.content = orjson.dumps(fallback.payload)
            return fallback
        return outcome

    async def _answer(self, body: bytes, headers: Headers, caller: Caller) -> Outcome:
        request_id: Any = None
        echo: dict[str, str] = {}
        skill: SkillInfo | None = None
        try:
            try:
                message = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise RpcError(
                    rpc.PARSE_ERROR, "Parse error: the request body could not be read as a JSON document."
                ) from None
            request_id = _echo_id(message)
            self._envelope(message)
            self._check_version(headers)
            self._check_extensions(headers)
            echo = {EXTENSIONS_HEADER: EXTENSION_URI}
            await self.gateway.admit(caller)  # before the method: docs/a2a.md, "Order of checks"
            if message["method"] == "ListTasks":
                return Outcome(rpc.success(request_id, self._list_tasks(message.get("params"))), echo)
            self._check_method(message["method"])
            call = self._send_message_params(message.get("params"))
            self._check_request_media_type(call)
            skill = self.gateway.skill_for(call.data)  # UNSUPPORTED_SKILL, malformed type → AapError
            self._check_media_for_skill(call, skill)
            response = await self.gateway.call(caller, skill, call.data, paid=1)
            ids = _random_uuids(1 if call.context_id else 2)
            result = {
                "message": {
                    "messageId": ids[0],
                    "contextId": call.context_id or ids[1],
                    "role": "ROLE_AGENT",
                    "parts": [{"data": response, "mediaType": skill.response_media_type}],
                }
            }
            return Outcome(rpc.success(request_id, result), echo, skill=skill.id)
        except RpcError as exc:
            return Outcome(
                rpc.failure(request_id, exc.to_error()),
                echo,
                skill=skill.id if skill else None,
                rpc_code=exc.code,
            )
        except AapError as exc:
            answer_headers = dict(echo)
            retry_after = retry_after_seconds(exc)
            if retry_after is not None:
                answer_headers["Retry-After"] = str(retry_after)
            error = rpc.aap_error(exc, DATA_FIELD)
            return Outcome(
                rpc.failure(request_id, error),
                answer_headers,
                skill=skill.id if skill else None,
                aap_code=exc.code,
                rpc_code=error["code"],
                error_id=exc.error_id,
            )
        except Exception as exc:  # never a 500, never the exception text
            outcome = self._internal(request_id, exc, skill.id if skill else None)
            outcome.headers = echo
            return outcome

    def _internal(self, request_id: Any, exc: BaseException, skill: str | None) -> Outcome:
        err = unexpected(exc, binding="a2a", skill=skill)
        error = rpc.aap_error(err, DATA_FIELD)
        return Outcome(
            rpc.failure(request_id, error),
            skill=skill,
            aap_code=err.code,
            rpc_code=error["code"],
            error_id=err.error_id,
        )

    # -- checks, in order --------------------------------------------------------
    @staticmethod
    def _envelope(message: Any) -> None:
        """Validate the JSON-RPC 2.0 request object, listing every problem."""
        if isinstance(message, list):
            raise RpcError(
                rpc.INVALID_REQUEST,
                "Invalid request: batch requests are not supported; send one JSON-RPC request object.",
                reason="INVALID_REQUEST",
            )
        if not isinstance(message, dict):
            raise RpcError(
                rpc.INVALID_REQUEST,
                "Invalid request: the body must be a JSON-RPC request object.",
                reason="INVALID_REQUEST",
            )
        violations: list[tuple[str, str]] = []
        if "id" not in message:
            violations.append(("id", "is required (notifications are not supported)"))
        elif _echo_id(message) is None:
            violations.append(("id", "must be a string or a number"))
        if message.get("jsonrpc") != "2.0":
            violations.append(("jsonrpc", 'must be exactly "2.0"'))
        if not isinstance(message.get("method"), str):
            violations.append(("method", "must be a string"))
        if "params" in message and not isinstance(message["params"], (dict, list)):
            violations.append(("params", "must be an object"))
        if violations:
            raise RpcError.listing(rpc.INVALID_REQUEST, "Invalid request", "INVALID_REQUEST", violations)

    @staticmethod
    def _check_version(headers: Headers) -> None:
        value = _header(headers, VERSION_HEADER)
        if value is None:  # AAP compatibility ingress (seed 004): omitted selects the 1.0 interface
            return
        if not _VERSION_RE.fullmatch(value.strip()):
            raise RpcError(
                rpc.VERSION_NOT_SUPPORTED,
                f"The requested A2A version is not supported: this interface serves A2A {A2A_PROTOCOL_VERSION} "
                f"(send 'A2A-Version: {A2A_PROTOCOL_VERSION}' or omit the header).",
                reason="VERSION_NOT_SUPPORTED",
                metadata={"supportedVersions": A2A_PROTOCOL_VERSION},
            )

    @staticmethod
    def _check_extensions(headers: Headers) -> None:
        value = _header(headers, EXTENSIONS_HEADER)
        if value is None:  # AAP compatibility ingress (seed 004): omitted activates the AAP extension
            return
        if EXTENSION_URI in (member.strip() for member in value.split(",")):
            return
        raise RpcError(
            rpc.EXTENSION_SUPPORT_REQUIRED,
            f"This agent requires the extension {EXTENSION_URI}: list it in the "
            f"{EXTENSIONS_HEADER} request header (or omit the header).",
            reason="EXTENSION_SUPPORT_REQUIRED",
            metadata={"extensionUri": EXTENSION_URI, "requiredHeader": EXTENSIONS_HEADER},
        )

    def _list_tasks(self, params: Any) -> dict[str, Any]:
        """``ListTasks`` (A2A v1.0 §3.1.4): this agent never creates tasks, so every page is empty.

        The parameters are checked all the same (every problem at once, -32602); a page
        token is one this agent never issued.
        """
        params = {} if params is None else params
        if not isinstance(params, dict):
            raise RpcError.listing(
                rpc.INVALID_PARAMS, "Invalid params", "INVALID_PARAMS", [("params", "must be an object")]
            )
        violations: list[tuple[str, str]] = []
        for name in ("contextId", "status", "pageToken", "statusTimestampAfter"):
            value = _get(params, name)
            if value is not None and not isinstance(value, str):
                violations.append((name, "must be a string"))
        status = _get(params, "status")
        if isinstance(status, str) and status and not status.startswith("TASK_STATE_"):
            violations.append(("status", "must be a TaskState name such as TASK_STATE_COMPLETED"))
        page_size = _get(params, "pageSize")
        if page_size is not None and (
            isinstance(page_size, bool)
            or not isinstance(page_size, (int, float))
            or page_size != int(page_size)
            or not 1 <= page_size <= LIST_TASKS_MAX_PAGE
        ):
            violations.append(("pageSize", f"must be an integer from 1 to {LIST_TASKS_MAX_PAGE}"))
        history = _get(params, "historyLength")
        if history is not None and (isinstance(history, bool) or not isinstance(history, (int, float)) or history < 0):
            violations.append(("historyLength", "must be a non-negative integer"))
        artifacts = _get(params, "includeArtifacts")
        if artifacts is not None and not isinstance(artifacts, bool):
            violations.append(("includeArtifacts", "must be a boolean"))
        echoed = params.get("tenant")
        declared = self.settings.a2a_tenant
        if (declared and echoed not in (None, "", declared)) or (not declared and echoed not in (None, "")):
            violations.append(("tenant", "must be omitted or echo the tenant declared on the agent card"))
        if _get(params, "pageToken"):
            violations.append(("pageToken", "is not a page token this agent issued"))
        if violations:
            raise RpcError.listing(rpc.INVALID_PARAMS, "Invalid params", "INVALID_PARAMS", violations)
        size = int(page_size) if page_size is not None else LIST_TASKS_DEFAULT_PAGE
        return {"tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0}

    @staticmethod
    def _check_method(method: str) -> None:
        if method == "SendMessage":
            return
        if method in STREAMING_METHODS:
            raise RpcError(
                rpc.UNSUPPORTED_OPERATION,
                f"{method} is not supported: this agent does not stream (capabilities.streaming is false); "
                "use SendMessage.",
                reason="UNSUPPORTED_OPERATION",
            )
        if method == "GetExtendedAgentCard":
            raise RpcError(
                rpc.UNSUPPORTED_OPERATION,
                "GetExtendedAgentCard is not supported: this agent has no extended card; "
                "read /.well-known/agent-card.json.",
                reason="UNSUPPORTED_OPERATION",
            )
        if method in PUSH_METHODS:
            raise RpcError(
                rpc.PUSH_NOT_SUPPORTED,
                f"{method} is not supported: this agent does not send push notifications "
                "(capabilities.pushNotifications is false).",
                reason="PUSH_NOTIFICATION_NOT_SUPPORTED",
            )
        if method in TASK_METHODS:
            raise RpcError(
                rpc.TASK_NOT_FOUND,
                "Task not found: this agent answers SendMessage with a direct message and never creates tasks.",
                reason="TASK_NOT_FOUND",
            )
        hint = " (A2A 0.3 method names are not served)" if "/" in method else ""
        raise RpcError(
            rpc.METHOD_NOT_FOUND,
            f"Method not found{hint}: this endpoint serves the A2A 1.0 method SendMessage.",
        )

    def _send_message_params(self, params: Any) -> SendCall:
        """Every problem of the SendMessage params at once, then the A2A-specific refusals."""
        violations: list[tuple[str, str]] = []
        if not isinstance(params, dict):
            raise RpcError(
                rpc.INVALID_PARAMS,
                "Invalid params: params must be an object with a message.",
                reason="INVALID_PARAMS",
                violations=[("params", "must be an object")],
            )
        echoed = params.get("tenant")
        declared = self.settings.a2a_tenant
        if declared:
            if echoed != declared:
                violations.append(("tenant", "must echo the tenant declared by this interface on the agent card"))
        elif echoed not in (None, ""):
            violations.append(("tenant", "must be omitted: this interface declares no tenant"))

        data: Any = None
        media_type: Any = None
        context_id: Any = None
        task_id: Any = None
        non_data_part = False
        message = params.get("message")
        if not isinstance(message, dict):
            violations.append(("message", "is required and must be an object"))
        else:
            message_id = _get(message, "messageId")
            if not isinstance(message_id, str) or not message_id:
                violations.append(("message.messageId", "is required and must be a non-empty string"))
            role = message.get("role")
            if role not in ("ROLE_USER", 1):
                violations.append(("message.role", 'must be "ROLE_USER"'))
            context_id = _get(message, "contextId")
            if context_id is not None and not isinstance(context_id, str):
                violations.append(("message.contextId", "must be a string"))
            task_id = _get(message, "taskId")
            if task_id is not None and not isinstance(task_id, str):
                violations.append(("message.taskId", "must be a string"))
            parts = message.get("parts")
            if not isinstance(parts, list) or len(parts) != 1:
                violations.append(("message.parts", "must hold exactly one AAP DataPart"))
            elif not isinstance(parts[0], dict):
                violations.append(("message.parts[0]", "must be an object"))
            else:
                part = parts[0]
                media_type = _get(part, "mediaType")
                if media_type is not None and not isinstance(media_type, str):
                    violations.append(("message.parts[0].mediaType", "must be a string"))
                if "data" not in part:
                    json_text = _json_request_text(part, media_type)
                    if isinstance(json_text, dict):  # an AAP request sent as JSON text: a DataPart's data
                        data = json_text
                        if not (isinstance(media_type, str) and _media_base(media_type).endswith("+json")):
                            media_type = None  # text/plain or application/json: any AAP request
                    elif any(k in part for k in ("text", "raw", "url", "file", "bytes")):
                        non_data_part = True
                    else:
                        violations.append((DATA_FIELD, "is required: send the AAP request as a DataPart"))
                elif not isinstance(part["data"], dict):
                    violations.append((DATA_FIELD, "must be a JSON object (the AAP request)"))
                else:
                    data = part["data"]

        accepted: Any = []
        push_config = None
        configuration = params.get("configuration")
        if configuration is not None:
            if not isinstance(configuration, dict):
                violations.append(("configuration", "must be an object"))
            else:
                accepted = _get(configuration, "acceptedOutputModes")
                if accepted is None:
                    accepted = []
                elif not isinstance(accepted, list) or not all(isinstance(m, str) for m in accepted):
                    violations.append(("configuration.acceptedOutputModes", "must be an array of strings"))
                    accepted = []
                push_config = _get(configuration, "taskPushNotificationConfig")

        if violations:
            raise RpcError.listing(rpc.INVALID_PARAMS, "Invalid params", "INVALID_PARAMS", violations)
        if task_id:
            raise RpcError(
                rpc.TASK_NOT_FOUND,
                "Task not found: this agent never creates tasks; send the message without a taskId.",
                reason="TASK_NOT_FOUND",
            )
        if push_config:
            raise RpcError(
                rpc.PUSH_NOT_SUPPORTED,
                "Push notifications are not supported (capabilities.pushNotifications is false); "
                "send the message without a taskPushNotificationConfig.",
                reason="PUSH_NOTIFICATION_NOT_SUPPORTED",
            )
        if non_data_part:
            raise self._not_a_request()
        return SendCall(data, media_type or None, context_id or None, accepted)

    def _not_a_request(self) -> RpcError:
        """-32005 for a part that holds no AAP request (prose, a file): what to send instead."""
        types = [skill.request_type for skill in self.gateway.agent.skills]
        example = orjson.dumps(EXAMPLE_REQUEST).decode()
        return RpcError(
            rpc.CONTENT_TYPE_NOT_SUPPORTED,
            "Content type not supported: this agent answers AAP requests, not prose. Send one as a DataPart "
            f"(or as JSON text), e.g. {example}; request types: {', '.join(types)}.",
            reason="CONTENT_TYPE_NOT_SUPPORTED",
            metadata={"requestTypes": ",".join(types), "example": example},
        )

    def _check_request_media_type(self, call: SendCall) -> None:
        """A part's mediaType, when given, must be a request type this agent implements."""
        if call.media_type is None:
            return
        if _media_base(call.media_type) not in self.gateway.agent.request_media_types:
            raise RpcError(
                rpc.CONTENT_TYPE_NOT_SUPPORTED,
                "Content type not supported: the part's mediaType is not an AAP request type this "
                "agent implements (see defaultInputModes on the agent card).",
                reason="CONTENT_TYPE_NOT_SUPPORTED",
            )

    @staticmethod
    def _check_media_for_skill(call: SendCall, skill: SkillInfo) -> None:
        """The part's mediaType matches ``data.type``; one accepted output mode is servable."""
        if call.media_type is not None and _media_base(call.media_type) != skill.request_media_type:
            raise RpcError(
                rpc.CONTENT_TYPE_NOT_SUPPORTED,
                f"Content type not supported: a {skill.request_type} part must carry mediaType "
                f"{skill.request_media_type}.",
                reason="CONTENT_TYPE_NOT_SUPPORTED",
                metadata={"expectedMediaType": skill.request_media_type},
            )
        if call.accepted_output_modes and not any(
            _media_base(m) in _GENERIC_OUTPUT_MODES or _media_base(m) == skill.response_media_type
            for m in call.accepted_output_modes
        ):
            raise RpcError(
                rpc.CONTENT_TYPE_NOT_SUPPORTED,
                f"Content type not supported: {skill.id} answers with {skill.response_media_type}, "
                "which none of configuration.acceptedOutputModes accepts.",
                reason="CONTENT_TYPE_NOT_SUPPORTED",
                metadata={"responseMediaType": skill.response_media_type},
            )


#: The paths this surface answers, and their error shape (:mod:`aap.web.surface`).
PATHS = (A2A_PATH,)
ERROR_SHAPES = {A2A_PATH: rpc.error_shape}


def build(gateway: Gateway) -> BindingParts:
    """The A2A binding's contribution to the app: ``POST /a2a``, answering errors in JSON-RPC."""
    binding = A2ABinding(gateway)
    return BindingParts(
        # Made only for a request the direct path does not take (another method: 405).
        routes=lambda: [Route(A2A_PATH, binding, methods=["POST"], name="a2a")],
        direct={(A2A_PATH, "POST"): binding},
    )
