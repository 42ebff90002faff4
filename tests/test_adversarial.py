"""The adversarial suite: hostile requests at every door, bounded by example
counts (CI replays the same examples: tests/conftest.py). bench/adversarial.py runs the same
generators and verdicts with ``--examples 20000`` and measures server CPU per refusal.

- schemathesis over ``/a2a/openapi.json`` (the seed's document) and ``/poppy/openapi.json``,
  valid and schema-violating bodies;
- hypothesis over A2A bodies carrying mutated AAP payloads, MCP JSON-RPC at both revisions,
  the Poppy native API with the same payloads, and the OAuth token endpoint;
- oversized bodies on every surface, with a declared length and chunked;
- hostile heads (request lines, header fields of every size and number around ``[server]``'s
  limits) against the real runner, judged by a reference of the limits: 414/431 exactly when
  the reference says so, in the path's shape, the connection closed;
- Poppy-Session JWTs and delegations with every kind of ``exp``/``nbf``, with and without
  ``sub``, signed by the delegated key or the identity key, judged by a reference of RFC 7519
  §4.1.4/§4.1.5 and the delegation rules (docs/poppy.md);
- ``/metrics`` behind its bearer token, with hostile ``Authorization`` values.
- the staff console (tests/console_attacks.py): sign-in storms and races, every console page
  with generated query strings as one seller's rooftop staff, forged sign-outs and a stolen
  session, CSV cells a spreadsheet would run.

Every answer: no 5xx, in its surface's format and schema-valid, no request value echoed in an
error, no internals; and the validator's work per request stays within the request bounds
(tests/adversarial_support.py says how each is checked).
"""

from __future__ import annotations

import copy
import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from aap.config.model import RateLimit
from aap.skills.catalog import SKILLS
from adversarial_support import (
    ACCEPT,
    CANARY,
    HEAD_EXAMPLES,
    LEGACY,
    MODERN,
    Verdicts,
    WorkMeter,
    a2a_bodies,
    aap_payloads,
    encode,
    head_refusal,
    hostile_heads,
    mcp_exchanges,
    skill_of,
    token_requests,
)
from factories import live_dealer_fixture
from poppy_client import PersonalAgent, PoppyClient, dpop_only
from poppy_env import PoppyDeployment, agent_host, poppy_ca  # noqa: F401 (fixtures)
from test_request_limits import Served

EXAMPLES = {
    "a2a": 800,
    "mcp": 1000,
    "poppy": 300,
    "token": 400,
    "schemathesis": 200,
    "poppy_schemathesis": 25,
    "heads": 250,
    "poppy_session": 120,
    "metrics": 100,
}
SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


#: Every surface of one app on loopback, rate limits off (the suite is one busy caller).
dealer = live_dealer_fixture("adversarial", count=60, rate_limit=RateLimit(enabled=False))


@pytest.fixture(scope="module")
def poppy(tmp_path_factory, poppy_ca, agent_host) -> Iterator[tuple[Any, PoppyClient]]:
    """The Poppy binding over HTTPS with a signed-in reference client; only that client is allowed,
    so no generated client_id is ever fetched."""
    from poppy_env import TEST_POPPY

    agent = PersonalAgent(agent_host, name="adversarial-agent")
    deployment = PoppyDeployment(
        tmp_path_factory.mktemp("adversarial-poppy"),
        poppy_ca,
        dataclasses.replace(TEST_POPPY, allowed_clients=(agent.client_id,)),
        inventory=30,
        rate_limit=RateLimit(enabled=False),
    )
    client = PoppyClient(agent, deployment.url, poppy_ca.context())
    client.discover()
    client.start_session()
    yield deployment, client
    client.close()
    deployment.stop()


@pytest.fixture
def meter(monkeypatch) -> WorkMeter:
    return WorkMeter(monkeypatch.setattr)


def assert_clean(verdicts: Verdicts) -> None:
    assert verdicts.failures == [], "\n".join(verdicts.failures[:10])


