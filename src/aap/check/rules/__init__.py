"""Rule modules; importing this package registers every rule, in run order."""

from aap.check.registry import RULES, Rule
from aap.check.rules import discovery, a2a, mcp, poppy, skills, errors, search, leads  # noqa: F401


def all_rules() -> list[Rule]:
    """Every registered rule, in run order (the import order of the modules above)."""
    return list(RULES.values())
