"""The issuer's own ES256 signing keys: made on first use, kept in the database, rotatable.

Access tokens are signed so that a forged or truncated token is refused before
any database lookup, and so a rotation is a clean cut-over: the newest key
signs, older keys keep verifying until every token they signed has expired,
then they are deleted. Every worker reads the same keys from the database.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from aap.config.model import Settings
from aap.config.poppy import PoppySettings
from aap.store import Stores
from aap.store.poppy import PoppyStore

if TYPE_CHECKING:
    from joserfc.jwk import ECKey

RELOAD_SECONDS = 30.0


class SigningKeys:
    """Active signing key + verification keys, cached per process for a few seconds."""

    def __init__(self, store: PoppyStore, token_ttl: int) -> None:
        self.store = store
        self.token_ttl = token_ttl
        self._lock = threading.Lock()
        self._loaded_at = 0.0
        self._keys: list[tuple[str, ECKey, float | None]] = []  # (kid, key, retired_at), newest first

    def _load(self, *, force: bool = False) -> None:
        from joserfc.jwk import ECKey  # on first use: aap.poppy.jose says why

        with self._lock:
            if not force and time.monotonic() - self._loaded_at < RELOAD_SECONDS and self._keys:
                return
            rows = self.store.signing_keys()
            if not any(retired is None for _, _, _, retired in rows):
                key = ECKey.generate_key("P-256", private=True)
                self.store.add_signing_key(
                    key.thumbprint(), key.as_dict(private=True), retire_others=False, only_if_none=True
                )
                rows = self.store.signing_keys()
            self._keys = [(kid, ECKey.import_key(jwk), retired) for kid, jwk, _, retired in rows]
            self._loaded_at = time.monotonic()

    def reload(self) -> None:
        """Re-read the keys now (after a rotation by an operator or another worker)."""
        self._load(force=True)

    def active(self) -> tuple[str, ECKey]:
        """The key that signs new tokens (the newest not retired)."""
        self._load()
        for kid, key, retired in self._keys:
            if retired is None:
                return kid, key
        self._load(force=True)
        return next((kid, key) for kid, key, retired in self._keys if retired is None)

    def verification_key(self, kid: Any) -> ECKey | None:
        """The key named ``kid`` if it may still verify tokens (reloads once on a miss)."""
        if not isinstance(kid, str):
            return None
        for attempt in range(2):
            self._load(force=attempt == 1)
            for known, key, retired in self._keys:
                if known == kid and (retired is None or retired + self.token_ttl + 60 > time.time()):
                    return key
        return None

    def rotate(self) -> str:
        """Make a new active key; the old ones only verify from now on. Returns the new kid."""
        # on first use: aap.poppy.jose says why
        from joserfc.jwk import ECKey

        key = ECKey.generate_key("P-256", private=True)
        kid = key.thumbprint()
        self.store.add_signing_key(kid, key.as_dict(private=True), retire_others=True)
        self.store.drop_retired_keys(time.time() - self.token_ttl - 60)
        self._load(force=True)
        return kid

    def public_jwks(self) -> dict[str, Any]:
        """The verification keys as a public JWK Set (for resource servers; agents never need it)."""
        self._load()
        now = time.time()
        keys = []
        for kid, key, retired in self._keys:
            if retired is None or retired + self.token_ttl + 60 > now:
                keys.append(key.as_dict(private=False, kid=kid, alg="ES256", use="sig"))
        return {"keys": keys}


def rotate_signing_key(stores: Stores, settings: Settings | None = None) -> str:
    """Operator action (e.g. ``aap poppy rotate-keys``): a new active signing key; returns its kid."""
    options = settings.poppy if settings is not None else PoppySettings()
    return SigningKeys(stores.poppy, options.access_token_ttl).rotate()