# -- A2A ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a2a_hostile_payloads(dealer, meter):
    verdicts = Verdicts()
    with httpx.Client(base_url=dealer.base_url, timeout=60) as http:

        @settings(max_examples=EXAMPLES["a2a"], **SETTINGS)
        @given(request=a2a_bodies())
        def exercise(request):
            body, headers = request
            response = http.post("/a2a", content=body, headers=headers)
            verdicts.a2a(response.status_code, response.headers, response.content)
            meter.check(verdicts, "a2a")

        exercise()
    assert_clean(verdicts)
    assert verdicts.answers >= EXAMPLES["a2a"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_a2a_openapi_document_by_schemathesis(dealer, meter, mode):
    """The seed's own document, served at /a2a/openapi.json, drives the requests."""
    document = httpx.get(dealer.base_url + "/a2a/openapi.json").json()
    document["paths"] = {"/a2a": document["paths"]["/"]}  # the seed's path is relative to servers[0]
    document["servers"] = [{"url": dealer.base_url}]
    operation = next(result.ok() for result in schemathesis.openapi.from_dict(document).get_all_operations())
    verdicts = Verdicts()

    @settings(max_examples=EXAMPLES["schemathesis"], **SETTINGS)
    @given(case=operation.as_strategy(generation_mode=mode))
    def exercise(case):
        response = case.call(base_url=dealer.base_url)
        verdicts.a2a(response.status_code, response.headers, response.content)
        meter.check(verdicts, "a2a")

    exercise()
    assert_clean(verdicts)


# -- MCP ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mcp_hostile_json_rpc_at_both_revisions(dealer, meter):
    verdicts = Verdicts()
    revisions: set[str] = set()
    with httpx.Client(base_url=dealer.base_url, timeout=60) as http:

        @settings(max_examples=EXAMPLES["mcp"], **SETTINGS)
        @given(exchange=mcp_exchanges())
        def exercise(exchange):
            body, headers, tool = exchange
            revisions.add(headers.get("MCP-Protocol-Version", ""))
            response = http.post("/mcp", content=body, headers=headers)
            verdicts.mcp(response.status_code, response.headers, response.content, tool)
            meter.check(verdicts, "mcp")

        exercise()
    assert_clean(verdicts)
    assert {MODERN, LEGACY} <= revisions
    assert verdicts.statuses.get(200, 0) > EXAMPLES["mcp"] // 6  # a good share reach the tools


# -- Poppy --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_poppy_api_hostile_payloads(poppy, meter):
    deployment, client = poppy
    verdicts = Verdicts()
    skills = [skill for skill in SKILLS.values()]

    @settings(max_examples=EXAMPLES["poppy"], **SETTINGS)
    @given(payload=aap_payloads(), index=st.integers(0, len(skills) - 1))
    def exercise(payload, index):
        skill = skill_of(payload) or skills[index]
        url = client.operation_url(skill.operation_id)
        headers = {**client.auth_headers("POST", url), "Content-Type": "application/json"}
        response = client.http.post(url, content=encode(payload), headers=headers)
        verdicts.poppy(response.status_code, response.headers, response.content, skill.id)
        meter.check(verdicts, "poppy")

    exercise()
    assert_clean(verdicts)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_poppy_openapi_document_by_schemathesis(poppy, poppy_ca, meter, mode):
    deployment, client = poppy
    schema = schemathesis.openapi.from_dict(dpop_only(client.openapi))
    server = client.openapi["servers"][0]["url"]
    verdicts = Verdicts()
    for operation in (result.ok() for result in schema.get_all_operations()):
        url = server + operation.path
        skill_id = operation.path.strip("/")

        @settings(max_examples=EXAMPLES["poppy_schemathesis"], **SETTINGS)
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case):
            response = case.call(
                base_url=server, headers=client.auth_headers("POST", url), verify=str(poppy_ca.ca_file)
            )
            verdicts.poppy(response.status_code, response.headers, response.content, skill_id)
            meter.check(verdicts, "poppy")

        exercise()
    assert_clean(verdicts)


@pytest.mark.slow
def test_token_endpoint_hostile_forms(poppy):
    deployment, client = poppy
    endpoint = client.issuer_metadata["token_endpoint"]
    verdicts = Verdicts()

    def proof() -> str:
        return client.agent.dpop_proof(client.session_key, "POST", endpoint)

    @settings(max_examples=EXAMPLES["token"], **SETTINGS)
    @given(request=st.builds(lambda: client.grant_form()).flatmap(lambda real: token_requests(real, proof)))
    def exercise(request):
        body, headers = request
        response = client.http.post(endpoint, content=body, headers=headers)
        verdicts.oauth(response.status_code, response.headers, response.content)

    exercise()
    assert_clean(verdicts)
    assert verdicts.statuses.get(200, 0) >= 1  # the real pieces still get a token


