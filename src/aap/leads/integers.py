"""The integers a lead may carry: at most what every JSON reader keeps exact.

The seed leaves the integer fields of a lead without an upper bound
(``Appointment.duration_minutes`` is only ``minimum: 15``; a vehicle's ``price``,
``msrp``, ``list_price``, ``mileage``, ``displacement_cc``, ``city_mpg``,
``highway_mpg`` and ``fees[].amount`` only ``minimum: 0``, seed 004). A lead is
stored and handed on to CRMs as JSON (the webhook) and ADF/XML, and an integer
beyond 2^53 - 1 is not exact for every JSON reader on the way (RFC 7493 §2.2);
one beyond 64 bits cannot even be stored. Such a value is refused with a
``details.errors[]`` entry at its place, like every other problem of the request
(**decision**, docs/leads.md §2).

The fields are found in the request schema itself (every ``type: integer`` reached
through ``properties``, ``items`` and ``$ref``), so a field the schema gains is
covered without a list to keep up to date.
"""

from __future__ import annotations

from typing import Any

from aap.errors import Problem, problem
from aap.spec import schema_files
from aap.util import pointer as json_pointer

#: The largest integer every JSON reader keeps exact (RFC 7493 §2.2, I-JSON).
MAX_EXACT = 2**53 - 1

REQUEST_SCHEMA = "lead-submit-request"
_SUFFIX = ".schema.json"
_BRANCHES = ("allOf", "anyOf", "oneOf", "then", "else")
_WHY = " (this endpoint's bound: the largest integer every JSON reader keeps exact, RFC 7493 §2.2)"


def _is_integer_typed(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind)


def integer_problems(payload: Any, schema: str = REQUEST_SCHEMA) -> list[Problem]:
    """One problem for each integer-typed value of ``payload`` beyond ±:data:`MAX_EXACT`.

    ``payload`` is walked along its schema: only the values the schema types as
    integers are looked at (a ``number`` such as ``battery_kwh`` is a double
    anyway). Never quotes the value.
    """
    documents = schema_files.documents()
    found: dict[str, Problem] = {}

    def resolve(ref: str, root: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The node ``ref`` names (a bundled file and/or a pointer in it) and its document."""
        name, _, fragment = ref.partition("#")
        if name:
            stem = name.rsplit("/", 1)[-1].removesuffix(_SUFFIX)
            if stem not in documents:
                return None, root
            root = documents[stem]
        node: Any = root
        for token in json_pointer.tokens(fragment) if fragment.startswith("/") else []:
            node = node.get(token) if isinstance(node, dict) else None
        return node, root

    def walk(node: Any, value: Any, pointer: str, root: dict[str, Any], refs: frozenset[str]) -> None:
        # ``refs``: the references followed at this place, so a schema naming itself ends
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            target, target_root = resolve(ref, root)
            key = f"{id(target_root)}{ref}"
            if key not in refs:
                walk(target, value, pointer, target_root, refs | {key})
        for branch in _BRANCHES:
            children = node.get(branch)
            for child in children if isinstance(children, list) else [children]:
                walk(child, value, pointer, root, refs)
        if _is_integer_typed(node) and isinstance(value, (int, float)) and not isinstance(value, bool):
            if value > MAX_EXACT:
                found.setdefault(pointer, problem(pointer, "maximum", f"must be at most {MAX_EXACT}{_WHY}"))
            elif value < -MAX_EXACT:
                found.setdefault(pointer, problem(pointer, "minimum", f"must be at least -{MAX_EXACT}{_WHY}"))
        if isinstance(value, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                for name, child in properties.items():
                    if name in value:
                        walk(child, value[name], f"{pointer}/{json_pointer.escape(name)}", root, frozenset())
        elif isinstance(value, list) and isinstance(node.get("items"), dict):
            for index, item in enumerate(value):
                walk(node["items"], item, f"{pointer}/{index}", root, frozenset())

    walk(documents[schema], payload, "", documents[schema], frozenset())
    return list(found.values())
