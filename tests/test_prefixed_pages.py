"""The pages for people stay where they are served: every link under the request's prefix.

A platform serves each tenant at its own domain (root path ``""``) and at
``https://PLATFORM_HOST/t/ID/`` (root path ``/t/ID``, docs/platform.md, "Routing"). Every console
and public page route — enumerated from the surfaces' own route lists, so a new page is covered
too — is requested both ways, signed in as the tenant's admin, and every ``href``, ``action``,
``src`` and ``data-poll`` of the page, every redirect's ``Location`` and every cookie's ``Path``
must stay under the prefix: a path that starts with ``/`` outside it, or a URL naming one of the
platform's hosts outside it, fails the test (aap.web.pages.url).
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

import aap.console
import aap.site
from aap.accounts import PLATFORM_ADMIN, Accounts
from aap.agent import DealerAgent
from aap.feeds.job import ImportRequest, run_import
from aap.gateway import Gateway
from aap.server.platform import create_platform_app
from aap.store import Stores, open_platform_database
from aap.tenants import TenantRegistry
from aap.work import Work
from console_support import PASSWORD, cheap_hashing, csrf_of
from http_helpers import AAP_HEADERS, send_message
from lead_support import lead_request
from platform_support import PLATFORM_HOST, listings, platform_settings, tenant_config, tenant_stores

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

TENANT = "dealer-a"
DOMAIN = "alpha.example"
ADMIN = "owner@alpha.example"
OPS = "ops@platform.example"
#: The platform console's own paths (on the platform host, at its root), which a platform
#: administrator's menu in a tenant's console links to on purpose.
PLATFORM_CONSOLE = frozenset({"/console/tenants", "/console/open", "/console/login"})
STAFF = "sales@alpha.example"
ROOFTOP = "Alpha Motors Main"
EXTRA = """
[[leads.routes]]
rooftop = "*"
[[leads.routes.targets]]
type = "webhook"
name = "crm"
url = "https://crm.alpha.example/leads"

[web]
contact_form_min_seconds = 0

[search]
default_limit = 2

