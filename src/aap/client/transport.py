"""What every binding transport returns: the AAP outcome plus the wire evidence.

Buyers only need :meth:`CallOutcome.unwrap`. The conformance checker also
needs what was on the wire (status, headers, envelope), so transports keep it.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx

from aap.client.errors import AapClientError, AapRemoteError, ProtocolError, remote_error
from aap.skills.catalog import SkillInfo

RETRYABLE_HTTP = {408, 425, 429, 500, 502, 503, 504}

T = TypeVar("T")


@dataclass
class CallOutcome:
    binding: str
    skill: SkillInfo
    request: Any = None
    http_status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    body: Any = None
    response: dict[str, Any] | None = None
    error: AapClientError | None = None

    def unwrap(self) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response

    async def attempt(self, exchange: Awaitable[T], what: str) -> T | None:
        """Await one exchange; a network or protocol failure becomes this outcome's error (None)."""
        try:
            return await exchange
        except httpx.HTTPError as exc:
            self.error = network_failure(self.binding, exc, what)
        except ProtocolError as exc:
            self.error = exc
        return None

    def record(self, response: httpx.Response, body: Any) -> None:
        """Keep the wire evidence of the answer (for the checker)."""
        self.http_status = response.status_code
        self.headers = response.headers
        self.body = body


class Transport(Protocol):
    name: str

    async def call(self, skill: SkillInfo, payload: dict[str, Any]) -> CallOutcome: ...

    async def aclose(self) -> None: ...


def retry_after_ms(headers: httpx.Headers) -> int | None:
    """``Retry-After`` (delta-seconds or HTTP-date) in milliseconds, if present and sane."""
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return int(value) * 1000
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0, int((when.timestamp() - time.time()) * 1000))


def http_failure(binding: str, response: httpx.Response, what: str) -> ProtocolError:
    """A non-AAP HTTP failure; 429/5xx are retryable and keep ``Retry-After``."""
    return ProtocolError(
        f"{what}: HTTP {response.status_code}",
        binding=binding,
        http_status=response.status_code,
        retryable=response.status_code in RETRYABLE_HTTP,
        retry_after_ms=retry_after_ms(response.headers),
    )


def answered_error(binding: str, response: httpx.Response, payload: dict[str, Any]) -> AapRemoteError:
    """The typed exception for the ``aap.error`` an answer carries (its ``Retry-After`` counted)."""
    return remote_error(
        payload,
        binding=binding,
        http_status=response.status_code,
        header_retry_after_ms=retry_after_ms(response.headers),
    )


def rpc_failure(
    binding: str, response: httpx.Response, error: Any, what: str = "", retryable_codes: frozenset[int] = frozenset()
) -> ProtocolError:
    """A JSON-RPC ``error`` member that is no ``aap.error``: retryable when its code says so, or
    the HTTP status is 429 or 503."""
    fields = error if isinstance(error, dict) else {}
    code = fields.get("code")
    return ProtocolError(
        f"{what}JSON-RPC error {code}: {fields.get('message') if isinstance(error, dict) else error}",
        binding=binding,
        http_status=response.status_code,
        rpc_code=code,
        data=fields.get("data"),
        retryable=code in retryable_codes or response.status_code in (429, 503),
        retry_after_ms=retry_after_ms(response.headers),
    )


def network_failure(binding: str, exc: httpx.HTTPError, what: str) -> ProtocolError:
    """Connection-level failures are retryable (the request may not have arrived)."""
    return ProtocolError(f"{what}: {type(exc).__name__}", binding=binding, retryable=True)


def json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
