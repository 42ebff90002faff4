"""The VIN check digit (ISO 3779 as 49 CFR 565.15 applies it to vehicles for North America).

One home for the rule: feed imports verify it (:mod:`aap.inventory.listing_rules`)
and the demo generator writes it (:mod:`aap.inventory.demo`).

Position 9 of a 17-character VIN is computed from the other sixteen: each
character gets a value (digits their own; letters by the table in 49 CFR
565.15, I, O and Q never appear), each position a weight, and the weighted
sum modulo 11 is the digit (10 is written ``X``). 49 CFR 565 binds every
vehicle sold in North America, wherever it was made (``J``, ``K``, ``W``,
``Z``... manufacturers too), so every well-formed 17-character VIN is checked;
see docs/feeds.md.
"""

from __future__ import annotations

#: The value of each character a VIN may hold (49 CFR 565.15, table I).
CHARACTER_VALUES: dict[str, int] = {
    **{str(d): d for d in range(10)},
    "A": 1,
    "B": 2,
    "C": 3,
    "D": 4,
    "E": 5,
    "F": 6,
    "G": 7,
    "H": 8,
    "J": 1,
    "K": 2,
    "L": 3,
    "M": 4,
    "N": 5,
    "P": 7,
    "R": 9,
    "S": 2,
    "T": 3,
    "U": 4,
    "V": 5,
    "W": 6,
    "X": 7,
    "Y": 8,
    "Z": 9,
}
#: The weight of each of the 17 positions (49 CFR 565.15, table II).
POSITION_WEIGHTS: tuple[int, ...] = (8, 7, 6, 5, 4, 3, 2, 10, 0, 9, 8, 7, 6, 5, 4, 3, 2)


def expected_check_digit(vin: str) -> str | None:
    """The check digit ``vin`` should carry, or None when it is no well-formed 17-character VIN."""
    if len(vin) != 17:
        return None
    total = 0
    for char, weight in zip(vin, POSITION_WEIGHTS):
        value = CHARACTER_VALUES.get(char)
        if value is None:
            return None
        total += value * weight
    remainder = total % 11
    return "X" if remainder == 10 else str(remainder)


def with_check_digit(vin: str) -> str:
    """``vin`` with position 9 replaced by its correct check digit (test and demo data)."""
    digit = expected_check_digit(vin[:8] + "0" + vin[9:])
    if digit is None:
        raise ValueError("not a well-formed VIN")
    return vin[:8] + digit + vin[9:]
