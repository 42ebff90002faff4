"""Schema validation that reports every problem, in the shape of ``details.errors[]``.

jsonschema finds the problems; this module turns each into
``{"instanceLocation", "keyword", "error"}`` with a message of our own.  The stock
messages quote the rejected value (``'x@y' is not a 'email'``), and request values are
customer data, so no message here ever contains anything from the instance: only
the schema's own words (property names, enum members, limits).

Combinators are explained by their leaves: a failed ``anyOf``/``oneOf`` reports the
problems of the branch that came closest, and an ``anyOf`` of ``required`` branches
(``vin`` or ``stock`` or ``vehicle_id``) becomes one entry naming the alternatives.

Speed: jsonschema-rs (compiled Rust) decides "valid or not" first; only a rejected
instance walks the python-jsonschema path that explains.  Both must agree on what is
valid, so the python path is given jsonschema-rs's semantics where they differ:
ECMA-262 ``pattern`` matching (:mod:`aap.spec.ecma`) and non-finite floats, which
are no JSON number (and it reads the schemas without ``$schema``, see
:func:`aap.spec.schema_files.dialect_free`, so its class reaches across ``$ref``s).  jsonschema-rs is given this package's format checks
(:mod:`aap.spec.formats`).  Values it cannot take (strings with unpaired
surrogates) go to the python path whole.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator, TypeChecker, validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from aap.errors import Problem
from aap.spec import ecma, formats, schema_files
from aap.spec.formats import checker as format_checker
from aap.util import pointer

_FORMAT_NAMES = {
    "date-time": "an RFC 3339 date-time with a time-zone offset",
    "date": "an RFC 3339 full-date (YYYY-MM-DD)",
    "email": "an email address",
    "uri": "an absolute URI",
    "uri-reference": "a URI reference",
    "hostname": "a host name",
}


class UnknownSchema(KeyError):
    """No bundled schema has this name."""


def _pattern(validator: Validator, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma.compile(pattern).search(instance):
        yield ValidationError("does not match the pattern")


def _is_number(checker: TypeChecker, instance: object) -> bool:
    if isinstance(instance, bool):
        return False
    if isinstance(instance, float):
        return math.isfinite(instance)
    return isinstance(instance, int)


# types-jsonschema declares extend() without annotations; what it returns is a validator class.
AapValidator: type[Validator] = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("number", _is_number),
)


def _schema(name: str) -> dict[str, Any]:
    documents = schema_files.documents()
    if name not in documents:
        raise UnknownSchema(name)
    return documents[name]


@functools.cache
def compiled(name: str) -> Validator:
    """The explaining validator for schema ``name`` (file stem), built once per process."""
    _schema(name)
    stripped, resources = schema_files.dialect_free()
    return AapValidator(stripped[name], registry=resources, format_checker=format_checker)


@functools.cache
def fast(name: str) -> jsonschema_rs.Validator:
    """The jsonschema-rs validator for schema ``name``: same resources, same formats."""
    schema = _schema(name)
    # a format the python path does not check is not checked here either
    checks: dict[str, Callable[[object], bool]] = {fmt: _anything for fmt in _all_formats()}
    checks.update(formats.functions())
    return jsonschema_rs.validator_for(
        schema,
        registry=schema_files.rust_registry(),
        retriever=schema_files.no_fetch,
        validate_formats=True,
        ignore_unknown_formats=True,
        formats=checks,
    )


def _anything(value: object) -> bool:
    return True


@functools.cache
def _all_formats() -> frozenset[str]:
    """Every ``format`` named anywhere in the bundled schemas."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("format"), str):
                found.add(node["format"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for document in schema_files.documents().values():
        walk(document)
    return frozenset(found)


def is_valid(instance: Any, name: str) -> bool:
    """Whether ``instance`` is valid against schema ``name`` (jsonschema-rs decides)."""
    checker = fast(name)
    try:
        return checker.is_valid(instance)
    except (ValueError, TypeError, OverflowError):
        # not representable for the Rust side (unpaired surrogates): the python path
        return compiled(name).is_valid(instance)


def validate(instance: Any, name: str, *, budget: float | None = None) -> list[Problem]:
    """Every problem of ``instance`` against schema ``name``; empty when valid.

    ``budget`` bounds the thread CPU seconds spent explaining an invalid instance: past
    it the list stops, ending with one ``budget`` entry at the root, so a caller knows
    there may be more (the request bounds of :mod:`aap.spec.bounds` keep AAP requests
    well inside any sensible budget; this is the guarantee).
    """
    if is_valid(instance, name):
        return []
    v = compiled(name)
    deadline = None if budget is None else time.thread_time() + budget
    # One entry per (location, keyword): two rules refusing one value for the same reason
    # (a vehicle's condition enum and the lead's wear-condition enum) are one problem, and
    # for enum and type it names what both allow.
    out: dict[tuple[str, str], Problem] = {}
    allowed: dict[tuple[str, str], list[Any]] = {}
    for error in v.iter_errors(instance):
        if _vacuous_condition(error, v.schema, instance):
            continue
        leaf = _allowed_values(error)
        for problem in _explain(error, v):
            key = (problem["instanceLocation"], problem["keyword"])
            values = leaf if leaf is not None and key == (pointer.build(error.absolute_path), error.validator) else None
            if key not in out:
                out[key] = problem
                if values is not None:
                    allowed[key] = values
            elif values is not None and key in allowed:
                allowed[key] = both = [x for x in allowed[key] if any(_same(x, y) for y in values)]
                out[key] = _problem(key[0], key[1], _allowed_message(key[1], both))
        if deadline is not None and time.thread_time() > deadline:
            out[("", "budget")] = _problem(
                "",
                "budget",
                "further problems were not listed: checking this request took longer than this endpoint allows",
            )
            break
    return sorted(out.values(), key=problem_order)


def _typed(schema: Any) -> Any:
    """``schema`` with ``type: object`` wherever it tests members (``properties``/``required``)."""
    if isinstance(schema, list):
        return [_typed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in ("const", "enum") else _typed(v)) for k, v in schema.items()}
    if ("properties" in out or "required" in out) and "type" not in out:
        out["type"] = "object"
    return out


def _vacuous_condition(error: ValidationError, root: Any, instance: Any) -> bool:
    """Whether ``error`` comes from a ``then``/``else`` whose ``if`` held only vacuously.

    ``{"if": {"properties": {"sort": {"properties": {"field": {"const": "distance_mi"}},
    "required": ["field"]}}}}`` holds for ``"sort": "price"`` (a string has no members to
    test), so its ``then`` ("filters is required") would be reported beside the real problem
    ("sort must be object"), sending a caller after the wrong fix. Read with the object types
    it assumes, the ``if`` does not hold, and that ``then`` problem is dropped; the value's own
    type problem is reported as always.
    """
    path = list(error.schema_path)
    if "then" not in path and "else" not in path:
        return False
    cut = max(i for i, token in enumerate(path) if token in ("then", "else"))
    node: Any = root
    for token in path[:cut]:
        if token == "$ref" or not isinstance(node, (dict, list)):
            return False
        try:
            node = node[token] if isinstance(node, dict) else node[int(token)]
        except (KeyError, IndexError, TypeError, ValueError):
            return False
    if not isinstance(node, dict) or "if" not in node:
        return False
    depth = sum(1 for token in path[cut + 1 :] if token in ("properties", "items"))
    located = list(error.absolute_path)
    target: Any = instance
    for token in located[: len(located) - depth] if depth <= len(located) else []:
        try:
            target = target[token]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        holds = AapValidator(_typed(node["if"]), format_checker=format_checker).is_valid(target)
    except Exception:  # a reference the bare condition cannot resolve: keep the problem as reported
        return False
    return bool(holds) is (path[cut] == "else")


def _allowed_values(error: ValidationError) -> list[Any] | None:
    """The values (``enum``) or types (``type``) a leaf error allows, else None."""
    value: Any = error.validator_value
    if error.validator == "enum" and isinstance(value, list):
        return list(value)
    if error.validator == "type":
        return list(value) if isinstance(value, list) else [value]
    return None


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``1`` is not ``true``), for intersecting enums."""
    return type(a) is type(b) and a == b


def _allowed_message(keyword: str, values: list[Any]) -> str:
    if not values:
        return "no value is allowed here"
    return _message(keyword, values, {})


def problem_order(p: Problem) -> tuple[tuple[tuple[int, int, str], ...], str, str]:
    """The order of ``details.errors[]``: by location (numeric segments numerically), keyword, text."""
    parts = p["instanceLocation"].split("/")
    # numeric segments in numeric order, so /items/10 follows /items/9
    return tuple((0, int(s), "") if pointer.is_index(s) else (1, 0, s) for s in parts), p["keyword"], p["error"]


# ------------------------------------------------------------------------ helpers


def _problem(location: str, keyword: str, message: str) -> Problem:
    return {"instanceLocation": location, "keyword": keyword, "error": message}


def _show(value: Any) -> str:
    """A schema value (never an instance value) for a message."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _one_of_words(values: list[Any], conj: str = "or") -> str:
    items = [_show(v) for v in values]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]


