"""Staff scopes on a marketplace whose two sellers both have a rooftop called "Downtown": a scope
names a rooftop *of a seller*, and every console query, export, retry and count holds to it
(docs/console.md, "Accounts, roles and what each person sees").

- the store's one predicate (:func:`aap.store.lead_inbox.scope_condition`) against a reference,
  by hypothesis, on SQLite and PostgreSQL;
- accounts: a bare rooftop name is refused on a marketplace, ``SELLER:ROOFTOP`` and ``--seller``
  name it; an account stored before scopes named sellers is resolved, or sees nothing;
- every console route (enumerated from the app, so a new page is covered too) as a rooftop's
  staff of one seller: no value of the other seller's lead, its lead answers 404, its lead is
  never changed.
"""

from __future__ import annotations

import dataclasses
import re

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route
from starlette.testclient import TestClient

from aap.accounts import AccountError, Accounts
from aap.agent import DealerAgent
from aap.cli.main import main
from aap.server.app import create_app
from aap.store import open_stores
from aap.store.lead_inbox import InboxFilter, LeadScope
from console_support import (
    MARKET_LEADS,
    NORTH,
    PASSWORD,
    SOUTH,
    cheap_hashing,
    csrf_of,
    fast_web,
    market_listings,
    market_settings,
    post_sign_in,
    submit_market_leads,
)
from lead_support import http_route

PAIRS = [(seller, rooftop) for seller, rooftop, *_ in MARKET_LEADS]


@pytest.fixture(autouse=True)
def _cheap_hashing():
    with cheap_hashing():
        yield


@pytest.fixture
def market(database_url):
    settings = market_settings(database_url=database_url, routes=[http_route("http://127.0.0.1:9/adf")])
    agent = DealerAgent(settings, open_stores(database_url))
    agent.stores.inventory.import_listings(market_listings())
    ids = submit_market_leads(agent)
    yield agent, ids
    agent.stores.close()


@pytest.mark.slow
def test_the_leads_carry_their_seller_and_rooftop(market):
    agent, ids = market
    for (seller, rooftop), lead_id in ids.items():
        lead = agent.stores.leads.get_lead(lead_id)
        assert (lead["dealer_id"], lead["rooftop"]) == (seller, rooftop)


scopes = st.one_of(
    st.just(LeadScope()),
    st.builds(
        LeadScope,
        st.sampled_from([None, NORTH, SOUTH]),
        st.one_of(st.none(), st.frozensets(st.sampled_from(PAIRS + [(SOUTH, "Airport")]), max_size=3)),
    ),
)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scope=scopes,
    seller=st.sampled_from([None, NORTH, SOUTH]),
    rooftop=st.sampled_from([None, "Downtown", "Airport"]),
)
def test_every_read_and_write_holds_to_the_scope_pairs(market, scope, seller, rooftop):
    agent, ids = market
    inbox = agent.stores.lead_inbox
    expected = {
        lead_id
        for (s, r), lead_id in ids.items()
        if scope.allows(s, r) and seller in (None, s) and rooftop in (None, r)
    }
    wanted = InboxFilter(dealer_id=seller, rooftop=rooftop)
    assert {row.lead_id for row in inbox.page(scope, wanted)[0]} == expected
    assert {row.lead_id for row in inbox.export(scope, wanted, batch=1)} == expected
    assert {row.lead_id for row in inbox.page(scope, dataclasses.replace(wanted, delivery="pending"))[0]} == expected
    for (s, r), lead_id in ids.items():
        allowed = scope.allows(s, r)
        assert inbox.in_scope(lead_id, scope) is allowed
        assert (inbox.lead(lead_id, scope) is not None) is allowed
        assert inbox.mark_handled(lead_id, scope, None, 1) is allowed
    in_scope = sum(1 for (s, r) in ids if scope.allows(s, r))
    assert sum(inbox.backlog(2**50, scope)["counts"].values()) == in_scope  # one route: one delivery each