[[feeds]]
name = "dms"
source = "https://feeds.alpha.example/inventory.json"
format = "aap"
"""
#: (view, base URL the test client uses, the prefix its pages must keep)
VIEWS = [("domain", f"https://{DOMAIN}", ""), ("prefix", f"https://{PLATFORM_HOST}", f"/t/{TENANT}")]
LINK = re.compile(r'\s(href|action|src|data-poll)="([^"]*)"')
#: POST routes whose one effect is work elsewhere (a feed fetched from the tenant's https://
#: source, the conformance checker run against the public URL): never started from here.
ELSEWHERE = {"/console/feeds/{name}/run", "/console/health/check"}


@pytest.fixture(scope="module")
def tenant(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """A platform with one tenant that has listings, a lead, a feed run with rejects and two accounts."""
    directory = tmp_path_factory.mktemp("prefixed")
    settings = platform_settings(f"sqlite:///{directory}/platform.db")
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add(TENANT, tenant_config("Alpha Motors", extra=EXTRA), [DOMAIN])
    own = tenant_stores(registry, TENANT)
    tenant_settings = registry.settings_for(registry.get(TENANT), f"https://{DOMAIN}")
    feed = directory / "feed.jsonl"
    rows = [orjson.dumps(item) for item in listings(TENANT, "Honda", 3, ROOFTOP)]
    feed.write_bytes(b"\n".join([*rows, b'{"vin": "NOT-A-VIN", "status": "available"}']) + b"\n")
    imported = asyncio.run(
        run_import(own, tenant_settings, ImportRequest(source=str(feed), feed="dms", partial=True), work=WORK)
    )
    assert imported.run.outcome == "imported"
    with cheap_hashing():
        Accounts(stores.console, settings).add(OPS, PASSWORD, role=PLATFORM_ADMIN)
        accounts = Accounts(own.console, tenant_settings)
        accounts.add(ADMIN, PASSWORD, role="admin")
        staff = accounts.add(STAFF, PASSWORD)
        app = create_platform_app(settings, stores)
        with TestClient(app, base_url=f"https://{DOMAIN}") as client:
            lead = lead_request(vehicle_of_interest={"vehicle_id": f"{TENANT}-1"})
            answer = client.post("/a2a", json=send_message(lead), headers=AAP_HEADERS).json()
            lead_id = answer["result"]["message"]["parts"][0]["data"]["data"]["lead_id"]
            yield {
                "app": app,
                "client": client,
                "settings": tenant_settings,
                "stores": own,
                "values": {
                    "lead_id": lead_id,
                    "vehicle_id": f"{TENANT}-1",
                    "run_id": imported.run.run_id,
                    "name": "dms",
                    "user_id": staff.user_id,
                    "rest": "no/such/page",
                },
            }
    own.close()
    stores.close()


def browser(tenant: dict[str, Any], base: str) -> TestClient:
    """The module's client (one event loop: the tenants' runtimes live on it) as a fresh browser
    at ``base``: no cookies, relative URLs resolved there."""
    client: TestClient = tenant["client"]
    client.cookies.clear()
    client.base_url = base
    return client


def surface_routes(settings, build) -> list[tuple[str, str]]:
    """(method, path) of every route of a surface, built over a gateway of ``settings``."""
    stores = Stores(open_platform_database("sqlite://:memory:"))
    try:
        parts = build(Gateway.of(DealerAgent(settings, stores)))
        out = []
        for route in parts.routes:
            assert isinstance(route, Route)
            path = re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", route.path)  # without its convertor
            out += [(method, path) for method in sorted((route.methods or set()) - {"HEAD"})]
        return out
    finally:
        stores.close()


def outside(value: str, root: str, host: str) -> bool:
    """Whether a link leaves the prefix ``root`` of ``host`` (or names another of the platform's hosts)."""
    parts = urlsplit(html.unescape(value))
    if parts.scheme and parts.scheme not in ("http", "https"):
        return False  # mailto:, tel:, data:
    if parts.netloc:
        if parts.hostname not in (host, DOMAIN, PLATFORM_HOST):
            return False  # another site (a photo, the dealer's own website)
        return parts.hostname != host or not (parts.path + "/").startswith(root + "/")
    if not parts.path.startswith("/"):
        return False  # "#main", or a relative path
    return not parts.path.startswith(root + "/")


def strays(answer: Any, root: str, host: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Every link, Location and cookie Path of ``answer`` that leaves ``root`` (but the paths ``allowed``)."""
    found = [
        f"{name}={value}"
        for name, value in LINK.findall(answer.text)
        if outside(value, root, host) and value not in allowed
    ]
    location = answer.headers.get("location")
    if location is not None and outside(location, root, host) and location not in allowed:
        found.append(f"Location: {location}")
    for cookie in answer.headers.get_list("set-cookie"):
        path = re.search(r";\s*Path=([^;]*)", cookie, re.IGNORECASE)
        if path is None or not (path.group(1) + "/").startswith(root + "/") or path.group(1) == "/" and root:
            found.append(f"Set-Cookie: {cookie.split('=', 1)[0]} Path={path.group(1) if path else None}")
    return found


def sign_in(client: TestClient, root: str, host: str, email: str = ADMIN) -> str:
    """Sign in at ``root``'s console, checking each answer on the way; the page's CSRF token."""
    form = client.get(f"{root}/console/login")
    assert form.status_code == 200 and strays(form, root, host) == []
    answer = client.post(
        f"{root}/console/login",
        data={"csrf_token": csrf_of(form.text), "email": email, "password": PASSWORD, "next": "/console/inventory"},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == f"{root}/console/inventory"
    assert strays(answer, root, host) == []
    return csrf_of(client.get(f"{root}/console/leads").text)


def filled(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


#: The form each POST route of the console is sent (beyond the CSRF token); a new POST route
#: fails the test until it is given one here.
FORMS: dict[str, dict[str, Any]] = {
    "/console/leads.csv": {},
    "/console/leads/{lead_id}/retry": {},
    "/console/leads/{lead_id}/handled": {"handled": "1"},
    "/console/leads/{lead_id}/pipeline": {"stage": "contacted", "owner": "", "follow_up": "", "note": "Called."},
    "/console/leads/{lead_id}/erase": {"confirm": "erase"},  # after the lead's other forms: it goes
    "/console/users": {"email": "new@alpha.example", "password": PASSWORD + " new", "role": "staff"},
    "/console/users/{user_id}/password": {"password": PASSWORD + " again"},
    "/console/users/{user_id}/unlock": {},
    "/console/users/{user_id}/remove": {},
    "/console/account": {"current": "wrong", "password": PASSWORD + "!", "again": PASSWORD + "!"},
    "/console/account/sessions": {"which": "others"},
}


@pytest.mark.slow
@pytest.mark.parametrize(("view", "base", "root"), VIEWS, ids=[v[0] for v in VIEWS])
def test_every_console_page_form_and_redirect_stays_under_the_prefix(tenant, view, base, root) -> None:
    host = urlsplit(base).hostname
    routes = surface_routes(tenant["settings"], aap.console.build)
    posts = [
        path
        for method, path in routes
        if method == "POST" and path not in ELSEWHERE | {"/console/login", "/console/logout"}
    ]
    assert sorted(posts) == sorted(FORMS), "give each POST route of the console its form in FORMS"
    client = browser(tenant, base)
    with cheap_hashing():
        # Signed out: each page sends the browser to the sign-in page, under the prefix.
        away = client.get(f"{root}/console/leads", follow_redirects=False)
        assert away.status_code == 303 and strays(away, root, host) == []
        assert away.headers["location"] == f"{root}/console/login?next=/console/leads"
        token = sign_in(client, root, host)
        here = client.get(f"{root}/console/inventory").text  # the menu marks the page it is on
        assert f'href="{root}/console/inventory" aria-current="page"' in here
        checked = 0
        for method, path in routes:
            if method != "GET" or path.startswith("/console/assets/"):
                continue
            answer = client.get(root + filled(path, tenant["values"]), follow_redirects=False)
            assert answer.status_code < 500, (path, answer.text[:500])
            assert strays(answer, root, host) == [], path
            checked += "<html" in answer.text
        assert checked >= 12  # pages, not only JSON polls
        for path, form in FORMS.items():
            answer = client.post(root + filled(path, tenant["values"]), data={"csrf_token": token, **form})
            assert answer.status_code < 500, (path, answer.text[:500])
            assert strays(answer, root, host) == [], path
            for step in answer.history:  # each redirect on the way
                assert strays(step, root, host) == [], path
        out = client.post(f"{root}/console/logout", data={"csrf_token": token}, follow_redirects=False)
        assert out.status_code == 303 and out.headers["location"] == f"{root}/console/login"
        assert strays(out, root, host) == []
        assert "aap_console=" in out.headers["set-cookie"]  # the session cookie deleted, at its own Path
    for asset in ("aap.css", "aap.js"):
        assert client.get(f"{root}/console/assets/{asset}").status_code == 200


TOKEN = re.compile(r'name="form_token" value="([^"]+)"')
CONTACT = {
    "first_name": "Marisol",
    "last_name": "Okonkwo-Reyes",
    "email": "marisol.or@example.org",
    "phone": "(916) 555-0142",
    "channels": ["email"],
    "preferred": "email",
    "message": "Is it still available?",
    "website": "",
}


@pytest.mark.parametrize(("view", "base", "root"), VIEWS, ids=[v[0] for v in VIEWS])
def test_every_public_page_and_its_contact_form_stay_under_the_prefix(tenant, view, base, root) -> None:
    host = urlsplit(base).hostname
    routes = surface_routes(tenant["settings"], aap.site.build)
    assert ("POST", "/contact") in routes
    values = {**tenant["values"], "name": "a2a"}
    client = browser(tenant, base)
    checked = 0
    for method, path in routes:
        if method != "GET":
            continue
        answer = client.get(root + filled(path, values), follow_redirects=False)
        assert answer.status_code < 500, (path, answer.text[:500])
        assert strays(answer, root, host) == [], path
        checked += "<html" in answer.text
    assert checked == 4  # the search, a vehicle, the API docs, the contact page
    poppy = client.get(f"{root}/api-docs/poppy")
    assert poppy.status_code in (200, 404) and strays(poppy, root, host) == []
    for query in ({"make": "Honda"}, {"make": "Nonesuch"}, {"year_min": "nineteen"}):
        paged = client.get(f"{root}/", params=query)
        assert paged.status_code < 500 and strays(paged, root, host) == [], query
    first = client.get(f"{root}/")  # 3 listings, 2 a page
    later = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert later is not None and later.group(1).startswith(f"{root}/?")
    page = client.get(f"{root}/vehicles/{values['vehicle_id']}")
    assert f'action="{root}/contact"' in page.text
    sent = client.post(
        f"{root}/contact", data={"form_token": TOKEN.search(page.text).group(1), **CONTACT}, headers={"origin": base}
    )
    assert sent.status_code == 200 and "Thank you" in sent.text, sent.text[:2000]
    assert strays(sent, root, host) == []
    assert f'href="{root}/vehicles/{values["vehicle_id"]}"' in sent.text  # back to the car
    refused = client.post(f"{root}/contact", data={"form_token": "forged", **CONTACT}, headers={"origin": base})
    assert refused.status_code == 400 and strays(refused, root, host) == []


@pytest.mark.slow
def test_a_platform_administrator_in_a_tenants_console_stays_under_its_prefix(tenant) -> None:
    """A platform administrator's visit: every link under ``/t/ID/`` but the platform console's own."""
    root, host = f"/t/{TENANT}", PLATFORM_HOST
    client = browser(tenant, f"https://{PLATFORM_HOST}")
    with cheap_hashing():
        form = client.get("/console/login")
        signed = client.post(
            "/console/login",
            data={"csrf_token": csrf_of(form.text), "email": OPS, "password": PASSWORD},
            follow_redirects=False,
        )
        assert signed.status_code == 303
    opened = client.get(f"/console/open?tenant={TENANT}", follow_redirects=False)
    assert opened.headers["location"] == f"{root}/console/"
    checked = 0
    for method, path in surface_routes(tenant["settings"], aap.console.build):
        if method != "GET" or path.startswith("/console/assets/"):
            continue
        answer = client.get(root + filled(path, tenant["values"]), follow_redirects=False)
        assert answer.status_code < 500, (path, answer.text[:500])
        assert strays(answer, root, host, PLATFORM_CONSOLE) == [], path
        checked += 'id="switch-tenant"' in answer.text
    assert checked >= 10  # the pages, each with the switch control
    token = csrf_of(client.get(f"{root}/console/leads").text)
    out = client.post(f"{root}/console/logout", data={"csrf_token": token}, follow_redirects=False)
    assert out.headers["location"] == "/console/login"  # the platform's session ended: its sign-in page
    assert "aap_platform=" in out.headers["set-cookie"] and "Path=/;" in out.headers["set-cookie"]


@pytest.mark.parametrize(("view", "base", "root"), VIEWS, ids=[v[0] for v in VIEWS])
def test_an_error_page_of_the_console_links_its_stylesheet_and_way_back_under_the_prefix(
    tenant, view, base, root
) -> None:
    host = urlsplit(base).hostname
    answer = browser(tenant, base).post(f"{root}/console/leads", headers={"accept": "text/html"})
    assert answer.status_code == 405 and "<html" in answer.text
    assert strays(answer, root, host) == []
    assert f'href="{root}/console/assets/aap.css"' in answer.text


def test_the_link_check_finds_a_link_out_of_the_prefix() -> None:
    """The checker itself: each kind of stray is caught, and what is not one is let through."""

    class Answer:
        def __init__(self, text: str, headers: dict[str, Any]) -> None:
            self.text = text
            self.headers = _Headers(headers)

    class _Headers(dict):
        def get_list(self, name: str) -> list[str]:
            value = self.get(name)
            return [] if value is None else value if isinstance(value, list) else [value]

    root, host = f"/t/{TENANT}", PLATFORM_HOST
    fine = Answer(
        f' <a href="{root}/console/leads"><img src="https://img.example/1.jpg"><a href="#main"> '
        f'<a href="mailto:a@b.example"> <a href="https://{PLATFORM_HOST}{root}/a2a">',
        {"location": f"{root}/console/login", "set-cookie": [f"aap_console=x; Path={root}/console/; Secure"]},
    )
    assert strays(fine, root, host) == []
    for text, headers in (
        (' <a href="/console/leads">', {}),
        (' <form action="/console/login">', {}),
        (' <link href="/console/assets/aap.css">', {}),
        (' <div data-poll="/console/health/state">', {}),
        (f' <a href="https://{PLATFORM_HOST}/a2a">', {}),
        (f' <a href="https://{DOMAIN}/">', {}),
        ("", {"location": "/console/login"}),
        ("", {"set-cookie": ["aap_console=x; Path=/console/; Secure"]}),
        ("", {"set-cookie": ["aap_console=x; Path=/; Secure"]}),
        ("", {"set-cookie": ["aap_console=x; Secure"]}),
    ):
        assert strays(Answer(text, headers), root, host) != [], (text, headers)