def _type_words(t: Any) -> str:
    types = t if isinstance(t, list) else [t]
    return _one_of_words(types)


# ---------------------------------------------------------------- explanation


def _explain_all(errors: Iterable[ValidationError], root: Validator) -> Iterator[Problem]:
    for error in errors:
        yield from _explain(error, root)


def _explain(e: ValidationError, root: Validator) -> Iterator[Problem]:
    loc = pointer.build(e.absolute_path)
    # a `false` subschema has no keyword (jsonschema leaves it None, its stubs say unset)
    kw = e.validator if isinstance(e.validator, str) else None
    value: Any = e.validator_value  # the keyword's value: any JSON from the schema
    instance = e.instance
    schema = e.schema if isinstance(e.schema, dict) else {}

    if kw is None or kw == "false":  # a `false` subschema
        yield _problem(loc, "false", "is not allowed here")
        return
    if kw == "additionalProperties" and isinstance(instance, dict):
        declared = set(schema.get("properties", {}))
        patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
        allowed = sorted(declared)
        hint = f"; allowed: {', '.join(allowed)}" if allowed and len(allowed) <= 60 else ""
        for key in instance:
            if key not in declared and not any(p.search(key) for p in patterns):
                yield _problem(
                    f"{loc}/{pointer.escape(key)}", "additionalProperties", "is not an allowed property" + hint
                )
        return
    if kw == "unevaluatedProperties" and isinstance(instance, dict):
        yield _problem(loc, kw, "has properties that no subschema allows")
        return
    if kw == "required" and isinstance(instance, dict):
        for name in value:
            if name not in instance:
                yield _problem(f"{loc}/{pointer.escape(name)}", "required", "is required")
        return
    if kw == "dependentRequired" and isinstance(instance, dict):
        for trigger, needed in value.items():
            if trigger in instance:
                for name in needed:
                    if name not in instance:
                        yield _problem(f"{loc}/{pointer.escape(name)}", kw, f"is required when {trigger} is present")
        return
    if kw in ("anyOf", "oneOf"):
        yield from _explain_branches(e, loc, root)
        return
    if kw == "not":
        yield _problem(loc, "not", _not_message(value))
        return
    if kw == "contains":
        yield _problem(loc, kw, _contains_message(schema))
        yield from _closest_item(e, loc, root)
        return
    yield _problem(loc, kw, _message(kw, value, schema))


