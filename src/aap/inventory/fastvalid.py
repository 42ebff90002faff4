"""A compiled yes/no check of a bundled AAP schema, for bulk feeds.

``jsonschema`` walks a schema dynamically and costs about a millisecond per
``InventoryListing``: a 100k-row feed would spend minutes just validating. This
module compiles a schema once into nested closures that answer only "valid or
not", with the same semantics as ``jsonschema``'s Draft 2020-12 validator for
the keywords the AAP schemas use, and the same format checker as
:mod:`aap.spec`. A schema using any other keyword refuses to compile
(:class:`Unsupported`), so the caller falls back to the full validator.

It never explains anything: a row it rejects is passed to
:func:`aap.spec.validate`, which lists the problems. The tests compare both
validators on generated and mutated listings.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Callable

from aap.spec import registry
from aap.spec.formats import checker as format_checker

if TYPE_CHECKING:
    from referencing._core import Resolver

Check = Callable[[Any], bool]

#: Keywords that never affect validity.
ANNOTATIONS = frozenset({
    "$schema", "$comment", "$defs", "title", "description", "examples", "default",
    "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
})


class Unsupported(ValueError):
    """The schema uses a keyword this compiler does not implement."""


@functools.lru_cache(maxsize=None)
def compiled(name: str) -> Check:
    """The yes/no check of bundled schema ``name`` (file stem); raises :class:`Unsupported`."""
    document = registry.documents()[name]
    resolver = registry.registry().resolver(base_uri=document.get("$id", ""))
    return _Compiler().compile(document, resolver, root=True)


def is_valid(instance: Any, name: str) -> bool | None:
    """True/False, or None when the schema cannot be compiled (use the full validator)."""
    try:
        check = compiled(name)
    except Unsupported:
        return None
    return check(instance)


# -- JSON Schema equality and types (as jsonschema defines them) ------------------------


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return a == b


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


_TYPES: dict[str, Check] = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "number": _is_number,
    "integer": lambda x: (isinstance(x, int) and not isinstance(x, bool))
    or (isinstance(x, float) and x.is_integer()),
}


def _format_check(fmt: str) -> Check:
    """``FormatChecker.conforms`` without its per-call lookup (formats it lacks always pass)."""
    if fmt not in format_checker.checkers:
        return lambda x: True
    func, raises = format_checker.checkers[fmt]

    def conforms(x: Any) -> bool:
        try:
            return bool(func(x))
        except raises:
            return False
    return conforms


def _unique(items: list) -> bool:
    if all(isinstance(x, str) for x in items):
        return len(set(items)) == len(items)
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if _equal(a, b):
                return False
    return True


def _all(checks: list[Check]) -> Check:
    """A check passing when every one of ``checks`` passes (loops beat ``all()`` here)."""
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        a, b = checks
        return lambda x: a(x) and b(x)
    frozen = tuple(checks)

    def every(x: Any) -> bool:
        for f in frozen:
            if not f(x):
                return False
        return True
    return every


def _any(checks: list[Check] | tuple[Check, ...]) -> Check:
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)

    def some(x: Any) -> bool:
        for f in frozen:
            if f(x):
                return True
        return False
    return some


# -- the compiler -----------------------------------------------------------------------


class _Compiler:
    def __init__(self) -> None:
        self._memo: dict[int, Check] = {}

    def compile(self, schema: Any, resolver: Resolver, *, root: bool = False) -> Check:
        if schema is True:
            return lambda x: True
        if schema is False:
            return lambda x: False
        if not isinstance(schema, dict):
            raise Unsupported("a schema must be an object or a boolean")
        key = id(schema)
        if key in self._memo:
            return self._memo[key]
        cell: list[Check] = []
        self._memo[key] = lambda x: cell[0](x)  # recursion through $ref resolves lazily
        check = self._build(schema, resolver, root)
        cell.append(check)
        self._memo[key] = check
        return check

    def _build(self, schema: dict, resolver: Resolver, root: bool) -> Check:
        checks: list[Check] = []
        handled = set(ANNOTATIONS)
        if "$id" in schema and not root:
            raise Unsupported("nested $id")
        handled.add("$id")

        def take(keyword: str) -> Any:
            handled.add(keyword)
            return schema[keyword]

        if "$ref" in schema:
            resolved = resolver.lookup(take("$ref"))
            checks.append(self.compile(resolved.contents, resolved.resolver,
                                       root=isinstance(resolved.contents, dict) and "$id" in resolved.contents))
        if "type" in schema:
            kinds = take("type")
            tests = [_TYPES[k] for k in (kinds if isinstance(kinds, list) else [kinds])]
            checks.append(_any(tests))
        if "enum" in schema:
            values = list(take("enum"))
            if all(isinstance(v, str) for v in values):
                allowed = frozenset(values)
                checks.append(lambda x: isinstance(x, str) and x in allowed)
            else:
                checks.append(lambda x: any(_equal(x, v) for v in values))
        if "const" in schema:
            const = take("const")
            checks.append(lambda x: _equal(x, const))
        checks += self._string(schema, take)
        checks += self._number(schema, take)
        checks += self._object(schema, take, resolver)
        checks += self._array(schema, take, resolver)
        for keyword in ("allOf", "anyOf", "oneOf"):
            if keyword in schema:
                subs = tuple(self.compile(s, resolver) for s in take(keyword))
                if keyword == "allOf":
                    checks.extend(subs)
                elif keyword == "anyOf":
                    checks.append(_any(subs))
                else:
                    checks.append(lambda x, subs=subs: sum(1 for f in subs if f(x)) == 1)
        if "not" in schema:
            negated = self.compile(take("not"), resolver)
            checks.append(lambda x: not negated(x))
        if "if" in schema:
            condition = self.compile(take("if"), resolver)
            then = self.compile(take("then"), resolver) if "then" in schema else None
            otherwise = self.compile(take("else"), resolver) if "else" in schema else None
            checks.append(lambda x: (then(x) if then else True) if condition(x)
                          else (otherwise(x) if otherwise else True))
        else:
            handled.update({"then", "else"})  # without "if" they do nothing
        unknown = set(schema) - handled
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        return _all(checks)

    @staticmethod
    def _string(schema: dict, take: Callable[[str], Any]) -> list[Check]:
        checks: list[Check] = []
        if "pattern" in schema:
            search = re.compile(take("pattern")).search
            checks.append(lambda x: not isinstance(x, str) or search(x) is not None)
        if "minLength" in schema:
            low = take("minLength")
            checks.append(lambda x: not isinstance(x, str) or len(x) >= low)
        if "maxLength" in schema:
            high = take("maxLength")
            checks.append(lambda x: not isinstance(x, str) or len(x) <= high)
        if "format" in schema:
            checks.append(_format_check(take("format")))
        return checks

    @staticmethod
    def _number(schema: dict, take: Callable[[str], Any]) -> list[Check]:
        checks: list[Check] = []
        for keyword, test in (
            ("minimum", lambda x, v: x >= v), ("maximum", lambda x, v: x <= v),
            ("exclusiveMinimum", lambda x, v: x > v), ("exclusiveMaximum", lambda x, v: x < v),
        ):
            if keyword in schema:
                bound = take(keyword)
                checks.append(lambda x, b=bound, t=test: not _is_number(x) or t(x, b))
        return checks

    def _object(self, schema: dict, take: Callable[[str], Any], resolver: Resolver) -> list[Check]:
        checks: list[Check] = []
        if "required" in schema:
            names = tuple(take("required"))

            def check_required(x: Any) -> bool:
                if isinstance(x, dict):
                    for name in names:
                        if name not in x:
                            return False
                return True
            checks.append(check_required)
        properties = {}
        if "properties" in schema:
            properties = {k: self.compile(v, resolver) for k, v in take("properties").items()}
        extra: Check | None = None
        if "additionalProperties" in schema:
            extra = self.compile(take("additionalProperties"), resolver)
            if schema["additionalProperties"] is True:
                extra = None
        if extra is not None:
            def check_object(x: Any, props=properties, extra=extra) -> bool:
                if not isinstance(x, dict):
                    return True
                for name, value in x.items():
                    test = props.get(name)
                    if test is not None:
                        if not test(value):
                            return False
                    elif not extra(value):
                        return False
                return True
            checks.append(check_object)
        elif properties:
            pairs = tuple(properties.items())

            def check_properties(x: Any, props=properties, pairs=pairs) -> bool:
                if not isinstance(x, dict):
                    return True
                if len(pairs) <= len(x):  # walk the shorter side
                    for name, test in pairs:
                        if name in x and not test(x[name]):
                            return False
                else:
                    for name, value in x.items():
                        test = props.get(name)
                        if test is not None and not test(value):
                            return False
                return True
            checks.append(check_properties)
        return checks

    def _array(self, schema: dict, take: Callable[[str], Any], resolver: Resolver) -> list[Check]:
        checks: list[Check] = []
        if "items" in schema:
            item = self.compile(take("items"), resolver)
            def check_items(x: Any) -> bool:
                if isinstance(x, list):
                    for v in x:
                        if not item(v):
                            return False
                return True
            checks.append(check_items)
        if "minItems" in schema:
            low = take("minItems")
            checks.append(lambda x: not isinstance(x, list) or len(x) >= low)
        if "maxItems" in schema:
            high = take("maxItems")
            checks.append(lambda x: not isinstance(x, list) or len(x) <= high)
        if schema.get("uniqueItems") is True:
            take("uniqueItems")
            checks.append(lambda x: not isinstance(x, list) or _unique(x))
        elif "uniqueItems" in schema:
            take("uniqueItems")
        if "contains" in schema:
            match = self.compile(take("contains"), resolver)
            low = take("minContains") if "minContains" in schema else 1
            high = take("maxContains") if "maxContains" in schema else None

            def check_contains(x: Any) -> bool:
                if not isinstance(x, list):
                    return True
                count = sum(1 for v in x if match(v))
                return count >= low and (high is None or count <= high)
            checks.append(check_contains)
        return checks
