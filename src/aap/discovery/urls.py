"""Every public URL of a deployment, derived from ``settings.url(path)`` in one place.

The agent card, poppy.json, llms.txt, the api-catalog and the OpenAPI
documents must name the very same URLs (a buyer that finds two different MCP
URLs cannot tell which one is the dealer's). Keeping the paths in one table
makes that agreement structural instead of a convention.
"""

from __future__ import annotations

from dataclasses import dataclass

from aap.config.model import Settings

AGENT_CARD_PATH = "/.well-known/agent-card.json"
A2A_PATH = "/a2a"
A2A_OPENAPI_PATH = "/a2a/openapi.json"
MCP_PATH = "/mcp"
POPPY_PATH = "/.well-known/poppy.json"
POPPY_OPENAPI_PATH = "/poppy/openapi.json"
POPPY_API_PREFIX = "/poppy/v1/"
OAUTH_METADATA_PATH = "/.well-known/oauth-authorization-server"
TOKEN_PATH = "/oauth/token"
LLMS_TXT_PATH = "/llms.txt"
API_CATALOG_PATH = "/.well-known/api-catalog"
SCHEMAS_PREFIX = "/schemas/"


def poppy_enabled(settings: Settings) -> bool:
    """Whether the Poppy binding is served (``[poppy] enabled``; on by default)."""
    return settings.poppy.enabled


@dataclass(frozen=True)
class DeploymentUrls:
    """Absolute public URLs of one deployment."""

    settings: Settings

    def _u(self, path: str) -> str:
        return self.settings.url(path)

    @property
    def origin(self) -> str:
        return self._u("/")

    @property
    def agent_card(self) -> str:
        return self._u(AGENT_CARD_PATH)

    @property
    def a2a(self) -> str:
        return self._u(A2A_PATH)

    @property
    def a2a_openapi(self) -> str:
        return self._u(A2A_OPENAPI_PATH)

    @property
    def mcp(self) -> str:
        return self._u(MCP_PATH)

    @property
    def poppy(self) -> str:
        return self._u(POPPY_PATH)

    @property
    def poppy_openapi(self) -> str:
        return self._u(POPPY_OPENAPI_PATH)

    def poppy_operation(self, skill_id: str) -> str:
        return self._u(POPPY_API_PREFIX + skill_id)

    @property
    def token_endpoint(self) -> str:
        return self._u(TOKEN_PATH)

    @property
    def llms_txt(self) -> str:
        return self._u(LLMS_TXT_PATH)

    @property
    def api_catalog(self) -> str:
        return self._u(API_CATALOG_PATH)

    @property
    def schemas(self) -> str:
        return self._u(SCHEMAS_PREFIX)

    def schema(self, filename: str) -> str:
        return self._u(SCHEMAS_PREFIX + filename)