def _closest_item(e: ValidationError, loc: str, root: Validator) -> Iterator[Problem]:
    """When no item satisfies ``contains``, why the closest one does not."""
    sub = e.schema.get("contains") if isinstance(e.schema, dict) else None
    items = e.instance
    if not isinstance(sub, dict) or not isinstance(items, list) or not 0 < len(items) <= 50:
        return
    if set(sub) <= {"const", "enum", "type"}:
        return  # "must contain X" already says it all
    try:
        checker = root.evolve(schema=sub)
        if any(checker.is_valid(item) for item in items):
            return  # some item matches: the count is the problem, not an item
        best: list[Problem] | None = None
        for i, item in enumerate(items):
            probs = [
                _problem(f"{loc}/{i}{p['instanceLocation']}", p["keyword"], p["error"])
                for p in _explain_all(checker.iter_errors(item), checker)
            ]
            if best is None or len(probs) < len(best):
                best = probs
    except Exception:  # a ref outside this resource: keep the plain entry
        return
    yield from best or []


def _explain_branches(e: ValidationError, loc: str, root: Validator) -> Iterator[Problem]:
    kw = e.validator
    alternatives = e.validator_value if isinstance(e.validator_value, list) else []
    # keyed by the branch's index in the anyOf/oneOf list
    branches: dict[str | int, list[ValidationError]] = {}
    for sub in e.context or ():
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    n = len(alternatives)
    if kw == "oneOf" and len(branches) < n:
        yield _problem(loc, "oneOf", "matches more than one of the allowed alternatives; it must match exactly one")
        return
    explained = {i: list(_explain_all(errs, root)) for i, errs in branches.items()}
    # `anyOf: [{required: [vin]}, {required: [stock]}, ...]` -> one entry
    missing: list[str] = []
    only_required = True
    for i in range(n):
        for p in explained.get(i, []):
            parent, _, name = p["instanceLocation"].rpartition("/")
            if p["keyword"] != "required" or parent != loc:
                only_required = False
                break
            name = pointer.unescape(name)
            if name not in missing:
                missing.append(name)
        if not only_required:
            break
    if only_required and missing:
        yield _problem(loc, "required", f"one of {_one_of_words(missing)} is required")
        return
    # all branches reject the value's type at this location -> one type entry
    types: list[str] = []
    consts: list[Any] = []
    all_type = all_const = True
    for i in range(n):
        top = [p for p in explained.get(i, []) if p["instanceLocation"] == loc]
        sub_schema = alternatives[i] if isinstance(alternatives[i], dict) else {}
        if not any(p["keyword"] == "type" for p in top):
            all_type = False
        else:
            t = sub_schema.get("type")
            for x in t if isinstance(t, list) else [t]:
                if x and x not in types:
                    types.append(x)
        if not any(p["keyword"] in ("const", "enum") for p in top):
            all_const = False
        elif "const" in sub_schema:
            consts.append(sub_schema["const"])
        elif isinstance(sub_schema.get("enum"), list):
            consts.extend(sub_schema["enum"])
    if all_type and types:
        yield _problem(loc, "type", f"must be {_type_words(types)}")
        return
    if all_const and consts:
        yield _problem(loc, "enum", f"must be one of: {', '.join(_show(c) for c in consts)}")
        return

    # otherwise: the problems of the closest branch (fewest problems, no type
    # mismatch at this location if possible; ties go to the first branch)
    def score(i: int) -> tuple[bool, int, int]:
        probs = explained.get(i, [])
        wrong_type = any(p["keyword"] == "type" and p["instanceLocation"] == loc for p in probs)
        return (wrong_type, len(probs), i)

    best = min(range(n), key=score)
    yield from explained.get(best, [])


