"""The MCP binding: the AAP skills as MCP tools at ``/mcp`` (Streamable HTTP).

One URL serves both MCP eras: 2026-07-28 (stateless, per-request ``_meta``,
routing headers, ``server/discover``) and the ``initialize``-handshake
revisions up to 2025-11-25. The official SDK's low-level server and session
manager do the protocol work (stateless, JSON responses); this package adds
the AAP tools (:mod:`.tools`), the call path into the transport-free core
(:mod:`.server`) and the deployment checks in front (:mod:`.http`).
"""

from __future__ import annotations

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from aap.agent import DealerAgent
from aap.bindings import jsonrpc
from aap.bindings.mcp.auth import BearerAuth, Verifier
from aap.bindings.mcp.http import McpHttpEndpoint
from aap.bindings.mcp.policy import OriginPolicy
from aap.bindings.mcp.server import make_server
from aap.bindings.mcp.tools import build_tools
from aap.paths import MCP_PATH, DeploymentUrls
from aap.protocols import MCP_PROTOCOL_VERSIONS
from aap.ratelimit import RateLimiter
from aap.web.parts import BindingParts

__all__ = ["build"]


def build(agent: DealerAgent, *, verifier: Verifier | None = None) -> BindingParts:
    """Routes and lifespan of the MCP endpoint for ``agent``.

    ``verifier`` checks a presented Bearer token (see :mod:`.auth`); without
    one, no token is valid and a call that presents one is refused. The
    composition root passes the Poppy issuer's (:func:`aap.poppy.mcp_verifier`).
    """
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
    urls = DeploymentUrls(settings.public_url)
    auth = BearerAuth(resource_url=urls.mcp, metadata_url=urls.mcp_protected_resource, verifier=verifier)
    endpoint = McpHttpEndpoint(
        manager,
        OriginPolicy.for_settings(settings),
        auth,
        max_body_bytes=settings.max_body_bytes,
        protocol_versions=MCP_PROTOCOL_VERSIONS,
    )
    return BindingParts(
        routes=[Route(MCP_PATH, endpoint=endpoint)],
        lifespans=[lambda app: manager.run()],
        error_shapes={MCP_PATH: jsonrpc.error_shape},
    )
