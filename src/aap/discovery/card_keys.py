"""Where an agent's card signing key comes from: a small interface, so that a platform's
tenant-secret store can back it later (docs/a2a.md, "Signed agent card").

Today :class:`EnvironmentCardKeys` reads the variable ``[agent] signing_key_env`` names, in the
process's environment — a deployment's own, or on a platform the platform process's, as a
tenant's CRM credentials are (docs/platform.md, "Limits and decisions"). A store of tenant
secrets implements :class:`CardKeys` with the same one method and is passed to
:func:`aap.discovery.build` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from aap.cardsign import SigningKey, load_private_key
from aap.config.model import Settings


class CardKeys(Protocol):
    """The private key ``settings``' agent signs its card with, or None (the card is unsigned)."""

    def signing_key(self, settings: Settings) -> SigningKey | None: ...


class EnvironmentCardKeys:
    """The key in the environment variable ``[agent] signing_key_env`` names (PEM or a JWK)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def signing_key(self, settings: Settings) -> SigningKey | None:
        name = settings.agent.signing_key_env
        if name is None:
            return None
        value = self.environ.get(name)
        if not value:  # the start-up check refuses this (aap.config.environment)
            raise ValueError(f"[agent] signing_key_env: environment variable {name} is not set")
        return load_private_key(value, kid=settings.agent.signing_kid, jku=settings.urls.agent_card_keys)
