"""JSON-RPC 2.0 envelopes and A2A error details (ProtoJSON ``Any`` entries).

A2A carries error details as an array of ``@type``-tagged objects
(``google.rpc.ErrorInfo``, ``google.rpc.BadRequest``, a ``google.protobuf.Struct``
wrapping the ``aap.error``; A2A §3.3.2, §9.5). Building them here, once, keeps
both JSON-RPC bindings (A2A, and the error bodies MCP's HTTP front writes) on
the same shapes. The layout of an AAP error is explained in docs/a2a.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from aap.errors import AapError
from aap.protocols import BAD_REQUEST_TYPE, ERROR_INFO_TYPE, STRUCT_TYPE
from aap.util import pointer as json_pointer

# JSON-RPC 2.0 and A2A 1.0 error codes (A2A §5.4, §9.5).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
EXTENSION_SUPPORT_REQUIRED = -32008
VERSION_NOT_SUPPORTED = -32009

A2A_DOMAIN = "a2a-protocol.org"
AAP_DOMAIN = "autoagentprotocol.org"


def error_info(reason: str, domain: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``google.rpc.ErrorInfo`` detail; metadata values must already be strings."""
    return {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": domain, "metadata": dict(metadata or {})}


def bad_request(violations: list[tuple[str, str]]) -> dict[str, Any]:
    """A ``google.rpc.BadRequest`` detail listing every ``(field, description)`` problem."""
    return {
        "@type": BAD_REQUEST_TYPE,
        "fieldViolations": [{"field": f, "description": d} for f, d in violations],
    }


def struct(value: dict[str, Any]) -> dict[str, Any]:
    """A free JSON object as a ``google.protobuf.Struct`` Any: only ``@type`` and ``value``."""
    return {"@type": STRUCT_TYPE, "value": value}


class RpcError(Exception):
    """An A2A / JSON-RPC protocol error (no AAP payload): code, message, details."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        violations: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: list[dict[str, Any]] = []
        if reason is not None:
            self.data.append(error_info(reason, A2A_DOMAIN, metadata))
        if violations:
            self.data.append(bad_request(violations))

    @classmethod
    def listing(cls, code: int, what: str, reason: str, violations: list[tuple[str, str]]) -> RpcError:
        """One error naming every ``(field, problem)`` at once, in the message and a BadRequest."""
        message = f"{what}: " + "; ".join(f"{f} {d}" for f, d in violations) + "."
        return cls(code, message, reason=reason, violations=violations)

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            error["data"] = self.data
        return error


def pointer_to_field(pointer: str, prefix: str) -> str:
    """``/filters/make/0`` under ``message.parts[0].data`` → ``message.parts[0].data.filters.make[0]``."""
    field = prefix
    for token in json_pointer.tokens(pointer):
        field += f"[{token}]" if json_pointer.is_index(token) else f".{token}"
    return field


def aap_error(err: AapError, field_prefix: str = "") -> dict[str, Any]:
    """The JSON-RPC ``error`` object for an AAP skill failure (docs/a2a.md, "Errors").

    ``data`` leads with an ErrorInfo whose string metadata is all a stock A2A SDK
    client keeps, then a BadRequest when there are field problems, then the
    Struct detail holding the closed ``aap.error`` object.
    """
    payload = err.to_dict()
    metadata = {
        "code": err.code,
        "error_id": err.error_id,
        "retryable": "true" if err.retryable else "false",
        "created_at": err.created_at,
    }
    if "retry_after_ms" in err.details:
        metadata["retry_after_ms"] = str(err.details["retry_after_ms"])
    data = [error_info(err.code, AAP_DOMAIN, metadata)]
    problems = err.errors
    if problems:
        data.append(
            bad_request([(pointer_to_field(p["instanceLocation"], field_prefix), p["error"]) for p in problems])
        )
    data.append(struct(payload))
    return {"code": err.spec.jsonrpc_code, "message": err.message, "data": data}


def success(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def failure(request_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def error_response(
    status: int,
    code: int,
    message: str,
    request_id: Any = None,
    *,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """A JSON-RPC error body with an HTTP status (``id`` null when the request's is unknown)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return Response(
        orjson.dumps(failure(request_id, error)), status_code=status, media_type="application/json", headers=headers
    )


def error_shape(status: int, error: AapError) -> Response:
    """The error shape of a JSON-RPC path (:data:`aap.web.errors.ErrorShape`).

    A request the binding never saw (a body over the limit) is an invalid
    request (-32600); an unexpected failure is ``INTERNAL_ERROR`` with its
    ``aap.error`` detail. ``id`` is null: the request was not read.
    """
    if status >= 500:
        return Response(
            orjson.dumps(failure(None, aap_error(error))), status_code=status, media_type="application/json"
        )
    return error_response(status, INVALID_REQUEST, error.message)
