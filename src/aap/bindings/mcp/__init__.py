"""The MCP binding: the AAP skills as MCP tools at ``/mcp`` (Streamable HTTP).

One URL serves both MCP eras: 2026-07-28 (stateless, per-request ``_meta``,
routing headers, ``server/discover``) and the ``initialize``-handshake
revisions up to 2025-11-25. The official SDK's low-level server and session
manager do the protocol work (stateless, JSON responses); this package adds
the AAP tools (:mod:`.tools`), the call path into the transport-free core
(:mod:`.server`) and the deployment checks in front (:mod:`.http`).
"""

from __future__ import annotations

from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from aap.bindings.mcp.auth import BearerAuth, load_verifier
from aap.bindings.mcp.http import McpHttpEndpoint
from aap.bindings.mcp.policy import OriginPolicy
from aap.bindings.mcp.server import PROTOCOL_VERSIONS, make_server
from aap.bindings.mcp.tools import build_tools
from aap.config.mcp import McpSettings
from aap.discovery.urls import MCP_PATH as PATH, DeploymentUrls
from aap.web.parts import BindingParts
from aap.web.ratelimit import RateLimiter

__all__ = ["PATH", "PROTOCOL_VERSIONS", "McpSettings", "build", "endpoint_descriptor"]


def endpoint_url(settings: Any) -> str:
    return DeploymentUrls(settings).mcp


def endpoint_descriptor(settings: Any) -> dict[str, Any]:
    """The ``McpEndpoint`` object for the agent card's ``params.mcp``."""
    return {
        "url": endpoint_url(settings),
        "transport": "streamable-http",
        "protocol_versions": list(PROTOCOL_VERSIONS),
        "public_read": True,
    }


def build(agent: Any) -> BindingParts:
    """Routes and lifespan of the MCP endpoint for ``agent`` (a DealerAgent)."""
    settings = agent.settings
    options = settings.mcp
    tools = build_tools(agent.skills, settings.search.to_json())
    limiter = RateLimiter(agent.stores.state, settings.rate_limit)
    server = make_server(agent, tools, limiter, ttl_ms=options.tools_cache_ttl_ms)
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        stateless=True,
        # Host/Origin are checked in front (OriginPolicy), with deployment-derived lists.
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=settings.max_body_bytes,
    )
    url = endpoint_url(settings)
    auth = BearerAuth(
        agent,
        resource_url=url,
        metadata_url=settings.url("/.well-known/oauth-protected-resource" + PATH),
        verifier=load_verifier(),
    )
    endpoint = McpHttpEndpoint(
        manager,
        OriginPolicy.for_settings(settings),
        auth,
        max_body_bytes=settings.max_body_bytes,
        protocol_versions=PROTOCOL_VERSIONS,
    )
    return BindingParts(routes=[Route(PATH, endpoint=endpoint)], lifespans=[lambda app: manager.run()])
