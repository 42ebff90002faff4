"""Staff accounts of the console: passwords, throttled sign-in, sessions, what each may see.

Transport-free, so ``aap users`` (the command line) and the console (the web)
apply the same rules (docs/console.md, "Signing in"):

- Passwords are hashed with argon2id (``argon2-cffi``'s defaults, the RFC 9106
  §4 profile for memory-constrained machines: 64 MiB, 3 passes, 4 lanes) and
  re-hashed on sign-in when those defaults move on. A hash takes its 64 MiB for
  as long as it runs, so a process runs at most ``[web] login_hash_concurrency``
  at once (:class:`HashGate`); a sign-in that waits longer than
  ``login_hash_wait_ms`` for one is refused as busy, never queued without end.
- A new password has :data:`MIN_PASSWORD_LENGTH` characters or more, enough
  different ones, is not one of a well-known list of common passwords shipped
  with the package, and is not the account's e-mail address (nor a part of it
  with a few characters added): :class:`PasswordPolicy`.
- A sign-in attempt is counted *before* its password is hashed, atomically in
  the database, per account and per client address (both hashed): the first
  ``login_failures_per_account`` (``_per_address``) attempts are free, each
  further one waits ``login_delay_seconds``, doubled after every failure, up to
  ``lockout_minutes``. A success takes its attempt back (the address) or forgets
  them (the account). A browser that signed in to the account before carries a
  signed device token (the console's cookie): its attempts are counted under
  that token alone, so strangers' failures never delay the account's owner on
  their own browser. An unknown e-mail costs the same hash and answers the same.
- A session is a random token whose SHA-256 is stored; it ends after
  ``session_idle_minutes`` without use and ``session_max_hours`` after sign-in.
  A new password ends the account's sessions (the console starts a new one
  for the person who changed it).
- Roles: ``admin`` manages accounts and sees every lead; ``staff`` sees the
  leads of its seller (aggregate scope) and of its rooftops, each a rooftop of a
  seller, or every lead when it has neither. On a platform deployment
  (docs/platform.md) each tenant's agent has these accounts in its own namespace;
  the platform's own namespace holds only :data:`PLATFORM_ADMIN` accounts, the
  people who manage the tenants and may look at every one of them
  (:meth:`Accounts.is_platform_admin`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import threading
import time
import unicodedata
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from aap.config.model import DealerProfile, Settings
from aap.store.console import ROLES, ConsoleStore, ScopeRooftop, Session, User
from aap.store.lead_inbox import LeadScope, RooftopKey

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024
#: Different characters a new password has at least ("aaaaaaaaaaaa", twelve spaces: refused).
MIN_DISTINCT_CHARACTERS = 5
#: What must be left of a password once the e-mail address's parts are taken out of it.
MIN_BEYOND_EMAIL = 8
_EMAIL = re.compile(r"^[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f]+\.[^@\s\x00-\x1f\x7f]+$")
#: A session is touched in the database at most this often (the idle clock's resolution).
TOUCH_EVERY_MS = 30_000
#: The common passwords: John the Ripper's ``password.lst`` (Openwall, public domain; its
#: header says where it comes from), package data of ``aap``.
COMMON_PASSWORDS = "data/common-passwords.txt"

#: The role of a platform administrator: an account in a platform deployment's own namespace
#: (``aap users add EMAIL --platform-admin``), never in a tenant's. It is not one of an agent's
#: console :data:`~aap.store.console.ROLES`, which a tenant's admin may hand out.
PLATFORM_ADMIN = "platform_admin"

_hasher = PasswordHasher()


class AccountError(ValueError):
    """A refused account change; the message is safe to show (it quotes no password)."""


class HashingBusy(Exception):
    """Every password hash of this process was taken for longer than a sign-in waits."""


def normalise_email(email: str) -> str:
    value = email.strip().casefold()
    if not _EMAIL.match(value) or len(value) > 254:
        raise AccountError("an account needs an e-mail address such as name@dealer.example")
    return value


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _core(text: str) -> str:
    """``text`` without the digits, spaces and symbols around it (``Password1234!`` -> ``password``)."""
    return re.sub(r"^[\W\d_]+|[\W\d_]+$", "", text)


def _letters_and_digits(text: str) -> str:
    return re.sub(r"[\W_]+", "", text)


class PasswordPolicy:
    """What a new password must be (NIST SP 800-63B §5.1.1.2: length, not a common or
    context-specific word); the list is read from the package on first use."""

    def __init__(self) -> None:
        self._common: frozenset[str] | None = None
        self._lock = threading.Lock()

    @property
    def common(self) -> frozenset[str]:
        if self._common is None:
            with self._lock:
                if self._common is None:
                    text = resources.files("aap").joinpath(COMMON_PASSWORDS).read_text(encoding="utf-8")
                    self._common = frozenset(
                        _fold(line) for line in text.splitlines() if line and not line.startswith("#!comment")
                    )
        return self._common

    def _is_common(self, text: str) -> bool:
        return any(form and form in self.common for form in (text, _core(text)))

    def problem(self, password: str, email: str | None = None) -> str | None:
        """Why ``password`` may not be set for ``email``'s account, or None."""
        if len(password) < MIN_PASSWORD_LENGTH:
            return f"a password needs at least {MIN_PASSWORD_LENGTH} characters"
        if len(password) > MAX_PASSWORD_LENGTH:
            return f"a password has at most {MAX_PASSWORD_LENGTH} characters"
        if len(set(password)) < MIN_DISTINCT_CHARACTERS:
            return f"a password needs at least {MIN_DISTINCT_CHARACTERS} different characters"
        folded = " ".join(_fold(password).split())
        if any(self._is_common(form) for form in (folded, folded.replace(" ", ""))):
            return "that password is on a list of the most common passwords; choose another"
        if email:
            plain = _letters_and_digits(folded)
            for part in _email_parts(email):
                left = plain.replace(part, "")
                if left != plain and (len(left) < MIN_BEYOND_EMAIL or self._is_common(left)):
                    return "a password may not be the e-mail address, or a part of it with a few characters added"
        return None


