"""Find a dealer's AAP agent from a domain or URL: the agent card and its AAP extension params."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from aap import EXTENSION_URI
from aap.client.errors import DiscoveryError, UnreachableError
from aap.client.transport import json_body
from aap.loopback import is_loopback_url
from aap.paths import DeploymentUrls
from aap.protocols import A2A_PROTOCOL_VERSION


def card_urls(target: str) -> list[str]:
    """Candidate agent-card URLs for a domain, origin, path or card URL (most specific first).

    A bare domain is reached over https, except a loopback host (:mod:`aap.loopback`),
    which a development server serves over plain http.
    """
    target = target.strip()
    if "://" not in target:
        scheme = "http" if is_loopback_url("http://" + target) else "https"
        target = f"{scheme}://{target}"
    parts = urlsplit(target)
    if not parts.scheme or not parts.netloc:
        raise DiscoveryError(f"not a URL or domain: {target!r}")
    if parts.path.endswith(".json"):
        return [urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))]
    origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    urls = []
    path = parts.path.rstrip("/")
    if path:
        urls.append(DeploymentUrls(origin + path).agent_card)
    urls.append(DeploymentUrls(origin).agent_card)
    return urls


@dataclass(frozen=True)
class Discovery:
    """What a buyer needs from the agent card to call the dealer over any binding."""

    card_url: str
    card: dict[str, Any]
    params: dict[str, Any]
    a2a_url: str
    a2a_tenant: str | None

    @property
    def name(self) -> str:
        return str(self.card.get("name", ""))

    @property
    def mcp(self) -> dict[str, Any] | None:
        mcp = self.params.get("mcp")
        return mcp if isinstance(mcp, dict) else None

    @property
    def mcp_url(self) -> str | None:
        return self.mcp.get("url") if self.mcp else None

    @property
    def poppy_url(self) -> str | None:
        value = self.params.get("poppy")
        return value if isinstance(value, str) else None

    @property
    def llms_txt_url(self) -> str | None:
        value = self.params.get("llms_txt")
        return value if isinstance(value, str) else None

    @property
    def skills(self) -> dict[str, Any]:
        skills = self.params.get("skills")
        return skills if isinstance(skills, dict) else {}

    @property
    def capabilities(self) -> dict[str, Any] | None:
        caps = (self.skills.get("inventory.search") or {}).get("capabilities")
        return caps if isinstance(caps, dict) else None

    def supports(self, skill_id: str) -> bool:
        return skill_id in self.skills


def aap_extension(card: dict[str, Any]) -> dict[str, Any] | None:
    """The card's AAP v3.1 extension entry (exact URI), if declared."""
    extensions = (card.get("capabilities") or {}).get("extensions") or []
    for extension in extensions:
        if isinstance(extension, dict) and extension.get("uri") == EXTENSION_URI:
            return extension
    return None


def jsonrpc_interface(card: dict[str, Any]) -> dict[str, Any] | None:
    """The preferred JSONRPC interface: the first with protocolVersion 1.0, else the first JSONRPC one."""
    interfaces = [
        i
        for i in card.get("supportedInterfaces") or []
        if isinstance(i, dict) and i.get("protocolBinding") == "JSONRPC" and isinstance(i.get("url"), str)
    ]
    for interface in interfaces:
        if interface.get("protocolVersion") == A2A_PROTOCOL_VERSION:
            return interface
    return interfaces[0] if interfaces else None


def parse_card(card_url: str, card: Any) -> Discovery:
    if not isinstance(card, dict):
        raise DiscoveryError(f"{card_url} is not a JSON object")
    extension = aap_extension(card)
    if extension is None:
        found = [e.get("uri") for e in (card.get("capabilities") or {}).get("extensions") or [] if isinstance(e, dict)]
        raise DiscoveryError(f"the agent card does not declare the AAP extension {EXTENSION_URI} (found {found})")
    params = extension.get("params")
    if not isinstance(params, dict):
        raise DiscoveryError("the AAP extension on the agent card has no params")
    interface = jsonrpc_interface(card)
    if interface is None:
        raise DiscoveryError("the agent card lists no JSONRPC interface")
    a2a_tenant = interface.get("tenant")
    return Discovery(card_url, card, params, interface["url"], a2a_tenant if isinstance(a2a_tenant, str) else None)


async def fetch_card(http: httpx.AsyncClient, target: str) -> tuple[str, Any, httpx.Response]:
    """GET the first agent card that answers 200 among :func:`card_urls`.

    Redirects are followed (a bare domain often redirects to ``www.``), but never
    from HTTPS to plain HTTP: the card's URL is the one it finally came from.
    """
    last: str = ""
    answered = False
    for url in card_urls(target):
        try:
            response = await http.get(url, headers={"Accept": "application/json"}, follow_redirects=True)
        except httpx.HTTPError as exc:
            answered = answered or not isinstance(exc, httpx.TransportError)
            last = f"{type(exc).__name__} fetching {url}" + (f" ({exc})" if str(exc) else "")
            continue
        answered = True
        final = str(response.url)
        if any(hop.url.scheme == "https" for hop in response.history) and response.url.scheme != "https":
            raise DiscoveryError(f"{url} redirects from HTTPS to {final}")
        if response.status_code == 200:
            body = json_body(response)
            if body is None:
                raise DiscoveryError(f"{final} did not return JSON")
            return final, body, response
        last = f"HTTP {response.status_code} from {final}"
    if not answered:
        raise UnreachableError(f"nothing answers at {target}: {last}")
    raise DiscoveryError(f"no agent card found for {target}: {last}")


async def discover(http: httpx.AsyncClient, target: str) -> Discovery:
    url, card, _ = await fetch_card(http, target)
    return parse_card(url, card)
