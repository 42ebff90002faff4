"""AAP over the Poppy (PAP 0.3) native OpenAPI API, with the guest session handled for the caller.

Discovery: poppy.json → the issuer's RFC 8414 metadata (``token_endpoint``)
and the ``openapi`` API entry → its ``servers[0].url`` and one operation per
skill. The operation paths are not fixed by AAP, so they are found in the
document: an ``x-aap-skill`` marker, the request body's ``type`` constant, the
conventional operationId, or a path ending in the skill id.

Session: a JWT-bearer grant with a ``private_key_jwt`` client assertion, a
session assertion and a DPoP proof (no ``ath``); every API call then carries
``Authorization: DPoP <token>`` and a fresh proof with ``ath``. A
``use_dpop_nonce`` challenge is answered once; an expired or refused token is
renewed once with the same DPoP key (the same Session).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from aap.client.errors import AuthError, DiscoveryError, ProtocolError
from aap.client.poppy_auth import CLIENT_ASSERTION_TYPE, JWT_BEARER, DpopKey, PoppyIdentity
from aap.client.transport import CallOutcome, answered_error, http_failure, json_body, network_failure, retry_after_ms
from aap.paths import OAUTH_METADATA_PATH, PROTECTED_RESOURCE_PATH
from aap.skills.catalog import SKILLS, SkillInfo
from aap.util import pointer as json_pointer

RENEW_MARGIN_S = 30


def issuer_metadata_url(issuer: str) -> str:
    """RFC 8414 §3: the well-known segment goes between the host and the issuer's path."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, OAUTH_METADATA_PATH + path, "", ""))


def protected_resource_metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, PROTECTED_RESOURCE_PATH + path, "", ""))


