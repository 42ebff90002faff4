"""The console's account pages: users and the audit log (admins), and one's own password.

The rules are :class:`aap.accounts.Accounts`', the same ``aap users`` applies;
every change is in the audit log. An admin cannot remove their own account
here (``aap users remove`` on the server can), so a console is never left
without the person who is using it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from aap.accounts import AccountError, hash_password
from aap.console.auth import Refused, Visit
from aap.paths import CONSOLE_PREFIX
from aap.store.console import ROLES

if TYPE_CHECKING:
    from aap.console import Console

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


def routes(console: Console) -> list[Route]:
    def users_page(
        request: Request,
        visit: Visit,
        users: list[Any],
        *,
        error: str | None = None,
        notice: str | None = None,
        status: int = 200,
    ) -> Response:
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
                "roles": ROLES,
                "sellers": sellers,
                "rooftops": rooftops,
                "error": error,
                "notice": notice or request.query_params.get("notice"),
            },
            visit=visit,
            status_code=status,
        )

    async def list_users(request: Request, visit: Visit) -> Response:
        return users_page(request, visit, await console.blocking(console.stores.console.users))

    async def add_user(request: Request, visit: Visit) -> Response:
        assert visit.form is not None
        email = _field(visit, "email")
        try:
            rooftops = tuple(_rooftop(v) for v in visit.form.getlist("rooftops") if isinstance(v, str) and v)
        except ValueError:
            raise Refused(400, "A rooftop of the form is not one of the listed rooftops; reload the page.") from None
        try:
            user = await console.blocking(
                console.accounts.add,
                email,
                _secret(visit, "password"),
                role=_field(visit, "role") or "staff",
                dealer_id=_field(visit, "seller") or None,
                rooftops=rooftops,
            )
        except AccountError as exc:
            return users_page(
                request, visit, await console.blocking(console.stores.console.users), error=str(exc), status=400
            )
        await console.blocking(
            console.audit,
            visit.email,
            "user.add",
            user.email,
            {"role": user.role, "seller": user.dealer_id, "rooftops": [list(pair) for pair in user.rooftops]},
        )
        return RedirectResponse(f"{USERS}?notice=Account+{user.email}+added.", status_code=303)

    async def _target(visit: Visit, request: Request) -> Any:
        user_id = request.path_params["user_id"]
        users = await console.blocking(console.stores.console.users)
        user = next((u for u in users if u.user_id == user_id), None)
        if user is None:
            raise Refused(404, "There is no such account.")
        return user

    async def remove_user(request: Request, visit: Visit) -> Response:
        user = await _target(visit, request)
        if user.user_id == visit.session.user.user_id:
            raise Refused(409, "You cannot remove your own account while signed in with it.")
        await console.blocking(console.stores.console.remove_user, user.user_id)
        await console.blocking(console.audit, visit.email, "user.remove", user.email, {})
        return RedirectResponse(f"{USERS}?notice=Account+{user.email}+removed.", status_code=303)

    async def reset_password(request: Request, visit: Visit) -> Response:
        user = await _target(visit, request)
        try:
            digest = await console.blocking(hash_password, _secret(visit, "password"))
        except AccountError as exc:
            return users_page(
                request, visit, await console.blocking(console.stores.console.users), error=str(exc), status=400
            )
        await console.blocking(console.stores.console.set_password, user.user_id, digest, console.now_ms())
        await console.blocking(console.audit, visit.email, "user.password", user.email, {})
        return RedirectResponse(f"{USERS}?notice=Password+of+{user.email}+changed.", status_code=303)

    async def audit_page(request: Request, visit: Visit) -> Response:
        before = request.query_params.get("before")
        before_ms = int(before) if before and before.isdigit() else None
        subject = request.query_params.get("subject") or None
        entries = await console.blocking(
            console.stores.console.audit_entries, subject=subject, before_ms=before_ms, limit=100
        )
        older = entries[-1].at_ms if len(entries) == 100 else None
        return console.page(
            request, "audit.html", {"entries": entries, "older": older, "subject": subject}, visit=visit
        )

    async def account_page(request: Request, visit: Visit) -> Response:
        error = None
        notice = None
        status = 200
        if request.method == "POST":
            outcome = await console.blocking(
                console.accounts.sign_in, visit.email, _secret(visit, "current"), visit.address
            )
            if outcome.user is None:
                error, status = "The current password is wrong.", 400
            elif _secret(visit, "password") != _secret(visit, "again"):
                error, status = "The new passwords differ.", 400
            else:
                try:
                    digest = await console.blocking(hash_password, _secret(visit, "password"))
                except AccountError as exc:
                    error, status = str(exc), 400
                else:
                    await console.blocking(
                        console.stores.console.set_password,
                        visit.session.user.user_id,
                        digest,
                        console.now_ms(),
                        end_sessions=False,
                    )
                    await console.blocking(console.audit, visit.email, "user.password", visit.email, {})
                    notice = "Your password was changed."
        return console.page(
            request, "account.html", {"error": error, "notice": notice}, visit=visit, status_code=status
        )

    return [
        Route(USERS, console.guarded(list_users, admin=True), methods=["GET"]),
        Route(USERS, console.guarded(add_user, admin=True), methods=["POST"]),
        Route(USERS + "/{user_id:str}/remove", console.guarded(remove_user, admin=True), methods=["POST"]),
        Route(USERS + "/{user_id:str}/password", console.guarded(reset_password, admin=True), methods=["POST"]),
        Route(AUDIT, console.guarded(audit_page, admin=True), methods=["GET"]),
        Route(ACCOUNT, console.guarded(account_page), methods=["GET", "POST"]),
    ]
