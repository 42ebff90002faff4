"""The adversarial suite's generators and verdicts, shared by tests/test_adversarial.py (bounded
example counts, in CI) and bench/adversarial.py (the same suite, ``--examples 20000``).

Generators (hypothesis strategies) build hostile requests for every door of the server:

- :func:`aap_payloads`: valid AAP requests of every skill, then mutated (a value replaced by
  any JSON, a member dropped or added, an array or string blown up past the request bounds,
  the ``type`` changed), carried on A2A (:func:`a2a_bodies`), MCP or Poppy;
- :func:`mcp_exchanges`: MCP JSON-RPC at both revisions (2025-11-25 stateless, 2026-07-28 with
  the ``_meta`` envelope): plain and odd tool calls, other methods, broken envelopes, batches,
  bytes that are not JSON, headers missing, repeated or contradicting the body;
- :func:`token_requests`: the OAuth token endpoint: forms from the real client's parts and
  garbage, JWT-shaped strings, repeated parameters, other media types, DPoP headers.

Every free-text value a generator makes carries the canary :data:`CANARY`, so "no request
value is echoed" is one substring test with no false alarm: an error answer that contains
the canary quoted the request. (Success answers may echo: ``applied_filters`` does.)

Verdicts (:class:`Verdicts`): no 5xx; the answer in its surface's format and valid against
its schema (JSON-RPC with a valid ``aap.error`` on ``/a2a``, JSON-RPC or a ``CallToolResult``
whose structured content is the response or ``aap.error`` on ``/mcp``, OAuth error JSON with
``no-store`` on ``/oauth/token``, ``aap.error`` on ``/poppy/v1``); no canary in an error; no
internals (traceback, file path, library name, exception class, memory address). Server
work per request is bounded structurally (:class:`WorkMeter`): full validation never sees a
request over the bounds, and explaining one failure is at most as many steps as the bounds
allow values.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from aap.bindings.mcp.results import render
from aap.skills.catalog import SKILLS
from aap.spec import validate
from aap.spec.bounds import REQUEST_BOUNDS, bound_problems
from aap.util.rfc3339 import to_utc_z

CANARY = "Qzx"
MODERN, LEGACY = "2026-07-28", "2025-11-25"
ACCEPT = "application/json, text/event-stream"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
OAUTH_ERRORS = {
    "invalid_request",
    "invalid_client",
    "invalid_grant",
    "unauthorized_client",
    "unsupported_grant_type",
    "invalid_scope",
    "invalid_target",
    "invalid_dpop_proof",
    "use_dpop_nonce",
    "rate_limited",
}
TOOLS = {skill.tool_name: skill for skill in SKILLS.values()}
BY_TYPE = {skill.request_type: skill for skill in SKILLS.values()}

# What would betray the server's insides in an answer (checked on every error body).
INTERNALS = re.compile(
    r"Traceback|File \"|\.py\b|site-packages|/usr/|/home/|/work/|/tmp/|object at 0x|<class |"
    r"(?i:\b(?:pydantic|starlette|uvicorn|httpx|httpcore|jsonschema|sqlite3?|psycopg|orjson|anyio|joserfc|"
    r"cryptography|referencing|asyncio)\b)|\b[A-Z][A-Za-z]*(?:Error|Exception)\b|\bline \d+\b",
)


# -- generators -------------------------------------------------------------------------------


def canary_text() -> st.SearchStrategy[str]:
    """Free text that carries the canary: any echo of it is visible."""
    tails = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
    return st.builds(
        lambda n, tail, head: f"{head}{CANARY}{n:x}{tail}",
        st.integers(0, 2**40),
        tails,
        st.sampled_from(["", " ", "Honda ", "<b>", "\"'", "%00", "\u202e", "../"]),
    )


_FILTER_WORDS = [
    "make",
    "model",
    "trim",
    "condition",
    "vehicle_type",
    "features_all",
    "features_any",
    "query",
    "near",
    "price_max",
    "year_min",
    "rooftops",
    "status",
    "vin",
    "stock",
    "sort",
    "pagination",
    "cursor",
    "limit",
    "skip",
    "field",
    "order",
    "filters",
    "currency",
    "customer",
    "consent",
    "email",
    "phone",
    "appointment",
    "trade_in",
    "vehicle_of_interest",
    "idempotency_key",
    "source_agent",
    "dealer_id",
    "vehicle_id",
    "type",
    "x-extra",
    "",
]
KEYS = st.sampled_from(_FILTER_WORDS) | st.text(max_size=8)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | canary_text()
    | st.sampled_from(
        [
            "used",
            "new",
            "asc",
            "price",
            "Honda",
            "inventory.search.request",
            "1HGCV1F34PA000001",
            "2026-03-02T16:55:00Z",
            "",
            " ",
            "\ud800",
        ]
    )
)
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=12
)


def _nested(depth: int) -> Any:
    value: Any = CANARY
    for _ in range(depth):
        value = [value]
    return value


# Containers and strings beyond the request bounds, and right at them.
OVERSIZED = st.one_of(
    st.sampled_from([REQUEST_BOUNDS.items, REQUEST_BOUNDS.items + 1, 5_000, 60_000]).map(
        lambda n: [f"{CANARY}{i % 7}" for i in range(n)]
    ),
    st.sampled_from([REQUEST_BOUNDS.string + 1, 200_000]).map(lambda n: CANARY + "x" * n),
    st.sampled_from([REQUEST_BOUNDS.depth + 1, 200]).map(_nested),
    st.builds(lambda: {f"k{i}": i for i in range(REQUEST_BOUNDS.items + 1)}),
)


def valid_payloads() -> dict[str, Callable[[], dict[str, Any]]]:
    """One valid request per skill (a fresh lead each time: its key and clock)."""

    def lead() -> dict[str, Any]:
        now = datetime.now(UTC)
        return {
            "type": "lead.submit.request",
            "customer": {
                "first_name": f"{CANARY}first",
                "last_name": f"{CANARY}last",
                "email": f"qzx.{uuid.uuid4().hex[:8]}@example.org",
                "phone": "+14155550123",
                "preferred_contact": "email",
            },
            "consent": {
                "granted_at": to_utc_z(now - timedelta(minutes=5)),
                "allowed_channels": ["email", "phone"],
                "consent_text": f"{CANARY} I agree to be contacted.",
                "scope": ["lead_submission"],
            },
            "vehicle_of_interest": {"make": "Honda", "model": "Civic", "condition": "used"},
            "message": f"{CANARY} is it available?",
            "source_agent": {"name": "adversarial-suite"},
            "idempotency_key": str(uuid.uuid4()),
        }

    return {
        "dealer.information": lambda: {"type": "dealer.information.request"},
        "inventory.facets": lambda: {"type": "inventory.facets.request", "filters": {"condition": ["used"]}},
        "inventory.search": lambda: {
            "type": "inventory.search.request",
            "filters": {"make": ["Honda"], "price_max": 40000, "query": "civic"},
            "sort": {"field": "price", "order": "asc"},
            "pagination": {"limit": 5},
        },
        "inventory.vehicle": lambda: {"type": "inventory.vehicle.request", "vin": "1HGCV1F34PA000001"},
        "lead.submit": lead,
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every member path of ``value`` (containers and leaves; not inside a blown-up container)."""
    found = [prefix]
    if isinstance(value, (dict, list)) and len(value) > 20:
        return found
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


