"""Feed import benchmark: a provider CSV with transforms against the plain ``aap`` format.

Generates ``count`` vehicles (deterministic) and writes them twice: as a
``dealer-csv`` export with the messy values real exports carry ("$33,995",
"28,411 mi", "Used", "01/15/2025", pipe-separated photo URLs, lower-case
VINs, Windows-1252, semicolons) and as the same listings in the ``aap`` CSV
format. Each is imported end to end into a fresh SQLite database through
:func:`aap.feeds.job.run_import` (what ``aap import`` runs: read, transform,
check every row with the one validator, import in one transaction, record the
run; a feed this large is read in a child process while it is stored,
:mod:`aap.feeds.pipeline`). Prints rows/s for the whole import (wall time) and
rows per CPU-second for its two halves. Target: dealer-csv >= 20k
rows/s on SQLite.

    python bench/bench_feeds.py --count 100000
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from aap.config.loader import load_settings
from aap.feeds.job import ImportRequest, run_import
from aap.inventory.formats import ReadOptions, read_feed_bytes
from aap.inventory.formats.aap import write_feed
from aap.inventory.vin import with_check_digit
from aap.store import open_stores
from aap.work import Work

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

MODELS = [
    ("Honda", "CR-V", "EX-L", "SUV"),
    ("Toyota", "Camry", "SE", "Sedan"),
    ("Ford", "F-150", "XLT", "Truck"),
    ("Subaru", "Outback", "Touring", "Wagon"),
    ("Mazda", "CX-5", "Grand Touring", "SUV"),
]
COLORS = ["Crystal Black Pearl", "Platinum White", "Café au Lait", "Rapid Red"]
CHARS = "ABCDEFGHJKLMNPRSTUVWXYZ0123456789"
HEADER = [
    "VIN",
    "Stock #",
    "Year",
    "Make",
    "Model",
    "Trim",
    "Body",
    "Exterior Color",
    "Mileage",
    "Internet Price",
    "MSRP",
    "New/Used",
    "Certified",
    "Photos",
    "Date In Stock",
]


def dealer_csv(count: int, seed: int = 1) -> bytes:
    rnd = random.Random(seed)
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=";", lineterminator="\r\n")
    writer.writerow(HEADER)
    for i in range(count):
        make, model, trim, body = MODELS[i % len(MODELS)]
        vin = with_check_digit("1" + "".join(rnd.choice(CHARS) for _ in range(10)) + f"{i:06d}")
        condition = ("New", "Used", "Used")[i % 3]
        mileage = 0 if condition == "New" else rnd.randint(5_000, 90_000)
        msrp = rnd.randint(24, 60) * 1000 + 995
        price = msrp - rnd.randint(0, 80) * 100
        photos = "|".join(f"http://cdn.dealer.example/{vin.lower()}/{n}.jpg" for n in range(1, 4))
        writer.writerow(
            [
                vin.lower() if i % 2 else vin,
                f"S{i:07d} ",
                str(2016 + i % 10),
                make,
                model,
                trim,
                body,
                COLORS[i % 4],
                f"{mileage:,} mi",
                f"${price:,}",
                f"${msrp:,}.00",
                condition,
                "Yes" if i % 6 == 2 else "No",
                photos,
                f"{1 + i % 12:02d}/{1 + i % 28:02d}/2025",
            ]
        )
    return buffer.getvalue().encode("cp1252")


def run(path: str, fmt: str, count: int, settings) -> tuple[float, float, float]:
    """(read+check CPU seconds, import CPU seconds, end-to-end wall seconds) on fresh databases.

    The halves are measured in CPU time (this process's), which other work on a
    shared machine disturbs less than wall time; the end-to-end figure is wall time
    (the pipelined import uses two processes).
    """
    data = Path(path).read_bytes()
    options = ReadOptions(format=fmt, settings=settings)
    start = time.process_time()
    report = read_feed_bytes(data, path, options)
    read_s = time.process_time() - start
    assert len(report.listings) == count and not report.rejected, report.problems[:3]
    with tempfile.TemporaryDirectory() as tmp:
        stores = open_stores(f"sqlite:///{tmp}/a.db")
        start = time.process_time()
        stores.inventory.import_listings(report.listings)
        import_s = time.process_time() - start
        stores.close()
    with tempfile.TemporaryDirectory() as tmp:
        stores = open_stores(f"sqlite:///{tmp}/b.db")
        start = time.perf_counter()
        result = asyncio.run(run_import(stores, settings, ImportRequest(source=path, format=fmt), work=WORK))
        total_s = time.perf_counter() - start
        assert result.run.outcome == "imported" and result.run.inserted == count, result.run.message
        stores.close()
    return read_s, import_s, total_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    settings = load_settings(environ={})
    with tempfile.TemporaryDirectory() as tmp:
        dealer = os.path.join(tmp, "export.csv")
        Path(dealer).write_bytes(dealer_csv(args.count))
        plain = os.path.join(tmp, "inventory.csv")
        listings = read_feed_bytes(Path(dealer).read_bytes(), dealer, ReadOptions(settings=settings)).listings
        write_feed(plain, listings)
        print(
            f"{args.count:,} rows; {Path(dealer).stat().st_size / 1e6:.1f} MB dealer-csv, "
            f"{Path(plain).stat().st_size / 1e6:.1f} MB aap CSV (Python {sys.version.split()[0]})"
        )
        for label, path, fmt in (("dealer-csv (transforms)", dealer, "dealer-csv"), ("aap CSV", plain, "aap")):
            read_s, import_s, total_s = run(path, fmt, args.count, settings)
            print(
                f"{label:<24} end to end {args.count / total_s:>8,.0f} rows/s ({total_s:.2f} s wall) | "
                f"read+check {args.count / read_s:>8,.0f} rows/CPU-s | "
                f"store import {args.count / import_s:>8,.0f} rows/CPU-s"
            )


if __name__ == "__main__":
    main()
