"""The rooftop index answers exactly what testing every rooftop's haversine distance answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aap.inventory.geo import Located, RooftopIndex, haversine_mi

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
        if distance <= radius:
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
