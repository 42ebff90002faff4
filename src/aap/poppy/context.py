"""One deployment's Poppy state: settings, URLs, store, signing keys, client registry.

Built once per app by :func:`aap.poppy.build`; every endpoint module takes it
instead of reaching for globals, so two apps in one process never share a
replay cache or a key by accident.
"""

from __future__ import annotations

import hashlib
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from aap.agent import DealerAgent
from aap.config.poppy import PoppySettings
from aap.gateway import Gateway
from aap.loopback import is_loopback_url
from aap.paths import DeploymentUrls
from aap.poppy.client_metadata import ClientRegistry
from aap.poppy.keys import SigningKeys
from aap.poppy.uses import UseBatches
from aap.store.poppy import PoppyStore
from aap.util.memo import Memo

#: Tokens whose signature this process has checked (a signature check is ~0.2 ms of CPU).
VERIFIED_TOKENS = 4096

PURGE_EVERY = 300.0


@dataclass
class PoppyContext:
    gateway: Gateway
    settings: PoppySettings
    store: PoppyStore
    ssl_context: ssl.SSLContext | None = None
    keys: SigningKeys = field(init=False)
    clients: ClientRegistry = field(init=False)
    #: The calls' single-use values, written in batches (aap.poppy.uses).
    uses: UseBatches = field(init=False)
    #: token -> (kid, claims) of tokens whose signature was checked (aap.poppy.tokens).
    verified_tokens: Memo[str, tuple[str, dict[str, Any]]] = field(
        init=False, default_factory=lambda: Memo(VERIFIED_TOKENS)
    )
    _purged_at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.keys = SigningKeys(self.store, self.settings.access_token_ttl)
        self.clients = ClientRegistry(self.settings, self.ssl_context, outbound=self.gateway.settings.outbound)
        self.uses = UseBatches(self.store, self.gateway)

    @property
    def agent(self) -> DealerAgent:
        return self.gateway.agent

    @property
    def urls(self) -> DeploymentUrls:
        return self.agent.settings.urls

    @property
    def issuer(self) -> str:
        """``auth.issuer``: the public base URL (no trailing slash; compared character for character)."""
        return self.agent.settings.base_url

    @property
    def organization_domain(self) -> str:
        return self.settings.organization_domain or (urlsplit(self.issuer).hostname or "").lower()

    @property
    def organization_name(self) -> str:
        return self.settings.organization_name or self.agent.settings.dealer.name

    @property
    def service_origin(self) -> str:
        """The origin the service is served from: the resource of the RFC 9728 metadata."""
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}".lower()

    @property
    def protected_resources(self) -> list[str]:
        """``https://{organization.domain}`` first, then the service origin if it differs,
        then the MCP URL when MCP tokens are exchanged (a service resource, seed 004
        ``PoppyOauthMetadata.protected_resources``).

        Every resource the other documents advertise is listed, in every deployment mode:
        on a plain-http loopback development server (the one mode the public URL may be
        http) the origin and the MCP URL are http ones, and a client that asks for the
        resource ``/.well-known/oauth-protected-resource`` names must get a token
        (docs/poppy.md, "Development on loopback").
        """
        resources = [f"https://{self.organization_domain}"]
        for resource in (self.service_origin, *([self.mcp_resource] if self.mcp_enabled else [])):
            if resource not in resources and (resource.startswith("https://") or is_loopback_url(resource)):
                resources.append(resource)
        return resources

    @property
    def mcp_enabled(self) -> bool:
        """Whether signed-in agents get Bearer tokens for the MCP endpoint (docs/poppy.md)."""
        return self.settings.mcp_enabled

    @property
    def mcp_resource(self) -> str:
        """The resource identifier of the MCP endpoint: its exact public URL (RFC 8707, RFC 9728)."""
        return self.urls.mcp

    def maybe_purge(self) -> None:
        """Keep the replay and token tables small (correctness never depends on it)."""
        now = time.monotonic()
        if now - self._purged_at >= PURGE_EVERY:
            self._purged_at = now
            self.store.purge_expired(self.settings.session_idle_ttl)


def caller_identity(client_id: str, sub: str) -> str:
    """The verified caller for lead idempotency: the personal agent plus its stable User ID.

    Hashed so the value is bounded and carries no caller-chosen text into other stores.
    """
    digest = hashlib.sha256(f"{client_id}\n{sub}".encode()).hexdigest()
    return f"poppy:{digest[:40]}"
