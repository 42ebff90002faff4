"""Running the app under uvicorn: one process, or several workers on one database.

``run()`` is all the CLI calls. With one worker it serves an app built in this
process. With several, uvicorn starts each worker as a fresh process that
imports an app factory (:func:`app_from_env`), so each worker has to make its
own :class:`Settings`. It makes them the way the parent did: from a
:class:`SettingsSource` — the configuration file (or the packaged demo), the
command-line overrides and the ``AAP_*`` environment — loaded by the one
configuration loader. The source is a handful of strings, passed as JSON in
``AAP_SETTINGS_SOURCE``.

Why the source and not the parent's ``Settings`` object: shipping the object
needs a serialisation of every settings class and, to rebuild it, decoding
classes by name — a second way of making settings, kept in step with the
loader by hand and able to produce objects the loader never would. Loading
the same source again is the only way settings are ever made, so every worker
serves the same agent card as the parent checked (tests/test_server_runner.py
starts two workers and compares). It costs one TOML parse per worker at
start-up; the configuration file must not be edited while the server starts.

Workers share nothing but the database, which is where every piece of shared
state lives. TLS is served directly when a certificate and key are given, so
``https://localhost:PORT`` deployments work for local tests of the HTTPS-only
discovery documents.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from uvicorn.supervisors import Multiprocess

from aap.config.environment import environment_problems
from aap.config.loader import ConfigError, load_settings
from aap.config.model import Settings
from aap.memory import limit_malloc_arenas
from aap.server.app import check_public_url, create_app
from aap.server.listen import ListenError, bind
from aap.server.logconfig import log_config
from aap.server.protocol import BoundedHttpToolsProtocol
from aap.store import Stores, open_platform_database, open_stores
from aap.store.db import sqlite_path
from aap.telemetry.setup import start as start_tracing
from aap.telemetry.setup import stop as stop_tracing
from aap.web.metrics import shared_metrics_directory

SOURCE_ENV = "AAP_SETTINGS_SOURCE"
APP_FACTORY = "aap.server.runner:app_from_env"
#: Objects allocated (net) between two young garbage collections of a serving process.
YOUNG_COLLECTION = 7000


@dataclass(frozen=True)
class SettingsSource:
    """Where a deployment's settings come from, in a form another process can load again.

    ``config`` is a TOML file (None: the packaged demo dealer group);
    ``overrides`` maps dotted keys to JSON values, as
    :func:`~aap.config.loader.load_settings` takes them; ``environ`` replaces
    the process environment for the ``AAP_*`` variables (None: each process
    reads its own, which workers inherit from the parent).
    """

    config: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def load(self) -> Settings:
        return load_settings(self.config, overrides=self.overrides, environ=self.environ)

    def to_json(self) -> bytes:
        return orjson.dumps({"config": self.config, "overrides": dict(self.overrides), "environ": self.environ})

    @classmethod
    def from_json(cls, data: bytes | str) -> SettingsSource:
        value = orjson.loads(data)
        if not isinstance(value, dict) or set(value) != {"config", "overrides", "environ"}:
            raise ValueError("not a serialised SettingsSource")
        config, overrides, environ = value["config"], value["overrides"], value["environ"]
        if not (config is None or isinstance(config, str)) or not isinstance(overrides, dict):
            raise ValueError("not a serialised SettingsSource")
        if environ is not None and not (
            isinstance(environ, dict) and all(isinstance(v, str) for v in environ.values())
        ):
            raise ValueError("not a serialised SettingsSource")
        return cls(config, overrides, environ)


def app_from_env() -> Starlette:
    """uvicorn app factory for worker processes: settings loaded from ``AAP_SETTINGS_SOURCE``."""
    data = os.environ.get(SOURCE_ENV)
    if not data:
        raise RuntimeError(f"{SOURCE_ENV} is not set: start workers through aap.server.runner.run()")
    settings = SettingsSource.from_json(data).load()
    logging.captureWarnings(True)  # a warning is a log line too, in the configured format
    app, _stores = open_app(settings)
    return settled(app)


def open_app(settings: Settings) -> tuple[Starlette, Stores]:
    """The app a deployment serves and the stores it opened (migrated): one agent, or with a
    ``[platform]`` table every tenant of its registry (docs/platform.md). Tracing starts here
    when the ``OTEL_*`` environment asks for it (:mod:`aap.telemetry`; once per process)."""
    tracing = start_tracing()
    if settings.platform is not None:
        # The platform's root, its provisioning API, services and tenant registry: loaded only
        # by a platform deployment, never by a worker of one agent (docs/architecture.md, "Memory").
        from aap.server.platform import create_platform_app
        from aap.server.platform_api import provisioning_routes
        from aap.server.platform_services import SERVICES

        stores = Stores(open_platform_database(settings.database_url))
        routes = [provisioning_routes(os.environ)]
        return create_platform_app(settings, stores, services=SERVICES, platform_routes=routes, tracing=tracing), stores
    stores = open_stores(
        settings.database_url, settings.database_read_urls, max_replica_lag_ms=settings.max_replica_lag_ms
    )
    return create_app(settings, stores, tracing=tracing), stores


def settled(app: Starlette) -> Starlette:
    """Move everything built so far out of the garbage collector's way, once, before serving.

    The modules and the app are ~100k objects that live as long as the process; a
    full collection walks them all (~70 ms on the benchmark machine), stalling every
    request in flight. Frozen, they are never walked again (``gc.freeze``); only
    what requests allocate is.

    And that is walked less often: a young collection runs once :data:`YOUNG_COLLECTION`
    more objects are alive than at the last one (CPython's default is 700). Sixteen requests
    in flight hold more than 700 between them, so at the default a young collection ran
    every few requests and walked all they held, though nearly all of it is freed by
    reference counting as each request ends (docs/benchmarks.md, "The HTTP path").
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])
    limit_malloc_arenas()  # before the app's threads start (aap.memory)
    return app


