"""One structured access-log line and one metrics observation per request.

Bindings tell the middleware what a request was with :func:`annotate` (binding,
skill, AAP code, error id); the middleware adds method, path, status, duration
and ``client``: the anonymous rate-limit key of the client address (a hash, never
the address; the same address the rate limit counts, proxies believed only as
``[server] forwarded_allow_ips`` says). Only those fields are logged: never a
query string, a header value or anything from the body, so no customer value
can reach the log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aap import telemetry
from aap.ratelimit import anonymous_caller_key
from aap.web.metrics import Metrics
from aap.web.middleware import HttpMiddleware

access_log = logging.getLogger("aap.access")

SCOPE_KEY = "aap.observe"
_FIELDS = ("binding", "skill", "aap_code", "rpc_code", "error_id", "tenant")


def annotate(scope: Scope, **fields: Any) -> None:
    """Attach request facts (``binding``, ``skill``, ``aap_code``, ``rpc_code``, ``error_id``, and on a
    platform the ``tenant`` id — never anything a tenant's customers sent)."""
    info = scope.get(SCOPE_KEY)
    if info is None:
        info = scope[SCOPE_KEY] = {}
    for name, value in fields.items():
        if name not in _FIELDS:
            raise ValueError(f"unknown access-log field {name!r}")
        if value is not None:
            info[name] = value
    tracing = telemetry.active
    if tracing is not None:  # the span the door runs in (an MCP tool call's, else the request's)
        tracing.annotate(fields)


@dataclass(eq=False)
class AccessLogMiddleware(HttpMiddleware):
    """Times the request, then logs and counts it."""

    app: ASGIApp
    metrics: Metrics

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        info: dict[str, Any] = {}
        scope[SCOPE_KEY] = info
        status = 500  # what the client sees if the app dies before answering
        start = time.perf_counter()
        recorded = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, recorded
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                # Recorded before the last byte leaves: once a client has its answer, the
                # request is in the log and the metrics.
                recorded = True
                self.record(scope, info, status, time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if not recorded:
                self.record(scope, info, status, time.perf_counter() - start)

    def record(self, scope: Scope, info: dict[str, Any], status: int, seconds: float) -> None:
        """One metrics observation and one access-log line for a finished request."""
        binding = info.get("binding", "other")
        skill = info.get("skill", "")
        code = info.get("aap_code") or (str(info["rpc_code"]) if "rpc_code" in info else None)
        self.metrics.observe(binding=binding, skill=skill, status=status, code=code, seconds=seconds)
        tenant = info.get("tenant")
        if tenant is not None:
            self.metrics.observe_tenant(tenant, status, code)
        if access_log.isEnabledFor(logging.INFO):
            # The record is made directly: Logger.info would also walk the stack for a
            # caller's file and line, which no access-log line shows.
            access_log.handle(
                access_log.makeRecord(
                    access_log.name,
                    logging.INFO,
                    "",
                    0,
                    "request",
                    (),
                    None,
                    extra={
                        "fields": {
                            "method": scope.get("method", ""),
                            "path": scope.get("path", ""),
                            "status": status,
                            "client": anonymous_caller_key(_client_host(scope)),
                            "binding": binding,
                            "skill": skill or None,
                            "aap_code": info.get("aap_code"),
                            "rpc_code": info.get("rpc_code"),
                            "duration_ms": round(seconds * 1000, 3),
                            "error_id": info.get("error_id"),
                            **({"tenant": tenant} if tenant is not None else {}),
                        }
                    },
                )
            )


def _client_host(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None
