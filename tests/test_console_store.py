"""The console's stored state on both backends: accounts, lockouts, sessions, the lead inbox,
delivery attempts, check runs and the inventory summary (docs/console.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from aap.accounts import AccountError, Accounts, Device, HashGate, HashingBusy, PasswordPolicy
from aap.accounts import Attempt as SignInAttempt
from aap.store import open_stores
from aap.store.lead_inbox import InboxFilter, LeadScope
from aap.store.leads import Attempt
from aap.store.legacy import _backfill_customer_keys
from console_support import CUSTOMERS, PASSWORD, cheap_hashing, dealer, fast_web, listings, submit_customers  # noqa: F401 (dealer: a fixture)

#: Tests that hash with argon2-cffi's default costs (the others use cheap ones, console_support.py).
DEFAULT_HASHING = {"test_accounts_are_added_once_with_a_valid_scope"}


@pytest.fixture(autouse=True)
def _cheap_hashing(request):
    if request.node.originalname in DEFAULT_HASHING:
        yield
        return
    with cheap_hashing():
        yield


class Clock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def accounts_for(agent, clock=None, **web):
    settings = dataclasses.replace(agent.settings, web=fast_web(**web))
    return Accounts(agent.stores.console, settings, clock=clock or Clock())


# -- accounts ---------------------------------------------------------------------------


@pytest.mark.slow
def test_accounts_are_added_once_with_a_valid_scope(dealer):
    accounts = accounts_for(dealer)
    admin = accounts.add("Boss@Dealer.Example ", PASSWORD, role="admin")
    assert admin.email == "boss@dealer.example" and admin.role == "admin"
    staff = accounts.add("oak@dealer.example", PASSWORD, rooftops=("Bay Motors Oakland",))
    assert staff.rooftops == ((None, "Bay Motors Oakland"),)
    assert accounts.scope_of(staff) == LeadScope(None, frozenset({("bay-motors", "Bay Motors Oakland")}))
    assert accounts.scope_of(admin) == LeadScope()
    refusals = {
        "there is already an account": lambda: accounts.add("BOSS@dealer.example", PASSWORD),
        "at least 12 characters": lambda: accounts.add("new@dealer.example", "short"),
        "an admin sees every lead": lambda: accounts.add(
            "a2@dealer.example", PASSWORD, role="admin", rooftops=("Bay Motors Oakland",)
        ),
        "no rooftop 'Nowhere'": lambda: accounts.add("x@dealer.example", PASSWORD, rooftops=("Nowhere",)),
        "no seller 'acme'": lambda: accounts.add("y@dealer.example", PASSWORD, dealer_id="acme"),
        "e-mail address": lambda: accounts.add("not-an-address", PASSWORD),
    }
    for message, attempt in refusals.items():
        with pytest.raises(AccountError, match=message):
            attempt()
    stored = dealer.stores.console.password_hash(admin.user_id)
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$") and PASSWORD not in stored  # RFC 9106 §4
    assert [u.email for u in dealer.stores.console.users()] == ["boss@dealer.example", "oak@dealer.example"]
    accounts.remove("oak@dealer.example")
    with pytest.raises(AccountError, match="no account"):
        accounts.remove("oak@dealer.example")


def test_attempts_past_the_free_ones_wait_twice_as_long_each_time_from_any_address(dealer):
    clock = Clock()
    accounts = accounts_for(
        dealer,
        clock,
        login_failures_per_account=3,
        login_failures_per_address=100,
        login_delay_seconds=5,
        lockout_minutes=1,
    )
    accounts.add("sam@dealer.example", PASSWORD)
    accounts.add("kim@dealer.example", PASSWORD)
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "10.0.0.1").user is not None
    outcomes = [accounts.sign_in("sam@dealer.example", "wrong password 1", f"10.0.0.{i}") for i in range(3)]
    assert [(o.user, o.wait_ms) for o in outcomes] == [(None, None)] * 3  # the free attempts
    held = accounts.sign_in("SAM@dealer.example", PASSWORD, "10.0.0.9")  # any address: the account waits
    assert held.user is None and held.wait_ms == 5_000
    assert accounts.sign_in("kim@dealer.example", PASSWORD, "10.0.0.1").user is not None  # others do not
    waits = []
    for _ in range(6):  # each failure doubles the next wait, up to lockout_minutes
        clock.now += accounts.sign_in("sam@dealer.example", "x", "10.0.0.1").wait_ms / 1000
        assert accounts.sign_in("sam@dealer.example", "wrong password 2", "10.0.0.1").wait_ms is None
        waits.append(accounts.sign_in("sam@dealer.example", PASSWORD, "10.0.0.1").wait_ms)
    assert waits == [10_000, 20_000, 40_000, 60_000, 60_000, 60_000]
    clock.now += 60
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "10.0.0.1").user is not None  # the owner, in time
    assert accounts.sign_in("sam@dealer.example", "wrong again", "10.0.0.1").wait_ms is None  # counts anew
    assert accounts.unlock("sam@dealer.example") == 1 and accounts.unlock("sam@dealer.example") == 0


def test_failures_are_forgotten_a_while_after_the_last(dealer):
    clock = Clock()
    accounts = accounts_for(dealer, clock, login_failures_per_account=2, login_failures_kept_hours=24)
    accounts.add("sam@dealer.example", PASSWORD)
    for _ in range(2):
        accounts.sign_in("sam@dealer.example", "wrong guess", "10.0.0.1")
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "10.0.0.1").wait_ms is not None
    assert accounts.throttled(dealer.stores.console.users()) == {accounts.find("sam@dealer.example").user_id: 2}
    clock.now += 24 * 3600 + 1
    assert accounts.throttled(dealer.stores.console.users()) == {}
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "10.0.0.1").user is not None


def test_a_known_browser_signs_in_while_strangers_are_held_back(dealer):
    """The owner's browser (a device token of the account) is counted alone: guesses at the
    account from elsewhere, or from the owner's shared address, never delay it."""
    clock = Clock()
    accounts = accounts_for(dealer, clock, login_failures_per_account=3, login_failures_per_address=5)
    sam = accounts.add("sam@dealer.example", PASSWORD)
    kim = accounts.add("kim@dealer.example", PASSWORD)
    mine, other = Device(sam.user_id, "token-of-sams-browser"), Device(kim.user_id, "token-of-kims-browser")
    for i in range(5):
        accounts.sign_in("sam@dealer.example", f"guess {i}", "203.0.113.5")  # the proxy everyone is behind
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "203.0.113.5").wait_ms is not None
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "203.0.113.5", other).wait_ms is not None  # not sam's
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "203.0.113.5", mine).user == sam
    for i in range(3):  # a stolen device token guesses only a few times too
        assert accounts.sign_in("sam@dealer.example", f"guess {i}", "198.51.100.1", mine).wait_ms is None
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "198.51.100.1", mine).wait_ms == 5_000


