"""Attacks on the staff console, shared by tests/test_adversarial.py and bench/adversarial.py:
sign-in storms and races over real HTTP, generated query strings for every console page, a
hasher that counts how many hashes run at once, CSV cells a spreadsheet could run.

Every request here is a browser's: a sign-in first fetches the form (its CSRF token and
cookie), as a browser does, so what is measured is the password check, not a refused form.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
from argon2 import PasswordHasher
from hypothesis import strategies as st

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def sign_in_form(base: str) -> tuple[httpx.Client, str]:
    """A fresh browser with the sign-in form loaded: (its client, the form's CSRF token)."""
    client = httpx.Client(base_url=base, timeout=120, follow_redirects=False)
    return client, csrf_of(client.get("/console/login").text)


def sign_in(base: str, email: str, password: str) -> httpx.Client:
    client, token = sign_in_form(base)
    answer = client.post("/console/login", data={"csrf_token": token, "email": email, "password": password})
    assert answer.status_code == 303, answer.text
    return client


def race(base: str, attempts: list[tuple[str, str]], *, known: httpx.Client | None = None) -> list[int]:
    """Post the sign-in attempts (e-mail, password) all at once, one browser each (or each from the
    ``known`` browser's cookies); their statuses, in order."""
    forms = []
    for _ in attempts:
        client, token = sign_in_form(base)
        if known is not None:
            for cookie in known.cookies.jar:
                if cookie.name == "aap_console_device":
                    client.cookies.set(cookie.name, cookie.value, domain=cookie.domain, path=cookie.path)
        forms.append((client, token))
    start = threading.Barrier(len(attempts))

    def post(i: int) -> int:
        client, token = forms[i]
        email, password = attempts[i]
        start.wait()
        return client.post(
            "/console/login", data={"csrf_token": token, "email": email, "password": password}
        ).status_code

    try:
        with ThreadPoolExecutor(len(attempts)) as pool:
            return list(pool.map(post, range(len(attempts))))
    finally:
        for client, _ in forms:
            client.close()


class CountingHasher(PasswordHasher):
    """argon2id at test costs whose checks take ``hold`` seconds and are counted: how many ran,
    and the most that ran at once (the hash gate's bound, seen from inside)."""

    def __init__(self, hold: float = 0.05) -> None:
        super().__init__(time_cost=1, memory_cost=1024, parallelism=1)
        self.hold = hold
        self.checks = 0
        self.at_once = 0
        self.most = 0
        self.lock = threading.Lock()

    def verify(self, hash: str | bytes, password: str | bytes) -> bool:  # noqa: A002 (argon2's name)
        with self.lock:
            self.checks += 1
            self.at_once += 1
            self.most = max(self.most, self.at_once)
        try:
            time.sleep(self.hold)  # the time a real hash takes, so that checks overlap if they can
            return super().verify(hash, password)
        finally:
            with self.lock:
                self.at_once -= 1


@contextmanager
def counting_hasher(**changes: Any) -> Iterator[CountingHasher]:
    """Every password check of this process through a :class:`CountingHasher`."""
    import pytest

    from aap import accounts

    hasher = CountingHasher(**changes)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accounts, "_hasher", hasher)
        yield hasher


#: Query keys the console's pages read (and a few they do not).
QUERY_KEYS = (
    "before",
    "q",
    "status",
    "seller",
    "rooftop",
    "from",
    "to",
    "delivery",
    "handled",
    "subject",
    "done",
    "account",
    "queued",
    "next",
    "nothing",
    # the pipeline, the inventory browser and the feeds pages
    "after",
    "stage",
    "owner",
    "follow_up",
    "sort",
    "notice",
    "condition",
    "vehicle_type",
    "no_photo",
    "no_price",
    "warned",
    "feed",
    "kind",
)


def query_values() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=40),
        st.from_regex(r"\A-?[0-9]{1,40}(\.[a-z_0-9]{0,70})?\Z"),
        st.sampled_from(
            [
                "9" * 30 + ".lead_x",
                "99999999999999999999",
                "2026-02-30",
                "99999-01-01",
                "../../etc/passwd",
                "'; DROP TABLE leads; --",
                "\x00",
                "%00",
                "x" * 1500,
                "dead",
                "handled",
                "received",
                "Downtown",
                "south-autos",
                "north-motors",
            ]
        ),
    )


def console_queries() -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(QUERY_KEYS), query_values(), max_size=5)


def spreadsheet_text() -> st.SearchStrategy[str]:
    """Cell text full of what spreadsheets read as formulas and field separators."""
    return st.text(alphabet=st.sampled_from(list("=+-@\t\r;, 'ab1.|!(")), max_size=30)


def spreadsheet_parts(cell: str) -> list[str]:
    """The pieces of a cell a spreadsheet may read as cells of their own: the cell, and what
    follows each ``,`` or ``;`` (where a locale splits fields), leading spaces dropped."""
    return [cell] + [part.lstrip(" ") for part in re.split(r"[;,]", cell)[1:]]


def market_app(tmp: str, public_url: str, **web: Any) -> tuple[Any, Any, dict[tuple[str, str], str]]:
    """The marketplace of tests/console_support.py as an app (rate limit off: the attacks are one
    busy caller): (app, stores, lead ids by (seller, rooftop)); accounts: an admin, the Downtown
    staff of north-motors, each with the password of console_support."""
    from aap.accounts import Accounts
    from aap.config.model import RateLimit
    from aap.server.app import create_app
    from aap.store import open_stores
    from console_support import (
        NORTH,
        PASSWORD,
        fast_web,
        market_listings,
        market_settings,
        submit_market_leads,
    )

    url = f"sqlite:///{tmp}/console-attacks.db"
    settings = replace(
        market_settings(database_url=url),
        public_url=public_url,
        rate_limit=RateLimit(enabled=False),
        web=fast_web(**web),
    )
    stores = open_stores(url)
    stores.inventory.import_listings(market_listings())
    accounts = Accounts(stores.console, settings)
    accounts.add("admin@market.example", PASSWORD, role="admin")
    accounts.add("downtown@north.example", PASSWORD, rooftops=((NORTH, "Downtown"),))
    app = create_app(settings, stores)
    from aap.agent import DealerAgent

    ids = submit_market_leads(DealerAgent(settings, stores))
    return app, stores, ids
