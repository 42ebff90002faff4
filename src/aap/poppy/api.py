"""The native OpenAPI API: ``POST /poppy/v1/{skill id}`` and its document ``/poppy/openapi.json``.

Bodies are the AAP typed messages shared with A2A and MCP; a skill failure is
the ``aap.error`` object with the code's HTTP status (``Retry-After`` on 429),
an authentication failure keeps its OAuth/DPoP shape. Operation ids are the
``operation_id`` column of the skill catalog. The document bundles
the AAP JSON Schemas under ``components/schemas`` so a client (or
schemathesis) needs nothing from the network.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aap import AAP_VERSION, gateway
from aap.errors import AapError, problem, unexpected
from aap.jsontext import encode
from aap.poppy.authn import Caller, authenticate, consume
from aap.poppy.context import PoppyContext
from aap.poppy.oauth import NO_STORE, OAuthError, server_error
from aap.poppy.schemas import bundle
from aap.ratelimit import retry_after_seconds
from aap.skills.catalog import SkillInfo


def aap_error_response(error: AapError, status: int | None = None) -> Response:
    """``aap.error`` as the HTTP body, with the code's status and ``Retry-After`` when rate limited."""
    headers = dict(NO_STORE)
    retry_after = retry_after_seconds(error)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return JSONResponse(error.to_dict(), status_code=status or error.spec.http_status, headers=headers)


def aap_error_shape(status: int, error: AapError) -> Response:
    """The error shape of the native API's paths (:data:`aap.web.errors.ErrorShape`)."""
    return aap_error_response(error, status)


async def read_json(request: Request, skill: SkillInfo) -> Any:
    """The JSON request body, or ``SCHEMA_VALIDATION_FAILED`` (never a 5xx).

    The app's body limit (:mod:`aap.web.body`) has refused an oversized body already.
    """
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    accepted = ("application/json", skill.request_media_type)
    if media_type not in accepted:
        raise AapError(
            "SCHEMA_VALIDATION_FAILED",
            errors=[problem("", "contentMediaType", "Send the request body as " + " or ".join(accepted) + ".")],
        )
    body = await request.body()
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise AapError(
            "SCHEMA_VALIDATION_FAILED", errors=[problem("", "type", "The request body is not valid JSON.")]
        ) from exc


class SkillEndpoint:
    """One ``POST /poppy/v1/{skill id}`` operation."""

    def __init__(self, ctx: PoppyContext, skill: SkillInfo) -> None:
        self.ctx = ctx
        self.skill = skill

    async def handle(self, request: Request) -> Response:
        ctx = self.ctx
        try:
            caller = await authenticate(ctx, request, ctx.urls.poppy_operation(self.skill.id))
        except OAuthError as exc:
            return exc.response()
        except Exception as exc:
            unexpected(exc, binding="poppy", skill=self.skill.id, endpoint="authentication")
            return server_error().response()
        try:
            payload = await read_json(request, self.skill)
            return await self._run(payload, caller)
        except OAuthError as exc:
            return exc.response()
        except AapError as exc:
            return aap_error_response(exc)
        except Exception as exc:
            return aap_error_response(unexpected(exc, binding="poppy", skill=self.skill.id))

    async def _run(self, payload: Any, caller: Caller) -> Response:
        if isinstance(payload, dict) and payload.get("type") != self.skill.request_type:
            raise AapError(
                "SCHEMA_VALIDATION_FAILED",
                errors=[problem("/type", "const", f"This operation takes '{self.skill.request_type}' messages.")],
            )
        await consume(self.ctx, caller)  # the request's single-use values, with the calls in flight
        verified = gateway.Caller(
            "poppy", "poppy:" + caller.caller_id, caller_id=caller.caller_id, client_id=caller.client_id
        )
        result = await self.ctx.gateway.call(verified, self.skill, payload)
        return Response(encode(result), media_type="application/json", headers=NO_STORE)


# -- the OpenAPI document ------------------------------------------------------

_OAUTH_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "minLength": 1}, "error_description": {"type": "string"}},
}