@pytest.mark.slow
def test_an_address_is_held_back_after_failures_across_accounts_and_unknown_ones_count(dealer):
    clock = Clock()
    accounts = accounts_for(dealer, clock, login_failures_per_account=100, login_failures_per_address=4)
    accounts.add("sam@dealer.example", PASSWORD)
    for email in ("nobody@dealer.example", "sam@dealer.example", "ghost@dealer.example", "sam@dealer.example"):
        unknown_or_wrong = accounts.sign_in(email, "not the password", "192.0.2.7")
        assert unknown_or_wrong.user is None and unknown_or_wrong.wait_ms is None
    assert accounts.sign_in("x@dealer.example", "not the password", "192.0.2.7").wait_ms is not None
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "192.0.2.7").user is None
    assert accounts.sign_in("sam@dealer.example", PASSWORD, "192.0.2.8").user is not None
    for _ in range(10):  # successes are not failures: many people behind one address sign in
        assert accounts.sign_in("sam@dealer.example", PASSWORD, "192.0.2.9").user is not None


def test_racing_attempts_at_one_account_check_exactly_the_free_ones(dealer):
    """30 attempts at once, on as many threads (as many workers would): each is counted before its
    password is hashed, in one transaction, so exactly ``login_failures_per_account`` get a hash."""
    accounts = accounts_for(dealer, login_failures_per_account=5, login_failures_per_address=1000)
    accounts.add("sam@dealer.example", PASSWORD)
    start = threading.Barrier(30)

    def attempt(i):
        start.wait()
        return accounts.begin_sign_in("sam@dealer.example", f"10.0.{i}.1")

    with ThreadPoolExecutor(30) as pool:
        begun = list(pool.map(attempt, range(30)))
    counted = [b for b in begun if isinstance(b, SignInAttempt)]
    assert len(counted) == 5 and all(b.wait_ms for b in begun if not isinstance(b, SignInAttempt))
    assert [accounts.finish_sign_in(a, "wrong guess").user for a in counted] == [None] * 5