def test_a_rooftop_on_a_marketplace_names_its_seller(market):
    agent, _ = market
    accounts = Accounts(agent.stores.console, agent.settings)
    with pytest.raises(AccountError, match="names its seller"):
        accounts.add("a@market.example", PASSWORD, rooftops=("Downtown",))
    with pytest.raises(AccountError, match="names its seller, as SELLER:ROOFTOP"):
        accounts.parse_rooftop("Downtown")
    with pytest.raises(AccountError, match="no rooftop 'Airport' of seller south-autos"):
        accounts.add("a@market.example", PASSWORD, rooftops=((SOUTH, "Airport"),))
    with pytest.raises(AccountError, match="is not a rooftop of seller north-motors"):
        accounts.add("a@market.example", PASSWORD, dealer_id=NORTH, rooftops=((SOUTH, "Downtown"),))
    north = accounts.add("n@market.example", PASSWORD, rooftops=(accounts.parse_rooftop("north-motors:Downtown"),))
    with_seller = accounts.add("w@market.example", PASSWORD, dealer_id=SOUTH, rooftops=("Downtown",))
    assert north.rooftops == ((NORTH, "Downtown"),) and with_seller.rooftops == ((SOUTH, "Downtown"),)
    assert accounts.scope_of(north) == LeadScope(None, frozenset({(NORTH, "Downtown")}))
    assert accounts.describe_scope(north) == "Downtown (north-motors)"
    assert accounts.describe_scope(with_seller) == "seller south-autos, Downtown"


def test_an_account_stored_with_a_bare_rooftop_name_sees_only_an_unambiguous_one(market):
    agent, ids = market
    accounts = Accounts(agent.stores.console, agent.settings)
    airport = accounts.add("air@market.example", PASSWORD, rooftops=((NORTH, "Airport"),))
    downtown = accounts.add("down@market.example", PASSWORD, rooftops=((NORTH, "Downtown"),))
    with agent.stores.db.transaction() as tx:  # as accounts were stored before scopes named sellers
        tx.execute("UPDATE console_users SET rooftops = ? WHERE user_id = ?", ('["Airport"]', airport.user_id))
        tx.execute("UPDATE console_users SET rooftops = ? WHERE user_id = ?", ('["Downtown"]', downtown.user_id))
    airport, downtown = accounts.find("air@market.example"), accounts.find("down@market.example")
    assert accounts.scope_of(airport) == LeadScope(None, frozenset({(NORTH, "Airport")}))
    assert accounts.scope_of(downtown) == LeadScope(None, frozenset())  # two sellers have one: none
    assert agent.stores.lead_inbox.page(accounts.scope_of(downtown), InboxFilter())[0] == []


MARKET_CONFIG = """
id = "cars-marketplace"
public_url = "https://cars.example"

[search]
scope = "aggregate"

[dealer]
name = "Cars Marketplace"
[[dealer.rooftops]]
name = "Marketplace HQ"

[[dealers]]
dealer_id = "north-motors"
name = "North Motors"
[[dealers.rooftops]]
name = "Downtown"
[[dealers.rooftops]]
name = "Airport"

[[dealers]]
dealer_id = "south-autos"
name = "South Autos"
[[dealers.rooftops]]
name = "Downtown"
"""


def test_aap_users_add_names_the_seller_of_a_rooftop(tmp_path, monkeypatch):
    from click.testing import CliRunner

    monkeypatch.delenv("AAP_DATABASE_URL", raising=False)
    config = tmp_path / "aap.toml"
    config.write_text(MARKET_CONFIG)
    url = f"sqlite:///{tmp_path}/market.db"

    def run(*args: str):
        return CliRunner().invoke(
            main, ["users", *args, "--config", str(config), "--database", url], input=PASSWORD + "\n"
        )

    bare = run("add", "a@market.example", "--rooftop", "Downtown", "--password-stdin")
    assert bare.exit_code == 1 and "north-motors:Downtown, south-autos:Downtown" in bare.output
    assert run("add", "a@market.example", "--rooftop", "south-autos:Downtown", "--password-stdin").exit_code == 0
    seller = run("add", "b@market.example", "--seller", NORTH, "--rooftop", "Airport", "--password-stdin")
    assert seller.exit_code == 0, seller.output
    listed = run("list").output
    assert "a@market.example\tstaff\tDowntown (south-autos)" in listed
    assert "b@market.example\tstaff\tseller north-motors, Airport" in listed


# -- every console route ---------------------------------------------------------------------

BASE = "https://cars.example"
STAFF = "downtown@north.example"


@pytest.fixture(scope="module")
def console_market(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('market')}/market.db"
    settings = market_settings(database_url=url)
    settings = dataclasses.replace(settings, public_url=BASE, web=fast_web())
    stores = open_stores(url)
    stores.inventory.import_listings(market_listings())
    with cheap_hashing():
        accounts = Accounts(stores.console, settings)
        accounts.add("admin@market.example", PASSWORD, role="admin")
        accounts.add(STAFF, PASSWORD, rooftops=((NORTH, "Downtown"),))
        app = create_app(settings, stores)
        with TestClient(app, base_url=BASE):
            ids = submit_market_leads(app.state.agent)
            yield {"app": app, "ids": ids, "stores": stores}
    stores.close()


