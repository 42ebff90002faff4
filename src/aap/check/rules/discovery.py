"""Discovery: the agent card, llms.txt, the api-catalog, and whether they agree with each other."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx

from aap import EXTENSION_URI, SCHEMA_BASE_URL
from aap.cardsign import SignatureError
from aap.check.context import CheckContext, is_loopback_http
from aap.check.registry import Fail, Skip, rule
from aap.client.card_signatures import verify_card
from aap.client.discovery import Discovery
from aap.protocols import A2A_PROTOCOL_VERSION
from aap.skills.catalog import SKILLS

AAP_EXTENSION_PREFIX = "https://autoagentprotocol.org/extensions/aap/"
URL_RE = re.compile(r"https?://[^\s<>()\[\]`\"']+")


def _json_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


@rule(
    "card.available",
    "The agent card is served as JSON at /.well-known/agent-card.json",
    "A2A §8.2; AAP AgentCard (seed 001)",
)
async def card_available(ctx: CheckContext) -> str | None:
    try:
        url, card, response = await ctx.card_fetch()
    except Skip as exc:
        raise Fail(ctx.card_error or exc.reason) from None
    if not isinstance(card, dict):
        raise Fail(f"{url} is not a JSON object")
    if not _json_type(response.headers.get("content-type", "")):
        raise Fail(f"{url} is served as {response.headers.get('content-type')!r}, not JSON")
    return url


@rule(
    "card.signature",
    "A signed agent card's signatures verify (a key the card's own origin publishes at its jku)",
    "A2A §8.4.3; AgentCard.signatures (seed 001)",
)
async def card_signature(ctx: CheckContext) -> str | None:
    url, card, _ = await ctx.card_fetch()
    if not isinstance(card, dict) or not card.get("signatures"):
        raise Skip("the card is not signed (signatures are optional)")
    try:
        kid = await verify_card(ctx.http, url, card)
    except SignatureError as exc:
        raise Fail("no signature of the card verifies", exc.problems) from None
    return f"signed with key {kid}"


@rule(
    "card.schema", "The agent card validates against the AAP 3.1 agent-card schema", "agent-card.schema.json (seed 001)"
)
async def card_schema(ctx: CheckContext) -> str | None:
    _, card, _ = await ctx.card_fetch()
    ctx.require_valid(card, "agent-card", "the agent card")
    return "validated with the loopback development allowance (http read as https)" if ctx.loopback_dev else None


@rule(
    "card.extension",
    "The card declares exactly one AAP extension: the v3.1 URI, required, with params",
    "AgentCard.capabilities.extensions (seed 001)",
)
async def card_extension(ctx: CheckContext) -> str | None:
    _, card, _ = await ctx.card_fetch()
    if not isinstance(card, dict):
        raise Skip("the card is not a JSON object")
    extensions = (card.get("capabilities") or {}).get("extensions")
    if not isinstance(extensions, list):
        raise Fail("capabilities.extensions is missing")
    aap = [e for e in extensions if isinstance(e, dict) and str(e.get("uri", "")).startswith(AAP_EXTENSION_PREFIX)]
    uris = [e.get("uri") for e in aap]
    if not aap:
        raise Fail(f"no AAP extension declared; expected {EXTENSION_URI}")
    if len(aap) > 1:
        raise Fail(f"{len(aap)} AAP extensions declared ({uris}); exactly one is allowed")
    entry = aap[0]
    problems = []
    if entry.get("uri") != EXTENSION_URI:
        problems.append(f"uri is {entry.get('uri')!r}, expected {EXTENSION_URI!r}")
    if entry.get("required") is not True:
        problems.append("required must be true")
    if not isinstance(entry.get("params"), dict):
        problems.append("params is missing")
    if problems:
        raise Fail("the AAP extension entry is wrong", problems)
    return None


@rule(
    "card.interface",
    "The card has a JSONRPC interface with protocolVersion 1.0 on an HTTPS URL",
    "AgentCard.supportedInterfaces (seed 001); A2A §8.3",
)
async def card_interface(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    interfaces = [i for i in found.card.get("supportedInterfaces") or [] if isinstance(i, dict)]
    problems = []
    jsonrpc = [i for i in interfaces if i.get("protocolBinding") == "JSONRPC"]
    if not any(i.get("protocolVersion") == A2A_PROTOCOL_VERSION for i in jsonrpc):
        problems.append("no JSONRPC interface with protocolVersion 1.0")
    scheme = urlsplit(found.a2a_url).scheme
    if scheme != "https" and not is_loopback_http(found.a2a_url):
        problems.append(f"interface url {found.a2a_url} is not HTTPS")
    if problems:
        raise Fail("the A2A interface declaration is wrong", problems)
    return None


@rule(
    "card.params",
    "The AAP params describe the declared skills with the v3.1 schema URLs and capabilities",
    "AapExtensionParams; InventoryCapabilities (seed 004)",
)
async def card_params(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    params = found.params
    ctx.require_valid(params, "aap-extension-params", "the AAP extension params")
    problems = []
    if params.get("schema_base_url") != SCHEMA_BASE_URL:
        problems.append(f"schema_base_url is not {SCHEMA_BASE_URL}")
    card_skills = [str(s.get("id")) for s in found.card.get("skills") or [] if isinstance(s, dict)]
    param_skills = list(found.skills)
    if sorted(card_skills) != sorted(param_skills):
        problems.append(f"params.skills {sorted(param_skills)} differ from the card's skills {sorted(card_skills)}")
    for skill_id, entry in found.skills.items():
        info = SKILLS.get(skill_id)
        if info is None:
            problems.append(f"params.skills names an unknown skill {skill_id!r}")
            continue
        if not isinstance(entry, dict):
            continue
        if entry.get("request_schema") != info.request_schema_url:
            problems.append(f"{skill_id}.request_schema should be {info.request_schema_url}")
        if entry.get("response_schema") != info.response_schema_url:
            problems.append(f"{skill_id}.response_schema should be {info.response_schema_url}")
    caps = found.capabilities
    if "inventory.search" in found.skills:
        if caps is None:
            problems.append("inventory.search needs capabilities")
        else:
            filters = caps.get("filters") or []
            if ("features_all" in filters or "features_any" in filters) and "inventory.facets" not in found.skills:
                problems.append("feature filters are advertised but inventory.facets is not declared")
            if caps.get("scope") == "aggregate" and "dealer.information" not in found.skills:
                problems.append("aggregate scope requires dealer.information")
            if (
                isinstance(caps.get("default_limit"), int)
                and isinstance(caps.get("max_limit"), int)
                and caps["default_limit"] > caps["max_limit"]
            ):
                problems.append("default_limit exceeds max_limit")
            default_sort = (caps.get("default_sort") or {}).get("field")
            if default_sort and default_sort not in (caps.get("sort_fields") or []):
                problems.append(f"default_sort {default_sort} is not among sort_fields")
            currencies = caps.get("currencies") or ["USD"]
            if caps.get("default_currency", "USD") not in currencies:
                problems.append("default_currency is not among currencies")
    if problems:
        raise Fail("the AAP extension params are inconsistent", problems)
    return None


@rule(
    "card.recommended",
    "JSONRPC listed first, no streaming claim, AAP media types pinned per skill",
    'AgentCard (seed 001); A2A §3.1.2; docs/a2a.md, "Agent card"',
    level="should",
)
async def card_recommended(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    problems = []
    interfaces = [i for i in found.card.get("supportedInterfaces") or [] if isinstance(i, dict)]
    if not interfaces or interfaces[0].get("protocolBinding") != "JSONRPC":
        problems.append("the JSONRPC interface should be listed first")
    if (found.card.get("capabilities") or {}).get("streaming") is True:
        problems.append(
            "capabilities.streaming is true: SDK clients then use SendStreamingMessage, which AAP does not define"
        )
    for key in ("defaultInputModes", "defaultOutputModes"):
        modes = found.card.get(key) or []
        if not modes or any(not str(m).startswith("application/vnd.autoagent.") for m in modes):
            problems.append(f"{key} should list only application/vnd.autoagent.* media types")
    for skill in found.card.get("skills") or []:
        skill_id = skill.get("id") if isinstance(skill, dict) else None
        info = SKILLS.get(skill_id) if isinstance(skill_id, str) else None
        if info is None:
            continue
        if skill.get("inputModes") != [info.request_media_type]:
            problems.append(f"{info.id}.inputModes should be [{info.request_media_type}]")
        if skill.get("outputModes") != [info.response_media_type]:
            problems.append(f"{info.id}.outputModes should be [{info.response_media_type}]")
        if "examples" in skill:
            problems.append(f"{info.id} carries natural-language examples")
    if problems:
        raise Fail("media-type declarations differ from the AAP recommendation", problems)
    return None


def _advertised_urls(found: Discovery, poppy: dict[str, Any] | None) -> dict[str, str]:
    urls = {"supportedInterfaces[0].url": found.a2a_url}
    if found.mcp_url:
        urls["params.mcp.url"] = found.mcp_url
    if found.poppy_url:
        urls["params.poppy"] = found.poppy_url
    if found.llms_txt_url:
        urls["params.llms_txt"] = found.llms_txt_url
    if poppy:
        ext = (poppy.get("extensions") or {}).get("autoagentprotocol.org/aap") or {}
        for key in ("agent_card", "mcp", "llms_txt", "openapi", "api_catalog", "documentation"):
            if isinstance(ext.get(key), str):
                urls[f"poppy.json extension {key}"] = ext[key]
        issuer = (poppy.get("auth") or {}).get("issuer")
        if isinstance(issuer, str):
            urls["poppy.json auth.issuer"] = issuer
        for i, api in enumerate(poppy.get("apis") or []):
            if isinstance(api, dict) and isinstance(api.get("url"), str):
                urls[f"poppy.json apis[{i}].url"] = api["url"]
    return urls


@rule(
    "discovery.https",
    "Every advertised URL is HTTPS without query or fragment",
    "AapExtensionParams; McpEndpoint; PoppyAapExtension (seed 004)",
)
async def discovery_https(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    try:
        poppy, _ = await ctx.poppy_document()
    except Skip:
        poppy = None
    problems = []
    for where, url in _advertised_urls(found, poppy).items():
        parts = urlsplit(url)
        if parts.scheme != "https" and not is_loopback_http(url):
            problems.append(f"{where} = {url} is not HTTPS")
        if parts.query or parts.fragment:
            problems.append(f"{where} = {url} carries a query or fragment")
    if problems:
        raise Fail("advertised URLs must be HTTPS", problems)
    return "loopback development server: plain http accepted" if ctx.loopback_dev else None


@rule(
    "llms_txt.available",
    "llms.txt is served as Markdown or text with an H1 and a summary",
    "AapExtensionParams.llms_txt (seed 004); llmstxt.org",
)
async def llms_txt_available(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    if not found.llms_txt_url:
        raise Fail("the card advertises no params.llms_txt")
    try:
        response = await llms_txt_response(ctx, found.llms_txt_url)
    except Skip as exc:
        raise Fail(exc.reason) from None
    if response.status_code != 200:
        raise Fail(f"GET {found.llms_txt_url}: HTTP {response.status_code}")
    text = response.text
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    problems = []
    if media not in ("text/markdown", "text/plain"):
        problems.append(f"served as {media!r}, expected text/markdown or text/plain")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        problems.append("the first line is not an H1 (# name)")
    if not any(line.startswith(">") for line in lines[:5]):
        problems.append("no '>' summary right after the title")
    if problems:
        raise Fail("llms.txt does not follow the expected layout", problems)
    return None


@rule(
    "llms_txt.links",
    "llms.txt links the agent card, the MCP endpoint and poppy.json",
    "AapExtensionParams.llms_txt (seed 004); llmstxt.org; docs/check.md",
    level="should",
)
async def llms_txt_links(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    if not found.llms_txt_url:
        raise Skip("the card advertises no llms.txt")
    response = await llms_txt_response(ctx, found.llms_txt_url)
    if response.status_code != 200:
        raise Skip(f"llms.txt answered HTTP {response.status_code}")
    missing = [
        f"{label} {url}"
        for label, url in (
            ("the agent card", found.card_url),
            ("the MCP endpoint", found.mcp_url),
            ("poppy.json", found.poppy_url),
        )
        if url and url not in response.text
    ]
    if missing:
        raise Fail("llms.txt does not link every discovery document", [f"missing {m}" for m in missing])
    return None


async def llms_txt_response(ctx: CheckContext, url: str) -> httpx.Response:
    """GET llms.txt once per run (whatever the status)."""
    return await ctx.memo("llms.txt", lambda: ctx.get(url))


@rule(
    "discovery.consistent",
    "Agent card, poppy.json and llms.txt name the very same URLs",
    "PoppyAapExtension, AapExtensionParams (seed 004)",
)
async def discovery_consistent(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    problems = []
    checked = []
    try:
        poppy, _ = await ctx.poppy_document()
    except Skip:
        poppy = None
    if poppy is not None:
        checked.append("poppy.json")
        ext = (poppy.get("extensions") or {}).get("autoagentprotocol.org/aap")
        if not isinstance(ext, dict):
            problems.append("poppy.json has no autoagentprotocol.org/aap extension")
        else:
            pairs = [
                ("agent_card", found.card_url, "the agent card URL"),
                ("mcp", found.mcp_url, "params.mcp.url"),
                ("llms_txt", found.llms_txt_url, "params.llms_txt"),
            ]
            for key, expected, label in pairs:
                if expected is not None and ext.get(key) != expected:
                    problems.append(f"poppy.json extension {key} = {ext.get(key)!r}, but {label} = {expected!r}")
    if found.llms_txt_url:
        try:
            response = await llms_txt_response(ctx, found.llms_txt_url)
        except Skip:
            response = None
        text = response.text if response is not None and response.status_code == 200 else None
        if text is not None:
            checked.append("llms.txt")
            known = {
                u for u in (found.card_url, found.mcp_url, found.poppy_url, found.llms_txt_url, found.a2a_url) if u
            }
            by_path = {urlsplit(u).path.rstrip("/"): u for u in known}
            for url in sorted(set(URL_RE.findall(text))):
                url = url.rstrip(".,;:")
                path = urlsplit(url).path.rstrip("/")
                if path in by_path and url not in known and urlsplit(url).netloc != urlsplit(by_path[path]).netloc:
                    problems.append(f"llms.txt links {url}, but the card names {by_path[path]}")
    if problems:
        raise Fail("discovery documents disagree", problems)
    if not checked:
        raise Skip("neither poppy.json nor llms.txt is available to compare")
    return "compared the card with " + " and ".join(checked)


@rule(
    "discovery.cache",
    "Discovery documents carry Cache-Control and ETag and revalidate with 304",
    "A2A §8.6; RFC 9110 §13.1.2",
    level="should",
)
async def discovery_cache(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    urls = [found.card_url] + [u for u in (found.llms_txt_url, found.poppy_url) if u]
    problems = []
    for url in urls:
        response = await ctx.get(url)
        if response.status_code != 200:
            continue
        if not response.headers.get("cache-control"):
            problems.append(f"{url}: no Cache-Control")
        etag = response.headers.get("etag")
        if not etag:
            problems.append(f"{url}: no ETag")
            continue
        again = await ctx.get(url, **{"If-None-Match": etag})
        if again.status_code != 304:
            problems.append(f"{url}: If-None-Match with the current ETag gave HTTP {again.status_code}, not 304")
    if problems:
        raise Fail("caching headers are missing or wrong", problems)
    return None


@rule(
    "discovery.api_catalog",
    "/.well-known/api-catalog is an RFC 9727 linkset (GET and HEAD)",
    "RFC 9727 §3–4; RFC 9264",
    level="should",
)
async def api_catalog(ctx: CheckContext) -> str | None:
    found = await ctx.discovery()
    parts = urlsplit(found.card_url)
    url = f"{parts.scheme}://{parts.netloc}/.well-known/api-catalog"
    response = await ctx.get(url)
    if response.status_code == 404:
        raise Fail(f"{url} is not published")
    problems = []
    ctype = response.headers.get("content-type", "")
    if ctype.split(";", 1)[0].strip().lower() != "application/linkset+json":
        problems.append(f"content type {ctype!r}, expected application/linkset+json")
    if "rfc9727" not in ctype:
        problems.append("the content type lacks the RFC 9727 profile parameter")
    try:
        head = await ctx.http.head(url)
        if head.status_code != 200:
            problems.append(f"HEAD answered HTTP {head.status_code}")
    except Exception as exc:  # noqa: BLE001 - report any transport failure as a problem
        problems.append(f"HEAD failed: {type(exc).__name__}")
    try:
        body = response.json()
    except ValueError:
        raise Fail("the api-catalog is not JSON", problems) from None
    linkset = body.get("linkset") if isinstance(body, dict) else None
    if not isinstance(linkset, list) or not linkset:
        problems.append("no linkset array")
        linkset = []
    hrefs = []
    for i, entry in enumerate(linkset):
        if not isinstance(entry, dict) or not isinstance(entry.get("anchor"), str):
            problems.append(f"linkset[{i}] has no anchor")
            continue
        for relation, targets in entry.items():
            if relation == "anchor":
                continue
            if not isinstance(targets, list) or not all(isinstance(t, dict) and "href" in t for t in targets):
                problems.append(f"linkset[{i}].{relation} is not an array of link targets")
                continue
            hrefs += [t["href"] for t in targets]
    for href in hrefs:
        for own in (found.card_url, found.llms_txt_url, found.mcp_url, found.poppy_url):
            if (
                own
                and href != own
                and urlsplit(href).path == urlsplit(own).path
                and urlsplit(href).netloc != urlsplit(own).netloc
            ):
                problems.append(f"api-catalog links {href}, but the card names {own}")
    if problems:
        raise Fail("the api-catalog is not a valid RFC 9727 linkset", problems)
    return None