# -- oversized bodies, every surface in its own format --------------------------------------------


SURFACES = {
    "/a2a": "a2a",
    "/mcp": "mcp",
    "/oauth/token": "oauth",
    "/oauth/revoke": "oauth",
    "/poppy/feedback": "oauth",
    "/poppy/v1/inventory.search": "poppy",
    "/healthz": "plain",
    "/nowhere": "plain",
}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", sorted(SURFACES))
def test_an_oversized_body_is_answered_in_its_surfaces_format(dealer, path, chunked):
    limit = dealer.settings.max_body_bytes
    payload = b'{"padding": "' + b"Qzx" * (limit // 3) + b'"}'

    def pieces():
        for start in range(0, len(payload), 65_536):
            yield payload[start : start + 65_536]

    headers = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": LEGACY}
    response = httpx.post(dealer.base_url + path, content=pieces() if chunked else payload, headers=headers, timeout=60)
    assert response.status_code == 413
    verdicts = Verdicts()
    body = response.content
    surface = SURFACES[path]
    if surface == "a2a":
        answer = response.json()
        assert answer["id"] is None and answer["error"]["code"] == -32600
        verdicts.common("a2a", 413, body, True)
    elif surface == "mcp":
        verdicts.mcp(413, response.headers, body, None)
    elif surface == "oauth":
        verdicts.oauth(413, response.headers, body)
    elif surface == "poppy":
        verdicts.poppy(413, response.headers, body, "inventory.search")
        assert response.json()["code"] == "SCHEMA_VALIDATION_FAILED"
    else:
        assert response.json() == {
            "error": {
                "status": 413,
                "message": (f"The request body is larger than this endpoint accepts ({limit} bytes)."),
            }
        }
    assert f"({limit} bytes)" in response.text
    assert_clean(verdicts)


# -- one problem list, every binding ---------------------------------------------------------------


BROKEN = [
    {"type": "inventory.search.request", "filters": {"features_all": ["no_such_feature"], "make": 5}},
    {"type": "inventory.search.request", "filters": {"make": ["x"] * 101}},
    {"type": "inventory.facets.request", "filters": {"price_max": "cheap", "rooftops": []}},
    {"type": "inventory.vehicle.request", "vin": "short", "stock": ""},
]


@pytest.mark.parametrize("payload", BROKEN, ids=["capability+schema", "bounds", "facets", "vehicle"])
def test_every_binding_lists_the_same_problems(dealer, poppy, payload):
    from http_helpers import AAP_HEADERS, aap_error_of, send_message

    skill = next(s for s in SKILLS.values() if s.request_type == payload["type"])
    a2a = aap_error_of(
        httpx.post(
            dealer.base_url + "/a2a", json=send_message(copy.deepcopy(payload)), headers=AAP_HEADERS, timeout=30
        ).json()
    )
    answers = {"a2a": a2a}
    for version in (LEGACY, MODERN):
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": skill.tool_name, "arguments": copy.deepcopy(payload)},
        }
        headers = {"Accept": ACCEPT, "MCP-Protocol-Version": version}
        if version == MODERN:
            message["params"]["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
            headers |= {"Mcp-Method": "tools/call", "Mcp-Name": skill.tool_name}
        result = httpx.post(dealer.base_url + "/mcp", json=message, headers=headers, timeout=30).json()["result"]
        assert result["isError"] is True
        answers[f"mcp {version}"] = result["structuredContent"]
    _, client = poppy
    client.start_session()  # the token endpoint's fuzzing may have replaced the Session
    answers["poppy"] = client.call(skill.operation_id, copy.deepcopy(payload)).json()
    codes = {name: (a["code"], a["details"]["errors"]) for name, a in answers.items()}
    assert len({repr(value) for value in codes.values()}) == 1, codes


# -- heads, against the real runner (the server's own protocol keeps the limits) ------------------

METRICS_TOKEN = "adversarial-metrics-token"


@pytest.fixture(scope="module")
def runner_served(tmp_path_factory) -> Iterator[Served]:
    server = Served(
        tmp_path_factory.mktemp("adversarial-runner"),
        env={"ADVERSARIAL_METRICS_TOKEN": METRICS_TOKEN},
        **{"server.metrics_token_env": "ADVERSARIAL_METRICS_TOKEN", "rate_limit.enabled": False},
    )
    yield server
    server.stop()


@pytest.mark.slow
def test_hostile_heads_are_refused_exactly_where_the_limits_say(runner_served):
    verdicts = Verdicts()

    @settings(max_examples=EXAMPLES["heads"], **SETTINGS)
    @given(head=hostile_heads())
    @example(head=HEAD_EXAMPLES[0])
    @example(head=HEAD_EXAMPLES[1])
    @example(head=HEAD_EXAMPLES[2])
    def exercise(head):
        data, path, fields, line = head
        expected = head_refusal(line, fields)
        try:
            status, headers, body, closed = runner_served.exchange(data)
        except AssertionError as exc:  # closed without an answer
            verdicts.fail("head", str(exc)[:100], b"")
            return
        if expected is not None:
            if status != expected:
                verdicts.fail("head", f"{status} where the limits say {expected}", body)
            verdicts.refused_head(status, headers, body, path, closed)
        else:
            verdicts.common("head", status, body, False)
            if status in (414, 431):
                verdicts.fail("head", f"{status} for a head within the limits", body)

    exercise()
    assert_clean(verdicts)
    assert {414, 431} <= set(verdicts.statuses) and any(s < 400 for s in verdicts.statuses), verdicts.statuses


def test_metrics_answer_no_forged_token(runner_served):
    verdicts = Verdicts()
    exact = f"Bearer {METRICS_TOKEN}"
    values = (
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
        | st.builds(lambda tail: exact + tail, st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=4))
        | st.builds(lambda n: exact[:n], st.integers(0, len(exact)))
        | st.sampled_from(["Bearer", f"bearer {METRICS_TOKEN}", METRICS_TOKEN, f"Basic {METRICS_TOKEN}"])
    ).map(str.strip)  # a field value has no whitespace at its ends (RFC 9110 §5.5)
    with httpx.Client(base_url=runner_served.base, timeout=30) as http:

        @settings(max_examples=EXAMPLES["metrics"], **SETTINGS)
        @given(value=values)
        def exercise(value):
            response = http.get("/metrics", headers={"Authorization": value})
            verdicts.seen(response.status_code)
            if (response.status_code == 200) != (value == exact):
                verdicts.fail("metrics", f"{response.status_code} for {value!r}", response.content)
            if response.status_code == 401 and "aap_requests_total" in response.text:
                verdicts.fail("metrics", "a refusal shows the metrics", response.content)

        exercise()
        assert http.get("/metrics", headers={"Authorization": exact}).status_code == 200
    assert_clean(verdicts)


