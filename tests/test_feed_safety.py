"""The import's safety rules through ``aap import``: nothing is lost to a bad or truncated feed."""

from __future__ import annotations

import csv

import orjson
import pytest
from click.testing import CliRunner

import feed_samples as samples
from aap.cli.main import main
from aap.store import open_stores

COUNT = 20


@pytest.fixture
def db(tmp_path):
    return f"sqlite:///{tmp_path}/aap.db"


def invoke(*args: str):
    return CliRunner().invoke(main, ["import", *args])


def stored(db: str) -> tuple[int, int]:
    """(available listings, import runs recorded)."""
    stores = open_stores(db)
    try:
        return stores.inventory.count(), len(stores.feeds.runs(limit=1000))
    finally:
        stores.close()


@pytest.fixture
def loaded(tmp_path, db):
    """The database with COUNT listings from a provider CSV; returns (items, path)."""
    items = samples.vehicles(COUNT)
    path = tmp_path / "full.csv"
    path.write_bytes(samples.dealer_csv(items))
    result = invoke(str(path), "--database", db)
    assert result.exit_code == 0, result.output
    return items, path


@pytest.mark.parametrize("content", [b"", samples.DEALER_HEADER and ";".join(samples.DEALER_HEADER).encode() + b"\r\n"])
def test_an_empty_or_header_only_feed_never_replaces(tmp_path, db, loaded, content):
    empty = tmp_path / "truncated.csv"
    empty.write_bytes(content)
    result = invoke(str(empty), "--replace", "--format", "dealer-csv", "--database", db)
    assert result.exit_code == 1
    assert "has no listings" in result.output and "nothing was imported" in result.output
    assert stored(db)[0] == COUNT


def test_a_replace_never_removes_more_than_the_share(tmp_path, db, loaded):
    items, _ = loaded
    few = tmp_path / "few.csv"
    few.write_bytes(samples.dealer_csv(items[:8]))  # would remove 12 of 20 = 60 %
    result = invoke(str(few), "--replace", "--database", db, "--json")
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "refused"
    assert "would remove 12 of 20 listings" in summary["message"]
    assert stored(db)[0] == COUNT
    assert invoke(str(few), "--replace", "--max-removed-share", "0.7", "--database", db).exit_code == 0
    assert stored(db)[0] == 8


def test_skip_invalid_writes_every_bad_row_once(tmp_path, db, loaded):
    items, _ = loaded
    rows = samples.dealer_rows(items)
    rows[3][0] = "1HGCV1F30NA12345"  # 16 characters
    rows[3][9] = "$3x,995"  # and a bad price in the same row
    rows[7][14] = "13/45/2025"  # no such day
    rows[11][11] = "Demo"  # no such sale condition
    path = tmp_path / "bad.csv"
    path.write_bytes(samples._delimited(rows, ";").encode("cp1252"))
    rejects = tmp_path / "rejects.csv"
    result = invoke(str(path), "--replace", "--skip-invalid", "--rejects", str(rejects), "--database", db)
    assert result.exit_code == 0, result.output
    assert "3 rows skipped" in result.output
    with open(rejects, newline="", encoding="utf-8") as handle:
        lines = list(csv.DictReader(handle))
    # Each bad row once, at its first physical line: the header is line 1 and every record
    # spans two lines (a quoted newline in "Comments").
    assert [int(r["line"]) for r in lines] == [6, 14, 22]
    first = lines[0]
    assert first["columns"].split("\n") == ["VIN", "Internet Price"]
    assert first["values"].split("\n") == ["1HGCV1F30NA12345", "$3x,995"]
    assert 'line 6, column "VIN": "1HGCV1F30NA12345" is not a VIN' in first["problems"]
    assert 'line 6, column "Internet Price": "$3x,995" is not an amount' in first["problems"]
    assert 'column "Date In Stock": "13/45/2025"' in lines[1]["problems"]
    assert 'column "New/Used": "Demo" is not a sale condition' in lines[2]["problems"]
    # The rejected rows' listings stay as they were (the replace keeps them).
    assert stored(db)[0] == COUNT


