"""The public dealer page at ``/``: profile, search form, paging, vehicle pages, API docs (docs/console.md)."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from aap.config.model import DealerProfile, RateLimit
from aap.config.web import WebSettings
from aap.inventory.demo import generate_listings
from aap.server.app import create_app
from aap.store import open_stores
from conftest import make_settings

BASE = "https://dealer.example"
VEHICLE_LINK = re.compile(r'href="/vehicles/([^"#?]+)"')


def client_for(settings, tmp_path, count=60, name="site"):
    stores = open_stores(f"sqlite:///{tmp_path}/{name}.db")
    stores.inventory.import_listings(generate_listings(count, settings=settings))
    return TestClient(create_app(settings, stores, services=()), base_url=BASE), stores


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    settings = make_settings()
    client, stores = client_for(settings, tmp_path_factory.mktemp("site"))
    with client:
        yield client
    stores.close()


def test_the_home_page_shows_the_dealer_its_rooftops_and_how_to_connect(site):
    page = site.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "<h1>Bay Motors Group</h1>" in html
    for rooftop in ("Bay Motors San Francisco", "Bay Motors Oakland", "Bay Motors Vancouver"):
        assert f"<h3>{rooftop}</h3>" in html
    assert '<th scope="row">Sunday</th><td>Closed</td>' in html and "09:00–19:00" in html
    for url in (
        f"{BASE}/.well-known/agent-card.json",
        f"{BASE}/mcp",
        f"{BASE}/llms.txt",
        f"{BASE}/a2a/openapi.json",
        f"{BASE}/.well-known/api-catalog",
    ):
        assert f'data-copy="{url}"' in html, url
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    usd = sum(1 for item in generate_listings(60, settings=make_settings()) if item.get("currency") != "CAD")
    assert f"{usd} vehicles · page 1 of {-(-usd // 20)} · prices in USD" in html  # the default currency's
    assert len(set(VEHICLE_LINK.findall(html))) == 20  # default_limit


def test_the_form_offers_exactly_the_advertised_filters_and_sorts(tmp_path):
    settings = make_settings(filters=("make", "price_max", "condition"), sort_fields=("price", "year"))
    client, stores = client_for(settings, tmp_path, count=60)
    with client:
        html = client.get("/").text
        refused = client.get("/?model=Civic&make=Honda")
    stores.close()
    names = set(re.findall(r'<(?:input|select)[^>]* name="([a-z_]+)"', html))
    assert names == {"make", "price_max", "condition", "sort", "currency", "unit"}
    assert re.findall(r'<option value="([a-z_]+:(?:asc|desc))"', html) == [
        "price:asc",
        "price:desc",
        "year:asc",
        "year:desc",
    ]
    assert refused.status_code == 200  # a filter the deployment does not advertise is not read at all


def test_search_filters_sorts_and_pages_through_the_core(site):
    new = site.get("/", params={"condition": "new", "sort": "price:asc"})
    assert new.status_code == 200
    prices = [int(p.replace(",", "")) for p in re.findall(r'<div class="price">\$([\d,]+)</div>', new.text)]
    cards = re.findall(r'<article class="card">(.*?)</article>', new.text, re.S)
    assert prices == sorted(prices) and 0 < len(prices) == len(cards)
    assert all(re.search(r"<div class=\"muted\">\s*New\b", card) for card in cards)

    first = site.get("/", params={"sort": "price:desc"})
    total = int(re.search(r"([\d,]+) vehicles? · page 1 of (\d+)", first.text).group(1))
    seen = set(VEHICLE_LINK.findall(first.text))
    next_link = re.search(r'<a href="([^"]+)" rel="next">', first.text)
    pages = 1
    while next_link:
        page = site.get(next_link.group(1).replace("&amp;", "&"))
        assert page.status_code == 200 and 'rel="first">← First page' in page.text
        assert "price%3Adesc" in next_link.group(1) and "cursor=" in next_link.group(1)
        page_ids = VEHICLE_LINK.findall(page.text)
        assert not seen & set(page_ids)
        seen |= set(page_ids)
        pages += 1
        next_link = re.search(r'<a href="([^"]+)" rel="next">', page.text)
    assert total > 20 and len(seen) == total and pages == -(-total // 20)


def test_without_offset_paging_too_the_next_page_follows_the_cursor(tmp_path):
    client, stores = client_for(make_settings(offset=False), tmp_path, count=60)
    with client:
        first = client.get("/")
        link = re.search(r'<a href="([^"]+)" rel="next">', first.text).group(1).replace("&amp;", "&")
        assert "cursor" in parse_qs(urlsplit(link).query)
        second = client.get(link)
        bad = client.get("/?cursor=not-a-cursor")
    stores.close()
    assert second.status_code == 200 and "First page" in second.text and "page 2 of" in second.text
    assert not set(VEHICLE_LINK.findall(first.text)) & set(VEHICLE_LINK.findall(second.text))
    assert bad.status_code == 400 and "Please check the search" in bad.text


def test_every_problem_of_a_bad_search_is_listed(site):
    page = site.get("/", params={"year_min": "soon", "price_max": "-5", "features_all": "warp_drive"})
    assert page.status_code == 400
    problems = re.findall(r"<li>(.*?)</li>", page.text.split('role="alert"')[1].split("</ul>")[0])
    assert problems[0] == "Year from: enter a whole number."
    assert "Must have: unknown feature &#39;warp_drive&#39;." in problems
    assert any(p.startswith("Price to: ") for p in problems)
    assert 'class="card"' not in page.text


def test_a_vehicle_page_shows_price_in_its_currency_and_mileage_in_its_unit(site):
    html = site.get("/", params={"rooftops": "Bay Motors Vancouver", "condition": "used", "currency": "CAD"}).text
    vehicle_id = VEHICLE_LINK.findall(html)[0]
    page = site.get(f"/vehicles/{vehicle_id}")
    assert page.status_code == 200
    assert re.search(r'<div class="price">CA\$[\d,]+</div>', page.text)
    assert re.search(r"<dt>Mileage</dt><dd>[\d,]+ km</dd>", page.text)
    assert "<strong>Bay Motors Vancouver</strong>" in page.text
    missing = site.get("/vehicles/veh_nope")
    assert missing.status_code == 404 and "Not available" in missing.text


def test_the_api_docs_are_pages_of_the_served_openapi_documents(site):
    a2a = site.get("/api-docs/a2a")
    assert a2a.status_code == 200
    assert 'href="/a2a/openapi.json"' in a2a.text and f"<code>{BASE}/a2a</code>" in a2a.text
    assert re.search(r'<span class="method">post</span> <code>/</code>', a2a.text)
    poppy = site.get("/api-docs/poppy")
    assert re.search(r'<span class="method">post</span> <code>/inventory.search</code>', poppy.text)
    anchors = set(re.findall(r'id="(schema-[^"]+)"', poppy.text))
    links = set(re.findall(r'href="#(schema-[^"]+)"', poppy.text))
    assert "schema-InventorySearchRequest" in anchors and links <= anchors
    assert site.get("/api-docs/graphql").status_code == 404


def test_the_stylesheet_and_script_are_served_from_the_package(site):
    css = site.get("/assets/aap.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css") and "--accent" in css.text
    assert site.get("/assets/aap.css", headers={"If-None-Match": css.headers["etag"]}).status_code == 304
    assert "data-copy" in site.get("/assets/aap.js").text


def test_an_aggregate_page_lists_its_sellers(tmp_path):
    sellers = tuple(
        DealerProfile(
            {
                "dealer_id": f"seller-{n}",
                "name": f"Seller {n}",
                "rooftops": [{"name": f"Seller {n} Store", "address": {"city": city, "country": "US"}}],
            }
        )
        for n, city in ((1, "Springfield"), (2, "Shelbyville"))
    )
    settings = make_settings(scope="aggregate", dealers=sellers, filters=("make", "price_max"))
    client, stores = client_for(settings, tmp_path, count=0)
    stores.inventory.import_listings(
        [
            {
                "vin": "1HGCV1F30NA000101",
                "make": "Honda",
                "model": "Fit",
                "year": 2024,
                "status": "available",
                "price": 20000,
                "rooftop": "Seller 1 Store",
                "updated_at": "2026-01-01T00:00:00Z",
            }
        ],
        dealer_id="seller-1",
    )
    with client:
        html = client.get("/").text
    stores.close()
    assert '<h2 id="sellers-heading">Sellers</h2>' in html
    assert "<h3>Seller 1</h3>" in html and "Seller 2 Store — Shelbyville" in html
    assert "Seller 1 Store · Seller 1" in html  # a listing names its seller


def test_the_page_counts_against_the_callers_rate_limit(tmp_path):
    settings = dataclasses.replace(make_settings(), rate_limit=RateLimit(per_minute=1, burst=2))
    client, stores = client_for(settings, tmp_path, count=5)
    with client:
        answers = [client.get("/") for _ in range(3)]
    stores.close()
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert int(answers[2].headers["retry-after"]) >= 1 and "Too many requests" in answers[2].text


def test_an_api_only_host_turns_the_pages_off(tmp_path):
    settings = dataclasses.replace(make_settings(), web=WebSettings(public_page=False, console=False))
    client, stores = client_for(settings, tmp_path, count=1)
    with client:
        answers = {
            path: client.get(path)
            for path in ("/", "/vehicles/x", "/api-docs/a2a", "/assets/aap.css", "/console/login")
        }
        card = client.get("/.well-known/agent-card.json")
    stores.close()
    assert {path: a.status_code for path, a in answers.items()} == dict.fromkeys(answers, 404)
    assert answers["/"].json() == {"error": {"status": 404, "message": "Not Found"}}
    assert card.status_code == 200


def _choices(html: str, name: str) -> list[str]:
    """The values a select or checkbox group of the form offers (its "Any" left out)."""
    select = re.search(rf'<select id="f-{name}" name="{name}">(.*?)</select>', html, re.S)
    if select:
        return [v for v in re.findall(r'<option value="([^"]*)"', select.group(1)) if v]
    return re.findall(rf'<input type="checkbox" name="{name}" value="([^"]+)"', html)


def test_the_filters_offer_only_what_the_inventory_has(tmp_path):
    """A car-only dealer with no EVs is offered no vehicle type, no EV filters and only its own
    conditions; an option asked for in the link stays on offer (docs/console.md, decision)."""
    settings = make_settings()
    client, stores = client_for(settings, tmp_path, count=0)
    base = {"status": "available", "price": 30000, "updated_at": "2026-01-01T00:00:00Z", "fuel": "gas"}
    base |= {"vehicle_type": "car", "rooftop": "Bay Motors San Francisco", "body": "sedan"}
    rows = [
        dict(base, vin="1HGCV1F30NA000101", make="Honda", model="Accord", condition="new", features=["Sunroof"]),
        dict(base, vin="1HGCV1F30NA000202", make="Honda", model="Civic", condition="used", body="hatchback"),
        dict(base, vin="1HGCV1F30NA000303", make="Toyota", model="Camry", condition="new"),
    ]
    stores.inventory.import_listings(rows)
    with client:
        page = client.get("/").text
        asked = client.get("/", params={"vehicle_type": "motorcycle"}).text
    stores.close()
    assert _choices(page, "make") == ["Honda", "Toyota"]
    assert _choices(page, "condition") == ["new", "used"]  # no certified pre-owned listing
    assert (
        '<label><input type="checkbox" name="condition" value="new"> New <span class="muted">(2)</span></label>' in page
    )
    assert _choices(page, "body") == ["sedan", "hatchback"]
    for absent in ("vehicle_type", "fuel", "status", "electric_range_mi_min", "dc_fast_charge", "charge_port"):
        assert f'name="{absent}"' not in page, absent  # one value for all, or no listing has it
    assert 'name="displacement_cc_min"' not in page and 'name="rooftops"' not in page
    assert _choices(asked, "vehicle_type") == ["car", "motorcycle"]
    assert 'name="vehicle_type" value="motorcycle" checked' in asked


def test_on_a_phone_the_filters_fold_and_name_how_many_are_in_use(site):
    page = site.get("/").text
    assert '<details class="fold" data-open-wide>' in page and "<summary>Filters and sort</summary>" in page
    used = site.get("/", params={"condition": "used", "make": "Honda"}).text
    assert '<summary>Filters and sort <span class="muted">(2 in use)</span></summary>' in used
    bad = site.get("/", params={"year_min": "soon"}).text
    assert '<details class="fold" data-open-wide open>' in bad  # a problem to fix: shown unfolded


def test_no_page_carries_an_inline_style(site):
    """The CSP allows only this origin's stylesheet (``style-src 'self'``): an inline style attribute
    would be refused by the browser, so none is written."""
    vehicle_id = VEHICLE_LINK.findall(site.get("/").text)[0]
    for path in ("/", f"/vehicles/{vehicle_id}", "/contact", "/api-docs/a2a", "/vehicles/veh_nope"):
        assert " style=" not in site.get(path).text, path


def test_an_aggregate_page_offers_a_contact_form_per_seller(tmp_path):
    sellers = tuple(
        DealerProfile({"dealer_id": f"seller-{n}", "name": f"Seller {n}", "rooftops": [{"name": f"Seller {n} Store"}]})
        for n in (1, 2)
    )
    settings = make_settings(scope="aggregate", dealers=sellers)
    client, stores = client_for(settings, tmp_path, count=0)
    with client:
        home = client.get("/").text
        seller = client.get("/contact", params={"seller": "seller-2"})
        unknown = client.get("/contact", params={"seller": "seller-9"}).text
        app_agent = client.app.state.agent
        token = re.search(r'name="form_token" value="([^"]+)"', seller.text).group(1)
        clock = app_agent.deps.clock
        app_agent.deps.clock = lambda: clock() + timedelta(minutes=1)  # sent a minute after it was shown
        sent = client.post(
            "/contact",
            data={
                "form_token": token,
                "first_name": "Ada",
                "last_name": "Byron",
                "email": "ada@example.org",
                "channels": "email",
            },
        )
        app_agent.deps.clock = clock
    lead_id = re.search(r"<code>(lead_[0-9a-f]+)</code>", sent.text).group(1)
    lead = stores.leads.get_lead(lead_id)
    stores.close()
    assert '<a href="/contact?seller=seller-1">Contact Seller 1</a>' in home
    assert '<h1 id="contact-heading">Contact Seller 2</h1>' in seller.text
    assert "I agree that Seller 2 may contact me" in seller.text
    assert "Contact Bay Motors Group</h1>" in unknown  # not a seller here: the operator's form
    assert sent.status_code == 200 and lead["dealer_id"] == "seller-2"
    assert lead["request"]["vehicle_of_interest"] == {"dealer_id": "seller-2"}


def test_codes_read_as_words_and_phones_as_the_rooftops_country_writes_them(site):
    """The labels come from the one table the console shares (``aap.inventory.labels``); a phone
    is written for its rooftop's country, and international from another country."""
    home = site.get("/").text
    assert re.search(r'<option value="bev">Electric \(\d+\)</option>', home)
    assert re.search(r'<option value="awd">All-wheel drive \(\d+\)</option>', home)
    assert re.search(r'<option value="suv">SUV \(\d+\)</option>', home)
    assert 'Sales: <a href="tel:+14155550100">(415) 555-0100</a>' in home  # San Francisco, US
    assert 'Sales: <a href="tel:+14155550100">+1 415-555-0100</a>' in home  # Vancouver, CA
    assert ">bev<" not in home and ">awd<" not in home
    ev = site.get("/", params={"fuel": "bev"}).text
    page = site.get(f"/vehicles/{VEHICLE_LINK.findall(ev)[0]}").text
    assert "<dt>Fuel</dt><dd>Electric</dd>" in page