def _email_parts(email: str) -> list[str]:
    """The address, its local part, the local part's pieces and the domain's names (3 characters or more)."""
    address = _fold(email.strip())
    local, _, domain = address.partition("@")
    pieces = [address, local, *re.split(r"[.\-_+]", local), *domain.split(".")[:-1]]
    parts = {_letters_and_digits(p) for p in pieces}
    return sorted((p for p in parts if len(p) >= 3), key=len, reverse=True)


def _verify(stored: str, password: str) -> bool:
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


class _Waiter:
    __slots__ = ("loop", "future", "granted")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.granted = False


class HashGate:
    """At most ``size`` password hashes at once in this process; a request waits ``wait_seconds``
    for one, first come first served, then :class:`HashingBusy`.

    An asyncio semaphore belongs to one event loop; this gate is shared by every thread and
    loop of the process (a test client runs each request on its own loop), so a slot is handed
    over under a lock and the waiter woken on its own loop. Waiting costs no thread: the
    threads of the pool stay free for the console's other work while sign-ins queue.
    """

    def __init__(self, size: int, wait_seconds: float) -> None:
        self.size = size
        self.wait_seconds = wait_seconds
        self._free = size
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    @property
    def in_use(self) -> int:
        with self._lock:
            return self.size - self._free

    async def _acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            waiter = _Waiter(loop)
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), self.wait_seconds)
        except TimeoutError:
            with self._lock:
                if waiter.granted:  # handed over just as the wait ended: it is ours
                    return
                self._waiters.remove(waiter)
            raise HashingBusy() from None
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self._release()
            raise

    def _release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop has closed: that request is gone
                    continue
                waiter.granted = True
                return
            self._free += 1

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one hash slot for the block (raises :class:`HashingBusy` after the wait)."""
        await self._acquire()
        try:
            yield
        finally:
            self._release()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True)
class Device:
    """A browser that signed in to ``user_id`` before (from the console's signed device cookie)."""

    user_id: str
    token: str


@dataclass(frozen=True)
class SignIn:
    """The outcome of a sign-in: ``user`` when it worked, else ``wait_ms`` when the attempt was
    held back (nothing checked: try again after that long)."""

    user: User | None
    wait_ms: int | None = None


@dataclass(frozen=True)
class Attempt:
    """A sign-in attempt counted under ``keys``, its password not yet checked."""

    user: User | None
    keys: tuple[str, ...]
    account_key: str
    address_key: str | None


class Accounts:
    """Account management, sign-in and sessions over a :class:`ConsoleStore`."""

    def __init__(self, store: ConsoleStore, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.web = settings.web
        self.clock = clock
        self.policy = PasswordPolicy()
        self.gate = HashGate(self.web.login_hash_concurrency, self.web.login_hash_wait_ms / 1000)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- passwords ----------------------------------------------------------------------
    def password_problem(self, password: str, email: str | None = None) -> str | None:
        return self.policy.problem(password, email)

    def hash_new_password(self, password: str, email: str) -> str:
        """The hash of a new password for ``email``'s account (blocking: argon2), or AccountError."""
        problem = self.policy.problem(password, email)
        if problem:
            raise AccountError(problem)
        return _hasher.hash(password)

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

    def check_scope(
        self, role: str, dealer_id: str | None, rooftops: tuple[ScopeRooftop | str, ...]
    ) -> tuple[ScopeRooftop, ...]:
        """The scope's rooftops as stored (each with its seller on a marketplace), or AccountError."""
        if self.settings.platform is not None:
            if role != PLATFORM_ADMIN:
                raise AccountError(
                    "the platform's own accounts are platform administrators (aap users add EMAIL --platform-admin);"
                    " a tenant's admin and staff accounts are the tenant's own (--tenant ID)"
                )
            if dealer_id or rooftops:
                raise AccountError("a platform administrator sees every tenant: it has no seller or rooftops")
            return ()
        if role == PLATFORM_ADMIN:
            raise AccountError(
                "a platform administrator is an account of a platform deployment itself ([platform]), "
                f"not of an agent; the roles here are: {', '.join(ROLES)}"
            )
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
        if user.role in ("admin", PLATFORM_ADMIN):
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
        if self.is_platform_admin(user):
            return "every tenant"
        if user.role == "admin" or not (user.dealer_id or user.rooftops):
            return "every lead"
        parts = [f"seller {user.dealer_id}"] if user.dealer_id else []
        for seller, name in user.rooftops:
            parts.append(f"{name} ({seller})" if seller and seller != user.dealer_id else name)
        return ", ".join(parts)

    def is_platform_admin(self, user: User) -> bool:
        """Whether ``user`` administers the platform: the role, in the platform's own namespace (an
        account of that role anywhere else — there can be none — is nobody's administrator)."""
        return user.role == PLATFORM_ADMIN and self.settings.platform is not None

    # -- management -------------------------------------------------------------------
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
        stored = self.check_scope(role, dealer_id, tuple(rooftops))
        digest = self.hash_new_password(password, address)
        user = self.store.add_user(address, digest, role, dealer_id, stored, self.now_ms())
        if user is None:
            raise AccountError(f"there is already an account for {address}")
        return user

    def find(self, email: str) -> User:
        user = self.store.user_by_email(normalise_email(email))
        if user is None:
            raise AccountError(f"no account for {email.strip()}")
        return user

    def set_password(self, email: str, password: str, *, keep_session: Session | None = None) -> User:
        """A new password; every session of the account ends but ``keep_session`` (the person's own)."""
        user = self.find(email)
        digest = self.hash_new_password(password, user.email)
        keep = keep_session.session_hash if keep_session is not None else None
        self.store.set_password(user.user_id, digest, self.now_ms(), keep=keep)
        return user

    def remove(self, email: str) -> User:
        user = self.find(email)
        self.store.remove_user(user.user_id)
        return user

    def unlock(self, email: str) -> int:
        """Forget the failed sign-ins counted against ``email``'s account (``aap users unlock``)."""
        user = self.find(email)
        return self.store.clear_throttle([self._account_key(user.email)])

    def throttled(self, users: list[User]) -> dict[str, int]:
        """Failed sign-ins counted against each account that has any, by user id (the Users page)."""
        keys = {self._account_key(u.email): u.user_id for u in users}
        rows = self.store.throttle(list(keys))
        forget = self.now_ms() - self.web.login_failures_kept_hours * 3_600_000
        return {keys[k]: row.attempts for k, row in rows.items() if row.last_ms >= forget}

    # -- sign-in ------------------------------------------------------------------------
    def _account_key(self, email: str) -> str:
        return "account:" + _digest(_fold(email.strip()))

    def _limit(self, key: str) -> int:
        if key.startswith("address:"):
            return self.web.login_failures_per_address
        return self.web.login_failures_per_account

    def delay_ms(self, beyond: int) -> int:
        """The wait before the attempt ``beyond`` attempts past the free ones (1: the first delay)."""
        first = self.web.login_delay_seconds * 1000
        doubled: int = first << min(max(beyond, 1) - 1, 40)
        return min(self.web.lockout_minutes * 60_000, doubled)

    def _wait_rule(self, now: int) -> Callable[[str, int, int], int]:
        def wait_ms(key: str, attempts: int, last_ms: int) -> int:
            limit = self._limit(key)
            if attempts < limit:
                return 0
            return max(0, last_ms + self.delay_ms(attempts - limit + 1) - now)

        return wait_ms

    def _reserve(self, keys: tuple[str, ...]) -> int:
        now = self.now_ms()
        forget = now - self.web.login_failures_kept_hours * 3_600_000
        return self.store.reserve(keys, now, forget, self._wait_rule(now))

    def begin_sign_in(self, email: str, address: str | None, device: Device | None = None) -> Attempt | SignIn:
        """Count a sign-in attempt before its password is checked (blocking: the database).

        A :class:`SignIn` with ``wait_ms`` when it must wait (nothing counted, nothing to hash);
        else the :class:`Attempt` to check with :meth:`finish_sign_in` (under :attr:`gate`) or
        give back with :meth:`abandon`.
        """
        try:
            user = self.store.user_by_email(normalise_email(email))
        except AccountError:
            user = None
        account_key = self._account_key(email)
        if device is not None and user is not None and hmac_equal(device.user_id, user.user_id):
            keys: tuple[str, ...] = ("device:" + _digest(device.token),)
            address_key = None
        else:
            address_key = "address:" + _digest(address or "unknown")
            keys = (account_key, address_key)
        wait = self._reserve(keys)
        if wait:
            return SignIn(None, wait)
        return Attempt(user, keys, account_key, address_key)

    def finish_sign_in(self, attempt: Attempt, password: str) -> SignIn:
        """Check the password of a counted attempt (blocking: argon2 and the database)."""
        user = attempt.user
        stored = self.store.password_hash(user.user_id) if user is not None else None
        if stored is None or len(password) > MAX_PASSWORD_LENGTH:
            _verify(self._dummy_hash(), password[:MAX_PASSWORD_LENGTH])  # the same cost as a real check
            return SignIn(None)
        if user is None or not _verify(stored, password):
            return SignIn(None)
        self.store.clear_throttle([k for k in attempt.keys if k != attempt.address_key] + [attempt.account_key])
        if attempt.address_key is not None:
            self.store.refund([attempt.address_key])  # a success is no failure of the address
        now = self.now_ms()
        if _hasher.check_needs_rehash(stored):
            self.store.set_password(user.user_id, _hasher.hash(password), now, end_sessions=False)
        self.purge()
        return SignIn(user)

    def abandon(self, attempt: Attempt) -> None:
        """Give back an attempt whose password was never checked (the server was busy)."""
        self.store.refund(attempt.keys)

    def sign_in(self, email: str, password: str, address: str | None, device: Device | None = None) -> SignIn:
        """:meth:`begin_sign_in` then :meth:`finish_sign_in`, in this thread (the command line, tests)."""
        attempt = self.begin_sign_in(email, address, device)
        if isinstance(attempt, SignIn):
            return attempt
        return self.finish_sign_in(attempt, password)

    def begin_confirm(self, session: Session) -> Attempt | SignIn:
        """Count a check of a signed-in person's own password (changing it), under the session alone:
        others' failures at the account never hold it back, and a stolen session guesses slowly."""
        key = "session:" + session.session_hash[:32]
        wait = self._reserve((key,))
        if wait:
            return SignIn(None, wait)
        return Attempt(session.user, (key,), key, None)

    def _dummy_hash(self) -> str:
        """A hash of nothing with the hasher's parameters: checking any password against it costs
        what checking a real one does (RFC 9106 §3.1: the cost is the parameters'), without the
        hash a real one took to make."""
        h = _hasher
        salt = base64.b64encode(secrets.token_bytes(h.salt_len)).decode().rstrip("=")
        tag = base64.b64encode(secrets.token_bytes(h.hash_len)).decode().rstrip("=")
        return f"$argon2id$v=19$m={h.memory_cost},t={h.time_cost},p={h.parallelism}${salt}${tag}"

    # -- sessions -----------------------------------------------------------------------
    def start_session(self, user: User, user_agent: str | None = None) -> str:
        """A new session for ``user``; returns its token (for the cookie: never stored as such)."""
        token = secrets.token_urlsafe(32)
        label = re.sub(r"[\x00-\x1f\x7f]", "", " ".join(user_agent.split()))[:200] if user_agent else None
        self.store.add_session(_digest_full(token), user.user_id, secrets.token_urlsafe(32), self.now_ms(), label)
        return token

    def _expired(self, row: Session, now: int) -> bool:
        return (
            now - row.seen_ms > self.web.session_idle_minutes * 60_000
            or now - row.created_ms > self.web.session_max_hours * 3_600_000
        )

    def session(self, token: str) -> Session | None:
        """The live session of ``token``, touched; None when unknown, idle too long or too old."""
        row = self.store.session(_digest_full(token))
        if row is None:
            return None
        now = self.now_ms()
        if self._expired(row, now):
            self.store.end_session(row.session_hash)
            return None
        if now - row.seen_ms >= TOUCH_EVERY_MS:
            self.store.touch_session(row.session_hash, now)
        return row

    def sessions_of(self, user: User) -> list[Session]:
        """The live sessions of ``user``, most recently used first (the account page)."""
        now = self.now_ms()
        return [s for s in self.store.sessions_of(user) if not self._expired(s, now)]

    def end_session(self, token: str) -> None:
        self.store.end_session(_digest_full(token))

    def end_sessions(self, user: User, *, keep: Session | None = None, only: str | None = None) -> int:
        """End ``user``'s sessions: every one but ``keep``, or the one whose public id is ``only``."""
        if only is not None:
            ended = 0
            for row in self.store.sessions_of(user):
                if row.public_id == only and (keep is None or row.session_hash != keep.session_hash):
                    self.store.end_session(row.session_hash)
                    ended += 1
            return ended
        return self.store.end_sessions(user.user_id, keep=keep.session_hash if keep is not None else None)

    def purge(self) -> int:
        """Forget ended sessions and long-forgotten sign-in counts."""
        now = self.now_ms()
        self.store.purge_throttle(now - self.web.login_failures_kept_hours * 3_600_000)
        return self.store.purge_sessions(
            now - self.web.session_idle_minutes * 60_000, now - self.web.session_max_hours * 3_600_000
        )


def hmac_equal(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode(), b.encode())


def _digest_full(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
