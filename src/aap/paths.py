"""Every route path of a deployment, and the absolute public URLs built from them.

The agent card, poppy.json, llms.txt, the api-catalog and the OpenAPI
documents must name the very same URLs (a buyer that finds two different MCP
URLs cannot tell which one is the dealer's), the routes must be mounted at
those paths, and the buyer client and the checker look for the well-known
ones. Keeping every path in this one table makes that agreement structural
instead of a convention. Paths are relative to the public base URL, which may
itself have a path (``https://platform.example/dealers/42``).
"""

from __future__ import annotations

from dataclasses import dataclass

# -- A2A and MCP -------------------------------------------------------------------
AGENT_CARD_PATH = "/.well-known/agent-card.json"  # A2A §8.2 well-known URI
#: The JWK Set of the agent card's signing key, the signatures' ``jku`` (docs/a2a.md, "Signed agent card").
AGENT_CARD_KEYS_PATH = "/.well-known/agent-card-keys.json"
A2A_PATH = "/a2a"
A2A_OPENAPI_PATH = "/a2a/openapi.json"
MCP_PATH = "/mcp"

# -- discovery documents -------------------------------------------------------------
LLMS_TXT_PATH = "/llms.txt"
API_CATALOG_PATH = "/.well-known/api-catalog"  # RFC 9727 §3
AI_CATALOG_PATH = "/.well-known/ai-catalog.json"  # AI Catalog 0.9, "Well-Known URI"
SCHEMAS_PREFIX = "/schemas/"

# -- Poppy (PAP 0.3) and its guest OAuth issuer (docs/poppy.md) ---------------------
POPPY_PATH = "/.well-known/poppy.json"
POPPY_OPENAPI_PATH = "/poppy/openapi.json"
POPPY_API_PREFIX = "/poppy/v1/"  # + skill id: one native API operation per skill
POPPY_FEEDBACK_PATH = "/poppy/feedback"
POPPY_EXCLUDED_TASKS_PATH = "/poppy/excluded-tasks.json"
OAUTH_PREFIX = "/oauth/"
TOKEN_PATH = "/oauth/token"
REVOKE_PATH = "/oauth/revoke"
JWKS_PATH = "/oauth/jwks.json"
OAUTH_METADATA_PATH = "/.well-known/oauth-authorization-server"  # RFC 8414 §3
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"  # RFC 9728 §3
# RFC 9728 §3.1: the metadata of the resource at /mcp (named in the MCP 401 challenge).
MCP_PROTECTED_RESOURCE_PATH = PROTECTED_RESOURCE_PATH + MCP_PATH

# -- operations ---------------------------------------------------------------------------
HEALTHZ_PATH = "/healthz"
LIVEZ_PATH = "/livez"  # the process serves (a liveness probe: never the database)
READYZ_PATH = "/readyz"  # this worker can answer requests now (a readiness probe)
METRICS_PATH = "/metrics"
#: What a load balancer or an orchestrator may ask any host, and the operator's port answers.
PROBE_PATHS = (HEALTHZ_PATH, LIVEZ_PATH, READYZ_PATH)


@dataclass(frozen=True)
class DeploymentUrls:
    """Absolute public URLs of the deployment (or dealer) at ``base_url``.

    The dealer side builds it from its configured public URL; the buyer client
    and the checker from the dealer's origin.
    """

    base_url: str
    #: The A2A endpoint when it is not this base URL's own ``/a2a``: a platform's shared endpoint,
    #: which routes by ``params.tenant`` (docs/platform.md, "One A2A endpoint for many tenants").
    a2a_endpoint: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    def url(self, path: str) -> str:
        """The absolute URL of ``path`` (one of the paths above) on this deployment."""
        return self.base_url + path

    @property
    def origin(self) -> str:
        return self.url("/")

    @property
    def agent_card(self) -> str:
        return self.url(AGENT_CARD_PATH)

    @property
    def agent_card_keys(self) -> str:
        return self.url(AGENT_CARD_KEYS_PATH)

    @property
    def a2a(self) -> str:
        return self.a2a_endpoint or self.url(A2A_PATH)

    @property
    def a2a_openapi(self) -> str:
        return self.url(A2A_OPENAPI_PATH)

    @property
    def mcp(self) -> str:
        return self.url(MCP_PATH)

    @property
    def mcp_protected_resource(self) -> str:
        return self.url(MCP_PROTECTED_RESOURCE_PATH)

    @property
    def poppy(self) -> str:
        return self.url(POPPY_PATH)

    @property
    def poppy_openapi(self) -> str:
        return self.url(POPPY_OPENAPI_PATH)

    @property
    def poppy_api(self) -> str:
        """The native API's server URL (``servers[0].url`` of its OpenAPI document)."""
        return self.url(POPPY_API_PREFIX.rstrip("/"))

    def poppy_operation(self, skill_id: str) -> str:
        return self.url(POPPY_API_PREFIX + skill_id)

    @property
    def poppy_feedback(self) -> str:
        return self.url(POPPY_FEEDBACK_PATH)

    @property
    def poppy_excluded_tasks(self) -> str:
        return self.url(POPPY_EXCLUDED_TASKS_PATH)

    @property
    def token_endpoint(self) -> str:
        return self.url(TOKEN_PATH)

    @property
    def revocation_endpoint(self) -> str:
        return self.url(REVOKE_PATH)

    @property
    def jwks(self) -> str:
        return self.url(JWKS_PATH)

    @property
    def llms_txt(self) -> str:
        return self.url(LLMS_TXT_PATH)

    @property
    def api_catalog(self) -> str:
        return self.url(API_CATALOG_PATH)

    @property
    def ai_catalog(self) -> str:
        return self.url(AI_CATALOG_PATH)

    @property
    def schemas(self) -> str:
        return self.url(SCHEMAS_PREFIX)

    def schema(self, filename: str) -> str:
        return self.url(SCHEMAS_PREFIX + filename)


# -- the public page and the staff console (docs/console.md) ------------------------------
SITE_PATH = "/"
VEHICLE_PAGE_PREFIX = "/vehicles/"  # + vehicle_id
CONTACT_PAGE_PATH = "/contact"  # the contact form (GET) and where every contact form is sent (POST)
API_DOCS_PREFIX = "/api-docs/"  # + "a2a" or "poppy": the OpenAPI documents as pages
SITE_ASSETS_PREFIX = "/assets/"  # the stylesheet and the small script
CONSOLE_PREFIX = "/console/"