@pytest.mark.parametrize(
    ("password", "problem"),
    [
        ("short", "at least 12 characters"),
        (" " * 12, "at least 5 different characters"),
        ("abababababab", "at least 5 different characters"),
        ("password1234", "most common passwords"),
        ("Password1234!", "most common passwords"),
        ("  Qwerty 2024 2024 ", "most common passwords"),
        ("winniethepooh", "most common passwords"),
        ("sam.lovelace@dealer.example", "e-mail address"),
        ("SamLovelace1234", "e-mail address"),
        ("lovelace-2024!", "e-mail address"),
        ("dealer-sam-12345", "e-mail address"),
        ("lovelacepassword", "e-mail address"),
        ("correct horse battery staple", None),
        ("lovelace loves long walks", None),
        ("x7#Kp2!vQ9zL", None),
    ],
)
def test_a_new_password_is_long_varied_uncommon_and_not_the_email_address(password, problem):
    found = PasswordPolicy().problem(password, "Sam.Lovelace@dealer.example")
    assert (found is None) if problem is None else (problem in found), found


def test_the_common_password_list_is_the_shipped_one():
    common = PasswordPolicy().common
    assert 3000 < len(common) < 5000 and {"password", "123456", "qwerty", "letmein"} <= common
    assert not any(entry.startswith("#!comment") for entry in common)


@pytest.mark.slow
def test_sessions_end_when_idle_and_at_their_maximum_age(dealer):
    clock = Clock()
    accounts = accounts_for(dealer, clock, session_idle_minutes=30, session_max_hours=1)
    user = accounts.add("sam@dealer.example", PASSWORD)
    token = accounts.start_session(user)
    assert accounts.session(token).user.email == "sam@dealer.example"
    assert accounts.session("forged-token") is None
    for _ in range(3):  # used every 25 minutes: never idle, but 75 minutes old at the end
        clock.now += 25 * 60
        alive = accounts.session(token)
        if clock.now - 1_800_000_000.0 > 3600:
            assert alive is None
        else:
            assert alive is not None
    idle = accounts.start_session(user)
    clock.now += 31 * 60
    assert accounts.session(idle) is None
    kept = accounts.start_session(user)
    accounts.set_password("sam@dealer.example", "a brand new password")  # a reset signs out everywhere
    assert accounts.session(kept) is None


# -- the lead inbox ---------------------------------------------------------------------


