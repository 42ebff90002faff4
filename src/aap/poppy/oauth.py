"""OAuth / DPoP protocol errors and their HTTP shape.

Authentication failures keep their OAuth format (``{"error", "error_description"}``)
on every Poppy endpoint; only skill failures use ``aap.error``. Descriptions are
fixed strings written here and in the verifiers: never an assertion, a token or
any other caller-supplied value.
"""

from __future__ import annotations

from starlette.responses import JSONResponse, Response

from aap.errors import AapError

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
DPOP_ALGS = 'algs="ES256"'


class OAuthError(Exception):
    """An RFC 6749 / 9449 error. ``challenge`` adds ``WWW-Authenticate: DPoP`` (resource errors)."""

    def __init__(
        self,
        error: str,
        description: str,
        status: int = 400,
        *,
        challenge: bool = False,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status
        self.challenge = challenge
        self.retry_after = retry_after

    def response(self) -> JSONResponse:
        headers = dict(NO_STORE)
        if self.challenge:
            headers["WWW-Authenticate"] = (
                f'DPoP error="{self.error}", error_description="{self.description}", {DPOP_ALGS}'
            )
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return JSONResponse(
            {"error": self.error, "error_description": self.description}, status_code=self.status, headers=headers
        )


def invalid_client(description: str) -> OAuthError:
    return OAuthError("invalid_client", description, 401)


def invalid_grant(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description, 400)


def invalid_request(description: str, status: int = 400) -> OAuthError:
    return OAuthError("invalid_request", description, status)


def token_endpoint_dpop_error(description: str) -> OAuthError:
    """At the token endpoint a bad proof is ``400 invalid_dpop_proof`` with no challenge."""
    return OAuthError("invalid_dpop_proof", description, 400)


def resource_error(error: str, description: str) -> OAuthError:
    """At the API: ``401`` with a ``WWW-Authenticate: DPoP`` challenge."""
    return OAuthError(error, description, 401, challenge=True)


def server_error() -> OAuthError:
    return OAuthError("server_error", "the dealer agent hit an unexpected error", 500)


def oauth_error_shape(status: int, error: AapError) -> Response:
    """The error shape of the OAuth paths (:data:`aap.web.errors.ErrorShape`).

    A request refused before the endpoint read it is ``invalid_request``
    (RFC 6749 §5.2); an unexpected failure is ``server_error``.
    """
    if status >= 500:
        return server_error().response()
    return OAuthError("invalid_request", error.message, status).response()
