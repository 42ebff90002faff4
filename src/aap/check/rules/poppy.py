"""Poppy (PAP 0.3) publication: poppy.json, issuer metadata, the native API and its guest tokens.

The document rules need no identity. Token and API calls need a personal-agent
identity (``--poppy-client-id`` + ``--poppy-client-key``): the dealer fetches
the client metadata from that HTTPS URL, so the checker cannot invent one on
the fly; without it those rules are skipped, never passed.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import httpx

from aap.check.context import CheckContext, describe, is_loopback_http
from aap.check.registry import Fail, Skip, rule
from aap.client.errors import AapClientError, DiscoveryError
from aap.client.poppy import issuer_metadata_url, operation_map, protected_resource_metadata_url
from aap.client.transport import json_body
from aap.skills.catalog import SKILLS

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
FORBIDDEN_TOKEN_MEMBERS = (
    "scope",
    "refresh_token",
    "refresh_token_expires_in",
    "issued_token_type",
    "session_id",
    "signed_in",
)


def _https(url: Any) -> bool:
    return isinstance(url, str) and (urlsplit(url).scheme == "https" or is_loopback_http(url))


@rule(
    "poppy.document",
    "poppy.json follows the AAP publication profile and names its own domain",
    "Poppy (AAPPoppyDiscovery, seed 004)",
)
async def poppy_document(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    if not found.poppy_url:
        raise Fail("the card advertises no params.poppy")
    try:
        document, response = await ctx.poppy_document()
    except Skip as exc:
        raise Fail(exc.reason) from None
    ctx.require_valid(document, "poppy", "poppy.json")
    problems = []
    domain = (document.get("organization") or {}).get("domain")
    host = urlsplit(found.poppy_url).hostname or ""
    if not isinstance(domain, str) or domain.lower() != host.lower():
        problems.append(f"organization.domain {domain!r} is not the host serving poppy.json ({host})")
    if not response.headers.get("content-type", "").startswith("application/json"):
        problems.append(f"served as {response.headers.get('content-type')!r}, not application/json")
    if problems:
        raise Fail("poppy.json is wrong", problems)
    return None


async def issuer_metadata(ctx: CheckContext) -> tuple[str, dict[str, Any]]:
    document, _ = await ctx.poppy_document()
    issuer = (document.get("auth") or {}).get("issuer")
    if not isinstance(issuer, str):
        raise Skip("poppy.json names no auth.issuer")
    metadata, _ = await ctx.json_document("issuer-metadata", issuer_metadata_url(issuer), "issuer metadata")
    return issuer, metadata


@rule(
    "poppy.issuer",
    "The guest issuer publishes RFC 8414 metadata that matches poppy.json",
    "PoppyOauthMetadata (seed 004); RFC 8414 §3",
)
async def poppy_issuer(ctx: CheckContext) -> str | None:
    document, _ = await ctx.poppy_document()
    try:
        issuer, metadata = await issuer_metadata(ctx)
    except Skip as exc:
        raise Fail(exc.reason) from None
    ctx.require_valid(metadata, "poppy-oauth-metadata", "the issuer metadata")
    problems = []
    if metadata.get("issuer") != issuer:
        problems.append(f"metadata issuer {metadata.get('issuer')!r} differs from auth.issuer {issuer!r}")
    domain = (document.get("organization") or {}).get("domain")
    resources = metadata.get("protected_resources") or []
    wanted = f"https://{domain}"
    if domain and wanted not in resources and not any(is_loopback_http(r) for r in resources):
        problems.append(f"protected_resources does not include {wanted}")
    if not _https(metadata.get("token_endpoint")):
        problems.append("token_endpoint is not an HTTPS URL")
    if problems:
        raise Fail("the issuer metadata is wrong", problems)
    return None


async def poppy_operations(ctx: CheckContext) -> dict[str, str]:
    async def compute() -> dict[str, str]:
        document, _ = await ctx.poppy_document()
        api = next((a for a in document.get("apis") or [] if isinstance(a, dict) and a.get("type") == "openapi"), None)
        if api is None:
            raise Skip("poppy.json lists no openapi API")
        openapi, _ = await ctx.json_document("poppy-openapi", api["url"], "the Poppy OpenAPI document")
        try:
            return operation_map(openapi, api["url"])
        except DiscoveryError as exc:
            raise Skip(exc.message) from exc

    return await ctx.memo("poppy-operations", compute)


@rule(
    "poppy.openapi",
    "The native API's OpenAPI document has an absolute HTTPS server and one operation per skill",
    "Poppy.apis (seed 004); docs/poppy.md",
)
async def poppy_openapi(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    document, _ = await ctx.poppy_document()
    api = next((a for a in document.get("apis") or [] if isinstance(a, dict) and a.get("type") == "openapi"), None)
    if api is None:
        raise Fail("poppy.json lists no openapi API")
    try:
        openapi, _ = await ctx.json_document("poppy-openapi", api["url"], "the Poppy OpenAPI document")
    except Skip as exc:
        raise Fail(exc.reason) from None
    problems = []
    if not str(openapi.get("openapi", "")).startswith("3."):
        problems.append("not an OpenAPI 3.x document")
    servers = openapi.get("servers") or []
    server = servers[0].get("url") if servers and isinstance(servers[0], dict) else None
    if not _https(server):
        problems.append(f"servers[0].url {server!r} is not an absolute HTTPS URL")
    try:
        operations = await poppy_operations(ctx)
    except Skip as exc:
        raise Fail(exc.reason) from None
    for skill_id in found.skills:
        if skill_id in SKILLS and skill_id not in operations:
            problems.append(f"no operation for {skill_id}")
    if problems:
        raise Fail("the Poppy OpenAPI document is incomplete", problems)
    return None


@rule(
    "poppy.auth_required",
    "The native API refuses calls without a DPoP-bound token (401 + WWW-Authenticate)",
    "Poppy publication profile (seed 004); RFC 9449 §7.1",
)
async def poppy_auth_required(ctx: CheckContext) -> str | None:
    if "poppy" not in ctx.options.bindings:
        raise Skip("binding poppy not selected (--binding)")
    operations = await poppy_operations(ctx)
    url = operations.get("inventory.search") or next(iter(operations.values()), None)
    if url is None:
        raise Skip("no Poppy operation to call")
    skill = "inventory.search" if "inventory.search" in operations else next(iter(operations))
    payload = {"type": SKILLS[skill].request_type}
    problems = []
    for label, headers in (("no credentials", {}), ("a Bearer token", {"Authorization": "Bearer aap-check"})):
        response = await ctx.http.post(url, json=payload, headers=headers)
        if response.status_code != 401:
            problems.append(f"{label}: HTTP {response.status_code}, expected 401")
        elif "dpop" not in response.headers.get("www-authenticate", "").lower():
            problems.append(f"{label}: the 401 has no WWW-Authenticate: DPoP challenge")
    if problems:
        raise Fail("the native API accepts unauthenticated calls", problems)
    return None


@rule(
    "poppy.token",
    "A guest JWT-bearer grant with DPoP yields a DPoP token with no forbidden members",
    "PoppyGuestTokenResponse, PoppySessionRequest (seed 004); RFC 7523; RFC 9449 §5",
)
async def poppy_token(ctx: CheckContext) -> str | None:
    transport = await ctx.transport("poppy")
    try:
        body = await transport.grant()
    except AapClientError as exc:
        raise Fail(f"the token request failed: {describe(exc)}") from exc
    ctx.require_valid(body, "poppy-guest-token-response", "the token response")
    problems = [f"the guest token response carries {m}" for m in FORBIDDEN_TOKEN_MEMBERS if m in body]
    if problems:
        raise Fail("the guest token response is wrong", problems)
    return None


@rule("poppy.dpop_replay", "A replayed DPoP proof is refused on the native API", "RFC 9449 §4.3, §11.1")
async def poppy_dpop_replay(ctx: CheckContext) -> str | None:
    transport = await ctx.transport("poppy")
    operations = await poppy_operations(ctx)
    skill_id = "dealer.information" if "dealer.information" in operations else next(iter(operations))
    url = operations[skill_id]
    try:
        token = await transport._token()  # noqa: SLF001 - the checker drives the session directly
    except AapClientError as exc:
        raise Fail(f"no guest token: {describe(exc)}") from exc
    proof = transport.dpop.proof("POST", url, access_token=token, nonce=transport.nonce)
    headers = {"Authorization": f"DPoP {token}", "DPoP": proof}
    payload = {"type": SKILLS[skill_id].request_type}
    first = await ctx.http.post(url, json=payload, headers=headers)
    if first.status_code != 200:
        raise Skip(f"the first call with a fresh proof answered HTTP {first.status_code}")
    second = await ctx.http.post(url, json=payload, headers=headers)
    if second.status_code != 401:
        body = json_body(second)
        raise Fail(
            f"the replayed proof was accepted (HTTP {second.status_code}"
            + (f", {body.get('type')}" if isinstance(body, dict) and body.get("type") else "")
            + ")"
        )
    return None


def _challenge_parameter(header: str, name: str) -> str | None:
    """A quoted auth-param of a ``WWW-Authenticate`` value (RFC 9110 §11.2)."""
    marker = f'{name}="'
    if marker not in header:
        return None
    return header.split(marker, 1)[1].split('"', 1)[0]


@rule(
    "poppy.mcp_resource",
    "A listed native MCP API has RFC 9728 metadata naming it and the issuer, "
    "and its 401 for a bad Bearer token points there",
    "Poppy.apis, PoppyMcpResourceMetadata (seed 004); RFC 9728 §3.1, §5.1; RFC 6750 §3",
)
async def poppy_mcp_resource(ctx: CheckContext) -> str | None:
    document, _ = await ctx.poppy_document()
    entry = next((a for a in document.get("apis") or [] if isinstance(a, dict) and a.get("type") == "mcp"), None)
    if entry is None:
        raise Skip("poppy.json lists no mcp API (native MCP is optional)")
    mcp_url = entry.get("url")
    if not isinstance(mcp_url, str):
        raise Fail("the mcp API entry has no url")
    problems = []
    if entry.get("resource", mcp_url) != mcp_url:
        problems.append(f"the mcp entry's resource {entry.get('resource')!r} is not its url {mcp_url!r}")
    metadata_url = protected_resource_metadata_url(mcp_url)
    try:
        metadata, _ = await ctx.json_document("mcp-resource-metadata", metadata_url, "the MCP resource metadata")
    except Skip as exc:
        raise Fail(exc.reason) from None
    ctx.require_valid(metadata, "poppy-mcp-resource-metadata", "the MCP resource metadata")
    issuer = (document.get("auth") or {}).get("issuer")
    if metadata.get("resource") != mcp_url:
        problems.append(f"resource {metadata.get('resource')!r} is not the advertised MCP URL {mcp_url!r}")
    if issuer not in (metadata.get("authorization_servers") or []):
        problems.append(f"authorization_servers does not name auth.issuer {issuer!r}")
    if "header" not in (metadata.get("bearer_methods_supported") or []):
        problems.append("bearer_methods_supported does not contain header")
    if "dpop_signing_alg_values_supported" not in metadata:  # Bearer MCP: the issuer must exchange tokens
        try:
            _, issuer_meta = await issuer_metadata(ctx)
            if TOKEN_EXCHANGE not in (issuer_meta.get("grant_types_supported") or []):
                problems.append("no DPoP at the MCP server, yet the issuer does not list token exchange")
        except Skip as exc:
            problems.append(exc.reason)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Authorization": "Bearer aap-check-not-a-token",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    try:
        response = await ctx.http.post(mcp_url, json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise Fail(f"POST {mcp_url} failed: {type(exc).__name__}") from exc
    challenge = response.headers.get("www-authenticate", "")
    if response.status_code != 401 or not challenge.lower().startswith("bearer"):
        problems.append(
            f"an invalid Bearer token got HTTP {response.status_code} "
            f"{'without' if not challenge else 'with'} a Bearer challenge, expected 401 + Bearer"
        )
    else:
        if _challenge_parameter(challenge, "error") != "invalid_token":
            problems.append('the 401 challenge lacks error="invalid_token"')
        named = _challenge_parameter(challenge, "resource_metadata")
        if named is None:
            problems.append("the 401 challenge names no resource_metadata")
        elif named != metadata_url:
            try:
                pointed, _ = await ctx.json_document("mcp-resource-metadata-named", named, "resource_metadata")
                if pointed.get("resource") != mcp_url:
                    problems.append(f"resource_metadata {named} does not describe {mcp_url}")
            except Skip as exc:
                problems.append(f"the 401's resource_metadata does not resolve: {exc.reason}")
    if problems:
        raise Fail("the native MCP API's protected-resource metadata is wrong", problems)
    return None