@st.composite
def aap_payloads(draw: st.DrawFn, skills: tuple[str, ...] | None = None) -> Any:
    """A valid request of some skill, mutated 0-3 times; now and then something else entirely."""
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON_VALUES)
    makers = valid_payloads()
    name = draw(st.sampled_from(sorted(skills or makers)))
    payload = makers[name]()
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(payload)))
        if not path:
            continue
        parent, last = _at(payload, path[:-1]), path[-1]
        action = draw(st.sampled_from(["replace", "drop", "add", "oversize", "retype"]))
        if action == "replace":
            parent[last] = draw(JSON_VALUES)
        elif action == "drop":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(KEYS)] = draw(JSON_VALUES)
        elif action == "oversize":
            parent[last] = draw(OVERSIZED)
        elif action == "retype":
            payload["type"] = draw(st.sampled_from([*BY_TYPE, 5, None, "", f"{CANARY}.request"]))
    return payload


def header_safe(value: str) -> str:
    """What an HTTP client can send as a header value: printable ASCII, no outer spaces."""
    cleaned = "".join(c for c in value if " " <= c <= "~").strip()
    return cleaned or "x"


def skill_of(payload: Any) -> Any:
    """The skill a payload's ``type`` names, or None."""
    kind = payload.get("type") if isinstance(payload, dict) else None
    return BY_TYPE.get(kind) if isinstance(kind, str) else None


