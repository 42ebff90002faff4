"""Where an agent's card signing key comes from (docs/a2a.md, "Signed agent card").

:class:`ConfiguredCardKeys` reads the key ``[agent]`` names: ``signing_key_env``, an environment
variable of the process (a deployment that is one agent), or ``signing_key_secret``, a platform
tenant's secret (docs/platform.md, "Secrets"), whose value the tenant's worker read from the
platform's database when it built the tenant (``Settings.secrets``), so a key set with ``aap
tenants secrets set`` signs the card without a restart. Another source implements
:class:`CardKeys` with the same one method and is passed to :func:`aap.discovery.build`.
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


class ConfiguredCardKeys:
    """The key (PEM or a JWK) in the environment variable ``[agent] signing_key_env`` names, or in
    the tenant secret ``signing_key_secret`` names."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    def signing_key(self, settings: Settings) -> SigningKey | None:
        agent = settings.agent
        if agent.signing_key_secret is not None:
            value = settings.secrets.get(agent.signing_key_secret)
            if not value:  # `aap tenants add/update/check` refuse this
                raise ValueError(f"[agent] signing_key_secret: {settings.secrets.missing(agent.signing_key_secret)}")
        elif agent.signing_key_env is not None:
            value = self.environ.get(agent.signing_key_env)
            if not value:  # the start-up check refuses this (aap.config.environment)
                raise ValueError(f"[agent] signing_key_env: environment variable {agent.signing_key_env} is not set")
        else:
            return None
        return load_private_key(value, kid=agent.signing_kid, jku=settings.urls.agent_card_keys)
