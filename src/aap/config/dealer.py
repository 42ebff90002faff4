"""``[dealer]`` and ``[[dealers]]``: the seller profiles, and the rule that ties them to the scope.

A profile is the AAP ``DealerInformation`` object (seed 004) written in TOML:
it is checked against the bundled schema, then for what the schema cannot
say (unique rooftop, fee and schedule names; IANA time zones; opening before
closing; phone numbers, rewritten to E.164 by :mod:`aap.config.phones`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aap.config.model import WEEKDAYS, DealerProfile, SearchCapabilities
from aap.config.phones import normalise_phones
from aap.config.table import Problems, Table, join, schema_check


def dealer_json(value: Any, path: str, problems: Problems) -> Any:
    """TOML → the JSON shape of DealerInformation: a day written ``"closed"`` becomes null."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[key] = dealer_json(item, join(path, key), problems)
        return out
    if isinstance(value, list):
        return [dealer_json(item, join(path, i), problems) for i, item in enumerate(value)]
    if isinstance(value, (dt.date, dt.time, dt.datetime)):
        problems.add(path, "TOML dates and times are not allowed here; quote the value")
        return str(value)
    return value


def _close_days(info: dict[str, Any]) -> None:
    for rooftop in info.get("rooftops") or []:
        if not isinstance(rooftop, dict):
            continue
        for schedule in rooftop.get("schedules") or []:
            week = schedule.get("value") if isinstance(schedule, dict) else None
            if isinstance(week, dict):
                for day in WEEKDAYS:
                    if week.get(day) == "closed":
                        week[day] = None


def parse_dealer_profile(table: Table, problems: Problems, *, require_id: bool = False) -> DealerProfile | None:
    """One DealerInformation object, validated by the AAP schema plus the rules it cannot express."""
    path = table.path
    if not table.present:
        problems.add(path, "is required (the dealer profile: name and at least one rooftop)")
        return None
    before = len(problems)
    info = dealer_json(table.data, path, problems)
    codes = _store_codes(info, path, problems)
    _close_days(info)
    schema_check(info, "dealer-information", path, problems)
    if require_id and "dealer_id" not in info:
        problems.add(join(path, "dealer_id"), "is required for every [[dealers]] entry")
    _check_rooftops(info, path, problems)
    return DealerProfile(info, codes) if len(problems) == before else None


def _store_codes(info: dict[str, Any], path: str, problems: Problems) -> dict[str, str]:
    """Take each rooftop's ``store_codes`` out of the profile (they are not DealerInformation).

    ``store_codes = ["SF01", "1111"]``: the codes a feed names the rooftop by
    (Google's ``store_code``, a DMS location column), matched without regard to
    case; a code names one rooftop of the dealer (docs/feeds.md, "Rooftops and store codes").
    """
    found: dict[str, str] = {}
    where: dict[str, str] = {}
    rooftops = info.get("rooftops")
    for i, rooftop in enumerate(rooftops if isinstance(rooftops, list) else ()):
        if not isinstance(rooftop, dict) or "store_codes" not in rooftop:
            continue
        at = join(join(join(path, "rooftops"), i), "store_codes")
        codes = rooftop.pop("store_codes")
        name = rooftop.get("name")
        if not isinstance(codes, list) or not all(isinstance(c, str) and c.strip() for c in codes):
            problems.add(at, "must be a list of store codes (non-empty strings)")
            continue
        for j, code in enumerate(codes):
            key = code.strip().casefold()
            if key in where:
                problems.add(join(at, j), f"is already a store code of {where[key]}")
            elif isinstance(name, str):
                found[key] = name
                where[key] = f"rooftops[{i}]"
    return found


def _check_rooftops(info: dict[str, Any], path: str, problems: Problems) -> None:
    rooftops = info.get("rooftops")
    if not isinstance(rooftops, list):
        return
    names: dict[str, int] = {}
    for i, rooftop in enumerate(rooftops):
        if not isinstance(rooftop, dict):
            continue
        at = join(join(path, "rooftops"), i)
        name = rooftop.get("name")
        if isinstance(name, str):
            if name in names:
                problems.add(
                    join(at, "name"), f"duplicates rooftops[{names[name]}].name (listings refer to rooftops by name)"
                )
            else:
                names[name] = i
        normalise_phones(rooftop, at, problems)
        tz = rooftop.get("timezone")
        if isinstance(tz, str) and not _valid_timezone(tz):
            problems.add(join(at, "timezone"), "unknown IANA timezone")
        _unique_names(rooftop.get("fees"), join(at, "fees"), "fee", problems)
        _unique_names(rooftop.get("schedules"), join(at, "schedules"), "schedule", problems)
        for j, schedule in enumerate(rooftop.get("schedules") or []):
            week = schedule.get("value") if isinstance(schedule, dict) else None
            if not isinstance(week, dict):
                continue
            for day in WEEKDAYS:
                hours = week.get(day)
                if (
                    isinstance(hours, dict)
                    and isinstance(hours.get("open"), str)
                    and isinstance(hours.get("close"), str)
                    and hours["open"] >= hours["close"]
                ):
                    problems.add(
                        join(join(join(join(at, "schedules"), j), "value"), day), "close must be later than open"
                    )


def _unique_names(items: Any, path: str, what: str, problems: Problems) -> None:
    if not isinstance(items, list):
        return
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        if name in seen:
            problems.add(join(join(path, i), "name"), f"duplicates {what} [{seen[name]}]; {what} names must be unique")
        else:
            seen[name] = i


def _valid_timezone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def parse_dealer(table: Table, problems: Problems) -> DealerProfile | None:
    return parse_dealer_profile(table, problems)


def parse_dealers(tables: list[Table], problems: Problems) -> tuple[DealerProfile, ...]:
    """The sellers of an aggregate endpoint, each with a distinct dealer_id."""
    profiles = []
    seen: dict[str, int] = {}
    for i, table in enumerate(tables):
        profile = parse_dealer_profile(table, problems, require_id=True)
        dealer_id = table.data.get("dealer_id")
        if isinstance(dealer_id, str):
            if dealer_id in seen:
                table.problem("dealer_id", f"duplicates dealers[{seen[dealer_id]}].dealer_id")
                continue
            seen[dealer_id] = i
        if profile is not None:
            profiles.append(profile)
    return tuple(profiles)


def scope_rules(parsed: dict[str, Any], problems: Problems) -> None:
    """Rule: aggregate scope needs sellers with distinct ids; dealer scope has none."""
    search: SearchCapabilities = parsed["search"]
    dealers: tuple[DealerProfile, ...] = parsed["dealers"]
    dealers_reported = any(p == "dealers" or p.startswith("dealers[") for p, _ in problems.items)
    if search.scope != "aggregate":
        if dealers or dealers_reported:
            problems.add("dealers", '[[dealers]] is only allowed with search.scope = "aggregate"')
        return
    if not dealers and not dealers_reported:
        problems.add(
            "dealers", 'scope = "aggregate" needs at least one [[dealers]] table (the sellers behind this endpoint)'
        )
    dealer = parsed.get("dealer")
    if dealer is not None and dealer.dealer_id and any(p.dealer_id == dealer.dealer_id for p in dealers):
        problems.add(
            "dealer.dealer_id", "must differ from every [[dealers]] dealer_id (the operator is not one of the sellers)"
        )