def _not_message(value: Any) -> str:
    if isinstance(value, dict):
        req = value.get("required")
        if isinstance(req, list) and set(value) == {"required"}:
            if len(req) == 1:
                return f"{req[0]} must not be present here"
            return f"{_one_of_words(req, 'and')} must not be used together"
        if set(value) == {"const"}:
            return f"must not be {_show(value['const'])}"
        if set(value) == {"enum"}:
            return f"must not be any of: {', '.join(_show(v) for v in value['enum'])}"
    return "matches a shape that is not allowed here"


def _contains_message(schema: Mapping[str, Any]) -> str:
    sub = schema.get("contains")
    low = schema.get("minContains", 1)
    high = schema.get("maxContains")
    what = "matching item"
    if isinstance(sub, dict):
        if "const" in sub:
            what = f"item equal to {_show(sub['const'])}"
        elif isinstance(sub.get("enum"), list):
            what = f"item among: {', '.join(_show(v) for v in sub['enum'])}"
        elif isinstance(sub.get("properties"), dict):
            what = "matching item"
    if high is not None:
        if low == high:
            return f"must contain exactly {low} {what}" + ("" if low == 1 else "s")
        return f"must contain between {low} and {high} of: {what}"
    return f"must contain at least {low} {what}" + ("" if low == 1 else "s")


def _at_least(value: Any, unit: str) -> str:
    return "must not be empty" if value == 1 else f"must have at least {value} {unit}"


#: The message of each failed keyword, from the keyword's value (protocol text as data).
_MESSAGES: dict[str, Callable[[Any], str]] = {
    "type": lambda v: f"must be {_type_words(v)}",
    "enum": lambda v: f"must be one of: {', '.join(_show(x) for x in v)}",
    "const": lambda v: f"must be {_show(v)}",
    "format": lambda v: f"must be {_FORMAT_NAMES.get(v, 'a valid ' + str(v))}",
    "pattern": lambda v: f"must match the pattern {v}",
    "minLength": lambda v: "must not be empty" if v == 1 else f"must be at least {v} characters long",
    "maxLength": lambda v: f"must be at most {v} characters long",
    "minimum": lambda v: f"must be at least {_show(v)}",
    "maximum": lambda v: f"must be at most {_show(v)}",
    "exclusiveMinimum": lambda v: f"must be greater than {_show(v)}",
    "exclusiveMaximum": lambda v: f"must be less than {_show(v)}",
    "multipleOf": lambda v: f"must be a multiple of {_show(v)}",
    "minItems": lambda v: _at_least(v, "items"),
    "maxItems": lambda v: f"must have at most {v} items",
    "uniqueItems": lambda v: "must not contain duplicate items",
    "minProperties": lambda v: _at_least(v, "properties"),
    "maxProperties": lambda v: "must be empty" if v == 0 else f"must have at most {v} properties",
    "propertyNames": lambda v: "has a property name that is not allowed",
    "unevaluatedItems": lambda v: "has items that no subschema allows",
    "$ref": lambda v: "does not match the referenced schema",
    "$dynamicRef": lambda v: "does not match the referenced schema",
}


def _message(kw: str, value: Any, schema: Mapping[str, Any]) -> str:
    if kw in ("minContains", "maxContains"):
        return _contains_message(schema)
    message = _MESSAGES.get(kw)
    return message(value) if message is not None else f"fails the {kw} constraint"
