"""The staff console's "Erase this customer's data" on a lead's page: administrators only, a
confirmation, every lead of the customer erased and the record in the audit log (docs/leads.md,
"Erasure and retention")."""

from __future__ import annotations

import dataclasses

import pytest
from starlette.testclient import TestClient

from aap.accounts import Accounts
from aap.server.app import create_app
from aap.store import open_stores
from console_support import CUSTOMERS, PASSWORD, cheap_hashing, csrf_of, fast_web, listings, submit_customers
from lead_support import lead_settings

BASE = "https://dealer.example"
ADMIN, STAFF = "admin@dealer.example", "staff@dealer.example"

#: A live app with sessions (pyproject.toml, the slow marker).
pytestmark = pytest.mark.slow


@pytest.fixture
def deployment(tmp_path):
    url = f"sqlite:///{tmp_path}/console.db"
    settings = dataclasses.replace(lead_settings(database_url=url), web=fast_web())
    stores = open_stores(url)
    stores.inventory.import_listings(listings())
    with cheap_hashing():
        accounts = Accounts(stores.console, settings)
        accounts.add(ADMIN, PASSWORD, role="admin")
        accounts.add(STAFF, PASSWORD)
        app = create_app(settings, stores)
        with TestClient(app, base_url=BASE):
            # the first customer twice (a second lead under the same address), then the others
            ids = submit_customers(app.state.agent, (CUSTOMERS[0], *CUSTOMERS))
            yield {"app": app, "ids": ids, "stores": stores}
    stores.close()


def sign_in(deployment, email: str) -> TestClient:
    client = TestClient(deployment["app"], base_url=BASE)
    form = client.get("/console/login")
    data = {"csrf_token": csrf_of(form.text), "email": email, "password": PASSWORD}
    assert client.post("/console/login", data=data, follow_redirects=False).status_code == 303
    return client


def test_an_administrator_erases_the_customer_of_a_lead(deployment):
    ids, stores = deployment["ids"], deployment["stores"]
    staff = sign_in(deployment, STAFF)
    page = staff.get(f"/console/leads/{ids[0]}")
    assert page.status_code == 200 and "Erase this customer" not in page.text
    token = csrf_of(page.text)
    assert (
        staff.post(f"/console/leads/{ids[0]}/erase", data={"csrf_token": token, "confirm": "erase"}).status_code == 403
    )

    admin = sign_in(deployment, ADMIN)
    page = admin.get(f"/console/leads/{ids[0]}")
    assert "Erase this customer" in page.text
    token = csrf_of(page.text)
    unconfirmed = admin.post(f"/console/leads/{ids[0]}/erase", data={"csrf_token": token})
    assert unconfirmed.status_code == 400 and stores.leads.get_lead(ids[0]) is not None

    done = admin.post(
        f"/console/leads/{ids[0]}/erase", data={"csrf_token": token, "confirm": "erase"}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"].endswith("/console/audit")
    assert stores.leads.get_lead(ids[0]) is None and stores.leads.get_lead(ids[1]) is None  # both of hers
    assert all(stores.leads.get_lead(i) is not None for i in ids[2:])
    (entry,) = [e for e in stores.console.audit_entries() if e.action == "leads.erased"]
    assert entry.actor == ADMIN and entry.detail["leads"] == 2
    log = admin.get("/console/audit")
    assert log.status_code == 200 and "leads.erased" in log.text and CUSTOMERS[0][2] not in log.text
    assert admin.get(f"/console/leads/{ids[0]}").status_code == 404
