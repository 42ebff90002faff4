"""Each tenant's request counts in record tables (src/aap/web/tenant_counts.py), against a simple
reference: what every worker counted is what a scrape shows, whole records only, from any worker."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from aap.web.metrics import Metrics
from aap.web.tenant_counts import CountTable, TenantCounts, read_records

TENANTS = st.sampled_from(["a", "dealer-b", "t00042", "x" * 48, "gamma-motors"])
STATUSES = st.sampled_from([200, 201, 204, 304, 400, 404, 429, 500, 503])
CODES = st.sampled_from([None, None, "RATE_LIMITED", "TENANT_SUSPENDED", "-32602", "INVALID_REQUEST"])
REQUESTS = st.lists(st.tuples(st.integers(0, 2), TENANTS, STATUSES, CODES), max_size=60)


def reference(requests) -> tuple[Counter, Counter]:
    by_class: Counter = Counter()
    by_code: Counter = Counter()
    for _, tenant, status, code in requests:
        by_class[(tenant, f"{status // 100}xx")] += 1
        if code:
            by_code[(tenant, code)] += 1
    return by_class, by_code


def shown(requests: dict[str, list[int]]) -> Counter:
    return Counter(
        {
            (tenant, status): n
            for tenant, counts in requests.items()
            for status, n in zip(TenantCounts.CLASSES, counts)
            if n
        }
    )


@settings(max_examples=60, deadline=None)
@given(REQUESTS)
def test_every_workers_counts_add_up_to_what_was_served(tmp_path_factory, requests) -> None:
    """Three workers sharing a directory, each counting the requests it answered: the totals
    any of them reads are the reference's, tenant by tenant and code by code."""
    directory = str(tmp_path_factory.mktemp("metrics"))
    workers = [TenantCounts(directory) for _ in range(3)]
    try:
        for worker, tenant, status, code in requests:
            workers[worker].observe(tenant, status, code)
        by_class, by_code = reference(requests)
        for worker in workers:
            totals, errors = worker.totals()
            assert shown(totals) == by_class
            assert Counter(errors) == by_code
    finally:
        for worker in workers:
            worker.close()


@settings(max_examples=40, deadline=None)
@given(REQUESTS)
def test_a_process_without_a_directory_counts_its_own(requests) -> None:
    counts = TenantCounts(None)
    for _, tenant, status, code in requests:
        counts.observe(tenant, status, code)
    by_class, by_code = reference(requests)
    totals, errors = counts.totals()
    assert shown(totals) == by_class and Counter(errors) == by_code


@pytest.mark.parametrize("in_file", [False, True])
def test_a_table_grows_past_its_first_records_and_keeps_every_count(tmp_path, in_file) -> None:
    table = CountTable(48, 5, str(tmp_path / "t.counts") if in_file else None)
    for i in range(700):  # past the first 256 records, twice
        table.add(f"t{i:05d}", i % 5, amount=i + 1)
    table.add("t00003", 3)
    assert len(table) == 700
    assert table.counts("t00003") == (0, 0, 0, 5, 0) and table.counts("t00699") == (0, 0, 0, 0, 700)
    assert table.counts("never") == (0,) * 5
    data = (tmp_path / "t.counts").read_bytes() if in_file else table.snapshot()
    records = dict(read_records(data, 48, 5))
    assert len(records) == 700 and records["t00004"] == (0, 0, 0, 0, 5)
    table.close()


def test_a_reader_sees_whole_records_only(tmp_path) -> None:
    """The header counts a record once it is written: bytes cut anywhere give the records before
    the cut, never a part of one; a table of another layout gives none."""
    table = CountTable(48, 5)
    for i in range(5):
        table.add(f"tenant-{i}", 1, amount=i + 1)
    data = table.snapshot()
    whole = list(read_records(data, 48, 5))
    assert [key for key, _ in whole] == [f"tenant-{i}" for i in range(5)]
    for cut in range(len(data)):
        assert list(read_records(data[:cut], 48, 5)) == whole[: max(0, (cut - 16) // table.record_size)]
    assert list(read_records(data, 127, 1)) == []


def test_a_key_longer_than_the_table_allows_is_refused_whole() -> None:
    table = CountTable(8, 1)
    with pytest.raises(ValueError):
        table.add("nine-byte", 0)
    assert len(table) == 0 and table.snapshot() == CountTable(8, 1).snapshot()


def test_a_worker_that_ended_stays_counted(tmp_path) -> None:
    """A worker process counts and exits; the scrape of one still running shows its counts."""
    directory = str(tmp_path)
    script = (
        "import sys; from aap.web.tenant_counts import TenantCounts\n"
        "c = TenantCounts(sys.argv[1])\n"
        "for _ in range(3): c.observe('dealer-a', 200, None)\n"
        "c.observe('dealer-a', 503, 'TENANT_UNAVAILABLE')\n"
    )
    subprocess.run([sys.executable, "-c", script, directory], check=True, timeout=60)
    alive = Metrics(multiprocess_dir=directory)
    alive.observe_tenant("dealer-a", 200)
    alive.observe_tenant("dealer-b", 404, "NOT_FOUND")
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(alive.render())
        for sample in family.samples
        if sample.name.startswith("aap_tenant_")
    }
    assert values == {
        ("aap_tenant_requests_total", (("status", "2xx"), ("tenant", "dealer-a"))): 4.0,
        ("aap_tenant_requests_total", (("status", "5xx"), ("tenant", "dealer-a"))): 1.0,
        ("aap_tenant_requests_total", (("status", "4xx"), ("tenant", "dealer-b"))): 1.0,
        ("aap_tenant_errors_total", (("code", "TENANT_UNAVAILABLE"), ("tenant", "dealer-a"))): 1.0,
        ("aap_tenant_errors_total", (("code", "NOT_FOUND"), ("tenant", "dealer-b"))): 1.0,
    }


def test_the_exposition_parses_back_to_the_counts_even_with_odd_characters() -> None:
    counts = TenantCounts(None)
    odd = 'a "code"\\ with\na line feed'
    counts.observe("dealer-a", 500, odd)
    counts.observe("dealer-a", 200, None)
    parsed = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(counts.exposition())
        for sample in family.samples
    }
    assert parsed == {
        ("aap_tenant_requests_total", (("status", "2xx"), ("tenant", "dealer-a"))): 1.0,
        ("aap_tenant_requests_total", (("status", "5xx"), ("tenant", "dealer-a"))): 1.0,
        ("aap_tenant_errors_total", (("code", odd), ("tenant", "dealer-a"))): 1.0,
    }
