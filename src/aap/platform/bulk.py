"""Bulk provisioning: many tenants from one JSON Lines file (``aap tenants add --from FILE``).

Each line is one JSON object with the fields the provisioning API's create takes —
``{"id", "config", "domains"}`` (docs/platform.md, "The provisioning API") — and the file is
taken in two passes, so that a file with mistakes changes nothing:

1. **read and check** every line: its JSON and fields, ids and domains given on two lines, and
   every check :class:`aap.tenants.TenantRegistry` makes of a tenant (the configuration, its
   secrets, its destinations, domains another tenant serves). Every problem of every line is
   reported at once, as ``line N: …``, and then nothing is written;
2. **apply** what the lines ask, one registry change per line (audited like a single ``add``),
   each line *idempotent*: a tenant already exactly as the line says is ``unchanged`` (nothing
   written), a new id is ``added``, an existing tenant that differs is ``refused`` unless
   updates are allowed (then ``updated``: its configuration and, when the line has
   ``domains``, its domains replaced in one change). Running the same file again changes
   nothing.

The input is bounded before it costs memory: :data:`MAX_LINES` lines of at most
:data:`MAX_LINE_BYTES` each, :data:`MAX_FILE_BYTES` in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from aap.tenants import MAX_CONFIG_BYTES, TenantError, TenantRegistry, domains_of

from .fields import field_problems

#: The most lines (tenants) one file may have.
MAX_LINES = 10_000
#: The longest line: the largest configuration, JSON-escaped, and its domains (as the API's body).
MAX_LINE_BYTES = 2 * MAX_CONFIG_BYTES + 64 * 1024
#: The largest file.
MAX_FILE_BYTES = 64 * 1024 * 1024
#: The fields of a line: name → "string" or "strings"; the required ones.
FIELDS = {"id": "string", "config": "string", "domains": "strings"}
REQUIRED = ("id", "config")

ADDED, UPDATED, UNCHANGED, REFUSED = "added", "updated", "unchanged", "refused"
#: What a line can come to, in the order a summary lists them.
ACTIONS = (ADDED, UPDATED, UNCHANGED, REFUSED)


@dataclass(frozen=True)
class Line:
    """One line of the file, its shape checked."""

    number: int
    tenant_id: str
    config: str
    domains: list[str] | None  # None: the line names none (an existing tenant keeps its own)


@dataclass
class Outcome:
    """What became, or would become, of one line."""

    line: int
    tenant_id: str
    action: str  # one of ACTIONS
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.tenant_id, "action": self.action, "problems": self.problems}


class BulkError(Exception):
    """The file is refused whole (nothing was written): every problem, each naming its line."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} problem(s)")


def read_lines(stream: IO[bytes]) -> list[Line]:
    """The lines of ``stream``, every problem of their shape at once (:class:`BulkError`)."""
    problems: list[str] = []
    lines: list[Line] = []
    total = 0
    number = 0
    ids: dict[str, int] = {}
    hosts: dict[str, int] = {}
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            break
        number += 1
        total += len(raw)
        if total > MAX_FILE_BYTES:
            problems.append(f"(file): larger than {MAX_FILE_BYTES} bytes; split it")
            break
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            problems.append(f"line {number}: longer than {MAX_LINE_BYTES} bytes")
            while raw and not raw.endswith(b"\n"):  # the rest of the line, a bounded piece at a time
                raw = stream.readline(MAX_LINE_BYTES + 1)
                total += len(raw)
            continue
        if not raw.strip():
            continue
        if len(lines) + 1 > MAX_LINES:
            problems.append(f"line {number}: more than {MAX_LINES} tenants in one file; split it")
            break
        line = _line(number, raw, problems)
        if line is None:
            continue
        first = ids.setdefault(line.tenant_id, number)
        if first != number:
            problems.append(f"line {number}: id: {line.tenant_id!r} is on line {first} already")
        names, _ = domains_of(line.domains or [], check=False)
        for host in dict.fromkeys(names):
            owner = hosts.setdefault(host, number)
            if owner != number:
                problems.append(f"line {number}: domains: {host!r} is on line {owner} already")
        lines.append(line)
    if problems:
        raise BulkError(problems)
    return lines


def _line(number: int, raw: bytes, problems: list[str]) -> Line | None:
    where = f"line {number}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        problems.append(f"{where}: not JSON ({exc.msg} at character {exc.pos})")
        return None
    if not isinstance(value, dict):
        problems.append(f"{where}: must be a JSON object with {', '.join(FIELDS)}")
        return None
    found = [f"{where}: {problem}" for problem in field_problems(value, FIELDS, REQUIRED, of="a line")]
    if found:
        problems += found
        return None
    return Line(number, value["id"], value["config"], value.get("domains"))


def plan(registry: TenantRegistry, lines: Sequence[Line], *, update: bool = False) -> list[Outcome]:
    """What each line would come to, every line checked as the registry checks a tenant
    (:class:`BulkError` with every problem of every line when one is refused by those checks)."""
    problems: list[str] = []
    outcomes: list[Outcome] = []
    for line in lines:
        where = f"line {line.number} ({line.tenant_id})"
        existing = registry.store.tenant(line.tenant_id)
        if existing is not None and registry.same(existing, line.config, line.domains):
            outcomes.append(Outcome(line.number, line.tenant_id, UNCHANGED))
            continue
        if existing is not None and not update:
            why = "exists with another configuration or other domains (--update replaces it)"
            outcomes.append(Outcome(line.number, line.tenant_id, REFUSED, [why]))
            continue
        domains = line.domains if line.domains is not None else (existing.domains if existing else ())
        try:
            registry.check(line.tenant_id, line.config, list(domains))
        except TenantError as exc:
            problems += [f"{where}: {problem}" for problem in exc.problems]
            continue
        outcomes.append(Outcome(line.number, line.tenant_id, ADDED if existing is None else UPDATED))
    if problems:
        raise BulkError(problems)
    return outcomes


def apply(registry: TenantRegistry, lines: Sequence[Line], outcomes: Sequence[Outcome], *, by: str) -> list[Outcome]:
    """Make the planned changes, one registry change per line. A line refused now (another change
    made meanwhile took its domain, say) is ``refused`` with its problems; the others go on."""
    done: list[Outcome] = []
    for line, planned in zip(lines_of(lines, outcomes), outcomes, strict=True):
        if planned.action not in (ADDED, UPDATED):
            done.append(planned)
            continue
        try:
            action, _ = registry.put(line.tenant_id, line.config, line.domains, by=by)
        except TenantError as exc:
            done.append(Outcome(line.number, line.tenant_id, REFUSED, exc.problems))
            continue
        done.append(Outcome(line.number, line.tenant_id, action))
    return done


def lines_of(lines: Sequence[Line], outcomes: Sequence[Outcome]) -> list[Line]:
    """The line each outcome is about, in the outcomes' order."""
    by_number = {line.number: line for line in lines}
    return [by_number[outcome.line] for outcome in outcomes]


def summary(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """How many lines came to each action, every action named."""
    counts = dict.fromkeys(ACTIONS, 0)
    for outcome in outcomes:
        counts[outcome.action] += 1
    return counts
