"""The fields of a tenant as the provisioning API's body and a line of a bulk file give them: one
check for both, so that the same mistake reads the same from either (docs/platform.md, "The
provisioning API")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aap.tenants import MAX_DOMAINS


def field_problems(
    value: dict[Any, Any],
    fields: Mapping[str, str],
    required: Sequence[str],
    *,
    of: str,
    max_host: int | None = None,
    max_id: int | None = None,
) -> list[str]:
    """Every problem of the shape of ``value`` at once: a ``required`` field missing, a field not in
    ``fields`` (name → "string" or "strings"; ``of`` names what they are fields of), a value of the
    wrong kind or beyond :data:`aap.tenants.MAX_DOMAINS` host names, and, when given, a host name
    longer than ``max_host`` or an ``id`` longer than ``max_id`` characters."""
    problems = [f"{name}: required" for name in required if name not in value]
    for name, item in value.items():
        kind = fields.get(name)
        if kind is None:
            problems.append(f"{str(name)[:100]}: not a field of {of} (fields: {', '.join(fields)})")
        elif kind == "string" and not isinstance(item, str):
            problems.append(f"{name}: must be a string")
        elif kind == "strings" and not (isinstance(item, list) and all(isinstance(v, str) for v in item)):
            problems.append(f"{name}: must be an array of strings")
        elif kind == "strings" and len(item) > MAX_DOMAINS:
            problems.append(f"{name}: at most {MAX_DOMAINS} host names")
        elif kind == "strings" and max_host is not None and any(len(v) > max_host for v in item):
            problems.append(f"{name}: a host name has at most {max_host} characters")
        elif name == "id" and max_id is not None and len(item) > max_id:
            problems.append(f"id: at most {max_id} characters")
    return problems
