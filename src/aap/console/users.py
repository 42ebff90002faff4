"""The console's account pages: users and the audit log (admins), and one's own password.

The rules are :class:`aap.accounts.Accounts`', the same ``aap users`` applies;
every change is in the audit log. An admin cannot remove their own account
here (``aap users remove`` on the server can), so a console is never left
without the person who is using it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from aap.accounts import AccountError, HashingBusy, SignIn
from aap.console.auth import Refused, Visit
from aap.console.core import Console
from aap.paths import CONSOLE_PREFIX
from aap.store.console import ROLES
from aap.web.pages import url

USERS = CONSOLE_PREFIX + "users"
AUDIT = CONSOLE_PREFIX + "audit"
ACCOUNT = CONSOLE_PREFIX + "account"


def _field(visit: Visit, name: str) -> str:
    value = visit.form.get(name) if visit.form is not None else None
    return value.strip() if isinstance(value, str) else ""


def _secret(visit: Visit, name: str) -> str:
    value = visit.form.get(name) if visit.form is not None else None
    return value if isinstance(value, str) else ""


def _rooftop(value: str) -> tuple[str | None, str]:
    """A rooftop checkbox's value: ``[seller or null, rooftop]`` (ValueError otherwise)."""
    try:
        pair = orjson.loads(value[:2000])
    except orjson.JSONDecodeError:
        raise ValueError(value) from None
    if (
        not isinstance(pair, list)
        or len(pair) != 2
        or not (pair[0] is None or isinstance(pair[0], str))
        or not isinstance(pair[1], str)
    ):
        raise ValueError(value)
    return (pair[0], pair[1])


NOTICES = {
    "added": "Account {account} added.",
    "removed": "The account was removed; its sessions ended.",
    "password": "Password of {account} changed; its sessions ended.",
    "unlocked": "The failed sign-ins of {account} were forgotten.",
}


ACCOUNT_NOTICES = {
    "others": "Every other session was signed out.",
    "password": "Your password was changed; every other session of your account was signed out.",
}


def _notice(request: Request, users: list[Any]) -> str | None:
    """What the last change did, from its code (the page never shows text taken from a link: a
    crafted link could put any words there); an account is named only when it exists."""
    template = NOTICES.get(request.query_params.get("done") or "")
    if template is None:
        return None
    named = request.query_params.get("account")
    account = next((u.email for u in users if u.email == named), None)
    if "{account}" in template and account is None:
        return None
    return template.format(account=account)


async def users_page(
    console: Console, request: Request, visit: Visit, *, error: str | None = None, status: int = 200
) -> Response:
    users = await console.blocking(console.stores.console.users)
    throttled = await console.blocking(console.accounts.throttled, users)
    sellers = (
        [(p.dealer_id, p.name) for p in console.settings.dealers if p.dealer_id]
        if console.settings.scope == "aggregate"
        else []
    )
    # Each rooftop with its seller: names are unique only within a seller. The value is the
    # (seller, rooftop) pair as JSON, so no name can be read as another.
    rooftops = [
        (orjson.dumps([seller, name]).decode(), name, seller_name if seller else None)
        for seller, name, seller_name in console.accounts.rooftop_choices()
    ]
    return console.page(
        request,
        "users.html",
        {
            "users": users,
            "sees": {u.user_id: console.accounts.describe_scope(u) for u in users},
            "throttled": throttled,
            "roles": ROLES,
            "sellers": sellers,
            "rooftops": rooftops,
            "error": error,
            "notice": _notice(request, users),
        },
        visit=visit,
        status_code=status,
    )


async def list_users(console: Console, request: Request, visit: Visit) -> Response:
    return await users_page(console, request, visit)