def test_inbox_pages_by_keyset_newest_first_and_searches_names_emails_and_phones(dealer):
    ids = submit_customers(dealer)
    inbox = dealer.stores.lead_inbox
    seen, before = [], None
    while True:
        rows, before = inbox.page(LeadScope(), InboxFilter(), before=before, limit=2)
        seen += [r.lead_id for r in rows]
        if before is None:
            break
    assert seen == list(reversed(ids))
    assert [r.lead_id for r in inbox.export(LeadScope(), InboxFilter(), batch=2)] == seen

    def found(query):
        return {r.last_name for r in inbox.page(LeadScope(), InboxFilter(query=query))[0]}

    assert found("adelheid") == {"Lovelacqua", "Yonathar"}  # first name
    assert found("ADELHEID LOVE") == {"Lovelacqua"}  # first and last
    assert found("hopp") == {"Hopperwick"}  # last name
    assert found("grazyna.hopperwick@") == {"Hopperwick"}  # e-mail
    assert found("555-0133") == {"Turingsby"}  # the phone's last digits, as typed
    assert found("(510) 555-0155") == {"Dijkstrom"}
    assert found("zzz") == set()
    row = inbox.page(LeadScope(), InboxFilter(query="ewd@"))[0][0]
    assert (row.first_name, row.email, row.phone, row.rooftop) == (
        "Edsgard",
        "ewd@eindhoven.example",
        "+15105550155",
        "Bay Motors San Francisco",
    )
    assert row.vehicle == "2024 Honda CR-V EX-L" and row.delivery_state == "pending"


def test_scope_filters_and_the_handled_mark(dealer):
    ids = submit_customers(dealer)
    inbox = dealer.stores.lead_inbox
    oakland = LeadScope(None, frozenset({("bay-motors", "Bay Motors Oakland")}))
    assert {r.last_name for r in inbox.page(oakland, InboxFilter())[0]} == {"Hopperwick", "Yonathar"}
    assert {r.last_name for r in inbox.page(LeadScope(), InboxFilter(rooftop="Bay Motors Vancouver"))[0]} == {
        "Turingsby"
    }
    assert inbox.page(LeadScope("another-seller"), InboxFilter())[0] == []
    assert len(inbox.page(LeadScope("bay-motors"), InboxFilter())[0]) == len(CUSTOMERS)
    assert inbox.lead(ids[0], oakland) is None  # San Francisco's lead is not Oakland's
    assert inbox.lead(ids[1], oakland)["request"]["customer"]["last_name"] == "Hopperwick"

    assert inbox.mark_handled(ids[0], oakland, "oak@dealer.example", 1000) is False
    assert inbox.mark_handled(ids[1], oakland, "oak@dealer.example", 1000) is True
    assert [r.lead_id for r in inbox.page(LeadScope(), InboxFilter(handled=True))[0]] == [ids[1]]
    assert len(inbox.page(LeadScope(), InboxFilter(handled=False))[0]) == len(CUSTOMERS) - 1
    assert inbox.lead(ids[1], LeadScope())["handled_by"] == "oak@dealer.example"
    assert inbox.mark_handled(ids[1], LeadScope(), None, 2000) is True
    assert inbox.page(LeadScope(), InboxFilter(handled=True))[0] == []
    window = InboxFilter(received_from_ms=inbox.page(LeadScope(), InboxFilter())[0][1].received_ms)
    assert len(inbox.page(LeadScope(), window)[0]) == 2


def test_attempts_keep_what_was_sent_and_the_delivery_filter_finds_failed_leads(dealer):
    ids = submit_customers(dealer)
    leads, inbox = dealer.stores.leads, dealer.stores.lead_inbox
    claimed = leads.claim_due(2**50, 60_000, 10)
    assert len(claimed) == len(CUSTOMERS)
    for delivery in claimed:
        if delivery.lead_id == ids[2]:
            assert leads.mark_dead(
                delivery, 2**50, "HTTP 500", Attempt(2**50 - 5, "application/xml", "<adf>sent</adf>")
            )
        else:
            assert leads.mark_retry(delivery, 2**50, 2**51, "HTTP 503")
    assert [r.lead_id for r in inbox.page(LeadScope(), InboxFilter(delivery="dead"))[0]] == [ids[2]]
    assert len(inbox.page(LeadScope(), InboxFilter(delivery="pending"))[0]) == len(CUSTOMERS) - 1
    assert inbox.page(LeadScope(), InboxFilter(delivery="none"))[0] == []
    (attempt,) = inbox.lead(ids[2], LeadScope())["attempts"]
    assert (attempt["outcome"], attempt["error"], attempt["payload"], attempt["attempt"]) == (
        "dead",
        "HTTP 500",
        "<adf>sent</adf>",
        1,
    )
    assert inbox.backlog(2**50)["counts"] == {"dead": 1, "pending": len(CUSTOMERS) - 1}


