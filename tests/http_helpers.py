"""Shared helpers for the HTTP tests: a live uvicorn server on loopback, settings,
JSON-RPC request builders and response validation against the AAP schemas."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import uvicorn

from aap import EXTENSION_URI
from aap.config.loader import load_settings
from aap.config.model import Settings
from aap.skills.catalog import SKILLS
from aap.spec import validate

STRUCT = "type.googleapis.com/google.protobuf.Struct"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def make_settings(public_url: str, database_url: str, **replace: Any) -> Settings:
    """The built-in demo dealer, pointed at ``public_url`` and ``database_url``."""
    settings = load_settings(None, overrides={"public_url": public_url, "database": database_url}, environ={})
    return dataclasses.replace(settings, **replace) if replace else settings


class LiveServer:
    """A uvicorn server in a background thread, on a socket bound to 127.0.0.1 up front.

    Binding first gives the port before the app exists, so the app's public URL
    (and thus the agent card's interface URL) can name the real server.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self, app: Any, *, certificate: tuple[str, str] | None = None) -> LiveServer:
        """Serve ``app``; over TLS with ``certificate`` (certificate file, key file)."""
        tls = {} if certificate is None else {"ssl_certfile": certificate[0], "ssl_keyfile": certificate[1]}
        if certificate is not None:
            self.base_url = f"https://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", **tls)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        for _ in range(1000):  # bounded by count: up to ~10 s on a loaded machine
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError("uvicorn did not start")

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.sock.close()


def serve(app: Any) -> Iterator[LiveServer]:
    """Generator for fixtures: yields a started LiveServer, stops it afterwards."""
    server = LiveServer()
    server.start(app)
    try:
        yield server
    finally:
        server.stop()


# -- JSON-RPC requests ---------------------------------------------------------------
def part_for(data: dict[str, Any]) -> dict[str, Any]:
    """The DataPart for an AAP request, with the skill's request media type."""
    skill = next(s for s in SKILLS.values() if s.request_type == data.get("type"))
    return {"data": data, "mediaType": skill.request_media_type}


def send_message(
    data: dict[str, Any],
    *,
    request_id: Any = "req-1",
    media_type: str | None = "auto",
    accepted: list[str] | None | str = "auto",
    context_id: str | None = None,
    **params: Any,
) -> dict[str, Any]:
    """A SendMessage request body carrying ``data`` as the one DataPart."""
    skill = next((s for s in SKILLS.values() if s.request_type == data.get("type")), None)
    part: dict[str, Any] = {"data": data}
    if media_type == "auto":
        if skill is not None:
            part["mediaType"] = skill.request_media_type
    elif media_type is not None:
        part["mediaType"] = media_type
    message: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part]}
    if context_id is not None:
        message["contextId"] = context_id
    body_params: dict[str, Any] = {"message": message}
    if accepted == "auto":
        if skill is not None:
            body_params["configuration"] = {"acceptedOutputModes": [skill.response_media_type]}
    elif accepted is not None:
        body_params["configuration"] = {"acceptedOutputModes": accepted}
    body_params.update(params)
    return {"jsonrpc": "2.0", "id": request_id, "method": "SendMessage", "params": body_params}


AAP_HEADERS = {"A2A-Version": "1.0", "A2A-Extensions": EXTENSION_URI}


# -- response checks --------------------------------------------------------------------
def aap_error_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The ``aap.error`` payload of a JSON-RPC error, located by @type and value.type."""
    for detail in body.get("error", {}).get("data", []) or []:
        if detail.get("@type") == STRUCT and detail.get("value", {}).get("type") == "aap.error":
            return detail["value"]
    return None


def detail_of(body: dict[str, Any], type_url: str) -> dict[str, Any] | None:
    for detail in body.get("error", {}).get("data", []) or []:
        if detail.get("@type") == type_url:
            return detail
    return None


def assert_valid_response(body: Any) -> None:
    """A JSON-RPC response valid against the seed; its aap.error (if any) valid too."""
    problems = validate(body, "json-rpc-response")
    assert problems == [], problems
    err = aap_error_of(body)
    if err is not None:
        assert validate(err, "error") == []
        # ErrorInfo leads, with the AAP code and retryable as strings.
        first = body["error"]["data"][0]
        assert first["@type"] == ERROR_INFO
        assert first["reason"] == err["code"]
        assert first["domain"] == "autoagentprotocol.org"
        assert first["metadata"]["code"] == err["code"]
        assert first["metadata"]["error_id"] == err["error_id"]
        assert first["metadata"]["retryable"] == ("true" if err["retryable"] else "false")
        assert all(isinstance(v, str) for v in first["metadata"].values())


def load_demo_inventory(stores: Any, settings: Settings, count: int = 60, seed: int = 7) -> list[dict[str, Any]]:
    """Import a small deterministic generated inventory; returns the listings."""
    from aap.inventory.demo import generate_listings

    listings = list(generate_listings(count, seed, settings=settings))
    stores.inventory.import_listings(listings, replace=True)
    return listings


class Deployment:
    """A full deployment on loopback: settings, stores, app and a live server."""

    def __init__(self, directory: Any, *, inventory: int = 60, public_url: str | None = None, **replace: Any) -> None:
        from aap.server.app import create_app
        from aap.store import open_stores

        self.server = LiveServer()
        self.settings = make_settings(public_url or self.server.base_url, f"sqlite:///{directory}/aap.db", **replace)
        self.stores = open_stores(self.settings.database_url)
        self.listings = load_demo_inventory(self.stores, self.settings, inventory) if inventory else []
        self.app = create_app(self.settings, self.stores)
        self.base_url = self.server.base_url

    def __enter__(self) -> Deployment:
        self.server.start(self.app)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self.stores.close()