async def _hashing(console: Console, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``func`` in a worker thread under the hash gate (it hashes a password)."""
    try:
        async with console.accounts.gate.slot():
            return await console.blocking(func, *args, **kwargs)
    except HashingBusy:
        raise Refused(
            503, "The server is busy checking other passwords. Try again in a moment.", {"Retry-After": "2"}
        ) from None


async def _refused(console: Console, request: Request, visit: Visit, message: str) -> Response:
    return await users_page(console, request, visit, error=message, status=400)


async def add_user(console: Console, request: Request, visit: Visit) -> Response:
    assert visit.form is not None
    email = _field(visit, "email")
    try:
        rooftops = tuple(_rooftop(v) for v in visit.form.getlist("rooftops") if isinstance(v, str) and v)
    except ValueError:
        raise Refused(400, "A rooftop of the form is not one of the listed rooftops; reload the page.") from None
    try:
        user = await _hashing(
            console,
            console.accounts.add,
            email,
            _secret(visit, "password"),
            role=_field(visit, "role") or "staff",
            dealer_id=_field(visit, "seller") or None,
            rooftops=rooftops,
        )
    except AccountError as exc:
        return await _refused(console, request, visit, str(exc))
    await console.blocking(
        console.audit,
        visit.email,
        "user.add",
        user.email,
        {"role": user.role, "seller": user.dealer_id, "rooftops": [list(pair) for pair in user.rooftops]},
    )
    return RedirectResponse(
        url(request, f"{USERS}?{urlencode({'done': 'added', 'account': user.email})}"), status_code=303
    )


async def _target(console: Console, request: Request) -> Any:
    """The account of the path's ``user_id`` (404 when there is none)."""
    user_id = request.path_params["user_id"]
    users = await console.blocking(console.stores.console.users)
    user = next((u for u in users if u.user_id == user_id), None)
    if user is None:
        raise Refused(404, "There is no such account.")
    return user


async def remove_user(console: Console, request: Request, visit: Visit) -> Response:
    user = await _target(console, request)
    if user.user_id == visit.session.user.user_id:
        raise Refused(409, "You cannot remove your own account while signed in with it.")
    await console.blocking(console.stores.console.remove_user, user.user_id)
    await console.blocking(console.audit, visit.email, "user.remove", user.email, {})
    return RedirectResponse(url(request, f"{USERS}?done=removed"), status_code=303)


async def reset_password(console: Console, request: Request, visit: Visit) -> Response:
    """A new password set by an admin: every session of the account ends (the admin's own
    stays when it is their account)."""
    user = await _target(console, request)
    own = visit.session if user.user_id == visit.session.user.user_id else None
    try:
        await _hashing(console, console.accounts.set_password, user.email, _secret(visit, "password"), keep_session=own)
    except AccountError as exc:
        return await _refused(console, request, visit, str(exc))
    await console.blocking(console.audit, visit.email, "user.password", user.email, {})
    return RedirectResponse(
        url(request, f"{USERS}?{urlencode({'done': 'password', 'account': user.email})}"), status_code=303
    )


async def unlock_user(console: Console, request: Request, visit: Visit) -> Response:
    user = await _target(console, request)
    await console.blocking(console.accounts.unlock, user.email)
    await console.blocking(console.audit, visit.email, "user.unlock", user.email, {})
    return RedirectResponse(
        url(request, f"{USERS}?{urlencode({'done': 'unlocked', 'account': user.email})}"), status_code=303
    )


async def audit_page(console: Console, request: Request, visit: Visit) -> Response:
    before = request.query_params.get("before") or ""
    subject = (request.query_params.get("subject") or "")[:300] or None
    if before and not (before.isascii() and before.isdigit() and len(before) <= 15):
        raise Refused(400, "This page link is not valid: open the audit log again.")
    entries = await console.blocking(
        console.stores.console.audit_entries, subject=subject, before_ms=int(before) if before else None, limit=100
    )
    older = entries[-1].at_ms if len(entries) == 100 else None
    return console.page(request, "audit.html", {"entries": entries, "older": older, "subject": subject}, visit=visit)


def _own_account(visit: Visit) -> None:
    """A guest's account is not one of this console's: it has nothing to change here."""
    if visit.guest is not None:
        raise Refused(
            403,
            "You are signed in as a platform administrator: your account is the platform's "
            "(aap users passwd on the server changes its password; sign out in the platform console).",
            visit=visit,
        )


async def account_page(console: Console, request: Request, visit: Visit) -> Response:
    """One's own account: change the password (every session ends; this browser gets a new
    one), the live sessions, sign out of one or of every one."""
    _own_account(visit)
    error = None
    notice = ACCOUNT_NOTICES.get(request.query_params.get("done") or "")
    status = 200
    if request.method == "POST":
        error, status = await _change_password(console, visit)
        if error is None:
            # Every session of the account ends, this one too: a thief holding a copy of this
            # very cookie is signed out as well. This browser goes on in a new session.
            response = RedirectResponse(url(request, f"{ACCOUNT}?done=password"), status_code=303)
            await console.auth.start_session(request, response, visit.session.user)
            return response
    sessions = await console.blocking(console.accounts.sessions_of, visit.session.user)
    return console.page(
        request,
        "account.html",
        {"error": error, "notice": notice, "sessions": sessions, "current": visit.session.session_hash},
        visit=visit,
        status_code=status,
    )


async def _change_password(console: Console, visit: Visit) -> tuple[str | None, int]:
    if _secret(visit, "password") != _secret(visit, "again"):
        return "The new passwords differ.", 400
    begun = await console.blocking(console.accounts.begin_confirm, visit.session)
    if isinstance(begun, SignIn):
        seconds = max(1, -(-(begun.wait_ms or 0) // 1000))
        return f"Too many wrong passwords. Try again in {seconds} seconds.", 429
    try:
        async with console.accounts.gate.slot():
            checked = await console.blocking(console.accounts.finish_sign_in, begun, _secret(visit, "current"))
            if checked.user is None:
                return "The current password is wrong.", 400
            await console.blocking(console.accounts.set_password, visit.email, _secret(visit, "password"))
    except HashingBusy:
        await console.blocking(console.accounts.abandon, begun)
        return "The server is busy checking other passwords. Try again in a moment.", 503
    except AccountError as exc:
        return str(exc), 400
    await console.blocking(console.audit, visit.email, "user.password", visit.email, {})
    return None, 200


async def sign_out_sessions(console: Console, request: Request, visit: Visit) -> Response:
    """``which=others``: every session but this one; ``which=all``: every one, this one too;
    else the session of that id (the account page's list)."""
    _own_account(visit)
    which = _field(visit, "which")
    user = visit.session.user
    if which == "all":
        await console.blocking(console.accounts.end_sessions, user)
        await console.blocking(console.audit, visit.email, "sessions.end", visit.email, {"which": "all"})
        return console.auth.signed_out(request)
    if which == "others":
        await console.blocking(console.accounts.end_sessions, user, keep=visit.session)
    else:
        await console.blocking(console.accounts.end_sessions, user, keep=visit.session, only=which[:32])
    await console.blocking(console.audit, visit.email, "sessions.end", visit.email, {"which": which[:32]})
    return RedirectResponse(url(request, f"{ACCOUNT}?done=others" if which == "others" else ACCOUNT), status_code=303)


def routes(console: Console) -> list[Route]:
    return [
        Route(USERS, console.endpoint(list_users, admin=True), methods=["GET"]),
        Route(USERS, console.endpoint(add_user, admin=True), methods=["POST"]),
        Route(USERS + "/{user_id:str}/remove", console.endpoint(remove_user, admin=True), methods=["POST"]),
        Route(USERS + "/{user_id:str}/password", console.endpoint(reset_password, admin=True), methods=["POST"]),
        Route(AUDIT, console.endpoint(audit_page, admin=True), methods=["GET"]),
        Route(USERS + "/{user_id:str}/unlock", console.endpoint(unlock_user, admin=True), methods=["POST"]),
        Route(ACCOUNT, console.endpoint(account_page), methods=["GET", "POST"]),
        Route(ACCOUNT + "/sessions", console.endpoint(sign_out_sessions), methods=["POST"]),
    ]
