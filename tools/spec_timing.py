#!/usr/bin/env python3
"""Time aap.spec.validate on a typical inventory.search request (hot path).

Not a test: performance is measured, never asserted.  Usage:
``python tools/spec_timing.py [N]``.
"""

from __future__ import annotations

import statistics
import sys
import time

import aap.spec as spec

REQUEST = {
    "type": "inventory.search.request",
    "filters": {
        "make": ["Honda", "BMW"],
        "model": ["CR-V"],
        "condition": ["used"],
        "year_min": 2023,
        "year_max": 2025,
        "price_max": 35000,
        "transmission": ["automatic"],
        "rooftops": ["Demo Toyota San Francisco"],
    },
    "pagination": {"limit": 100},
    "sort": {"field": "price", "order": "asc"},
    "privacy": {"anonymous": True},
}


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    t0 = time.perf_counter()
    spec.validate(REQUEST, "inventory-search-request")  # compiles once
    first = time.perf_counter() - t0
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        problems = spec.validate(REQUEST, "inventory-search-request")
        samples.append(time.perf_counter() - t)
    assert problems == []
    samples.sort()
    print(f"first call (compile + validate): {first * 1e3:.2f} ms")
    print(
        f"validate x{n}: p50 {statistics.median(samples) * 1e6:.0f} us, "
        f"p99 {samples[int(n * 0.99)] * 1e6:.0f} us, "
        f"mean {statistics.fmean(samples) * 1e6:.0f} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