# -- Poppy-Session time claims and delegations, against a reference ----------------------------------

OFFSETS = [-3600, -600, -60, -5, 5, 60, 600, 3600]  # seconds from now; the leeway is 30
TIME_CLAIMS = st.one_of(
    st.none(),  # absent
    st.sampled_from(OFFSETS),
    st.sampled_from(["soon", "1700000000", True, False, [], {}]).map(lambda v: ("literal", v)),
)


def _claim(value: Any, now: int) -> Any:
    return value[1] if isinstance(value, tuple) else now + value


def _time_ok(name: str, value: Any) -> bool:
    """RFC 7519: absent, or a NumericDate within the leeway (exp not past, nbf not future)."""
    if value is None:
        return True
    if isinstance(value, tuple):
        return False  # not a NumericDate
    return value >= -30 if name == "exp" else value <= 30


def test_poppy_session_time_claims_and_delegations_match_the_reference(poppy):
    deployment, client = poppy
    agent = client.agent
    url = client.operation_url("dealerInformation")
    verdicts = Verdicts()

    @settings(max_examples=EXAMPLES["poppy_session"], **SETTINGS)
    @given(
        exp=TIME_CLAIMS,
        nbf=TIME_CLAIMS,
        delegation_nbf=TIME_CLAIMS,
        sub=st.sampled_from(["user", "other", "absent"]),
        key=st.sampled_from(["delegated", "identity"]),
    )
    def exercise(exp, nbf, delegation_nbf, sub, key):
        now = int(time.time())
        signer = client.session_key if key == "delegated" else agent.identity
        delegation_claims: dict[str, Any] = {}
        if sub != "absent":
            delegation_claims["sub"] = client.user_id if sub == "user" else f"usr_{CANARY}other"
        if delegation_nbf is not None:
            delegation_claims["nbf"] = _claim(delegation_nbf, now)
        delegation = agent.delegation(signer, **delegation_claims)
        claims = {name: _claim(value, now) for name, value in (("exp", exp), ("nbf", nbf)) if value is not None}
        jwt = agent.poppy_session(
            signer,
            delegation,
            issuer=client.issuer,
            user_id=client.user_id,
            sid="adversarial",
            method="POST",
            url=url,
            **claims,
        )
        response = client.http.post(url, json={"type": "dealer.information.request"}, headers={"Poppy-Session": jwt})
        verdicts.poppy(response.status_code, response.headers, response.content, "dealer.information")
        accepted = (
            _time_ok("exp", exp)
            and _time_ok("nbf", nbf)
            and _time_ok("nbf", delegation_nbf)
            and sub == "user"
            and key == "delegated"
        )
        if accepted != (response.status_code == 200):
            verdicts.fail(
                "poppy-session", f"{response.status_code} where the reference says {accepted}", response.content
            )
        if not accepted and response.status_code == 401 and response.json().get("error") != "invalid_token":
            verdicts.fail("poppy-session", "a refusal that is not invalid_token", response.content)

    exercise()
    assert_clean(verdicts)
    assert {200, 401} <= set(verdicts.statuses), verdicts.statuses


