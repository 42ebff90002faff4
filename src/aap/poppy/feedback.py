"""``POST /poppy/feedback``: a personal agent reports a task it could not do.

The report is stored for the operator as data — never acted on, never
followed, never logged. Unknown ``kind`` values are accepted. When the task
matches an excluded task that names an alternative, the answer is ``200`` with
that ``PoppyAlternative``; otherwise ``202`` with no body.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from aap.errors import unexpected
from aap.poppy.authn import Caller, authenticate, consume
from aap.poppy.context import PoppyContext
from aap.poppy.oauth import NO_STORE, OAuthError, server_error
from aap.spec import validate
from aap.web.body import BodyTooLarge, read_request_body

MAX_BODY = 16_384


def _normalize(task: str) -> str:
    return " ".join(task.casefold().split())


def alternative_for(ctx: PoppyContext, task: str) -> dict[str, Any] | None:
    """The alternative of the excluded task with the same wording (case and spacing ignored)."""
    wanted = _normalize(task)
    for excluded in ctx.settings.excluded_tasks:
        if excluded.alternative is not None and _normalize(excluded.task) == wanted:
            return excluded.alternative
    return None


def parse_report(raw: bytes) -> dict[str, Any]:
    """A ``PoppyFeedbackRequest`` with non-blank ``task`` and ``description``, or ``400 invalid_request``."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OAuthError("invalid_request", "the feedback body must be JSON", 400) from exc
    problems = validate(body, "poppy-feedback-request")
    if isinstance(body, dict):
        for name in ("task", "description"):
            if isinstance(body.get(name), str) and not body[name].strip():
                problems.append(
                    {"instanceLocation": f"/{name}", "keyword": "minLength", "error": f"{name} must not be blank"}
                )
    if problems:
        where = ", ".join(sorted({p["instanceLocation"] or "/" for p in problems}))
        raise OAuthError(
            "invalid_request", f"the feedback report is not a valid PoppyFeedbackRequest (at {where})", 400
        )
    return body


async def receive(ctx: PoppyContext, caller: Caller, raw: bytes) -> Response:
    body = parse_report(raw)
    alternative = alternative_for(ctx, body["task"])
    await consume(ctx, caller)
    stored = await ctx.gateway.blocking(
        ctx.store.add_feedback,
        client_id=caller.client_id,
        sub=caller.sub,
        agent_id=caller.agent_id,
        body=body,
        answered_with_alternative=alternative is not None,
        daily_limit=ctx.settings.feedback_daily_limit,
        now=time.time(),
    )
    if stored is None:
        raise OAuthError("rate_limited", "the daily feedback quota for this User ID is used up", 429, retry_after=3600)
    if alternative is not None:
        return JSONResponse(alternative, headers=NO_STORE)
    return Response(status_code=202, headers=NO_STORE)


async def endpoint(ctx: PoppyContext, request: Request) -> Response:
    """``POST /poppy/feedback``: the caller authenticated, the report read (at most :data:`MAX_BODY`
    bytes) and received; an error in the OAuth shape of the issuer's endpoints."""
    try:
        caller = await authenticate(ctx, request, ctx.urls.poppy_feedback)
        try:
            raw = await read_request_body(request, MAX_BODY)
        except BodyTooLarge:
            raise OAuthError("invalid_request", "the feedback report is too large", 400) from None
        return await receive(ctx, caller, raw)
    except OAuthError as exc:
        return exc.response()
    except Exception as exc:
        unexpected(exc, binding="poppy", endpoint="feedback")
        return server_error().response()
