"""Sealing a platform's tenant secrets with the platform's keys (docs/platform.md, "Secrets").

A value is sealed with AES-256-GCM (NIST SP 800-38D) under the *first* key of the keyring, with
a fresh 96-bit nonce, and bound to where it belongs by the associated data (the tenant id and the
secret's name): a sealed value copied to another tenant's row, or another name, does not open.
The sealed text names the key it was sealed with by a short id (the first 8 bytes of the key's
SHA-256, hex), so that a keyring holding several keys opens every value (rotation: a new key goes
first, the old ones stay until ``aap tenants secrets rotate`` has sealed every value again) and a
value sealed with a key the keyring lacks is reported as exactly that, not as corrupt data.

Keys are 32 random bytes written as URL-safe base64 (``aap tenants secrets new-key``); a keyring
is one or more of them separated by white space or commas, the key that seals first.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The sealed form's version prefix: ``v1.<key id>.<base64url(nonce | ciphertext and tag)>``.
VERSION = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
#: The most keys a keyring holds (rotation needs two; a few more cost nothing).
MAX_KEYS = 8
_SEPARATORS = re.compile(r"[\s,]+")


class SecretKeyError(Exception):
    """The keyring is missing or malformed, or a value cannot be opened with it: the message names
    the problem and never a key or a value."""


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def key_id(key: bytes) -> str:
    """The public name of ``key`` in sealed values: it identifies the key, it reveals nothing of it."""
    return hashlib.sha256(key).hexdigest()[:16]


def new_key() -> str:
    """A fresh key in the form a keyring is written in."""
    return _b64encode(os.urandom(KEY_BYTES))


@dataclass(frozen=True)
class Keyring:
    """The platform's keys: the first seals, every one opens."""

    keys: tuple[bytes, ...]

    def __repr__(self) -> str:  # never a key in a log line or a traceback
        return f"Keyring(ids={self.ids!r})"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(key_id(k) for k in self.keys)

    @property
    def current(self) -> str:
        """The id of the key that seals."""
        return key_id(self.keys[0])

    @classmethod
    def parse(cls, text: str, where: str) -> Keyring:
        """The keys written in ``text`` (read from ``where``, which problems name), or a
        :class:`SecretKeyError` listing every malformed one by position."""
        words = [w for w in _SEPARATORS.split(text.strip()) if w]
        if not words:
            raise SecretKeyError(f"{where} holds no key")
        if len(words) > MAX_KEYS:
            raise SecretKeyError(f"{where} holds {len(words)} keys; at most {MAX_KEYS}")
        keys, problems = [], []
        for i, word in enumerate(words, 1):
            try:
                key = _b64decode(word)
            except (binascii.Error, ValueError):
                key = b""
            if len(key) != KEY_BYTES:
                problems.append(f"key {i} is not {KEY_BYTES} bytes in URL-safe base64")
            keys.append(key)
        if problems:
            raise SecretKeyError(f"{where}: " + "; ".join(problems) + " (aap tenants secrets new-key writes one)")
        return cls(tuple(keys))

    def seal(self, value: str, context: Sequence[str]) -> str:
        """``value`` sealed under the current key, bound to ``context``."""
        # ``cryptography`` (~7 MiB) loads with the first value sealed or opened, never at import: a
        # worker of one agent never needs it (docs/benchmarks.md, "Memory: a worker at 100k listings").
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[0]).encrypt(nonce, value.encode("utf-8"), _aad(context))
        return f"{VERSION}.{self.current}.{_b64encode(nonce + sealed)}"

    def open(self, sealed: str, context: Sequence[str]) -> str:
        """The value ``sealed`` holds; a :class:`SecretKeyError` when no key of the ring opens it."""
        version, _, rest = sealed.partition(".")
        kid, _, body = rest.partition(".")
        if version != VERSION or not body:
            raise SecretKeyError("the stored value is not in a sealed form this release reads")
        keys = [k for k in self.keys if key_id(k) == kid]
        if not keys:
            raise SecretKeyError(
                f"it was sealed with the key {kid}, which is not among the platform's keys ({', '.join(self.ids)})"
            )
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        try:
            data = _b64decode(body)
            return AESGCM(keys[0]).decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], _aad(context)).decode("utf-8")
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretKeyError(f"it does not open with the key {kid}: altered, or stored for another place") from None


def _aad(context: Sequence[str]) -> bytes:
    """The associated data: each part length-prefixed, so that no two contexts share a byte string."""
    out = bytearray()
    for part in context:
        data = part.encode("utf-8")
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


#: The largest keyring file read.
MAX_KEYS_FILE_BYTES = 4096


def read_keyring(path: str | None, variable: str, environ: Mapping[str, str]) -> Keyring:
    """The keys in the file ``path`` when it is given, else in the environment variable
    ``variable``; a :class:`SecretKeyError` says where they were looked for."""
    if path:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_KEYS_FILE_BYTES + 1)
        except OSError as exc:
            raise SecretKeyError(f"[platform] secret_keys_file {path}: {exc.strerror}") from None
        if len(data) > MAX_KEYS_FILE_BYTES:
            raise SecretKeyError(f"[platform] secret_keys_file {path}: larger than a keyring is")
        return Keyring.parse(data.decode("ascii", "replace"), f"[platform] secret_keys_file {path}")
    text = environ.get(variable, "")
    if not text.strip():
        raise SecretKeyError(
            f"the platform's secret keys are not set: the environment variable {variable}"
            " (or [platform] secret_keys_file) holds them; `aap tenants secrets new-key` writes one"
        )
    return Keyring.parse(text, f"the environment variable {variable}")