# -- the staff console --------------------------------------------------------------------------
# One marketplace (two sellers, each with a "Downtown") over real HTTP on loopback; the attacks of
# tests/console_attacks.py. Rate limits off: the suite is one busy caller.


@pytest.fixture(scope="module")
def market(tmp_path_factory) -> Iterator[dict[str, Any]]:
    from console_attacks import counting_hasher, market_app
    from http_helpers import LiveServer

    with counting_hasher() as hasher:
        server = LiveServer()
        app, stores, ids = market_app(str(tmp_path_factory.mktemp("console-attacks")), server.base_url)
        server.start(app)
        try:
            yield {"base": server.base_url, "stores": stores, "ids": ids, "hasher": hasher, "app": app}
        finally:
            server.stop()
            stores.close()


def _forget_sign_ins(market) -> None:
    with market["stores"].db.transaction() as tx:
        tx.execute("DELETE FROM console_throttle")


@pytest.mark.slow
def test_a_storm_of_sign_ins_hashes_a_few_at_once_and_no_more_than_the_address_may(market):
    """40 sign-ins at once with unknown e-mails from one address: at most login_hash_concurrency
    hashes run at once, and no more are hashed than login_failures_per_address (20)."""
    from console_attacks import race

    _forget_sign_ins(market)
    hasher = market["hasher"]
    before, hasher.most = hasher.checks, 0
    statuses = race(market["base"], [(f"nobody{i}@market.example", "a guess at it") for i in range(40)])
    assert set(statuses) <= {401, 429, 503}, statuses
    hashed = hasher.checks - before
    assert hashed == statuses.count(401) <= 20 and statuses.count(429) >= 20
    assert 1 <= hasher.most <= 2  # [web] login_hash_concurrency


@pytest.mark.slow
def test_thirty_racing_guesses_at_one_account_check_at_most_its_free_attempts(market):
    from console_attacks import race, sign_in
    from console_support import PASSWORD

    _forget_sign_ins(market)
    owner = sign_in(market["base"], "downtown@north.example", PASSWORD)  # the owner's browser, known
    hasher = market["hasher"]
    before = hasher.checks
    statuses = race(market["base"], [("downtown@north.example", f"guess number {i}") for i in range(30)])
    assert statuses.count(401) == hasher.checks - before <= 5 and set(statuses) <= {401, 429, 503}
    right = race(market["base"], [("downtown@north.example", PASSWORD)])
    assert right == [429]  # a stranger's browser waits, even with the right password
    known = race(market["base"], [("downtown@north.example", PASSWORD)], known=owner)
    assert known == [303]  # the owner's browser is not held back
    owner.close()


