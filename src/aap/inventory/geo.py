"""Rooftops near a point: a bounding-box prefilter, then the exact haversine distance.

A ``near`` filter is resolved against the configured rooftops (listings sit at
their rooftop), so a marketplace with thousands of sellers would otherwise
compute a great-circle distance to every rooftop on every request. The index
keeps the rooftops sorted by latitude: a binary search finds the latitude band
that can hold a point within the radius, a longitude window narrows it, and
only the survivors get the haversine test that decides. The box is a true
superset of the circle (with a small margin for rounding), so the answer is the
same as testing every rooftop.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

EARTH_RADIUS_MI = 3958.7613
#: A rooftop this much beyond the radius still matches: ``near`` is inclusive, and a distance
#: computed in another order of floating-point operations (the caller's) may differ by a few
#: units in the last place (docs/search.md, "near"). About 1.6 mm.
NEAR_TOLERANCE_MI = 1e-6
_MARGIN_DEG = 1e-6  # ~10 cm: covers floating-point rounding in the box bounds, and the tolerance

T = TypeVar("T")


def haversine_mi(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in miles on WGS84 degrees (``Vehicle.distance_mi``, seed 004):
    ``d = 2R·asin(√(sin²(Δφ/2) + cosφ1·cosφ2·sin²(Δλ/2)))`` with R = 3958.7613 mi, the
    differences taken in degrees and then converted (``radians(φ2 − φ1)``), as the formula reads."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi = math.radians(lat2 - lat1)
    dlmb = math.radians(lon2 - lon1)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlmb / 2) ** 2
    return 2 * EARTH_RADIUS_MI * math.asin(math.sqrt(min(1.0, h)))


@dataclass(frozen=True)
class Located(Generic[T]):
    """A rooftop with coordinates; ``order`` is its position in the configuration."""

    order: int
    latitude: float
    longitude: float
    item: T


class RooftopIndex(Generic[T]):
    """Located items sorted by latitude, for radius queries."""

    def __init__(self, items: Sequence[Located[T]]) -> None:
        self._items = sorted(items, key=lambda x: (x.latitude, x.order))
        self._latitudes = [x.latitude for x in self._items]

    def __len__(self) -> int:
        return len(self._items)

    def within(self, latitude: float, longitude: float, radius_mi: float) -> list[tuple[Located[T], float]]:
        """(item, exact distance) of every item within ``radius_mi`` (inclusive, within
        :data:`NEAR_TOLERANCE_MI`), in configuration order."""
        angle = radius_mi / EARTH_RADIUS_MI  # the radius as an angle on the sphere, radians
        band = math.degrees(angle) + _MARGIN_DEG
        low = bisect_left(self._latitudes, latitude - band)
        high = bisect_right(self._latitudes, latitude + band)
        window = _longitude_window(latitude, angle)
        found: list[tuple[Located[T], float]] = []
        for item in self._items[low:high]:
            if window is not None:
                offset = abs((item.longitude - longitude + 180.0) % 360.0 - 180.0)
                if offset > window:
                    continue
            distance = haversine_mi(latitude, longitude, item.latitude, item.longitude)
            if distance <= radius_mi + NEAR_TOLERANCE_MI:
                found.append((item, distance))
        found.sort(key=lambda pair: pair[0].order)
        return found


def _longitude_window(latitude: float, angle: float) -> float | None:
    """Largest longitude offset (degrees) a point within ``angle`` of the centre can have.

    None when the circle reaches a pole (every longitude is then possible). For a
    circle clear of the poles the bound is ``asin(sin(angle) / cos(latitude))``.
    """
    phi = math.radians(abs(latitude))
    if angle >= math.pi / 2 or phi + angle >= math.pi / 2 - 1e-9:
        return None
    ratio = math.sin(angle) / math.cos(phi)
    if ratio >= 1.0:
        return None
    return math.degrees(math.asin(ratio)) + _MARGIN_DEG
