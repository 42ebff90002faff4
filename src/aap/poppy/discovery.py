"""The public Poppy documents: poppy.json, issuer and protected-resource metadata, excluded tasks.

All URLs come from :class:`aap.paths.DeploymentUrls`, the same table the
agent card, llms.txt and the api-catalog are built from, so the AAP bridge in
poppy.json names exactly the card, MCP endpoint and llms.txt the card names.
"""

from __future__ import annotations

from typing import Any

from aap import AAP_VERSION
from aap.poppy.context import PoppyContext
from aap.poppy.exchange import TOKEN_EXCHANGE
from aap.poppy.token_endpoint import JWT_BEARER
from aap.protocols import POPPY_AAP_EXTENSION, POPPY_PROTOCOL_VERSION


def poppy_document(ctx: PoppyContext) -> dict[str, Any]:
    """``/.well-known/poppy.json``: the AAP 3.1 publication profile (guest issuer only)."""
    urls = ctx.urls
    skills = ", ".join(skill.id for skill in ctx.agent.skills)
    bridge: dict[str, Any] = {
        "version": "1",
        "aap_version": AAP_VERSION,
        "agent_card": urls.agent_card,
        "mcp": urls.mcp,
        "llms_txt": urls.llms_txt,
        "openapi": urls.poppy_openapi,
        "api_catalog": urls.api_catalog,
    }
    documentation = ctx.agent.settings.agent.documentation_url
    if documentation and documentation.lower().startswith("https://"):
        bridge["documentation"] = documentation
    document: dict[str, Any] = {
        "protocol_version": POPPY_PROTOCOL_VERSION,
        "organization": {"name": ctx.organization_name, "domain": ctx.organization_domain},
        "auth": {"issuer": ctx.issuer},
        "apis": [
            {
                "type": "openapi",
                "url": urls.poppy_openapi,
                "description": f"AAP {AAP_VERSION} dealer skills over HTTPS with a DPoP-bound guest token: {skills}.",
            }
        ],
        "excluded_tasks": {"url": urls.poppy_excluded_tasks},
        "extensions": {POPPY_AAP_EXTENSION: bridge},
    }
    if ctx.mcp_enabled:
        # Native MCP for signed-in agents: a Bearer token for this exact URL by token exchange.
        document["apis"].append(
            {
                "type": "mcp",
                "url": urls.mcp,
                "resource": ctx.mcp_resource,
                "description": f"The same AAP {AAP_VERSION} skills as MCP tools; public reads need no token, a signed-in "
                "agent exchanges its DPoP Session token for a Bearer token bound to this URL.",
            }
        )
    if ctx.settings.feedback_enabled:
        document["feedback"] = {"endpoint": urls.poppy_feedback}
    return document


def issuer_metadata(ctx: PoppyContext) -> dict[str, Any]:
    """RFC 8414 metadata of the guest issuer (``PoppyOauthMetadata``)."""
    urls = ctx.urls
    return {
        "issuer": ctx.issuer,
        "token_endpoint": urls.token_endpoint,
        "revocation_endpoint": urls.revocation_endpoint,
        "jwks_uri": urls.jwks,
        # refresh_token is required by the schema; a refresh grant is answered invalid_grant.
        "grant_types_supported": [JWT_BEARER, "refresh_token", *([TOKEN_EXCHANGE] if ctx.mcp_enabled else [])],
        "token_endpoint_auth_methods_supported": ["private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": ["ES256"],
        "revocation_endpoint_auth_methods_supported": ["private_key_jwt"],
        "revocation_endpoint_auth_signing_alg_values_supported": ["ES256"],
        "dpop_signing_alg_values_supported": ["ES256"],
        "protected_resources": ctx.protected_resources,
    }


def protected_resource_metadata(ctx: PoppyContext) -> dict[str, Any]:
    """RFC 9728 metadata for the dealer origin (the resource is the URL it is served from)."""
    return {
        "resource": ctx.service_origin,
        "authorization_servers": [ctx.issuer],
        "bearer_methods_supported": ["header"],
        "dpop_signing_alg_values_supported": ["ES256"],
        "dpop_bound_access_tokens_required": True,
        "resource_name": ctx.organization_name,
    }


def mcp_resource_metadata(ctx: PoppyContext) -> dict[str, Any]:
    """RFC 9728 metadata of the MCP endpoint (``PoppyMcpResourceMetadata``, seed 004).

    No ``dpop_signing_alg_values_supported``: its presence would advertise DPoP
    at the MCP server, whose tokens are Bearer tokens from token exchange.
    """
    return {
        "resource": ctx.mcp_resource,
        "authorization_servers": [ctx.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": f"{ctx.organization_name} (AAP MCP)",
    }


def excluded_tasks_document(ctx: PoppyContext) -> dict[str, Any]:
    """``PoppyExcludedTasks``: what the dealer does not offer to personal agents (may be empty)."""
    return {"tasks": [task.to_json() for task in ctx.settings.excluded_tasks]}