def _resolve(document: dict[str, Any], schema: Any, depth: int = 0) -> Any:
    """Follow local ``#/...`` refs (bounded) so a request body's ``type`` const can be read."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 10:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return schema
        node: Any = document
        for token in json_pointer.tokens(ref[1:]):
            node = node.get(token) if isinstance(node, dict) else None
        schema, depth = node, depth + 1
    return schema


def _body_type(document: dict[str, Any], operation: dict[str, Any]) -> str | None:
    content = (operation.get("requestBody") or {}).get("content") or {}
    for media in content.values():
        schema = _resolve(document, (media or {}).get("schema"))
        if isinstance(schema, dict):
            const = ((schema.get("properties") or {}).get("type") or {}).get("const")
            if isinstance(const, str):
                return const
    return None


def operation_map(document: dict[str, Any], base_url: str) -> dict[str, str]:
    """skill id → absolute operation URL, from an OpenAPI document."""
    servers = document.get("servers") or []
    server = servers[0].get("url") if servers and isinstance(servers[0], dict) else None
    if not isinstance(server, str):
        raise DiscoveryError("the Poppy OpenAPI document has no servers[0].url", binding="poppy")
    server = urljoin(base_url, server).rstrip("/")
    found: dict[str, tuple[int, str]] = {}
    for path, item in (document.get("paths") or {}).items():
        operation = (item or {}).get("post") if isinstance(item, dict) else None
        if not isinstance(operation, dict):
            continue
        url = server + path
        body_type = _body_type(document, operation)
        for skill in SKILLS.values():
            rank = None
            if operation.get("x-aap-skill") == skill.id:
                rank = 0
            elif body_type == skill.request_type:
                rank = 1
            elif operation.get("operationId") == skill.operation_id:
                rank = 2
            elif path.rstrip("/").endswith("/" + skill.id):
                rank = 3
            if rank is not None and (skill.id not in found or rank < found[skill.id][0]):
                found[skill.id] = (rank, url)
    return {skill_id: url for skill_id, (_, url) in found.items()}


def _www_authenticate_error(response: httpx.Response) -> str | None:
    header = response.headers.get("www-authenticate", "")
    marker = 'error="'
    if marker in header:
        return header.split(marker, 1)[1].split('"', 1)[0]
    return None


class PoppyTransport:
    name = "poppy"

    def __init__(self, http: httpx.AsyncClient, poppy_url: str, identity: PoppyIdentity) -> None:
        self.http = http
        self.poppy_url = poppy_url
        self.identity = identity
        self.dpop = DpopKey()
        self.document: dict[str, Any] | None = None
        self.issuer: str | None = None
        self.metadata: dict[str, Any] | None = None
        self.openapi_url: str | None = None
        self.openapi: dict[str, Any] | None = None
        self.operations: dict[str, str] = {}
        self.token: str | None = None
        self.token_expires_at = 0.0
        self.token_response: dict[str, Any] | None = None
        self.nonce: str | None = None

    # -- discovery ----------------------------------------------------------
    async def _get_json(self, url: str, what: str) -> Any:
        try:
            response = await self.http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise DiscoveryError(f"{what}: {type(exc).__name__} fetching {url}", binding=self.name) from exc
        if response.status_code != 200:
            raise DiscoveryError(
                f"{what}: HTTP {response.status_code} from {url}", binding=self.name, http_status=response.status_code
            )
        body = json_body(response)
        if not isinstance(body, dict):
            raise DiscoveryError(f"{what}: {url} did not return a JSON object", binding=self.name)
        return body

    async def open(self) -> None:
        if self.document is not None:
            return
        document = await self._get_json(self.poppy_url, "poppy.json")
        issuer = (document.get("auth") or {}).get("issuer")
        if not isinstance(issuer, str):
            raise DiscoveryError("poppy.json has no auth.issuer", binding=self.name)
        metadata = await self._get_json(issuer_metadata_url(issuer), "issuer metadata")
        if metadata.get("issuer") != issuer:
            raise DiscoveryError("issuer metadata names a different issuer than poppy.json", binding=self.name)
        if not isinstance(metadata.get("token_endpoint"), str):
            raise DiscoveryError("issuer metadata has no token_endpoint", binding=self.name)
        api = next((a for a in document.get("apis") or [] if isinstance(a, dict) and a.get("type") == "openapi"), None)
        if api is None or not isinstance(api.get("url"), str):
            raise DiscoveryError("poppy.json lists no openapi API", binding=self.name)
        openapi = await self._get_json(api["url"], "Poppy OpenAPI document")
        self.operations = operation_map(openapi, api["url"])
        self.document, self.issuer, self.metadata = document, issuer, metadata
        self.openapi_url, self.openapi = api["url"], openapi

    # -- session ------------------------------------------------------------
    async def grant(self) -> dict[str, Any]:
        """Start (or renew) the guest Session: POST the JWT-bearer grant with a DPoP proof."""
        await self.open()
        assert self.metadata is not None and self.issuer is not None
        endpoint = self.metadata["token_endpoint"]
        for _ in range(2):
            form = {
                "grant_type": JWT_BEARER,
                "client_id": self.identity.client_id,
                "client_assertion_type": CLIENT_ASSERTION_TYPE,
                "client_assertion": self.identity.client_assertion(self.issuer),
                "assertion": self.identity.session_assertion(self.issuer),
            }
            headers = {"DPoP": self.dpop.proof("POST", endpoint, nonce=self.nonce), "Accept": "application/json"}
            try:
                response = await self.http.post(endpoint, data=form, headers=headers)
            except httpx.HTTPError as exc:
                raise network_failure(self.name, exc, "Poppy token request failed") from exc
            body = json_body(response)
            if response.headers.get("dpop-nonce"):
                self.nonce = response.headers["dpop-nonce"]
            error = body.get("error") if isinstance(body, dict) else None
            if response.status_code == 400 and error == "use_dpop_nonce" and self.nonce:
                continue
            if response.status_code != 200 or not isinstance(body, dict) or "access_token" not in body:
                raise AuthError(
                    f"Poppy token request refused: HTTP {response.status_code} {error or ''}".strip(),
                    error=error,
                    binding=self.name,
                    http_status=response.status_code,
                    retryable=response.status_code in (429, 503),
                    retry_after_ms=retry_after_ms(response.headers),
                )
            if str(body.get("token_type", "")).lower() != "dpop":
                raise AuthError("Poppy issuer did not issue a DPoP-bound token", binding=self.name)
            self.token = body["access_token"]
            expires_in = body.get("expires_in")
            self.token_expires_at = time.time() + (expires_in if isinstance(expires_in, (int, float)) else 300)
            self.token_response = body
            return body
        raise AuthError("Poppy issuer kept demanding a new DPoP nonce", error="use_dpop_nonce", binding=self.name)

    async def _token(self) -> str:
        if self.token is None or time.time() > self.token_expires_at - RENEW_MARGIN_S:
            await self.grant()
        assert self.token is not None
        return self.token

    async def authorized_post(self, url: str, payload: Any) -> httpx.Response:
        """POST JSON with the DPoP token and a fresh proof (answers one nonce challenge, renews once)."""
        renewed = False
        nonce_retry = False
        while True:
            token = await self._token()
            headers = {
                "Authorization": f"DPoP {token}",
                "DPoP": self.dpop.proof("POST", url, access_token=token, nonce=self.nonce),
                "Accept": "application/json",
            }
            response = await self.http.post(url, json=payload, headers=headers)
            if response.headers.get("dpop-nonce"):
                self.nonce = response.headers["dpop-nonce"]
            if response.status_code != 401:
                return response
            challenge = _www_authenticate_error(response)
            if challenge == "use_dpop_nonce" and not nonce_retry:
                nonce_retry = True
                continue
            if challenge == "invalid_token" and not renewed:
                renewed = True
                self.token = None
                continue
            return response

    # -- AAP ------------------------------------------------------------------
    async def call(self, skill: SkillInfo, payload: dict[str, Any]) -> CallOutcome:
        outcome = CallOutcome(self.name, skill, request=payload)

        async def post() -> httpx.Response:
            await self.open()
            url = self.operations.get(skill.id)
            if url is None:
                raise DiscoveryError(f"the Poppy OpenAPI document has no operation for {skill.id}", binding=self.name)
            return await self.authorized_post(url, payload)

        response = await outcome.attempt(post(), "Poppy request failed")
        if response is None:
            return outcome
        body = json_body(response)
        outcome.record(response, body)
        if isinstance(body, dict) and body.get("type") == "aap.error":
            outcome.error = answered_error(self.name, response, body)
        elif response.status_code >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            if error:
                outcome.error = AuthError(
                    f"Poppy API refused the call: HTTP {response.status_code} {error}",
                    error=error,
                    binding=self.name,
                    http_status=response.status_code,
                    retryable=response.status_code in (429, 503),
                    retry_after_ms=retry_after_ms(response.headers),
                )
            else:
                outcome.error = http_failure(self.name, response, "Poppy API")
        elif isinstance(body, dict) and body.get("type") == skill.response_type:
            outcome.response = body
        else:
            outcome.error = ProtocolError(
                f"Poppy API answer is not a {skill.response_type}", binding=self.name, http_status=response.status_code
            )
        return outcome

    async def aclose(self) -> None:
        return None
