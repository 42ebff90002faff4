"""A reference personal agent (PAP 0.3 / AAP 3.1) for the tests, plus the HTTPS plumbing it needs.

Deliberately independent of ``aap.poppy``: it signs with joserfc directly and
speaks only HTTP, so a server bug cannot be mirrored by a shared helper.

- :class:`TestCA` makes a throw-away CA and server certificates with ``cryptography``.
- :class:`HttpsServer` runs a Starlette app with uvicorn over TLS on 127.0.0.1.
- :class:`AgentHost` serves personal agents' client metadata and JWKS documents.
- :class:`PersonalAgent` holds an agent's identity key and signs its assertions,
  DPoP proofs and AAP 3.2 ``Poppy-Session`` JWTs.
- :class:`PoppyClient` walks discovery → token → API operations → feedback.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import ipaddress
import json
import secrets
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from joserfc import jws
from joserfc.jwk import ECKey
from joserfc.jws import JWSRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
_REGISTRY = JWSRegistry(algorithms=["ES256"], strict_check_header=False)
_REGISTRY.max_header_length = 16384


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def new_jti() -> str:
    return b64url(secrets.token_bytes(16))


def sign(header: dict[str, Any], claims: dict[str, Any], key: ECKey) -> str:
    return jws.serialize_compact(header, json.dumps(claims).encode(), key, registry=_REGISTRY)


def public_jwk(key: ECKey) -> dict[str, Any]:
    jwk = key.as_dict(private=False)
    return {"kty": "EC", "crv": "P-256", "x": jwk["x"], "y": jwk["y"]}


# -- TLS ---------------------------------------------------------------------------------


class TestCA:
    """A CA made for one test session; issues server certificates for loopback names."""

    __test__ = False

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aap poppy test CA")])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self.directory / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, label: str, names: tuple[str, ...] = ("localhost",), addresses: tuple[str, ...] = ("127.0.0.1",)
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        sans = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        cert_file = self.directory / f"{label}.pem"
        key_file = self.directory / f"{label}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cert_file, key_file

    def context(self) -> ssl.SSLContext:
        """A client context trusting only this CA."""
        return ssl.create_default_context(cafile=str(self.ca_file))


class HttpsServer:
    """uvicorn over TLS in a background thread, on a 127.0.0.1 socket bound up front."""

    def __init__(self, ca: TestCA, label: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base_url = f"https://localhost:{self.port}"
        self.cert_file, self.key_file = ca.issue(label)
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self, app: Any) -> HttpsServer:
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            ssl_certfile=str(self.cert_file),
            ssl_keyfile=str(self.key_file),
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        for _ in range(1000):  # bounded by count
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError("uvicorn (TLS) did not start")

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
            # Don't wait for clients' idle keep-alive TLS connections to finish
            # their close_notify exchange (asyncio waits up to 30 s for each).
            self.server.force_exit = True
        if self.thread is not None:
            self.thread.join(timeout=30)
        self.sock.close()


class AgentHost:
    """Serves documents by path: what a personal agent publishes at its client_id and jwks_uri."""

    def __init__(self, ca: TestCA) -> None:
        self.server = HttpsServer(ca, "agent-host")
        self.base_url = self.server.base_url
        self.documents: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self.delays: dict[str, float] = {}
        self.hits: dict[str, int] = {}
        self.server.start(Starlette(routes=[Route("/{path:path}", self._serve, methods=["GET"])]))

    async def _serve(self, request: Request) -> Response:
        path = request.url.path
        self.hits[path] = self.hits.get(path, 0) + 1
        if path in self.delays:
            await asyncio.sleep(self.delays[path])
        status, body, headers = self.documents.get(path, (404, b"{}", {}))
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    def publish(self, path: str, document: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> str:
        body = document if isinstance(document, bytes) else json.dumps(document).encode()
        self.documents[path] = (status, body, headers or {})
        return self.base_url + path

    def stop(self) -> None:
        self.server.stop()


# -- the personal agent -----------------------------------------------------------------


class PersonalAgent:
    """One personal agent: an identity key published at ``jwks_uri``, metadata at ``client_id``."""

    def __init__(self, host: AgentHost, name: str = "agent", *, publish: bool = True) -> None:
        self.host = host
        self.name = name
        self.identity = ECKey.generate_key("P-256", private=True)
        self.kid = f"{name}-key-1"
        self.client_id = f"{host.base_url}/{name}/agent.json"
        self.jwks_uri = f"{host.base_url}/{name}/jwks.json"
        if publish:
            self.publish()

    def metadata(self) -> dict[str, Any]:
        return {
            "client_id": self.client_id,
            "client_name": f"Reference personal agent {self.name}",
            "jwks_uri": self.jwks_uri,
            "redirect_uris": [f"{self.host.base_url}/{self.name}/callback", "http://127.0.0.1/callback"],
            "token_endpoint_auth_method": "private_key_jwt",
        }

    def jwks(self) -> dict[str, Any]:
        return {"keys": [{**public_jwk(self.identity), "kid": self.kid, "alg": "ES256", "use": "sig"}]}

    def publish(self, metadata: dict[str, Any] | None = None) -> None:
        self.host.publish(f"/{self.name}/agent.json", metadata or self.metadata())
        self.host.publish(f"/{self.name}/jwks.json", self.jwks())

    # -- signed artefacts --------------------------------------------------------------
    def assertion(
        self,
        issuer: str,
        sub: str,
        *,
        lifetime: float = 60,
        at: float | None = None,
        header: dict[str, Any] | None = None,
        key: ECKey | None = None,
        **claims: Any,
    ) -> str:
        """A JWT assertion issued ``at`` (default now); ``claims`` override any claim."""
        now = time.time() if at is None else at
        body = {
            "iss": self.client_id,
            "sub": sub,
            "aud": issuer,
            "iat": int(now),
            "exp": int(now) + lifetime,
            "jti": new_jti(),
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return sign(header or {"alg": "ES256", "kid": self.kid, "typ": "JWT"}, body, key or self.identity)

    def client_assertion(self, issuer: str, **kw: Any) -> str:
        return self.assertion(issuer, self.client_id, **kw)

    def session_assertion(self, issuer: str, user_id: str, **kw: Any) -> str:
        return self.assertion(issuer, user_id, **kw)

    @staticmethod
    def dpop_proof(
        key: ECKey,
        method: str,
        url: str,
        *,
        access_token: str | None = None,
        header: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A DPoP proof; ``claims`` override any claim (``iat=...``, ``ath=...``)."""
        body: dict[str, Any] = {"jti": new_jti(), "htm": method, "htu": url, "iat": int(time.time())}
        if access_token is not None:
            body["ath"] = b64url(hashlib.sha256(access_token.encode()).digest())
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return sign(header or {"typ": "dpop+jwt", "alg": "ES256", "jwk": public_jwk(key)}, body, key)

    def delegation(self, delegated: ECKey, *, lifetime: int = 3600, key: ECKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.client_id,
            "iat": now,
            "exp": now + lifetime,
            "cnf": {"jwk": public_jwk(delegated)},
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return sign({"alg": "ES256", "kid": self.kid, "typ": "poppy-dlg+jwt"}, body, key or self.identity)

    def poppy_session(
        self,
        delegated: ECKey,
        delegation: str,
        *,
        issuer: str,
        user_id: str,
        sid: str,
        method: str,
        url: str,
        access_token: str | None = None,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        body: dict[str, Any] = {
            "iss": self.client_id,
            "aud": issuer,
            "sid": sid,
            "sub": user_id,
            "htm": method,
            "htu": url,
            "iat": int(time.time()),
            "jti": new_jti(),
        }
        if access_token is not None:
            body["ath"] = b64url(hashlib.sha256(access_token.encode()).digest())
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        header = {
            "typ": "poppy-session+jwt",
            "alg": "ES256",
            "kid": kid or delegated.thumbprint(),
            "poppy_dlg": delegation,
        }
        return sign(header, body, delegated)


def dpop_only(openapi: dict[str, Any]) -> dict[str, Any]:
    """``openapi`` as a caller that signs with DPoP sees it: the Poppy-Session scheme left out,
    so schemathesis (which fills in every apiKey scheme it is not given) adds no random
    Poppy-Session header beside the DPoP proof it is handed."""
    document = {**openapi, "security": [{"poppyDPoP": []}]}
    document["components"] = {
        **openapi["components"],
        "securitySchemes": {"poppyDPoP": openapi["components"]["securitySchemes"]["poppyDPoP"]},
    }
    return document


class PoppyClient:
    """The reference walk: discovery → guest token → API operations → feedback."""

    def __init__(self, agent: PersonalAgent, dealer_url: str, verify: ssl.SSLContext) -> None:
        self.agent = agent
        self.dealer_url = dealer_url
        self.http = httpx.Client(verify=verify, timeout=30.0)
        self.session_key = ECKey.generate_key("P-256", private=True)
        self.user_id = "usr_" + b64url(secrets.token_bytes(16))
        self.poppy: dict[str, Any] = {}
        self.issuer_metadata: dict[str, Any] = {}
        self.openapi: dict[str, Any] = {}
        self.token: str | None = None

    def close(self) -> None:
        self.http.close()

    def discover(self) -> dict[str, Any]:
        poppy = self.http.get(f"{self.dealer_url}/.well-known/poppy.json")
        poppy.raise_for_status()
        self.poppy = poppy.json()
        issuer = self.poppy["auth"]["issuer"]
        metadata = self.http.get(f"{issuer}/.well-known/oauth-authorization-server")
        metadata.raise_for_status()
        self.issuer_metadata = metadata.json()
        api = next(entry for entry in self.poppy["apis"] if entry["type"] == "openapi")
        document = self.http.get(api["url"])
        document.raise_for_status()
        self.openapi = document.json()
        return self.poppy

    @property
    def issuer(self) -> str:
        return self.poppy["auth"]["issuer"]

    def token_request(
        self,
        *,
        form: dict[str, Any] | None = None,
        proof: str | None = "auto",
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        endpoint = self.issuer_metadata["token_endpoint"]
        body = form if form is not None else self.grant_form()
        headers = dict(extra_headers or {})
        if proof == "auto":
            proof = self.agent.dpop_proof(self.session_key, "POST", endpoint)
        if proof is not None:
            headers["DPoP"] = proof
        return self.http.post(endpoint, data=body, headers=headers)

    def grant_form(self, **overrides: Any) -> dict[str, Any]:
        form = {
            "grant_type": JWT_BEARER,
            "client_id": self.agent.client_id,
            "client_assertion_type": CLIENT_ASSERTION_TYPE,
            "client_assertion": self.agent.client_assertion(self.issuer),
            "assertion": self.agent.session_assertion(self.issuer, self.user_id),
        }
        form.update(overrides)
        return {k: v for k, v in form.items() if v is not None}

    def start_session(self) -> dict[str, Any]:
        response = self.token_request()
        assert response.status_code == 200, response.text
        body = response.json()
        self.token = body["access_token"]
        return body

    def operation_url(self, operation_id: str) -> str:
        server = self.openapi["servers"][0]["url"]
        for path, item in self.openapi["paths"].items():
            if item.get("post", {}).get("operationId") == operation_id:
                return server + path
        raise KeyError(operation_id)

    def auth_headers(
        self, method: str, url: str, *, token: str | None = None, key: ECKey | None = None, **proof_claims: Any
    ) -> dict[str, str]:
        token = token or self.token
        assert token is not None
        proof = self.agent.dpop_proof(key or self.session_key, method, url, access_token=token, **proof_claims)
        return {"Authorization": f"DPoP {token}", "DPoP": proof}

    def call(self, operation_id: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
        url = self.operation_url(operation_id)
        return self.http.post(url, json=body, headers=self.auth_headers("POST", url, **kw))

    def feedback(self, report: dict[str, Any]) -> httpx.Response:
        url = self.poppy["feedback"]["endpoint"]
        return self.http.post(url, json=report, headers=self.auth_headers("POST", url))

    # -- native MCP (RFC 9728 metadata, RFC 8693 token exchange) ---------------------------
    def mcp_api(self) -> dict[str, Any]:
        return next(api for api in self.poppy["apis"] if api["type"] == "mcp")

    @staticmethod
    def protected_resource_metadata_url(resource: str) -> str:
        """RFC 9728 §3.1: the well-known segment between the host and the resource's path."""
        parts = urlsplit(resource)
        return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path.rstrip('/')}"

    def exchange_form(self, **overrides: Any) -> dict[str, Any]:
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "client_id": self.agent.client_id,
            "client_assertion_type": CLIENT_ASSERTION_TYPE,
            "client_assertion": self.agent.client_assertion(self.issuer),
            "subject_token": self.token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
        }
        if "resource" not in overrides:
            form["resource"] = self.mcp_api().get("resource", self.mcp_api()["url"])
        form.update(overrides)
        return {k: v for k, v in form.items() if v is not None}

    def exchange_for_mcp(self) -> dict[str, Any]:
        """A Bearer token for the MCP endpoint, exchanged for the Session token (DPoP proof, no ath)."""
        response = self.token_request(form=self.exchange_form())
        assert response.status_code == 200, response.text
        return response.json()

    def revoke(self, token: str) -> httpx.Response:
        return self.http.post(
            self.issuer_metadata["revocation_endpoint"],
            data={
                "token": token,
                "client_id": self.agent.client_id,
                "client_assertion_type": CLIENT_ASSERTION_TYPE,
                "client_assertion": self.agent.client_assertion(self.issuer),
            },
        )
