"""AAP 3.1 JSON Schemas as package data, and the one validator every binding uses.

(The schema helper replaces this module with the real registry and validator.)
"""
from __future__ import annotations

from typing import Any


def validate(instance: Any, name: str) -> list[dict[str, str]]:
    """Every problem of ``instance`` against schema ``name`` as details.errors[] entries."""
    from aap.spec.validator import validate as _validate

    return _validate(instance, name)
