"""Rules that apply to one seller's or one rooftop's leads, and which of them a lead gets.

Lead routes (``[[leads.routes]]``) and notification recipients
(``[[leads.notifications.recipients]]``) are both chosen this way: the most specific entry that
matches — seller and rooftop, then seller, then rooftop, then ``"*"`` — and the first of equals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar


class Scoped(Protocol):
    @property
    def dealer_id(self) -> str | None: ...  # aggregate scope: only this seller's leads

    @property
    def rooftop(self) -> str: ...  # "*": any rooftop


S = TypeVar("S", bound=Scoped)


def specificity(entry: Scoped, dealer_id: str | None, rooftop: str | None) -> int | None:
    """How well ``entry`` matches a lead of ``dealer_id`` at ``rooftop``; None when it does not apply."""
    if entry.dealer_id is not None and entry.dealer_id != dealer_id:
        return None
    if entry.rooftop != "*" and entry.rooftop != rooftop:
        return None
    return (2 if entry.dealer_id is not None else 0) + (1 if entry.rooftop != "*" else 0)


def most_specific(entries: Iterable[S], dealer_id: str | None, rooftop: str | None) -> S | None:
    """The most specific entry matching the lead (the first of equals), or None."""
    best: tuple[int, S] | None = None
    for entry in entries:
        score = specificity(entry, dealer_id, rooftop)
        if score is not None and (best is None or score > best[0]):
            best = (score, entry)
    return best[1] if best else None
