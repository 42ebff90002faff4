"""Run the rules against one endpoint and collect a report."""

from __future__ import annotations

import fnmatch
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from aap import AAP_VERSION, __version__
from aap.check.context import CheckContext, CheckOptions
from aap.check.registry import Fail, Rule, Skip
from aap.check.rules import all_rules
from aap.client.via import ViaTransport
from aap.util.rfc3339 import now_utc_z

STATUSES = ("pass", "fail", "warn", "skip", "error")


@dataclass
class RuleResult:
    rule: Rule
    status: str  # pass | fail | warn | skip | error
    message: str = ""
    details: list[str] = field(default_factory=list)
    duration_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.rule.id,
            "title": self.rule.title,
            "spec": self.rule.spec,
            "level": self.rule.level,
            "status": self.status,
            "message": self.message,
            "details": self.details,
            "duration_ms": self.duration_ms,
        }


@dataclass
class Report:
    target: str
    started_at: str
    results: list[RuleResult] = field(default_factory=list)
    card_url: str | None = None
    #: Why nothing answered at the target; then no rule ran (one failure, not one per rule).
    unreachable: str | None = None

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for result in self.results:
            counts[result.status] += 1
        return counts

    @property
    def ok(self) -> bool:
        """Reached, and no failed and no crashed rule (warnings and skips do not fail a run)."""
        return self.unreachable is None and not any(r.status in ("fail", "error") for r in self.results)

    def result(self, rule_id: str) -> RuleResult:
        return next(r for r in self.results if r.rule.id == rule_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "agent_card": self.card_url,
            "aap_version": AAP_VERSION,
            "checker": f"aap {__version__}",
            "started_at": self.started_at,
            "ok": self.ok,
            "unreachable": self.unreachable,
            "summary": self.counts(),
            "results": [r.to_json() for r in self.results],
        }


def unmatched_patterns(patterns: Iterable[str]) -> list[str]:
    """The ``--rule`` patterns that select no rule (a typo would otherwise check nothing and pass)."""
    ids = [r.id for r in all_rules()]
    return [p for p in patterns if not any(fnmatch.fnmatchcase(i, p) for i in ids)]


def select_rules(patterns: Iterable[str] | None = None) -> list[Rule]:
    """Rules whose id matches any of ``patterns`` (shell globs such as ``search.*``); all when empty."""
    rules = all_rules()
    patterns = [p for p in (patterns or []) if p]
    if not patterns:
        return rules
    return [r for r in rules if any(fnmatch.fnmatchcase(r.id, p) for p in patterns)]


async def run_rule(ctx: CheckContext, rule: Rule) -> RuleResult:
    started = time.perf_counter()
    try:
        note = await rule.func(ctx)
        result = RuleResult(rule, "pass", note or "")
    except Fail as exc:
        result = RuleResult(rule, "warn" if rule.level == "should" else "fail", exc.message, exc.details)
    except Skip as exc:
        result = RuleResult(rule, "skip", exc.reason)
    except httpx.HTTPError as exc:
        result = RuleResult(
            rule, "warn" if rule.level == "should" else "fail", f"network error: {type(exc).__name__}: {exc}"
        )
    except Exception as exc:  # noqa: BLE001 - a crashing rule is reported, never hides the others
        result = RuleResult(rule, "error", f"the checker crashed in this rule: {type(exc).__name__}: {exc}")
    result.duration_ms = int((time.perf_counter() - started) * 1000)
    return result


async def run_checks(
    target: str,
    options: CheckOptions | None = None,
    *,
    rules: Iterable[str] | None = None,
    http: httpx.AsyncClient | None = None,
    verify: ssl.SSLContext | str | bool = True,
    timeout: float = 30.0,
    via: str | None = None,
) -> Report:
    """Check ``target`` (a domain, base URL or agent-card URL) and return the report.

    ``via``: connect to this origin for every request, keeping each URL's host in ``Host``
    (:mod:`aap.client.via`).
    """
    own_http = http is None
    if http is None:
        transport = ViaTransport(via, httpx.AsyncHTTPTransport(verify=verify)) if via else None
        http = httpx.AsyncClient(
            timeout=timeout,
            verify=verify,
            follow_redirects=False,
            headers={"User-Agent": f"aap-check/{__version__}"},
            transport=transport,
        )
    ctx = CheckContext(target, http, options or CheckOptions())
    report = Report(target, now_utc_z())
    try:
        selected = select_rules(rules)
        try:
            await ctx.card_fetch()  # every rule starts from the card; fetched once, remembered
        except Skip:
            pass  # the card rule reports why; other rules skip with the reason
        report.unreachable = ctx.unreachable
        for rule in selected if report.unreachable is None else []:
            report.results.append(await run_rule(ctx, rule))
    finally:
        await ctx.close()
        if own_http:
            await http.aclose()
    report.card_url = ctx.card_url
    return report