def _camel(stem: str) -> str:
    return "".join(part.capitalize() for part in stem.split("-"))


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def openapi_document(ctx: PoppyContext) -> dict[str, Any]:
    """OpenAPI 3.1 for the implemented skills, with every referenced AAP schema bundled."""
    skills = ctx.agent.skills
    names = {"error": "AapError"}
    for skill in skills:
        names[skill.request_schema] = _camel(skill.request_schema)
        names[skill.response_schema] = _camel(skill.response_schema)
    components = bundle(names)
    components["OAuthError"] = _OAUTH_ERROR

    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{names.get(name, name)}"}

    aap_error = {"description": "The AAP error object (aap.error).", "content": _json(ref("error"))}
    unauthorized = {
        "description": "Missing, invalid, expired or revoked token, or a bad DPoP proof / Poppy-Session.",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
        "content": _json({"$ref": "#/components/schemas/OAuthError"}),
    }
    paths: dict[str, Any] = {}
    for skill in skills:
        responses: dict[str, Any] = {
            "200": {"description": f"A {skill.response_type} message.", "content": _json(ref(skill.response_schema))},
            "400": {
                "description": "Validation failure (aap.error) or a malformed authentication request (OAuth error).",
                "content": _json({"anyOf": [ref("error"), {"$ref": "#/components/schemas/OAuthError"}]}),
            },
            "401": unauthorized,
            "404": aap_error,
            "408": {**aap_error, "description": "The request body did not arrive in time (aap.error)."},
            "413": {**aap_error, "description": "The request body is larger than this endpoint accepts (aap.error)."},
            "414": {**aap_error, "description": "The request line is longer than the server accepts (aap.error)."},
            "431": {
                **aap_error,
                "description": "The request header fields (a Poppy-Session header among them) are larger, "
                "or more, than the server accepts (aap.error).",
            },
            "429": {**aap_error, "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 1}}}},
            "500": {
                "description": "Unexpected failure (aap.error INTERNAL_ERROR, or OAuth server_error).",
                "content": _json({"anyOf": [ref("error"), {"$ref": "#/components/schemas/OAuthError"}]}),
            },
        }
        if not skill.read_only:
            responses["409"] = aap_error
        paths[f"/{skill.id}"] = {
            "post": {
                "operationId": skill.operation_id,
                "summary": skill.name,
                "description": f"{skill.description} Request and response are the AAP typed messages "
                f"'{skill.request_type}' and '{skill.response_type}'.",
                "tags": list(skill.tags[:1]),
                "requestBody": {
                    "required": True,
                    "content": {
                        media: {"schema": ref(skill.request_schema)}
                        for media in ("application/json", skill.request_media_type)
                    },
                },
                "responses": dict(sorted(responses.items())),
            }
        }
    settings = ctx.agent.settings
    schemes: dict[str, Any] = {
        "poppyDPoP": {
            "type": "http",
            "scheme": "DPoP",
            "description": "A DPoP-bound guest access token (RFC 9449) from the issuer in poppy.json, "
            "sent with a DPoP proof header bound to it (ath).",
        }
    }
    security: list[dict[str, list[str]]] = [{"poppyDPoP": []}]
    if ctx.settings.accept_poppy_session:
        schemes["poppySession"] = {
            "type": "apiKey",
            "in": "header",
            "name": "Poppy-Session",
            "description": "AAP 3.2: a poppy-session+jwt (ES256) signed for this one request by a key the "
            "agent's identity key delegates in poppy_dlg (seed 003, PoppySessionJWT). On its own it makes "
            "a signed-out call; beside 'Authorization: DPoP <token>' it replaces the DPoP proof, and the "
            "token must be bound to the delegated key.",
        }
        security += [{"poppySession": []}, {"poppyDPoP": [], "poppySession": []}]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{settings.agent.name}: AAP native API (Poppy)",
            "version": AAP_VERSION,
            "description": (
                "The dealer's AAP skills for personal agents (Personal Agent Protocol 0.3). "
                f"Get a guest Session token at {ctx.issuer} (see {ctx.urls.poppy}), then call each "
                "operation with 'Authorization: DPoP <token>' and a fresh DPoP proof (ES256, htm, htu, iat, "
                "jti, ath) in the 'DPoP' header; or sign the call with an AAP 3.2 'Poppy-Session' header."
            ),
        },
        "servers": [{"url": ctx.urls.poppy_api}],
        "security": security,
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": schemes},
    }
