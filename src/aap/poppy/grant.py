"""One request to ``/oauth/token`` whose client authenticated: what every grant reads.

The guest grant (:mod:`aap.poppy.token_endpoint`) and token exchange (:mod:`aap.poppy.exchange`)
answer the same kind of request: a form, a client authenticated by its assertion, and a DPoP
proof of the key the grant binds, checked as a token request's (RFC 9449 §5: no ``ath``).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from aap.poppy.assertions import Assertion
from aap.poppy.client_metadata import ClientInfo
from aap.poppy.context import PoppyContext
from aap.poppy.dpop import DpopProblem, DpopProof, verify_proof
from aap.poppy.oauth import token_endpoint_dpop_error


@dataclass(frozen=True)
class TokenRequest:
    request: Request
    form: dict[str, str]
    client: ClientInfo
    client_assertion: Assertion
    now: float

    def proof(self, ctx: PoppyContext) -> DpopProof:
        """The request's DPoP proof for the token endpoint, or the ``invalid_dpop_proof`` error."""
        try:
            return verify_proof(
                self.request.headers.getlist("dpop"),
                method="POST",
                url=ctx.urls.token_endpoint,
                now=self.now,
                window=ctx.settings.dpop_iat_window,
                access_token=None,
            )
        except DpopProblem as exc:
            raise token_endpoint_dpop_error(str(exc)) from exc
