"""Rule modules; importing this package registers every rule, in run order."""

from aap.check.rules import discovery, a2a, mcp, poppy, skills, errors, search, leads  # noqa: F401