def run(
    source: Settings | SettingsSource,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    sock: socket.socket | None = None,
    metrics_sock: socket.socket | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    workers: int = 1,
    log_level: str = "info",
    log_format: str = "json",
) -> None:
    """Serve the deployment until interrupted.

    ``source`` is the :class:`Settings` to serve in this process, or a
    :class:`SettingsSource`, which several workers can each load (as uvicorn
    itself serves several workers only from an import string, never from an
    app object). ``sock`` is a socket already bound by
    :func:`aap.server.listen.bind` (``aap serve`` binds before it prints
    anything); without one, ``host:port`` is bound here and a
    :class:`~aap.server.listen.ListenError` says why it could not be. The same
    goes for ``metrics_sock`` and ``[server] metrics_listen``.

    Before anything is bound the settings get the start-up check ``aap config
    check`` runs: a lead target whose secret variable is unset is a
    :class:`~aap.config.loader.ConfigError` now, not at the first delivery.
    """
    settings = source.load() if isinstance(source, SettingsSource) else source
    check_public_url(settings.public_url)
    problems = environment_problems(settings, os.environ)  # where the transports read them
    if problems:
        raise ConfigError(problems, settings.source_path)
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise ValueError("TLS needs both ssl_certfile and ssl_keyfile")
    if workers < 1:
        raise ValueError("workers must be at least 1")
    if workers > 1 and settings.database_url.startswith("sqlite") and sqlite_path(settings.database_url) == ":memory:":
        raise ValueError("several workers cannot share an in-memory SQLite database; use a file or PostgreSQL")
    if workers > 1 and not isinstance(source, SettingsSource):
        raise ValueError("several workers load their settings themselves: pass a SettingsSource, not Settings")
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "ssl_certfile": ssl_certfile,
        "ssl_keyfile": ssl_keyfile,
        "log_config": log_config(log_level, log_format),
        "log_level": log_level,
        "access_log": False,  # ours is aap.access; uvicorn's would log query strings
        "server_header": False,
        "ws": "none",  # no surface speaks WebSocket: never load a WebSocket library
        "timeout_graceful_shutdown": 10,
        **proxy_options(settings),
        **limit_options(settings),
    }
    if sock is None:
        sock = bind(host, port)
    sockets = [sock]
    if settings.metrics_listen is not None:
        if metrics_sock is None:
            try:
                metrics_sock = bind(*settings.metrics_listen)
            except ListenError:
                sock.close()
                raise
        if metrics_sock.getsockname()[1] == sock.getsockname()[1]:
            raise ValueError("[server] metrics_listen must name another port than the one served")
        sockets.append(metrics_sock)
    logging.captureWarnings(True)  # a warning is a log line too, in the configured format
    if workers == 1:
        app, stores = open_app(settings)
        try:
            _serve(uvicorn.Config(settled(app), **options), sockets)
        finally:
            stop_tracing()  # what is buffered is sent before the process ends
            stores.close()
            for each in sockets:
                each.close()
        return
    # Migrates once, before any worker starts.
    if settings.platform is not None:
        open_platform_database(settings.database_url).close()
    else:
        open_stores(settings.database_url).close()
    assert isinstance(source, SettingsSource)
    previous = os.environ.get(SOURCE_ENV)
    os.environ[SOURCE_ENV] = source.to_json().decode()
    try:
        with shared_metrics_directory():  # one scrape sees every worker (aap.web.metrics)
            _serve(uvicorn.Config(APP_FACTORY, factory=True, workers=workers, **options), sockets)
    finally:
        for each in sockets:
            each.close()
        if previous is None:
            os.environ.pop(SOURCE_ENV, None)
        else:
            os.environ[SOURCE_ENV] = previous


