"""A platform's tenant secrets: set, listed by name, opened when a tenant is built, sealed again.

The values live in the platform's database (``platform_secrets``, :mod:`aap.store.platform`),
each sealed with the platform's keys (:mod:`aap.secretbox`), which come from the file
``[platform] secret_keys_file`` names, else from the environment variable ``secret_keys_env``
(``AAP_SECRET_KEYS``) — the same on every worker and wherever ``aap tenants secrets`` runs.
A value is never shown back, logged or put in an error: what is listed is a name, when it was
set and the id of the key that sealed it (docs/platform.md, "Secrets").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aap.config.credentials import SecretValues
from aap.config.platform import PlatformSettings
from aap.secretbox import Keyring, SecretKeyError, read_keyring
from aap.store.platform import PlatformStore

log = logging.getLogger("aap.platform")

#: The largest value a secret holds (a PEM private key is a few kilobytes).
MAX_SECRET_BYTES = 16 * 1024
#: The most secrets one tenant has.
MAX_SECRETS = 100


def load_keyring(platform: PlatformSettings, environ: Mapping[str, str]) -> Keyring:
    """The platform's keys, or a :class:`SecretKeyError` saying where they were looked for."""
    return read_keyring(platform.secret_keys_file, platform.secret_keys_env, environ)


@dataclass(frozen=True)
class SecretInfo:
    """What is shown of a secret: never its value."""

    name: str
    set_ms: int
    key_id: str


@dataclass(frozen=True)
class Rotation:
    """What ``aap tenants secrets rotate`` did."""

    resealed: int
    current: int  # already sealed with the current key
    key_id: str


class TenantSecrets:
    """Every tenant's secrets on one platform: sealing on the way in, opening on the way out."""

    def __init__(self, store: PlatformStore, platform: PlatformSettings, environ: Mapping[str, str] | None = None):
        self.store = store
        self.platform = platform
        self.environ = os.environ if environ is None else environ
        self._keyring: Keyring | None = None

    def keyring(self) -> Keyring:
        """The platform's keys, read once per process (a new key is taken on a restart)."""
        if self._keyring is None:
            self._keyring = load_keyring(self.platform, self.environ)
        return self._keyring

    # -- changes --------------------------------------------------------------------------------
    def put(self, tenant_id: str, name: str, value: str) -> bool:
        """Seal and store ``value`` as ``name``; returns whether the name is new."""
        keys = self.keyring()
        sealed = keys.seal(value, (tenant_id, name))
        return self.store.set_secret(tenant_id, name, sealed, keys.current, _now_ms())

    def remove(self, tenant_id: str, name: str) -> bool:
        return self.store.remove_secret(tenant_id, name, _now_ms())

    def rotate(self) -> Rotation:
        """Seal every value of every tenant again with the current key (the first), a page at a
        time; values sealed with it already are left as they are."""
        keys = self.keyring()
        resealed = current = 0
        after = ("", "")
        while True:
            page = self.store.secrets_page(after)
            if not page:
                return Rotation(resealed, current, keys.current)
            for secret in page:
                if secret.key_id == keys.current:
                    current += 1
                    continue
                try:
                    value = keys.open(secret.sealed, (secret.tenant_id, secret.name))
                except SecretKeyError as exc:
                    raise SecretKeyError(f"tenant {secret.tenant_id}, secret {secret.name}: {exc}") from None
                if self.store.reseal(secret, keys.seal(value, (secret.tenant_id, secret.name)), keys.current):
                    resealed += 1
            after = (page[-1].tenant_id, page[-1].name)

    # -- reads ----------------------------------------------------------------------------------
    def listing(self, tenant_id: str) -> list[SecretInfo]:
        return [SecretInfo(s.name, s.set_ms, s.key_id) for s in self.store.secrets(tenant_id)]

    def names(self, tenant_id: str) -> set[str]:
        return {s.name for s in self.store.secrets(tenant_id)}

    def values(self, tenant_id: str, names: Iterable[str]) -> SecretValues:
        """The values of ``names`` (those set), for a tenant being built. One that cannot be opened
        (the platform's keys lack the key that sealed it) is left out with its reason, which a
        delivery that needs it reports; the tenant itself is still served."""
        wanted = set(names)
        if not wanted:
            return SecretValues()
        stored = [s for s in self.store.secrets(tenant_id) if s.name in wanted]
        values: dict[str, str] = {}
        problems: dict[str, str] = {}
        for secret in stored:
            try:
                values[secret.name] = self.keyring().open(secret.sealed, (tenant_id, secret.name))
            except SecretKeyError as exc:
                problems[secret.name] = str(exc)
                log.error("tenant %s: secret %s cannot be opened: %s", tenant_id, secret.name, exc)
        return SecretValues(values, problems)


def _now_ms() -> int:
    return int(time.time() * 1000)