def _signed_in(console_market, email: str) -> TestClient:
    client = TestClient(console_market["app"], base_url=BASE)
    answer = post_sign_in(client, email)
    assert answer.status_code == 303, answer.text
    return client


def _console_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every console route but the assets and signing in and out."""
    out = []
    for route in app.state.runtime.routes():
        if not isinstance(route, Route) or not route.path.startswith("/console/"):
            continue
        if route.path.startswith("/console/assets") or route.path in ("/console/login", "/console/logout"):
            continue
        path = re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", route.path)  # without its convertor
        for method in sorted((route.methods or set()) - {"HEAD"}):
            out.append((method, path))
    return out


def _values(lead_keys) -> list[str]:
    return [v for seller, rooftop, _, _, customer in MARKET_LEADS if (seller, rooftop) in lead_keys for v in customer]


@pytest.mark.slow
def test_a_rooftops_staff_of_one_seller_sees_nothing_of_another_on_any_route(console_market):
    app, ids, stores = console_market["app"], console_market["ids"], console_market["stores"]
    staff = _signed_in(console_market, STAFF)
    token = csrf_of(staff.get("/console/leads").text)
    theirs = ids[(SOUTH, "Downtown")]
    hidden = _values({(SOUTH, "Downtown"), (NORTH, "Airport")}) + [theirs, ids[(NORTH, "Airport")]]
    mine = ids[(NORTH, "Downtown")]
    routes = _console_routes(app)
    assert ("GET", "/console/leads") in routes and ("POST", "/console/leads/{lead_id}/handled") in routes
    queries = [{}, {"seller": SOUTH}, {"rooftop": "Downtown"}, {"seller": SOUTH, "rooftop": "Downtown"}, {"q": "q"}]
    for method, path in routes:
        if "{lead_id}" in path:
            for lead_id, status in ((theirs, 404), (ids[(NORTH, "Airport")], 404), (mine, None)):
                target = path.replace("{lead_id}", lead_id)
                answer = (
                    staff.get(target)
                    if method == "GET"
                    else staff.post(target, data={"csrf_token": token, "handled": "1"}, follow_redirects=False)
                )
                if status is not None:
                    assert answer.status_code == status, (method, path)
                assert answer.status_code < 500 and not [v for v in hidden if v in answer.text], (method, path)
            continue
        if "{" in path:  # an account's (admins only)
            target = re.sub(r"\{[^}]+\}", "usr_nobody", path)
            assert staff.request(method, target, data={"csrf_token": token}).status_code in (403, 404, 405)
            continue
        for query in queries:
            if method == "GET":
                answer = staff.get(path, params=query)
            else:
                answer = staff.post(path, data={"csrf_token": token, **query}, follow_redirects=False)
            assert answer.status_code < 500, (method, path, query)
            leaked = [v for v in hidden if v in answer.text]
            assert not leaked, (method, path, query, leaked)
    assert stores.lead_inbox.lead(theirs, LeadScope())["handled_ms"] is None  # never marked
    exported = staff.post("/console/leads.csv", data={"csrf_token": token}).text
    assert "Northcote" in exported and len(exported.splitlines()) == 2
    assert "Ottoline" in staff.get("/console/leads").text


def test_the_add_user_form_lists_each_rooftop_with_its_seller(console_market):
    admin = _signed_in(console_market, "admin@market.example")
    page = admin.get("/console/users").text
    values = re.findall(r'name="rooftops" value="([^"]+)"', page)
    assert sorted(orjson.loads(v.replace("&#34;", '"')) for v in values) == sorted(
        [[NORTH, "Airport"], [NORTH, "Downtown"], [SOUTH, "Downtown"]]
    )
    added = admin.post(
        "/console/users",
        data={
            "csrf_token": csrf_of(page),
            "email": "south@market.example",
            "password": PASSWORD,
            "rooftops": [orjson.dumps([SOUTH, "Downtown"]).decode()],
        },
    )
    assert added.status_code == 200 and "Downtown (south-autos)" in added.text
    south = _signed_in(console_market, "south@market.example").get("/console/leads").text
    assert "Southwark" in south and "Northcote" not in south
    forged = admin.post(
        "/console/users",
        data={"csrf_token": csrf_of(page), "email": "x@market.example", "password": PASSWORD, "rooftops": ["Downtown"]},
    )
    assert forged.status_code == 400