def encode(value: Any) -> bytes:
    """JSON as a hostile client sends it: lone surrogates escaped, integers of any size."""
    return json.dumps(value, ensure_ascii=True).encode()


@st.composite
def a2a_bodies(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a ``SendMessage`` carrying a hostile payload, sometimes a broken envelope."""
    payload = draw(aap_payloads())
    skill = skill_of(payload)
    part: dict[str, Any] = {"data": payload}
    if skill is not None and draw(st.booleans()):
        part["mediaType"] = skill.request_media_type
    message = {
        "jsonrpc": "2.0",
        "id": draw(st.integers(0, 10**6) | st.text(max_size=8)),
        "method": "SendMessage",
        "params": {"message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part]}},
    }
    kind = draw(st.integers(0, 9))
    if kind == 0:
        message["method"] = draw(st.sampled_from(["GetTask", "message/send", "SendStreamingMessage", "", "x" * 50]))
    elif kind == 1:
        message = draw(JSON_VALUES)
    elif kind == 2:
        message["params"]["message"]["parts"] = draw(JSON_VALUES)
    elif kind == 3:
        return draw(st.binary(max_size=64)), {"Content-Type": "application/json"}
    headers = {"Content-Type": "application/json"}
    if draw(st.integers(0, 4)) == 0:
        headers["A2A-Version"] = draw(st.sampled_from(["1.0", "0.3", "", "2.0", "1.0.7"]))
    if draw(st.integers(0, 4)) == 0:
        headers["A2A-Extensions"] = draw(
            st.sampled_from(["", "https://example.org/ext", "https://autoagentprotocol.org/extensions/aap/v3.1"])
        )
    return encode(message), headers


def _meta(version: str) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "adversarial-suite", "version": "1"},
    }


@st.composite
def mcp_exchanges(draw: st.DrawFn) -> tuple[bytes, dict[str, str], str | None]:
    """(body, headers, tool name or None) of one POST /mcp at either revision."""
    version = draw(st.sampled_from([MODERN, LEGACY]))
    kind = draw(st.integers(0, 17))  # 8 and up: a plain tool call
    tool = draw(st.sampled_from(sorted(TOOLS)))
    method = "tools/call"
    params: Any = {"name": tool, "arguments": draw(aap_payloads(skills=(TOOLS[tool].id,)))}
    if kind == 0:
        params["name"] = draw(st.sampled_from([f"{CANARY}_tool", "", "aap_lead_submit "]))
    elif kind == 1:
        method, params = draw(
            st.sampled_from(
                [
                    ("tools/list", {}),
                    ("server/discover", {}),
                    ("ping", {}),
                    ("resources/list", {}),
                    (f"{CANARY}/method", {}),
                    (
                        "initialize",
                        {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
                    ),
                ]
            )
        )
    elif kind == 2:
        params = draw(JSON_VALUES)
    request_id: Any = (
        draw(st.integers(-(2**40), 2**40) | st.text(max_size=6))
        if draw(st.integers(0, 9))
        else draw(st.sampled_from([None, True, 1.5, [], {}]))
    )
    message: Any = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    if version == MODERN and isinstance(params, dict) and draw(st.integers(0, 5)) > 0:
        params["_meta"] = _meta(version) if draw(st.integers(0, 4)) > 0 else draw(JSON_VALUES)
    if kind == 3:
        del message["id"]  # a notification
    elif kind == 4:
        message["jsonrpc"] = draw(st.sampled_from(["1.0", "", None, 2.0]))
    elif kind == 5:
        message = [message, message]  # a batch
    elif kind == 6:
        message = draw(JSON_VALUES)
    headers = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": version}
    if version == MODERN:
        headers["Mcp-Method"] = method
        if method == "tools/call" and isinstance(params, dict) and isinstance(params.get("name"), str):
            headers["Mcp-Name"] = header_safe(params["name"])
    twist = draw(st.integers(0, 15))  # 6 and up: headers as a client sends them
    if twist == 0:
        del headers["Accept"]
    elif twist == 1:
        headers["Content-Type"] = draw(
            st.sampled_from(["text/plain", "application/json; charset=latin-1", "multipart/form-data"])
        )
    elif twist == 2:
        headers["MCP-Protocol-Version"] = draw(st.sampled_from(["2024-11-05", "", "2099-01-01", LEGACY, MODERN]))
    elif twist == 3:
        headers.pop("MCP-Protocol-Version")
    elif twist == 4:
        headers["Mcp-Name"] = f"{CANARY}name"
    elif twist == 5:
        headers["Authorization"] = draw(st.sampled_from(["Bearer " + CANARY, "DPoP x", "Basic Zm9vOmJhcg=="]))
    body = draw(st.binary(max_size=40)) if kind == 7 else encode(message)
    return body, headers, tool if method == "tools/call" else None


@st.composite
def token_requests(draw: st.DrawFn, real: dict[str, str], proof: Callable[[], str]) -> tuple[bytes, dict[str, str]]:
    """(body, headers) for POST /oauth/token: ``real`` is a valid guest-grant form of the
    allowed client; each field is kept, dropped, garbled or replaced; ``proof`` makes a valid
    DPoP proof for the token endpoint."""
    from urllib.parse import urlencode

    form: list[tuple[str, str]] = []
    jwtish = st.builds(
        lambda a, b, c: f"{a}.{b}.{c}",
        st.text("abcXYZ-_019", max_size=30),
        st.text("abcXYZ-_019", max_size=30),
        st.text("abcXYZ-_019", max_size=10),
    )
    touched = draw(st.sets(st.sampled_from(sorted(real)), max_size=3))  # empty: the real form as it is
    for name, value in real.items():
        choice = draw(st.integers(0, 3)) if name in touched else 4
        if choice == 0:
            continue
        if choice == 1:
            value = draw(canary_text())
        elif choice == 2:
            value = draw(jwtish)
        elif choice == 3 and value.count(".") == 2:  # a real JWT with one part garbled
            head, body, sig = value.split(".", 2)
            value = ".".join([head, body, sig[::-1]] if draw(st.booleans()) else [head + "x", body, sig])
        form.append((name, value))
    for _ in range(draw(st.integers(0, 2)) if touched else 0):
        form.append(
            draw(
                st.sampled_from(
                    [
                        (
                            "grant_type",
                            draw(st.sampled_from([JWT_BEARER, TOKEN_EXCHANGE, "refresh_token", "password"])),
                        ),
                        ("resource", draw(st.sampled_from(["https://127.0.0.1", CANARY, "https://evil.example"]))),
                        ("scope", CANARY),
                        ("session_id", CANARY),
                        ("client_id", real.get("client_id", "")),
                        (draw(st.text(max_size=6)), draw(canary_text())),
                    ]
                )
            )
        )
    body = urlencode(form).encode()
    if draw(st.integers(0, 9)) == 0:
        body = draw(st.binary(max_size=64))
    headers = {
        "Content-Type": draw(
            st.sampled_from(
                ["application/x-www-form-urlencoded"] * 6
                + ["application/json", "text/plain", "application/x-www-form-urlencoded; charset=utf-8"]
            )
        )
    }
    dpop = draw(st.integers(0, 6))
    if dpop <= 4:
        headers["DPoP"] = proof()
    elif dpop == 5:
        headers["DPoP"] = header_safe(draw(jwtish | canary_text()))
    return body, headers


# -- heads: what the server's protocol reads before the app ----------------------------------------

#: The [server] defaults the server's protocol keeps (aap.config.model.ConnectionLimits).
HEAD_LIMITS = {"line": 8192, "field": 8192, "head": 32768, "fields": 100}
HEAD_PATHS = ["/a2a", "/mcp", "/poppy/v1/inventory.search", "/oauth/token", "/healthz", "/console/", "/nowhere"]
_TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"


def _sized(draw: st.DrawFn, limit: int) -> int:
    """A length near the places a limit can go wrong: small, around the limit, far past it."""
    return draw(
        st.integers(0, 64)
        | st.integers(limit - 16, limit + 16)
        | st.integers(0, 2 * limit)
        | st.sampled_from([limit // 2, 4 * limit, 20 * limit])
    )


@st.composite
def hostile_heads(draw: st.DrawFn) -> tuple[bytes, str, list[tuple[str, str]], str]:
    """(raw request, path, header fields, method) with a request line and header fields of
    every size and number around ``HEAD_LIMITS``; values carry the canary."""
    method = draw(st.sampled_from(["GET", "POST", "OPTIONS", "DELETE"]))
    path = draw(st.sampled_from(HEAD_PATHS))
    target = path
    if draw(st.booleans()):
        target += "?q=" + CANARY + "a" * _sized(draw, HEAD_LIMITS["line"])
    fields: list[tuple[str, str]] = [("Host", "adversarial")]
    count = draw(st.integers(0, 8) | st.integers(90, 110) | st.sampled_from([300]))
    big = draw(st.integers(0, max(count - 1, 0)))  # the field that may be large
    for i in range(count):
        name = draw(st.text(_TOKEN_CHARS, min_size=1, max_size=12)) + f"-{i}"
        size = _sized(draw, HEAD_LIMITS["field"]) if i == big else draw(st.integers(0, 400))
        fields.append((name, (CANARY + "v" * size)[: max(size, 1)]))
    return head_of(method, path, target, fields)


def head_of(
    method: str, path: str, target: str, fields: list[tuple[str, str]]
) -> tuple[bytes, str, list[tuple[str, str]], str]:
    """A raw request head as :func:`hostile_heads` draws them (closing its connection)."""
    fields = [*fields, ("Connection", "close")]
    if method == "POST":
        fields.append(("Content-Length", "0"))
    head = "\r\n".join([f"{method} {target} HTTP/1.1", *(f"{n}: {v}" for n, v in fields)]) + "\r\n\r\n"
    return head.encode("latin-1"), path, fields, f"{method} {target}"


#: Heads every run tries besides those drawn: one served, one past the request line's limit,
#: one past a field's (the draws reach each only with some probability).
HEAD_EXAMPLES = [
    head_of("GET", "/healthz", "/healthz", [("Host", "adversarial")]),
    head_of("GET", "/a2a", "/a2a?q=" + CANARY + "a" * HEAD_LIMITS["line"], [("Host", "adversarial")]),
    head_of("POST", "/a2a", "/a2a", [("Host", "adversarial"), ("x-big", CANARY + "v" * HEAD_LIMITS["field"])]),
]


def head_refusal(line: str, fields: list[tuple[str, str]]) -> int | None:
    """The reference: 414, 431 or None (served), checked in the order the bytes arrive."""
    if len(line) + len(" HTTP/1.1") > HEAD_LIMITS["line"]:
        return 414
    total = len(line) + len(" HTTP/1.1")
    for number, (name, value) in enumerate(fields, 1):
        size = len(name) + len(value)
        total += size
        if size > HEAD_LIMITS["field"] or number > HEAD_LIMITS["fields"] or total > HEAD_LIMITS["head"]:
            return 431
    return None


# -- verdicts ----------------------------------------------------------------------------------


def _json(body: bytes) -> Any:
    return json.loads(body)


def canary_free(text: str) -> bool:
    return CANARY not in text


_POINTERS = re.compile(r'"(?:instanceLocation|id)":\s*"(?:[^"\\]|\\.)*"')


def no_internals(text: str) -> str | None:
    """The first internal detail ``text`` betrays, or None. JSON Pointers and JSON-RPC ids are
    left out: pointers are made of the request's own member names (a member may well be called
    "uvicorn") and an id is echoed as sent (Hypothesis draws text from the code's own literals,
    "sqlite" among them)."""
    match = INTERNALS.search(_POINTERS.sub("", text))
    return match.group(0) if match else None


@dataclass
class Verdicts:
    """Collects every violation (with a little of the answer) instead of failing at the first,
    so a bench run can count them; a test asserts the list is empty."""

    failures: list[str] = field(default_factory=list)
    answers: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    def fail(self, surface: str, why: str, body: bytes) -> None:
        self.failures.append(f"{surface}: {why}: {body[:300]!r}")

    def seen(self, status: int) -> None:
        self.answers += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def common(self, surface: str, status: int, body: bytes, error: bool) -> bool:
        """No 5xx; on an error answer no canary and no internals. False: stop checking it."""
        self.seen(status)
        if status >= 500:
            self.fail(surface, f"HTTP {status}", body)
            return False
        if error:
            text = body.decode("utf-8", "replace")
            if not canary_free(text):
                self.fail(surface, "a request value is echoed", body)
            leak = no_internals(text)
            if leak:
                self.fail(surface, f"an internal detail ({leak}) is shown", body)
        return True

    # -- per surface ------------------------------------------------------------------------
    def a2a(self, status: int, headers: Any, body: bytes) -> None:
        try:
            answer = _json(body)
        except ValueError:
            self.common("a2a", status, body, True)
            self.fail("a2a", "the answer is not JSON", body)
            return
        is_error = not isinstance(answer, dict) or "result" not in answer
        if not self.common("a2a", status, body, is_error):
            return
        if status != 200:
            self.fail("a2a", f"HTTP {status} (A2A answers every request 200)", body)
        problems = validate(answer, "json-rpc-response")
        if problems:
            self.fail("a2a", f"not a JSON-RPC response ({problems[:2]})", body)
            return
        for detail in answer.get("error", {}).get("data", []) or []:
            value = detail.get("value") if isinstance(detail, dict) else None
            if isinstance(value, dict) and value.get("type") == "aap.error" and validate(value, "error"):
                self.fail("a2a", "the aap.error detail is not schema-valid", body)
        if "result" in answer:
            part = answer["result"]["message"]["parts"][0]
            response = part.get("data", {})
            skill = next((s for s in SKILLS.values() if s.response_type == response.get("type")), None)
            if skill is None or validate(response, skill.response_schema):
                self.fail("a2a", "the AAP response is not schema-valid", body)

    def mcp(self, status: int, headers: Any, body: bytes, tool: str | None) -> None:
        if status == 202 and not body:
            self.seen(status)
            return
        try:
            answer = _json(body)
        except ValueError:
            self.common("mcp", status, body, True)
            self.fail("mcp", f"HTTP {status} answer is not JSON", body)
            return
        result = answer.get("result") if isinstance(answer, dict) else None
        is_error = not isinstance(result, dict) or bool(result.get("isError"))
        if not self.common("mcp", status, body, is_error):
            return
        if status == 401:  # a Bearer challenge (RFC 6750 / RFC 9728): OAuth error JSON, not JSON-RPC
            if "www-authenticate" not in {k.lower() for k in headers}:
                self.fail("mcp", "401 without a challenge", body)
            if not (isinstance(answer, dict) and answer.get("error") in OAUTH_ERRORS | {"invalid_token"}):
                self.fail("mcp", "a 401 that is not an OAuth error", body)
            return
        if not _is_jsonrpc_response(answer):
            self.fail("mcp", "not a JSON-RPC response", body)
            return
        if isinstance(result, dict) and tool is not None and "structuredContent" in result:
            content = result["structuredContent"]
            schema = "error" if result.get("isError") else TOOLS[tool].response_schema
            if validate(content, schema):
                self.fail("mcp", f"structuredContent is not a valid {schema}", body)
            text = result.get("content", [{}])[0].get("text")
            # The text is the answer's JSON (a failure; a revision without structuredContent) or,
            # for a success, its compact rendering (docs/mcp.md).
            if text is None or (text != render(content) and _json_or_none(text) != content):
                self.fail("mcp", "the text block is not the structured content", body)

    def oauth(self, status: int, headers: Any, body: bytes) -> None:
        try:
            answer = _json(body)
        except ValueError:
            self.common("oauth", status, body, True)
            self.fail("oauth", "the answer is not JSON", body)
            return
        if not self.common("oauth", status, body, status != 200):
            return
        if headers.get("cache-control") != "no-store":
            self.fail("oauth", "an OAuth answer without Cache-Control: no-store", body)
        if status == 200:
            if validate(answer, "poppy-guest-token-response"):
                self.fail("oauth", "a token answer that is not PoppyGuestTokenResponse", body)
            return
        if not (
            isinstance(answer, dict)
            and set(answer) <= {"error", "error_description"}
            and answer.get("error") in OAUTH_ERRORS
            and isinstance(answer.get("error_description", ""), str)
        ):
            self.fail("oauth", "not an OAuth error object", body)

    def poppy(self, status: int, headers: Any, body: bytes, skill_id: str) -> None:
        try:
            answer = _json(body)
        except ValueError:
            self.common("poppy", status, body, True)
            self.fail("poppy", "the answer is not JSON", body)
            return
        if not self.common("poppy", status, body, status != 200):
            return
        skill = SKILLS[skill_id]
        if status == 200:
            if validate(answer, skill.response_schema):
                self.fail("poppy", "a 200 that is not the response", body)
        elif status == 401:
            if not (isinstance(answer, dict) and answer.get("error") in OAUTH_ERRORS | {"invalid_token"}):
                self.fail("poppy", "a 401 that is not an OAuth error", body)
        elif validate(answer, "error"):
            self.fail("poppy", f"a {status} that is not a valid aap.error", body)

    def refused_head(self, status: int, headers: Any, body: bytes, path: str, closed: bool) -> None:
        """A 414/431 from the server's protocol: in the shape of the path's surface, closed."""
        if not self.common("head", status, body, True):
            return
        if not closed or headers.get("connection") != "close":
            self.fail("head", "a refused head left the connection open", body)
        try:
            answer = _json(body)
        except ValueError:
            self.fail("head", "the answer is not JSON", body)
            return
        if path in ("/a2a", "/mcp"):
            ok = _is_jsonrpc_response(answer) and answer["error"]["code"] == -32600
        elif path.startswith("/poppy/v1/"):
            ok = not validate(answer, "error") and answer["code"] == "SCHEMA_VALIDATION_FAILED"
        elif path.startswith("/oauth/"):
            ok = isinstance(answer, dict) and answer.get("error") == "invalid_request"
        else:
            ok = isinstance(answer, dict) and answer.get("error", {}).get("status") == status
        if not ok:
            self.fail("head", f"a {status} not in the shape of {path}", body)


def _is_jsonrpc_response(answer: Any) -> bool:
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0" or "id" not in answer:
        return False
    if ("result" in answer) == ("error" in answer):
        return False
    if "error" in answer:
        error = answer["error"]
        return isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
    return True


# -- structural bound on server work -------------------------------------------------------------


class WorkMeter:
    """Counts, in an in-process server, the work each request costs the validator.

    Installed with pytest's ``monkeypatch`` (or by hand in the bench): every instance that
    reaches full validation is within the request bounds, and explaining a failure takes at
    most as many steps as the bounds allow values. ``take()`` returns the count since the
    last call and checks it.
    """

    def __init__(self, patch: Callable[[Any, str, Any], None]) -> None:
        import aap.agent
        import aap.spec.validator

        self.explained = 0
        self.over_bounds = 0
        self.validations = 0
        real_explain = aap.spec.validator._explain
        real_validate = aap.agent.validate

        def explain(*args: Any, **kwargs: Any) -> Any:
            self.explained += 1
            return real_explain(*args, **kwargs)

        def validate_counted(instance: Any, name: str, **kwargs: Any) -> Any:
            self.validations += 1
            if bound_problems(instance):
                self.over_bounds += 1
            return real_validate(instance, name, **kwargs)

        patch(aap.spec.validator, "_explain", explain)
        patch(aap.agent, "validate", validate_counted)

    def take(self) -> tuple[int, int, int]:
        counts = (self.validations, self.explained, self.over_bounds)
        self.validations = self.explained = self.over_bounds = 0
        return counts

    def check(self, verdicts: Verdicts, surface: str) -> None:
        validations, explained, over = self.take()
        if over:
            verdicts.fail(surface, "full validation ran on a request over the bounds", b"")
        if validations > 2 or explained > REQUEST_BOUNDS.values:
            verdicts.fail(surface, f"{validations} validations, {explained} explained errors for one request", b"")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
