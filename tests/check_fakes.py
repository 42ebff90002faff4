"""A small, independent, conformant AAP dealer (Starlette) and its deliberately broken variants.

It exists so ``aap check`` is tested against an implementation that shares no
code with this project's server: if the checker only passed our own server, a
rule could silently encode our quirks. Each :class:`Breaks` flag turns one
conformance rule off, and the tests expect exactly that rule to fail.

Scope: discovery documents (card, llms.txt, poppy.json, issuer metadata, the
Poppy OpenAPI, api-catalog, the MCP protected-resource metadata) and the A2A
binding with the four read skills. The fake advertises MCP and Poppy (the
params schema requires both) but does not serve them beyond the 401 that a bad
Bearer token gets at ``/mcp``, so the tests run the checker with
``bindings=("a2a",)``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aap import EXTENSION_URI, SCHEMA_BASE_URL
from aap.skills.catalog import SKILLS

BASE = "http://localhost:8765"
STRUCT = "type.googleapis.com/google.protobuf.Struct"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
FORBIDDEN = "https://autoagentprotocol.org/extensions/aap/error"
SECRET = b"fake-dealer-cursor-key"
READ_SKILLS = ("dealer.information", "inventory.facets", "inventory.search", "inventory.vehicle")

CAPABILITIES = {
    "scope": "dealer",
    "filters": ["make", "body", "condition"],
    "sort_fields": ["price", "year", "make", "updated_at"],
    "default_sort": {"field": "updated_at", "order": "desc"},
    "default_limit": 10,
    "max_limit": 25,
    "offset": False,
    "currencies": ["USD"],
    "default_currency": "USD",
    "default_mileage_unit": "mi",
}
SEARCH_FILTER_KEYS = set(CAPABILITIES["filters"])
ALL_FILTER_KEYS = {
    "make",
    "model",
    "trim",
    "condition",
    "vehicle_type",
    "transmission",
    "fuel",
    "electric_range_mi_min",
    "electric_range_mi_max",
    "dc_fast_charge",
    "charge_port",
    "driveline",
    "body",
    "displacement_cc_min",
    "displacement_cc_max",
    "exterior_color",
    "interior_color",
    "rooftops",
    "status",
    "features_all",
    "features_any",
    "near",
    "year_min",
    "year_max",
    "price_min",
    "price_max",
    "mileage_max",
    "vin",
    "stock",
    "query",
}

VIN_CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
MAKES = [
    ("Honda", "Civic", "sedan"),
    ("Honda", "CR-V", "suv"),
    ("Toyota", "RAV4", "suv"),
    ("Ford", "F-150", "truck"),
    ("Mazda", "CX-5", "suv"),
    ("Subaru", "Outback", "wagon"),
]


def make_inventory(count: int = 37) -> list[dict[str, Any]]:
    """Deterministic listings; some without price or year to exercise 'missing sorts last'."""
    listings = []
    for i in range(count):
        make, model, body = MAKES[i % len(MAKES)]
        vin = "1FAKE" + "".join(VIN_CHARS[(i * 7 + j) % len(VIN_CHARS)] for j in range(12))
        listing: dict[str, Any] = {
            "vehicle_id": f"veh_{i:03d}",
            "vin": vin[:17],
            "stock": f"S{i:04d}",
            "make": make,
            "model": model,
            "body": body,
            "condition": "used" if i % 3 else "new",
            "status": "available",
            "mileage": 1000 * i,
            "updated_at": f"2026-05-{1 + i % 28:02d}T10:00:00Z",
        }
        if i % 5 != 4:
            listing["price"] = 20000 + (i * 733) % 15000
        if i % 7 != 6:
            listing["year"] = 2015 + i % 10
        listings.append(listing)
    return listings


@dataclass(frozen=True)
class Breaks:
    """One flag per deliberate non-conformance."""

    wrong_extension_uri: bool = False
    clamp_limit: bool = False
    repeat_listing: bool = False
    legacy_error_type: bool = False
    mismatched_urls: bool = False
    unbound_cursor: bool = False
    lenient_version: bool = False
    capped_total: bool = False
    drops_context: bool = False
    mcp_metadata_wrong_resource: bool = False
    mcp_challenge_without_metadata: bool = False
    rate_limit_every: int = 0  # not a break: every Nth A2A call is RATE_LIMITED (retry_after_ms 5)


class FakeError(Exception):
    def __init__(
        self,
        code: str,
        message: str,
        rpc: int = -32602,
        errors: list[dict[str, str]] | None = None,
        retryable: bool = False,
    ) -> None:
        self.code, self.message, self.rpc, self.errors, self.retryable = code, message, rpc, errors, retryable


def _sort_key(listing: dict[str, Any], field: str, order: str) -> tuple:
    value = listing.get(field)
    missing = value is None
    if isinstance(value, str):
        value = value.casefold()
    if missing:
        return (1, 0, listing["vehicle_id"])
    if order == "desc":
        value = -value if isinstance(value, (int, float)) else _Desc(value)
    return (0, value, listing["vehicle_id"])


class _Desc:
    """Reverses string comparison for descending sorts."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Desc) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.value == other.value


