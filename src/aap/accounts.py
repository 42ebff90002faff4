"""Staff accounts of the console: passwords, sign-in with lockout, sessions, what each may see.

Transport-free, so ``aap users`` (the command line) and the console (the web)
apply the same rules:

- Passwords are hashed with argon2id (``argon2-cffi``'s defaults, the RFC 9106
  profile for memory-constrained machines) and re-hashed on sign-in when those
  defaults move on. At least :data:`MIN_PASSWORD_LENGTH` characters.
- Sign-in failures count per account and per client address (both hashed) in
  the database; reaching ``[web] login_failures_per_account`` or
  ``login_failures_per_address`` within ``lockout_minutes`` locks that key for
  ``lockout_minutes``, during which even the right password is refused. An
  unknown e-mail costs the same hash as a known one and answers the same.
- A session is a random token whose SHA-256 is stored; it ends after
  ``session_idle_minutes`` without use and ``session_max_hours`` after sign-in.
- Roles: ``admin`` manages accounts and sees every lead; ``staff`` sees the
  leads of its seller (aggregate scope) and rooftops, or every lead when it has
  neither (docs/console.md).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from aap.config.model import DealerProfile, Settings
from aap.store.console import ROLES, ConsoleStore, ScopeRooftop, Session, User
from aap.store.lead_inbox import LeadScope, RooftopKey

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
#: A session is touched in the database at most this often (the idle clock's resolution).
TOUCH_EVERY_MS = 30_000

_hasher = PasswordHasher()


class AccountError(ValueError):
    """A refused account change; the message is safe to show (it quotes no password)."""


def normalise_email(email: str) -> str:
    value = email.strip().casefold()
    if not _EMAIL.match(value) or len(value) > 254:
        raise AccountError("an account needs an e-mail address such as name@dealer.example")
    return value


def password_problem(password: str) -> str | None:
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"a password needs at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"a password has at most {MAX_PASSWORD_LENGTH} characters"
    return None


def hash_password(password: str) -> str:
    problem = password_problem(password)
    if problem:
        raise AccountError(problem)
    return _hasher.hash(password)


def _verify(stored: str, password: str) -> bool:
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SignIn:
    """The outcome of a sign-in: ``user`` when it worked, else ``locked_until_ms`` when locked out."""

    user: User | None
    locked_until_ms: int | None = None


class Accounts:
    """Account management, sign-in and sessions over a :class:`ConsoleStore`."""

    def __init__(self, store: ConsoleStore, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.web = settings.web
        self.clock = clock
        self._dummy: str | None = None

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- management -------------------------------------------------------------------
    # -- scopes ------------------------------------------------------------------------
    def seller_key(self, profile: DealerProfile) -> str:
        """The ``dealer_id`` the leads of ``profile``'s rooftops carry (aap.leads.submit)."""
        return profile.dealer_id or self.settings.deployment_id

    def rooftop_choices(self) -> list[tuple[str | None, str, str]]:
        """Every rooftop a staff scope may name: (seller or None on a one-dealer deployment, rooftop,
        seller's name), by seller then rooftop."""
        aggregate = self.settings.scope == "aggregate"
        return sorted(
            (
                (p.dealer_id if aggregate else None, str(r["name"]), p.name)
                for p in self.settings.all_profiles()
                for r in p.rooftops
            ),
            key=lambda c: (c[0] or "", c[1]),
        )

    def parse_rooftop(self, text: str, dealer_id: str | None = None) -> ScopeRooftop:
        """A rooftop as typed on the command line: ``NAME`` (one dealer, or with a seller), else
        ``SELLER:NAME`` on a marketplace. Raises :class:`AccountError` naming the choices."""
        if self.settings.scope != "aggregate" or dealer_id is not None:
            return (dealer_id, text)
        found = [(d, n) for d, n, _ in self.rooftop_choices() if d is not None and text == f"{d}:{n}"]
        if len(found) == 1:
            return found[0]
        choices = ", ".join(f"{d}:{n}" for d, n, _ in self.rooftop_choices())
        raise AccountError(
            f"on a marketplace a rooftop names its seller, as SELLER:ROOFTOP (or give --seller); "
            f"{text!r} is none of: {choices}"
        )

    def _check_scope(
        self, role: str, dealer_id: str | None, rooftops: tuple[ScopeRooftop | str, ...]
    ) -> tuple[ScopeRooftop, ...]:
        """The scope's rooftops as stored (each with its seller on a marketplace), or AccountError."""
        if role not in ROLES:
            raise AccountError(f"the role is one of: {', '.join(ROLES)}")
        if role == "admin" and (dealer_id or rooftops):
            raise AccountError("an admin sees every lead: give a seller or rooftops to staff accounts only")
        aggregate = self.settings.scope == "aggregate"
        if dealer_id is not None:
            if not aggregate or self.settings.profile_for(dealer_id) is None:
                sellers = [p.dealer_id for p in self.settings.dealers if p.dealer_id]
                raise AccountError(
                    f"no seller {dealer_id!r} on this endpoint"
                    + (f" (sellers: {', '.join(sellers)})" if sellers else "")
                )
        known = {(d, n) for d, n, _ in self.rooftop_choices()}
        resolved: list[ScopeRooftop] = []
        for entry in rooftops:
            seller, name = (None, entry) if isinstance(entry, str) else entry
            seller = seller if seller is not None else dealer_id
            if aggregate and seller is None:
                raise AccountError(
                    f"rooftop {name!r}: on a marketplace a rooftop names its seller (rooftop names are"
                    " unique only within a seller)"
                )
            if dealer_id is not None and seller != dealer_id:
                raise AccountError(f"rooftop {name!r} of seller {seller} is not a rooftop of seller {dealer_id}")
            if not aggregate:
                seller = None
            if (seller, name) not in known:
                names = sorted(n for d, n in known if d == seller)
                raise AccountError(
                    f"no rooftop {name!r}"
                    + (f" of seller {seller}" if seller else "")
                    + (f"; rooftops: {', '.join(names)}" if names else "")
                )
            if (seller, name) not in resolved:
                resolved.append((seller, name))
        return tuple(resolved)

    def scope_of(self, user: User) -> LeadScope:
        """The leads ``user`` may see: admins every lead; staff their seller's and rooftops'.

        A rooftop stored without its seller (an account made before scopes named sellers) is
        the rooftop of that name of the only seller having one; where several do, it allows
        nothing (docs/console.md, "Accounts, roles and what each person sees").
        """
        if user.role == "admin":
            return LeadScope()
        if not user.rooftops:
            return LeadScope(user.dealer_id)
        keys = {p.dealer_id: self.seller_key(p) for p in self.settings.all_profiles()}
        aggregate = self.settings.scope == "aggregate"
        pairs: set[RooftopKey] = set()
        for seller, name in user.rooftops:
            if seller is not None and aggregate:
                pairs.add((keys.get(seller, seller), name))
                continue
            owners = [d for d, n, _ in self.rooftop_choices() if n == name]
            if len(owners) == 1:
                pairs.add((keys.get(owners[0], self.seller_key(self.settings.dealer)), name))
        return LeadScope(user.dealer_id, frozenset(pairs))

    def describe_scope(self, user: User) -> str:
        """What ``user`` sees, in words (``aap users list``, the Users page)."""
        if user.role == "admin" or not (user.dealer_id or user.rooftops):
            return "every lead"
        parts = [f"seller {user.dealer_id}"] if user.dealer_id else []
        for seller, name in user.rooftops:
            parts.append(f"{name} ({seller})" if seller and seller != user.dealer_id else name)
        return ", ".join(parts)

    def add(
        self,
        email: str,
        password: str,
        *,
        role: str = "staff",
        dealer_id: str | None = None,
        rooftops: tuple[ScopeRooftop | str, ...] = (),
    ) -> User:
        """A new account; ``rooftops`` are (seller or None, rooftop name) pairs (:meth:`parse_rooftop`),
        or names (of the one dealer, or of ``dealer_id``)."""
        address = normalise_email(email)
        stored = self._check_scope(role, dealer_id, tuple(rooftops))
        user = self.store.add_user(address, hash_password(password), role, dealer_id, stored, self.now_ms())
        if user is None:
            raise AccountError(f"there is already an account for {address}")
        return user

    def find(self, email: str) -> User:
        user = self.store.user_by_email(normalise_email(email))
        if user is None:
            raise AccountError(f"no account for {email.strip()}")
        return user

    def set_password(self, email: str, password: str) -> User:
        """A new password; every session of the account ends."""
        user = self.find(email)
        self.store.set_password(user.user_id, hash_password(password), self.now_ms())
        return user

    def remove(self, email: str) -> User:
        user = self.find(email)
        self.store.remove_user(user.user_id)
        return user

    # -- sign-in ------------------------------------------------------------------------
    def _keys(self, email: str, address: str | None) -> tuple[str, str]:
        return "account:" + _digest(email.strip().casefold()), "address:" + _digest(address or "unknown")

    def sign_in(self, email: str, password: str, address: str | None) -> SignIn:
        """Check a password under the lockout rules (blocking: argon2 and the database)."""
        now = self.now_ms()
        account_key, address_key = self._keys(email, address)
        locked = self.store.locked_until((account_key, address_key), now)
        if locked is not None:
            return SignIn(None, locked)
        try:
            user = self.store.user_by_email(normalise_email(email))
        except AccountError:
            user = None
        stored = self.store.password_hash(user.user_id) if user is not None else None
        if stored is None or len(password) > MAX_PASSWORD_LENGTH:
            _verify(self._dummy_hash(), password[:MAX_PASSWORD_LENGTH])  # the same cost as a real check
            user = None
        elif not _verify(stored, password):
            user = None
        if user is None:
            window = self.web.lockout_minutes * 60_000
            locked_now = [
                self.store.record_failure(key, limit, window, now)
                for key, limit in (
                    (account_key, self.web.login_failures_per_account),
                    (address_key, self.web.login_failures_per_address),
                )
            ]
            return SignIn(None, now + window if any(locked_now) else None)
        self.store.clear_failures(account_key)
        if stored is not None and _hasher.check_needs_rehash(stored):
            self.store.set_password(user.user_id, _hasher.hash(password), now, end_sessions=False)
        return SignIn(user)

    def _dummy_hash(self) -> str:
        if self._dummy is None:
            self._dummy = _hasher.hash(secrets.token_urlsafe(16))
        return self._dummy

    # -- sessions -----------------------------------------------------------------------
    def start_session(self, user: User) -> str:
        """A new session for ``user``; returns its token (for the cookie: never stored as such)."""
        token = secrets.token_urlsafe(32)
        self.store.add_session(_digest_full(token), user.user_id, secrets.token_urlsafe(32), self.now_ms())
        return token

    def session(self, token: str) -> Session | None:
        """The live session of ``token``, touched; None when unknown, idle too long or too old."""
        row = self.store.session(_digest_full(token))
        if row is None:
            return None
        now = self.now_ms()
        if (
            now - row.seen_ms > self.web.session_idle_minutes * 60_000
            or now - row.created_ms > self.web.session_max_hours * 3_600_000
        ):
            self.store.end_session(row.session_hash)
            return None
        if now - row.seen_ms >= TOUCH_EVERY_MS:
            self.store.touch_session(row.session_hash, now)
        return row

    def end_session(self, token: str) -> None:
        self.store.end_session(_digest_full(token))

    def purge(self) -> int:
        now = self.now_ms()
        return self.store.purge_sessions(
            now - self.web.session_idle_minutes * 60_000, now - self.web.session_max_hours * 3_600_000
        )


def _digest_full(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
