"""The test helpers' own promises: every helper module of tests/ has its asserts rewritten (so an
``assert_*`` helper that fails shows the values it compared), and the factories build what
their docstrings say."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from aap.spec import validate
from factories import crv, feed_listing, listing, make_settings, numbered_listing, seller_listing

HELPERS = sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith(("test_", "conftest")))


@pytest.mark.parametrize("name", HELPERS)
def test_every_helper_module_is_rewritten(name: str) -> None:
    module = importlib.import_module(name)
    assert type(module.__loader__).__name__ == "AssertionRewritingHook", name


def test_the_listings_are_listings() -> None:
    """Each factory's listing is an InventoryListing as the seed's schema reads it."""
    made = [
        listing("v1", make="Honda"),
        crv("1HGCV1F30NA123456"),
        seller_listing("s1", "springfield-honda", "Springfield Honda", "1HGCV1F34PA000002"),
        numbered_listing(7),
        feed_listing(),
    ]
    for item in made:
        assert validate(item, "inventory-listing") == [], item
    assert "trim" not in feed_listing(trim=None) and crv("1HGCV1F30NA123456")["stock"] == "H23456"


def test_the_settings_have_three_rooftops_and_a_vocabulary() -> None:
    settings = make_settings()
    assert [r["name"] for r in settings.dealer.rooftops] == [
        "Bay Motors San Francisco",
        "Bay Motors Oakland",
        "Bay Motors Vancouver",
    ]
    assert {f.code for f in settings.features} >= {"sunroof", "apple_carplay"}