def proxy_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's proxy-header settings: ``X-Forwarded-For``/``-Proto`` believed only from the
    configured ``[server] forwarded_allow_ips``, and from nobody by default.

    uvicorn's own default believes them from 127.0.0.1 (or ``$FORWARDED_ALLOW_IPS``), so a
    process on the same host, or a proxy that passes a client's header through, could pick
    the address its rate limit is counted under. The address uvicorn settles on is the one
    every part of the app sees (``scope["client"]``): rate limits (:mod:`aap.web.callers`),
    the access log's ``client`` and the issuer's limits. DPoP ``htu`` is compared with the
    public URL, never with a forwarded scheme or host (:mod:`aap.poppy.dpop`).
    """
    trusted = list(settings.forwarded_allow_ips)
    if not trusted:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": trusted}


def limit_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's settings for ``[server]``'s request limits and headers, on every worker.

    The HTTP protocol is uvicorn's httptools one with the limits kept as bytes
    arrive (:mod:`aap.server.protocol`; a partial of the class, which worker
    processes receive pickled with the rest of the configuration). An https
    ``public_url`` adds ``Strict-Transport-Security`` (RFC 6797) to every answer:
    uvicorn's default headers, so refusals made before the app carry it too.
    """
    options: dict[str, Any] = {
        "http": functools.partial(BoundedHttpToolsProtocol, limits=settings.limits),
        "timeout_keep_alive": settings.limits.keep_alive_seconds,
    }
    if settings.public_url.startswith("https://") and settings.hsts_max_age:
        options["headers"] = [("strict-transport-security", f"max-age={settings.hsts_max_age}")]
    return options


def _serve(config: uvicorn.Config, sockets: list[socket.socket]) -> None:
    """What ``uvicorn.run`` does, on our already-bound sockets (the public one, and the
    operator's with ``[server] metrics_listen``).

    One worker: a :class:`uvicorn.Server` in this process. Several: uvicorn's
    own :class:`~uvicorn.supervisors.Multiprocess` supervisor, whose workers
    inherit the sockets. A server that could not start (its lifespan failed)
    exits with status 3, as ``uvicorn.run`` would.
    """
    server = uvicorn.Server(config)
    try:
        if config.workers > 1:
            Multiprocess(config, sockets=sockets).run()
        else:
            server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    if config.workers == 1 and not server.started:
        raise SystemExit(3)
