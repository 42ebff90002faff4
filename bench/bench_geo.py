"""Resolving ``near`` against many rooftops: the rooftop index next to testing every rooftop.

    python bench/bench_geo.py [--rooftops 1000,10000,100000] [--runs 200]

Rooftops are spread uniformly over the continental US (as in bench_postgres.py);
each query is a 50 mi radius around a random point in the same box.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aap.inventory.geo import Located, RooftopIndex, haversine_mi  # noqa: E402
from common import percentile, timed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rooftops", default="1000,10000,100000")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    for count in (int(n) for n in args.rooftops.split(",")):
        rnd = random.Random(count)
        points = [(rnd.uniform(30.0, 47.0), rnd.uniform(-120.0, -75.0)) for _ in range(count)]
        index = RooftopIndex([Located(i, lat, lon, i) for i, (lat, lon) in enumerate(points)])
        centres = iter([(rnd.uniform(30.0, 47.0), rnd.uniform(-120.0, -75.0)) for _ in range(2 * args.runs + 2)])

        def indexed() -> None:
            lat, lon = next(centres)
            index.within(lat, lon, 50)

        def every() -> None:
            lat, lon = next(centres)
            [i for i, (plat, plon) in enumerate(points) if haversine_mi(lat, lon, plat, plon) <= 50]

        a = timed(indexed, args.runs)
        b = timed(every, args.runs)
        print(
            f"{count:>7,} rooftops, 50 mi: index p50 {percentile(a, 0.5) * 1000:.0f} µs, "
            f"every rooftop p50 {percentile(b, 0.5) * 1000:.0f} µs "
            f"({percentile(b, 0.5) / percentile(a, 0.5):.0f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main()
