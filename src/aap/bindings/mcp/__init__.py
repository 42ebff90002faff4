"""The MCP binding: the AAP skills as MCP tools at ``/mcp`` (Streamable HTTP).

One URL serves both MCP eras: 2026-07-28 (stateless, per-request ``_meta``,
routing headers, ``server/discover``) and the ``initialize``-handshake
revisions up to 2025-11-25. The official SDK's low-level server and session
manager do the protocol work (stateless, JSON responses); this package adds
the AAP tools (:mod:`.tools`), the call path into the transport-free core
(:mod:`.calls`), the deployment checks in front (:mod:`.http`), plain tool calls
answered without the SDK (:mod:`.fastpath`), and the SDK loaded on first need
(:mod:`.sdk`).
"""

from __future__ import annotations

from starlette.routing import Route

from aap.bindings import jsonrpc
from aap.bindings.mcp.auth import BearerAuth, Verifier
from aap.bindings.mcp.calls import ToolRunner, server_identity
from aap.bindings.mcp.fastpath import FastToolCalls
from aap.bindings.mcp.http import McpHttpEndpoint
from aap.bindings.mcp.policy import OriginPolicy
from aap.bindings.mcp.sdk import LazySdk
from aap.gateway import Gateway
from aap.paths import MCP_PATH
from aap.protocols import MCP_PROTOCOL_VERSIONS
from aap.web.parts import BindingParts

__all__ = ["ERROR_SHAPES", "PATHS", "build"]

#: The paths this surface answers, and their error shape (:mod:`aap.web.surface`).
PATHS = (MCP_PATH,)
ERROR_SHAPES = {MCP_PATH: jsonrpc.error_shape}


def build(gateway: Gateway, *, verifier: Verifier | None = None) -> BindingParts:
    """Routes and lifespan of the MCP endpoint of ``gateway``'s agent.

    ``verifier`` checks a presented Bearer token (see :mod:`.auth`); without
    one, no token is valid and a call that presents one is refused. The
    composition root passes the Poppy issuer's (:func:`aap.poppy.mcp_verifier`).
    """
    settings = gateway.settings
    runner = ToolRunner(gateway)
    sdk = LazySdk(gateway, runner)  # the SDK itself loads on the first request that needs it
    urls = settings.urls
    auth = BearerAuth(urls.mcp, urls.mcp_protected_resource, verifier, gateway.blocking)
    endpoint = McpHttpEndpoint(
        sdk,
        OriginPolicy.for_settings(settings),
        auth,
        max_body_bytes=settings.max_body_bytes,
        protocol_versions=MCP_PROTOCOL_VERSIONS,
        fast=FastToolCalls(runner, server_identity(gateway)),
    )
    return BindingParts(
        routes=[Route(MCP_PATH, endpoint=endpoint)],
        lifespans=[sdk.lifespan],
        direct={(MCP_PATH, None): endpoint},  # every method: the endpoint answers each itself
    )
