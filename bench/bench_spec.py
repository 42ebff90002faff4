"""Schema validation cost on the hot path: ``python bench/bench_spec.py``.

Prints microseconds per call of ``aap.spec.validate`` for a typical
``inventory.search`` request, a ``lead.submit`` request, a rejected search
request (the path that explains every problem) and one demo listing, plus the
yes/no ``is_valid`` check used for feed rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aap.config.loader import load_settings
from aap.inventory.demo import generate_listings
from aap.spec import is_valid, validate

SEARCH = {
    "type": "inventory.search.request",
    "filters": {"make": ["Honda"], "condition": ["used"], "price_max": 40000, "year_min": 2020},
    "pagination": {"limit": 25},
    "sort": {"field": "price", "order": "asc"},
}
BAD_SEARCH = {**SEARCH, "filters": {"make": [], "colour": ["red"], "year_min": "2020"}}
LEAD = {
    "type": "lead.submit.request",
    "customer": {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "email": "ada@example.com",
        "phone": "+14155550123",
        "preferred_contact": "email",
    },
    "consent": {
        "granted_at": "2026-11-01T10:00:00Z",
        "allowed_channels": ["email", "phone"],
        "consent_text": "I agree to be contacted about this vehicle.",
        "scope": ["lead_submission"],
    },
    "vehicle_of_interest": {"year": 2024, "make": "Honda", "model": "CR-V", "condition": "used"},
    "appointment": {"appointment_type": "test_drive", "appointment_at": "2026-12-03T10:00:00-08:00"},
    "source_agent": {"name": "bench"},
    "idempotency_key": "bench-0001",
}


def per_call_us(fn: Callable[[], object], n: int) -> float:
    fn()  # compile and warm caches first
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    rows = list(generate_listings(1000, seed=11, settings=load_settings(environ={})))
    print(
        f"validate(search request)         {per_call_us(lambda: validate(SEARCH, 'inventory-search-request'), 2000):9.1f} us"
    )
    print(
        f"validate(lead.submit request)    {per_call_us(lambda: validate(LEAD, 'lead-submit-request'), 2000):9.1f} us"
    )
    print(
        f"validate(rejected search)        {per_call_us(lambda: validate(BAD_SEARCH, 'inventory-search-request'), 500):9.1f} us"
    )
    per_row = per_call_us(lambda: [validate(r, "inventory-listing") for r in rows], 3) / len(rows)
    print(f"validate(listing) per feed row   {per_row:9.1f} us")
    per_row = per_call_us(lambda: [is_valid(r, "inventory-listing") for r in rows], 3) / len(rows)
    print(f"is_valid(listing) per feed row   {per_row:9.1f} us")


if __name__ == "__main__":
    main()