def test_the_migration_gives_older_leads_their_search_keys(dealer):
    ids = submit_customers(dealer)
    with dealer.stores.db.transaction() as tx:
        tx.execute(
            "UPDATE leads SET customer_name_k = NULL, customer_last_k = NULL, customer_email_k = NULL,"
            " customer_phone_r = NULL"
        )
    assert dealer.stores.lead_inbox.page(LeadScope(), InboxFilter(query="turingsby"))[0] == []
    with dealer.stores.db.transaction() as tx:
        _backfill_customer_keys(tx)
    (row,) = dealer.stores.lead_inbox.page(LeadScope(), InboxFilter(query="turingsby"))[0]
    assert row.lead_id == ids[2]


# -- check runs, the audit log, the inventory summary -------------------------------------


def test_one_check_runs_at_a_time_and_a_dead_workers_run_is_given_up(dealer):
    store = dealer.stores.console
    first = store.start_check("a@dealer.example", "https://dealer.example", 1_000, stale_before_ms=0)
    assert first is not None
    assert store.start_check("b@dealer.example", "https://dealer.example", 2_000, stale_before_ms=0) is None
    later = store.start_check("b@dealer.example", "https://dealer.example", 9_000, stale_before_ms=5_000)
    assert later is not None and later != first  # the first was started before the stale mark
    store.finish_check(later, "done", {"ok": True, "results": []}, 10_000)
    run = store.latest_check()
    assert (run.run_id, run.state, run.report, run.started_by) == (
        later,
        "done",
        {"ok": True, "results": []},
        "b@dealer.example",
    )


def test_audit_entries_page_newest_first_by_subject(dealer):
    store = dealer.stores.console
    for i in range(5):
        store.audit("sam@dealer.example", "lead.view", f"lead_{i % 2}", {"n": i}, 1000 + i)
    assert [e.detail["n"] for e in store.audit_entries()] == [4, 3, 2, 1, 0]
    assert [e.detail["n"] for e in store.audit_entries(subject="lead_0")] == [4, 2, 0]
    assert [e.detail["n"] for e in store.audit_entries(before_ms=1003, limit=2)] == [2, 1]


def test_audit_entries_written_in_one_millisecond_are_newest_first_too(dealer):
    """Changes made in quick succession (an operator's script, the provisioning API) share a
    millisecond: the log still lists them in the order they were written, newest first."""
    store = dealer.stores.console
    for i in range(20):
        store.audit("sam@dealer.example", "lead.view", "lead_1", {"n": i}, 5000)
    assert [e.detail["n"] for e in store.audit_entries()] == list(range(19, -1, -1))


def test_inventory_summary_counts_by_rooftop_per_version_and_finds_vins_and_stock_numbers(dealer):
    summaries = dealer.stores.inventory_summaries
    first = summaries.summary()
    assert first.total() == 3 and {r.rooftop for r in first.rows} == set(dict((c[4], 1) for c in CUSTOMERS))
    assert summaries.summary() is first  # remembered for this inventory version
    dealer.stores.inventory.import_listings(listings()[:2], replace=True)
    second = summaries.summary()
    assert second.version != first.version and second.total() == 2 and sum(second.removed.values()) == 1
    assert [f.vin for f in summaries.lookup("1hgcv1f30na0002")] == ["1HGCV1F30NA000202"]
    by_stock = summaries.lookup("H0030")
    assert [(f.vin, f.available) for f in by_stock] == [("1HGCV1F30NA000303", False)]  # removed, still found
    assert summaries.lookup("H0010", dealer_id="another-seller") == []


