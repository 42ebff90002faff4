"""The rule registry: every conformance rule is (id, title, spec reference, function).

A rule is an ``async def`` taking the :class:`~aap.check.context.CheckContext`.
It passes by returning (optionally a short note), fails by raising
:class:`Fail`, and skips by raising :class:`Skip` (something it needs is not
advertised or not available). ``level="should"`` rules report a failure as a
warning, which does not change the exit code. Adding a rule is one decorated
function in ``aap/check/rules/``; :func:`aap.check.rules.all_rules` lists them
in run order. "Registry" is the right word here: the decorator records each
rule as its module is imported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the context imports Fail and Skip from here
    from aap.check.context import CheckContext

RuleFunc = Callable[["CheckContext"], Awaitable[str | None]]


class Fail(Exception):
    """The endpoint broke the rule. ``details`` lists the individual problems."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        self.message = message
        self.details = list(details or [])
        super().__init__(message)


class Skip(Exception):
    """The rule does not apply or cannot run here (the reason says which)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    spec: str
    func: RuleFunc = field(compare=False)
    level: str = "must"  # "must" → fail; "should" → warn
    area: str = ""


RULES: dict[str, Rule] = {}


def rule(rule_id: str, title: str, spec: str, *, level: str = "must") -> Callable[[RuleFunc], RuleFunc]:
    """Register ``func`` as rule ``rule_id`` (ids are unique; registration order is run order)."""
    if level not in ("must", "should"):
        raise ValueError("level is 'must' or 'should'")

    def decorate(func: RuleFunc) -> RuleFunc:
        if rule_id in RULES:
            raise ValueError(f"duplicate rule id {rule_id}")
        RULES[rule_id] = Rule(rule_id, title, spec, func, level, rule_id.split(".", 1)[0])
        return func

    return decorate