class FakeDealer:
    def __init__(
        self, breaks: Breaks = Breaks(), base: str = BASE, inventory: list[dict[str, Any]] | None = None
    ) -> None:
        self.breaks = breaks
        self.base = base
        self.inventory = inventory if inventory is not None else make_inventory()
        self.calls = 0
        self.limited = 0
        self.app = Starlette(
            routes=[
                Route("/.well-known/agent-card.json", self.card_endpoint),
                Route("/llms.txt", self.llms_endpoint),
                Route("/.well-known/poppy.json", self.poppy_endpoint),
                Route("/.well-known/oauth-authorization-server", self.issuer_endpoint),
                Route("/poppy/openapi.json", self.openapi_endpoint),
                Route("/.well-known/api-catalog", self.catalog_endpoint, methods=["GET", "HEAD"]),
                Route("/a2a", self.a2a_endpoint, methods=["POST"]),
                Route("/.well-known/oauth-protected-resource/mcp", self.mcp_metadata_endpoint),
                Route("/mcp", self.mcp_endpoint, methods=["POST"]),
            ]
        )

    # -- discovery -------------------------------------------------------------------------
    def url(self, path: str) -> str:
        return self.base + path

    def card(self) -> dict[str, Any]:
        uri = EXTENSION_URI.replace("v3.1", "v3.0") if self.breaks.wrong_extension_uri else EXTENSION_URI
        skills = [SKILLS[s] for s in READ_SKILLS]
        params_skills: dict[str, Any] = {}
        for s in skills:
            params_skills[s.id] = {"request_schema": s.request_schema_url, "response_schema": s.response_schema_url}
        params_skills["inventory.search"]["capabilities"] = CAPABILITIES
        return {
            "name": "Fake Motors agent",
            "description": "An independent fake AAP dealer used to test the conformance checker.",
            "supportedInterfaces": [{"url": self.url("/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "version": "1.0.0",
            "capabilities": {
                "streaming": False,
                "extensions": [
                    {
                        "uri": uri,
                        "required": True,
                        "params": {
                            "id": "fake-motors",
                            "version": "3.1.0",
                            "schema_base_url": SCHEMA_BASE_URL,
                            "mcp": {
                                "url": self.url("/mcp"),
                                "transport": "streamable-http",
                                "protocol_versions": ["2026-07-28", "2025-11-25"],
                                "public_read": True,
                            },
                            "poppy": self.url("/.well-known/poppy.json"),
                            "llms_txt": self.url("/llms.txt"),
                            "skills": params_skills,
                        },
                    }
                ],
            },
            "defaultInputModes": [s.request_media_type for s in skills],
            "defaultOutputModes": [s.response_media_type for s in skills],
            "skills": [
                {
                    "id": s.id,
                    "name": s.name,
                    "description": s.description,
                    "tags": list(s.tags),
                    "inputModes": [s.request_media_type],
                    "outputModes": [s.response_media_type],
                }
                for s in skills
            ],
        }

    def cached(self, request: Request, body: bytes, media_type: str) -> Response:
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        headers = {"Cache-Control": "public, max-age=60", "ETag": etag}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=media_type, headers=headers)

    async def card_endpoint(self, request: Request) -> Response:
        return self.cached(request, json.dumps(self.card()).encode(), "application/json")

    async def llms_endpoint(self, request: Request) -> Response:
        mcp = "https://elsewhere.example/mcp" if self.breaks.mismatched_urls else self.url("/mcp")
        text = (
            f"# Fake Motors agent\n\n> A fake AAP 3.1 dealer. Agent card: {self.url('/.well-known/agent-card.json')}\n\n"
            f"## Links\n\n- [Agent card]({self.url('/.well-known/agent-card.json')})\n- [MCP]({mcp})\n"
            f"- [poppy.json]({self.url('/.well-known/poppy.json')})\n"
        )
        return self.cached(request, text.encode(), "text/markdown; charset=utf-8")

    async def poppy_endpoint(self, request: Request) -> Response:
        llms = "https://elsewhere.example/llms.txt" if self.breaks.mismatched_urls else self.url("/llms.txt")
        document = {
            "protocol_version": "0.3",
            "organization": {"name": "Fake Motors", "domain": urlsplit(self.base).hostname},
            "auth": {"issuer": self.base},
            "apis": [
                {
                    "type": "openapi",
                    "url": self.url("/poppy/openapi.json"),
                    "description": "AAP skills over the native API",
                },
                {
                    "type": "mcp",
                    "url": self.url("/mcp"),
                    "resource": self.url("/mcp"),
                    "description": "AAP skills as MCP tools; signed-in agents use a Bearer token",
                },
            ],
            "extensions": {
                "autoagentprotocol.org/aap": {
                    "version": "1",
                    "aap_version": "3.1.0",
                    "agent_card": self.url("/.well-known/agent-card.json"),
                    "mcp": self.url("/mcp"),
                    "llms_txt": llms,
                }
            },
        }
        return self.cached(request, json.dumps(document).encode(), "application/json")

    async def issuer_endpoint(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.base,
                "token_endpoint": self.url("/oauth/token"),
                "revocation_endpoint": self.url("/oauth/revoke"),
                "grant_types_supported": [
                    "urn:ietf:params:oauth:grant-type:jwt-bearer",
                    "refresh_token",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
                "protected_resources": [self.base],
            }
        )

    # -- native MCP: only what the Poppy rules look at (metadata and the 401 for a bad token) --------
    async def mcp_metadata_endpoint(self, request: Request) -> Response:
        resource = self.base if self.breaks.mcp_metadata_wrong_resource else self.url("/mcp")
        return JSONResponse(
            {"resource": resource, "authorization_servers": [self.base], "bearer_methods_supported": ["header"]}
        )

    async def mcp_endpoint(self, request: Request) -> Response:
        challenge = 'Bearer error="invalid_token"'
        if not self.breaks.mcp_challenge_without_metadata:
            challenge += f', resource_metadata="{self.url("/.well-known/oauth-protected-resource/mcp")}"'
        if request.headers.get("authorization"):
            return JSONResponse({"error": "invalid_token"}, status_code=401, headers={"WWW-Authenticate": challenge})
        return self.rpc_error(None, -32601, "This fake serves no MCP")

    async def openapi_endpoint(self, request: Request) -> Response:
        ids = {
            "dealer.information": "dealerInformation",
            "inventory.facets": "inventoryFacets",
            "inventory.search": "inventorySearch",
            "inventory.vehicle": "inventoryVehicle",
        }
        paths = {
            f"/{s}": {"post": {"operationId": op, "responses": {"200": {"description": "ok"}}}} for s, op in ids.items()
        }
        return JSONResponse(
            {
                "openapi": "3.1.0",
                "info": {"title": "Fake", "version": "1"},
                "servers": [{"url": self.url("/poppy/v1")}],
                "paths": paths,
            }
        )

    async def catalog_endpoint(self, request: Request) -> Response:
        body = json.dumps(
            {
                "linkset": [
                    {
                        "anchor": self.url("/a2a"),
                        "service-meta": [{"href": self.url("/.well-known/agent-card.json")}],
                        "service-doc": [{"href": self.url("/llms.txt")}],
                    }
                ]
            }
        ).encode()
        media = 'application/linkset+json; profile="https://www.rfc-editor.org/info/rfc9727"'
        if request.method == "HEAD":
            return Response(b"", media_type=media)
        return Response(body, media_type=media)

    # -- A2A -------------------------------------------------------------------------------
    async def a2a_endpoint(self, request: Request) -> Response:
        raw = await request.body()
        self.calls += 1
        if self.breaks.rate_limit_every and self.calls % self.breaks.rate_limit_every == 0:
            self.limited += 1
            error = {
                "type": "aap.error",
                "error_id": "err_rl",
                "code": "RATE_LIMITED",
                "message": "Slow down",
                "retryable": True,
                "created_at": "2026-05-01T10:00:00Z",
                "details": {"retry_after_ms": 5},
            }
            rid = json.loads(raw).get("id") if raw.startswith(b"{") and raw.endswith(b"}") else None
            return JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {"code": -32000, "message": "Slow down", "data": [{"@type": STRUCT, "value": error}]},
                }
            )
        try:
            body = json.loads(raw)
        except ValueError:
            return self.rpc_error(None, -32700, "Parse error")
        if not isinstance(body, dict) or body.get("jsonrpc") != "2.0" or "method" not in body:
            return self.rpc_error(body.get("id") if isinstance(body, dict) else None, -32600, "Invalid request")
        rid = body.get("id")
        version = request.headers.get("a2a-version")
        if version is not None and version != "1.0" and not self.breaks.lenient_version:
            return self.rpc_error(rid, -32009, f"A2A version {version!r} is not supported")
        extensions = request.headers.get("a2a-extensions")
        if extensions is not None and EXTENSION_URI not in [e.strip() for e in extensions.split(",")]:
            return self.rpc_error(rid, -32008, f"Send A2A-Extensions: {EXTENSION_URI}")
        method = body["method"]
        if method in ("SendStreamingMessage", "SubscribeToTask"):
            return self.rpc_error(rid, -32004, "Streaming is not supported")
        if method != "SendMessage":
            return self.rpc_error(rid, -32601, "Method not found")
        message = (body.get("params") or {}).get("message")
        if not isinstance(message, dict) or not message.get("parts"):
            return self.rpc_error(rid, -32602, "params.message is required")
        data = message["parts"][0].get("data")
        try:
            kind = data.get("type") if isinstance(data, dict) else None
            skill = next((s for s in SKILLS.values() if s.request_type == kind and s.id in READ_SKILLS), None)
            if skill is None:
                raise FakeError("UNSUPPORTED_SKILL", "Unknown skill", -32004)
            result = getattr(self, skill.id.replace(".", "_"))(data)
        except FakeError as exc:
            return self.aap_error(rid, exc)
        response_message = {
            "messageId": str(uuid.uuid4()),
            "contextId": (None if self.breaks.drops_context else message.get("contextId")) or str(uuid.uuid4()),
            "role": "ROLE_AGENT",
            "parts": [{"data": {"type": skill.response_type, "data": result}, "mediaType": skill.response_media_type}],
        }
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": {"message": response_message}})

    def rpc_error(self, rid: Any, code: int, message: str) -> Response:
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})

    def aap_error(self, rid: Any, exc: FakeError) -> Response:
        error: dict[str, Any] = {
            "type": "aap.error",
            "error_id": "err_" + uuid.uuid4().hex,
            "code": exc.code,
            "message": exc.message,
            "retryable": exc.retryable,
            "created_at": "2026-05-01T10:00:00Z",
        }
        if exc.errors:
            error["details"] = {"errors": exc.errors}
        if self.breaks.legacy_error_type:
            data = [{"@type": FORBIDDEN, **error}]
        else:
            data = [
                {
                    "@type": ERROR_INFO,
                    "reason": exc.code,
                    "domain": "autoagentprotocol.org",
                    "metadata": {"code": exc.code},
                },
                {"@type": STRUCT, "value": error},
            ]
        return JSONResponse(
            {"jsonrpc": "2.0", "id": rid, "error": {"code": exc.rpc, "message": exc.message, "data": data}}
        )

    # -- skills ----------------------------------------------------------------------------
    def dealer_information(self, request: dict[str, Any]) -> dict[str, Any]:
        self.closed(request, {"type", "dealer_id"})
        return {"name": "Fake Motors", "rooftops": [{"name": "Fake Motors Main", "timezone": "America/New_York"}]}

    def closed(self, request: dict[str, Any], allowed: set[str]) -> None:
        extra = sorted(set(request) - allowed)
        if extra:
            raise FakeError(
                "SCHEMA_VALIDATION_FAILED",
                "Unknown keys",
                errors=[
                    {"instanceLocation": "", "keyword": "additionalProperties", "error": f"unknown key {k}"}
                    for k in extra
                ],
            )

    def validate_filters(self, filters: Any) -> list[dict[str, str]]:
        problems = []
        if not isinstance(filters, dict):
            return [{"instanceLocation": "/filters", "keyword": "type", "error": "must be an object"}]
        for key, value in filters.items():
            where = f"/filters/{key}"
            if key not in ALL_FILTER_KEYS:
                problems.append(
                    {
                        "instanceLocation": "/filters",
                        "keyword": "additionalProperties",
                        "error": f"unknown filter {key}",
                    }
                )
            elif isinstance(value, list) and not value:
                problems.append({"instanceLocation": where, "keyword": "minItems", "error": "must not be empty"})
            elif key in ("year_min", "year_max") and isinstance(value, int) and not 1900 <= value <= 2100:
                problems.append({"instanceLocation": where, "keyword": "minimum", "error": "out of range"})
        return problems

    def matching(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        unsupported = sorted(set(filters) - SEARCH_FILTER_KEYS)
        if unsupported:
            raise FakeError("UNSUPPORTED_FILTER", f"Unsupported filter {unsupported[0]}")
        out = []
        for listing in self.inventory:
            ok = all(
                str(listing.get(k, "")).casefold() in {str(v).casefold() for v in values}
                for k, values in filters.items()
            )
            if ok:
                out.append(listing)
        return out

    def inventory_facets(self, request: dict[str, Any]) -> dict[str, Any]:
        self.closed(request, {"type", "filters", "currency", "mileage_unit"})
        problems = self.validate_filters(request.get("filters", {}))
        if problems:
            raise FakeError("SCHEMA_VALIDATION_FAILED", "Invalid request", errors=problems)
        listings = self.matching(request.get("filters", {}))

        def terms(field: str) -> list[dict[str, Any]]:
            counts: dict[Any, int] = {}
            for listing in listings:
                if field in listing:
                    counts[listing[field]] = counts.get(listing[field], 0) + 1
            return [{"value": v, "count": c} for v, c in sorted(counts.items())]

        return {"makes": terms("make"), "bodies": terms("body"), "conditions": terms("condition"), "features": []}

    def query_hash(self, request: dict[str, Any], limit: int) -> str:
        sort = request.get("sort") or CAPABILITIES["default_sort"]
        canonical = json.dumps([request.get("filters", {}), sort, limit], sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def encode_cursor(self, qhash: str, offset: int) -> str:
        payload = f"{qhash}:{offset}".encode()
        mac = hmac.new(SECRET, payload, hashlib.sha256).hexdigest()[:16]
        return base64.urlsafe_b64encode(payload + b":" + mac.encode()).decode().rstrip("=")

    def decode_cursor(self, cursor: str, qhash: str) -> int:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
            got_hash, offset, mac = raw.split(":")
            expected = hmac.new(SECRET, f"{got_hash}:{offset}".encode(), hashlib.sha256).hexdigest()[:16]
        except (ValueError, UnicodeDecodeError):
            raise FakeError("INVALID_CURSOR", "Malformed cursor") from None
        if not hmac.compare_digest(mac, expected) or (got_hash != qhash and not self.breaks.unbound_cursor):
            raise FakeError("INVALID_CURSOR", "Cursor does not match this query")
        return int(offset)

    def inventory_search(self, request: dict[str, Any]) -> dict[str, Any]:
        self.closed(request, {"type", "filters", "pagination", "sort", "currency", "mileage_unit", "privacy"})
        pagination = request.get("pagination") or {}
        problems = self.validate_filters(request.get("filters", {}))
        limit = pagination.get("limit", CAPABILITIES["default_limit"])
        if not isinstance(limit, int) or limit < 1 or limit > 100:
            problems.append(
                {
                    "instanceLocation": "/pagination/limit",
                    "keyword": "maximum" if limit else "minimum",
                    "error": "limit must be 1..100",
                }
            )
        elif limit > CAPABILITIES["max_limit"]:
            if self.breaks.clamp_limit:
                limit = CAPABILITIES["max_limit"]
            else:
                problems.append(
                    {
                        "instanceLocation": "/pagination/limit",
                        "keyword": "maximum",
                        "error": f"limit exceeds max_limit {CAPABILITIES['max_limit']}",
                    }
                )
        if "skip" in pagination:
            problems.append(
                {"instanceLocation": "/pagination/skip", "keyword": "offset", "error": "skip is not supported"}
            )
        if problems:
            raise FakeError("SCHEMA_VALIDATION_FAILED", "Invalid request", errors=problems)
        sort = request.get("sort") or CAPABILITIES["default_sort"]
        if sort.get("field") not in CAPABILITIES["sort_fields"]:
            raise FakeError("UNSUPPORTED_SORT", "Unsupported sort field")
        listings = sorted(
            self.matching(request.get("filters", {})), key=lambda v: _sort_key(v, sort["field"], sort["order"])
        )
        qhash = self.query_hash(request, limit)
        offset = self.decode_cursor(pagination["cursor"], qhash) if "cursor" in pagination else 0
        page = listings[offset : offset + limit]
        step = limit - 1 if self.breaks.repeat_listing and limit > 1 else limit
        next_cursor = self.encode_cursor(qhash, offset + step) if offset + limit < len(listings) else None
        total = min(len(listings), 20) if self.breaks.capped_total else len(listings)
        return {
            "total": total,
            "limit": limit,
            "next_cursor": next_cursor,
            "applied_filters": request.get("filters", {}),
            "sort": sort,
            "vehicles": page,
        }

    def inventory_vehicle(self, request: dict[str, Any]) -> dict[str, Any]:
        self.closed(request, {"type", "vin", "stock", "vehicle_id"})
        for key in ("vehicle_id", "vin", "stock"):
            if key in request:
                for listing in self.inventory:
                    if listing.get(key) == request[key]:
                        return listing
                raise FakeError("VEHICLE_NOT_FOUND", "No such vehicle", -32000)
        raise FakeError(
            "SCHEMA_VALIDATION_FAILED",
            "An identifier is required",
            errors=[{"instanceLocation": "", "keyword": "anyOf", "error": "vin, stock or vehicle_id"}],
        )
