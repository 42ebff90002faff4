"""``aap check``: a conformance run against any AAP 3.1 endpoint.

Rules live in one registry (:mod:`aap.check.registry`), one decorated function
each, grouped by area under :mod:`aap.check.rules`. See docs/check.md.
"""

from aap.check.context import CheckContext, CheckOptions
from aap.check.registry import RULES, Fail, Rule, Skip, rule
from aap.check.rules import all_rules
from aap.check.runner import Report, RuleResult, run_checks, select_rules

__all__ = [
    "CheckContext",
    "CheckOptions",
    "RULES",
    "Fail",
    "Rule",
    "Skip",
    "all_rules",
    "rule",
    "Report",
    "RuleResult",
    "run_checks",
    "select_rules",
]
