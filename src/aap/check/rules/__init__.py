"""Rule modules; importing this package registers every rule, in run order."""

from aap.check.registry import RULES, Rule
from aap.check.rules import a2a, discovery, errors, leads, mcp, poppy, search, skills  # noqa: F401


def all_rules() -> list[Rule]:
    """Every registered rule, in run order (the import order of the modules above)."""
    return list(RULES.values())