@pytest.mark.slow
def test_every_console_page_answers_generated_queries_without_a_5xx_or_another_sellers_lead(market):
    """Every GET page of the console (listed from the app), with generated query strings, as the
    Downtown staff of north-motors: never a 5xx, never a value of south-autos' lead (nor of
    north-motors' other rooftop)."""
    import re

    from starlette.routing import Route

    from console_attacks import console_queries, sign_in
    from console_support import MARKET_LEADS, NORTH, PASSWORD, SOUTH

    staff = sign_in(market["base"], "downtown@north.example", PASSWORD)
    ids = market["ids"]
    hidden = [
        v
        for seller, rooftop, _, _, customer in MARKET_LEADS
        if (seller, rooftop) != (NORTH, "Downtown")
        for v in customer
    ]
    pages = sorted(
        {
            re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", r.path)
            for r in market["app"].state.runtime.routes()
            if isinstance(r, Route)
            and r.path.startswith("/console/")
            and "GET" in (r.methods or ())
            and not r.path.startswith("/console/assets")
        }
    )
    leads = st.sampled_from([ids[(SOUTH, "Downtown")], ids[(NORTH, "Airport")], ids[(NORTH, "Downtown")], "lead_x"])

    @settings(max_examples=300, **SETTINGS)
    @given(page=st.sampled_from(pages), query=console_queries(), lead=leads, other=st.text(max_size=20))
    def exercise(page, query, lead, other):
        segment = quote(other, safe="") or "x"
        path = re.sub(r"\{\w+\}", lambda _: segment, page.replace("{lead_id}", lead))
        answer = staff.get(path, params=query)
        assert answer.status_code < 500, (path, query, answer.status_code)
        leaked = [v for v in hidden if v in answer.text]
        assert not leaked, (path, query, leaked)

    exercise()
    staff.close()


@pytest.mark.slow
def test_a_forged_sign_out_changes_nothing_and_a_new_password_ends_a_stolen_session(market):
    from console_attacks import csrf_of, sign_in
    from console_support import PASSWORD

    _forget_sign_ins(market)
    owner = sign_in(market["base"], "admin@market.example", PASSWORD)
    thief = httpx.Client(base_url=market["base"], follow_redirects=False, timeout=60)
    thief.cookies.set("aap_console", owner.cookies["aap_console"])  # a copied session cookie
    token = csrf_of(owner.get("/console/leads").text)
    for forged in (
        {},
        {"data": {"csrf_token": "guess"}},
        {"data": {"csrf_token": token}, "headers": {"Origin": "https://evil.example"}},
    ):
        answer = owner.post("/console/logout", **forged)
        assert answer.status_code == 403 and "set-cookie" not in answer.headers
    assert owner.get("/console/leads").status_code == 200 and thief.get("/console/leads").status_code == 200
    page = owner.get("/console/account")
    changed = owner.post(
        "/console/account",
        data={
            "csrf_token": csrf_of(page.text),
            "current": PASSWORD,
            "password": "a whole new one",
            "again": "a whole new one",
        },
    )
    assert changed.status_code == 303 and changed.headers["location"] == "/console/account?done=password"
    assert thief.get("/console/leads").status_code == 303 and owner.get("/console/leads").status_code == 200
    page = owner.get("/console/account")
    owner.post(  # back to the shared password for the other cases
        "/console/account",
        data={"csrf_token": csrf_of(page.text), "current": "a whole new one", "password": PASSWORD, "again": PASSWORD},
    )
    owner.close()
    thief.close()


@pytest.mark.slow
def test_no_csv_cell_starts_a_formula_wherever_a_spreadsheet_splits_it():
    from aap.console.leads import FORMULA_START, _csv_cell
    from console_attacks import spreadsheet_parts, spreadsheet_text

    @settings(max_examples=2000, **SETTINGS)
    @given(text=spreadsheet_text())
    def exercise(text):
        cell = _csv_cell(text)
        if re.fullmatch(r"[+-]?\d+(\.\d+)?", text):
            assert cell == text  # a plain number stays one
            return
        assert not [part for part in spreadsheet_parts(cell) if part.startswith(FORMULA_START)], cell
        assert cell.replace("'", "") == text.replace("'", "")  # only quotes were added

    exercise()