def test_two_workers_share_sessions_and_lockouts_through_the_database(dealer):
    """Two apps on one database, as two `aap serve` workers: a sign-in on one is valid on the
    other, and failures on both count towards one account's free attempts."""
    from starlette.testclient import TestClient

    from aap.server.app import create_app
    from console_support import csrf_of

    settings = dataclasses.replace(dealer.settings, web=fast_web(login_failures_per_account=3))
    Accounts(dealer.stores.console, settings).add("sam@dealer.example", PASSWORD)
    one, two = (
        TestClient(
            create_app(settings, open_stores(settings.database_url), services=()), base_url="https://dealer.example"
        )
        for _ in range(2)
    )
    page = one.get("/console/login")
    one.post(
        "/console/login", data={"csrf_token": csrf_of(page.text), "email": "sam@dealer.example", "password": PASSWORD}
    )
    two.cookies.set("aap_console", one.cookies["aap_console"], domain="dealer.example", path="/console/")
    assert two.get("/console/leads").status_code == 200

    def fail(client):
        form = client.get("/console/login")
        return client.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": "sam@dealer.example", "password": "wrong guess"},
        )

    three = TestClient(two.app, base_url="https://dealer.example")  # a browser that never signed in
    assert [fail(two).status_code, fail(three).status_code, fail(two).status_code] == [401, 401, 401]
    assert fail(three).status_code == 429  # the account's free attempts are spent, on both workers
    form = two.get("/console/login")
    assert (
        two.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": "sam@dealer.example", "password": PASSWORD},
        ).status_code
        == 429
    )
    form = one.get("/console/login")  # the browser that signed in before is known: not held back
    assert (
        one.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": "sam@dealer.example", "password": PASSWORD},
            follow_redirects=False,
        ).status_code
        == 303
    )
    for client in (one, two):
        client.app.state.stores.close()


# -- the hash gate ---------------------------------------------------------------------------


def test_the_hash_gate_lets_a_few_hash_at_once_and_the_others_wait_in_turn():
    gate = HashGate(2, wait_seconds=60)
    inside, most, order = 0, 0, []

    async def hash_one(i: int, release: asyncio.Event) -> None:
        nonlocal inside, most
        async with gate.slot():
            inside += 1
            most = max(most, inside)
            order.append(i)
            await release.wait()
            inside -= 1

    async def run() -> None:
        release = asyncio.Event()
        tasks = [asyncio.create_task(hash_one(i, release)) for i in range(6)]
        for _ in range(1000):  # until the two first hold their slots and four wait (bounded by count)
            await asyncio.sleep(0)
            if len(gate._waiters) == 4:
                break
        assert gate.in_use == 2 and order == [0, 1]
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(run())
    assert most == 2 and order == list(range(6)) and gate.in_use == 0


def test_a_request_that_waits_too_long_for_the_gate_is_refused_and_leaves_no_trace():
    gate = HashGate(1, wait_seconds=0.01)

    async def run() -> None:
        async with gate.slot():
            with pytest.raises(HashingBusy):
                async with gate.slot():
                    raise AssertionError("never inside")
            assert not gate._waiters
            waiting = asyncio.create_task(gate.slot().__aenter__())
            await asyncio.sleep(0)
            waiting.cancel()  # a client that went away while it waited
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert not gate._waiters
        assert gate.in_use == 0

    asyncio.run(run())


def test_the_gate_hands_a_slot_from_one_event_loop_to_another():
    """One gate per process, whatever loop or thread a request runs on (a test client's each)."""
    gate = HashGate(1, wait_seconds=60)
    held, release, got = threading.Event(), threading.Event(), threading.Event()

    def holder() -> None:
        async def hold() -> None:
            async with gate.slot():
                held.set()
                await asyncio.to_thread(release.wait)

        asyncio.run(hold())

    def waiter() -> None:
        async def wait() -> None:
            async with gate.slot():
                got.set()

        asyncio.run(wait())

    one = threading.Thread(target=holder)
    one.start()
    assert held.wait(30)
    two = threading.Thread(target=waiter)
    two.start()
    for _ in range(3000):  # bounded by count: until the second loop waits
        if gate._waiters:
            break
        threading.Event().wait(0.01)
    assert not got.is_set()
    release.set()
    one.join(30)
    two.join(30)
    assert got.is_set() and gate.in_use == 0
