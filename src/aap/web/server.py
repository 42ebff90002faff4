"""Running the app under uvicorn: one process, or several workers on one database.

``run()`` is all the CLI calls. With ``workers > 1`` uvicorn must import the
app in each spawned worker, so the exact :class:`Settings` object (including
command-line overrides and the built-in demo dealer) is written as JSON to a
private temporary file whose path travels in ``AAP_SETTINGS_FILE``; each worker
rebuilds it with :func:`app_from_env`. Workers share nothing but the database,
which is where every piece of shared state lives.

TLS is served directly when a certificate and key are given, so
``https://localhost:PORT`` deployments work for local tests of the HTTPS-only
discovery documents.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import tempfile
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette

from aap.config.model import Settings
from aap.store import open_stores
from aap.store.db import sqlite_path
from aap.web.app import check_public_url, create_app
from aap.web.logconfig import log_config

SETTINGS_ENV = "AAP_SETTINGS_FILE"
APP_FACTORY = "aap.web.server:app_from_env"


# -- Settings <-> JSON (for worker processes) -----------------------------------
# Self-describing: dataclasses carry their class ("module:QualName", only from the
# aap package) and tuples are tagged, so subsystem sections typed ``Any`` on
# Settings (mcp, leads, poppy, ...) come back as the very objects they were.
_CLASS = "__dataclass__"
_TUPLE = "__tuple__"


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        out = {_CLASS: f"{cls.__module__}:{cls.__qualname__}"}
        for f in dataclasses.fields(value):
            out[f.name] = _encode(getattr(value, f.name))
        return out
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("settings dictionaries must have string keys")
        return {k: _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot pass a {type(value).__name__} to worker processes")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if _TUPLE in value:
        return tuple(_decode(v) for v in value[_TUPLE])
    if _CLASS in value:
        module, _, qualname = value[_CLASS].partition(":")
        if module != "aap" and not module.startswith("aap."):
            raise ValueError(f"refusing to rebuild a settings object of class {value[_CLASS]!r}")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        kwargs = {k: _decode(v) for k, v in value.items() if k != _CLASS}
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: v for k, v in kwargs.items() if k in init})
    return {k: _decode(v) for k, v in value.items()}


def settings_to_json(settings: Settings) -> bytes:
    return orjson.dumps(_encode(settings))


def settings_from_json(data: bytes | str) -> Settings:
    settings = _decode(orjson.loads(data))
    if not isinstance(settings, Settings):
        raise ValueError("not a serialised Settings object")
    return settings


def app_from_env() -> Starlette:
    """uvicorn app factory for worker processes: settings from ``AAP_SETTINGS_FILE``."""
    path = os.environ.get(SETTINGS_ENV)
    if not path:
        raise RuntimeError(f"{SETTINGS_ENV} is not set: start workers through aap.web.server.run()")
    with open(path, "rb") as handle:
        settings = settings_from_json(handle.read())
    return create_app(settings, open_stores(settings.database_url))


# -- entry point ---------------------------------------------------------------------
def run(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Serve ``settings`` until interrupted."""
    check_public_url(settings.public_url)
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise ValueError("TLS needs both ssl_certfile and ssl_keyfile")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    if workers > 1 and settings.database_url.startswith("sqlite") and sqlite_path(settings.database_url) == ":memory:":
        raise ValueError("several workers cannot share an in-memory SQLite database; use a file or PostgreSQL")
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
        "log_config": log_config(log_level),
        "log_level": log_level,
        "access_log": False,  # ours is aap.access; uvicorn's would log query strings
        "server_header": False,
        "timeout_graceful_shutdown": 10,
    }
    stores = open_stores(settings.database_url)  # migrates once, before any worker starts
    if workers == 1:
        try:
            uvicorn.run(create_app(settings, stores), **options)
        finally:
            stores.close()
        return

    stores.close()
    fd, path = tempfile.mkstemp(prefix="aap-settings-", suffix=".json")  # mode 0600
    previous = os.environ.get(SETTINGS_ENV)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(settings_to_json(settings))
        os.environ[SETTINGS_ENV] = path
        uvicorn.run(APP_FACTORY, factory=True, workers=workers, **options)
    finally:
        os.unlink(path)
        if previous is None:
            os.environ.pop(SETTINGS_ENV, None)
        else:
            os.environ[SETTINGS_ENV] = previous
