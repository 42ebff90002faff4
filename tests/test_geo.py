"""The rooftop index answers exactly what testing every rooftop's haversine distance answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aap.inventory.geo import EARTH_RADIUS_MI, NEAR_TOLERANCE_MI, Located, RooftopIndex, haversine_mi

latitudes = st.floats(-90, 90, allow_nan=False)
longitudes = st.floats(-180, 180, allow_nan=False)
# Clusters near the poles and the antimeridian, where the box is easiest to get wrong.
edgy_latitudes = st.one_of(latitudes, st.floats(84, 90), st.floats(-90, -84))
edgy_longitudes = st.one_of(longitudes, st.floats(175, 180), st.floats(-180, -175))
radii = st.one_of(st.floats(0.01, 50), st.floats(50, 13_000))


def brute_force(points: list[tuple[float, float]], lat: float, lon: float, radius: float) -> list[tuple[int, float]]:
    out = []
    for i, (plat, plon) in enumerate(points):
        distance = haversine_mi(lat, lon, plat, plon)
        if distance <= radius + NEAR_TOLERANCE_MI:
            out.append((i, distance))
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    points=st.lists(st.tuples(edgy_latitudes, edgy_longitudes), max_size=40),
    centre=st.tuples(edgy_latitudes, edgy_longitudes),
    radius=radii,
    copy=st.booleans(),
)
def test_index_matches_every_rooftop_tested(points, centre, radius, copy):
    lat, lon = centre
    if copy and points:  # a rooftop exactly at the centre, and one exactly on the circle's edge
        points = points + [(lat, lon), points[0]]
        radius = max(radius, haversine_mi(lat, lon, *points[0]))
    index = RooftopIndex([Located(i, p[0], p[1], i) for i, p in enumerate(points)])
    found = [(located.item, distance) for located, distance in index.within(lat, lon, radius)]
    assert found == brute_force(points, lat, lon, radius)


def test_the_box_leaves_out_far_rooftops_without_measuring_them(monkeypatch):
    points = [(lat / 10, lon / 10) for lat in range(-400, 400, 7) for lon in range(-1200, -700, 7)]
    index = RooftopIndex([Located(i, p[0], p[1], i) for i, p in enumerate(points)])
    measured = []
    import aap.inventory.geo as geo

    real = geo.haversine_mi
    monkeypatch.setattr(geo, "haversine_mi", lambda *a: measured.append(a) or real(*a))
    found = index.within(37.77, -100.0, 50)
    assert [item.item for item, _ in found] == [i for i, _ in brute_force(points, 37.77, -100.0, 50)]
    assert found and len(measured) < len(points) / 50  # a few dozen of ~8,000


def seed_haversine(lat1: float, lon1: float, lat2: float, lon2: float, *, convert_first: bool = False) -> float:
    """The seed's formula as a reader computes it (``Vehicle.distance_mi``, seed 004), or with the
    degrees converted before they are subtracted: two orders a caller may pick."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    if convert_first:
        dphi, dlmb = phi2 - phi1, math.radians(lon2) - math.radians(lon1)
    else:
        dphi, dlmb = math.radians(lat2 - lat1), math.radians(lon2 - lon1)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_MI * math.asin(math.sqrt(min(1.0, h)))


@settings(max_examples=400, deadline=None)
@given(
    centre=st.tuples(latitudes, longitudes),
    rooftop=st.tuples(latitudes, longitudes),
    convert_first=st.booleans(),
)
def test_near_boundary_is_inclusive_within_the_tolerance(centre, rooftop, convert_first):
    """A radius equal to the rooftop's distance, however the caller computed it, keeps the rooftop."""
    radius = seed_haversine(*centre, *rooftop, convert_first=convert_first)
    if radius <= 0:
        return
    assert haversine_mi(*centre, *rooftop) == seed_haversine(*centre, *rooftop)
    index = RooftopIndex([Located(0, rooftop[0], rooftop[1], "r")])
    assert [located.item for located, _ in index.within(*centre, radius)] == ["r"]
    if radius > 1e-3:
        assert index.within(*centre, radius - 1e-5) == []  # the tolerance is tiny


def test_a_boundary_the_subtraction_order_moves():
    """Where radians(a) - radians(b) and radians(a - b) differ, the seed's order is the one used."""
    centre, rooftop = (37.7749, -122.4194), (37.804363, -122.271111)
    by_seed = seed_haversine(*centre, *rooftop)
    assert haversine_mi(*centre, *rooftop) == by_seed
    index = RooftopIndex([Located(0, rooftop[0], rooftop[1], "r")])
    assert len(index.within(*centre, by_seed)) == 1
    assert len(index.within(*centre, seed_haversine(*centre, *rooftop, convert_first=True))) == 1