def test_all_or_nothing_by_default_lists_each_problem_once(tmp_path, db, loaded):
    items, _ = loaded
    rows = samples.dealer_rows(items)
    rows[5][0] = rows[5][0][:8] + ("1" if rows[5][0][8] != "1" else "2") + rows[5][0][9:]  # check digit
    rows[6][9] = "-5"
    path = tmp_path / "bad.csv"
    path.write_bytes(samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(str(path), "--strict", "--database", db)
    assert result.exit_code == 1
    assert "nothing was imported" in result.output
    after = result.output[result.output.index(" rejected: ") :]
    problems = [line for line in after.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2
    assert problems[0].startswith('  - line 10, column "VIN": ') and "has a wrong check digit (expected" in problems[0]
    assert problems[1] == '  - line 12, column "Internet Price": "-5" must be at least 0'
    # Without --strict a wrong check digit is a warning; the price still rejects the feed.
    result = invoke(str(path), "--database", db, "--json")
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "rejected" and summary["warnings"] >= 1
    assert [p["line"] for p in summary["problems"]] == [12]
    assert summary["problems"][0]["column"] == "Internet Price" and summary["problems"][0]["value"] == "-5"


def test_dry_run_writes_nothing(tmp_path, db, loaded):
    items, _ = loaded
    before = stored(db)
    newer = tmp_path / "newer.csv"
    newer.write_bytes(samples.dealer_csv(samples.vehicles(COUNT + 5)[COUNT - 5 :]))  # 5 kept, 20 new
    result = invoke(str(newer), "--replace", "--allow-shrink", "--dry-run", "--database", db, "--json")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "checked"
    assert (summary["inserted"], summary["updated"], summary["removed"]) == (5, 5, 15)
    assert stored(db) == before  # no listing, no history row
    refused = invoke(str(newer), "--replace", "--dry-run", "--database", db)
    assert refused.exit_code == 1 and "would remove 15 of 20" in refused.output
    assert stored(db) == before


def test_usage_errors_exit_2(tmp_path, db):
    assert invoke(str(tmp_path / "missing.csv"), "--database", db).exit_code == 2
    assert invoke("ftp://feeds.example/x.csv", "--database", db).exit_code == 2
    mapping = tmp_path / "m.toml"
    mapping.write_text('[columns]\n"X" = "colour"\n"Y" = { field = "price", transform = "nope" }\n')
    feed = tmp_path / "f.csv"
    feed.write_text("X,Y\n1,2\n")
    result = invoke(str(feed), "--mapping", str(mapping), "--database", db)
    assert result.exit_code == 2
    assert "columns.X" in result.output and "columns.Y.transform" in result.output


def test_history_records_cli_imports(tmp_path, db, loaded):
    result = CliRunner().invoke(main, ["feeds", "history", "--database", db, "--json"])
    assert result.exit_code == 0
    (run,) = orjson.loads(result.stdout)
    assert run["trigger"] == "cli" and run["outcome"] == "imported" and run["inserted"] == COUNT
    assert run["format"] == "dealer-csv" and run["details"]["encoding"] == "cp1252"
    assert run["details"]["defaults"] == {"status": COUNT, "updated_at": COUNT}


# -- the pipelined path (a large feed read in a child process) ------------------------------


@pytest.fixture
def pipelined(monkeypatch):
    import aap.feeds.pipeline

    monkeypatch.setattr(aap.feeds.pipeline, "PIPELINE_MIN_BYTES", 0)  # every feed counts as large


@pytest.mark.slow
def test_pipelined_import_keeps_every_rule(tmp_path, db, pipelined):
    items = samples.vehicles(COUNT, seed=9)
    good = tmp_path / "good.csv"
    good.write_bytes(samples.dealer_csv(items))
    result = invoke(str(good), "--database", db, "--json")
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["outcome"], summary["inserted"], summary["warnings"]) == ("imported", COUNT, 2 * COUNT)
    # A bad row rejects the whole feed: the transaction rolls back.
    rows = samples.dealer_rows(samples.vehicles(COUNT + 10, seed=10))
    rows[25][9] = "-5"
    bad = tmp_path / "bad.csv"
    bad.write_bytes(samples._delimited(rows, ";").encode("cp1252"))
    result = invoke(str(bad), "--database", db, "--json")
    assert result.exit_code == 1
    summary = orjson.loads(result.stdout)
    assert summary["outcome"] == "rejected" and summary["problems"][0]["line"] == 2 + 2 * 24
    assert stored(db)[0] == COUNT
    # Too many removals, and an empty feed: refused, nothing changes.
    few = tmp_path / "few.csv"
    few.write_bytes(samples.dealer_csv(items[:4]))
    assert "would remove 16 of 20" in invoke(str(few), "--replace", "--database", db).output
    empty = tmp_path / "empty.csv"
    empty.write_bytes(";".join(samples.DEALER_HEADER).encode() + b"\r\n")
    result = invoke(str(empty), "--replace", "--allow-shrink", "--format", "dealer-csv", "--database", db)
    assert result.exit_code == 1 and "has no listings" in result.output
    assert stored(db)[0] == COUNT
    # A partial import is read whole first (the rows of a shared VIN are all left out); its rows
    # whose stock numbers are published cars' under other VINs are left out too (one car, one listing).
    result = invoke(str(bad), "--skip-invalid", "--rejects", str(tmp_path / "r.csv"), "--database", db, "--json")
    summary = orjson.loads(result.stdout)
    assert (summary["outcome"], summary["skipped"]) == ("imported", 1 + COUNT)
    assert stored(db)[0] == COUNT + 9
