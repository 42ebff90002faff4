"""The import rule of docs/architecture.md, checked on the source.

Every module of ``src/aap`` belongs to one layer; a module may import from
its own layer or a lower one, never a higher one, and no two packages may
import each other (directly or through others). Every import counts: function-level
ones, and the annotation-only ones under ``if TYPE_CHECKING:`` too, so that no arrow
runs back up the layers unseen (an annotation that needs a higher layer's type is a
dependency in the wrong direction, whether or not it runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: Low to high. The name is the second component of the module path
#: (``aap.store.db`` → ``store``; ``aap.errors`` → ``errors``).
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "foundation",
        frozenset(
            {
                "cardsign",
                "errors",
                "jsontext",
                "loopback",
                "memory",
                "netguard",
                "paths",
                "protocols",
                "secretbox",
                "spec",
                "telemetry",
                "util",
            }
        ),
    ),
    ("config", frozenset({"config"})),
    ("inventory", frozenset({"inventory"})),
    ("store", frozenset({"store"})),
    (
        "core logic",
        frozenset(
            {
                "leads",
                "skills",
                "agent",
                "gateway",
                "work",
                "ratelimit",
                "fairshare",
                "feeds",
                "accounts",
                "tenants",
                "tenant_secrets",
            }
        ),
    ),
    ("http plumbing", frozenset({"web"})),
    ("surfaces", frozenset({"bindings", "discovery", "poppy", "site", "console", "platform"})),
    ("composition root", frozenset({"server"})),
    ("the other side", frozenset({"client", "check"})),
    ("command line", frozenset({"cli", "__main__"})),
)
LAYER_OF = {name: rank for rank, (_, names) in enumerate(LAYERS) for name in names}


def module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = SRC) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every ``aap`` import, wherever it is (TYPE_CHECKING blocks included)."""
    module = module_name(path, root)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((child.lineno, target))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return [(line, target) for line, target in found if target == "aap" or target.startswith("aap.")]


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


SOURCES = sorted((SRC / "aap").rglob("*.py"))


def test_every_package_has_a_layer() -> None:
    unplaced = {component(module_name(p)) for p in SOURCES} - set(LAYER_OF) - {""}
    assert not unplaced, f"give these a layer in tests/test_layers.py: {sorted(unplaced)}"


def test_no_module_imports_a_higher_layer() -> None:
    offences = []
    for path in SOURCES:
        source = component(module_name(path))
        if source not in LAYER_OF:
            continue
        for line, target in imports(path):
            dest = component(target)
            if dest and LAYER_OF.get(dest, -1) > LAYER_OF[source]:
                offences.append(
                    f"{path.relative_to(SRC)}:{line} ({LAYERS[LAYER_OF[source]][0]}) imports "
                    f"{target} ({LAYERS[LAYER_OF[dest]][0]})"
                )
    assert not offences, "lower layers must not import higher ones:\n" + "\n".join(offences)


def test_no_import_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        source = component(module_name(path))
        for _line, target in imports(path):
            dest = component(target)
            if dest and dest != source:
                graph.setdefault(source, set()).add(dest)
    cycles = [scc for scc in _strongly_connected(graph) if len(scc) > 1]
    assert not cycles, f"packages that import each other: {cycles}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (the graph is a few dozen nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            scc = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                scc.append(top)
                if top == node:
                    break
            out.append(sorted(scc))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return out


#: Function-level imports that close a cycle of module-level imports, in code that is being
#: rebuilt (docs/architecture.md, "Memory"): the store opens its PostgreSQL backend (which
#: imports the store) on first use, and the MCP SDK's modules load with the first SDK request;
#: these come back through the packages' ``__init__.py``, which import their modules.
KNOWN_LAZY_CYCLES = {
    ("aap.bindings.mcp.sdk", "aap.bindings.mcp.server"),
    ("aap.bindings.mcp.sdk", "aap.bindings.mcp.tools"),
    ("aap.store.db", "aap.store.postgres"),
    ("aap.store.replicas", "aap.store.postgres"),
    ("aap.store.upgrade", "aap.store.postgres"),
}


def module_imports(path: Path, modules: set[str], root: Path = SRC) -> tuple[set[str], set[str]]:
    """The ``aap`` modules ``path`` loads when it is imported (its module-level imports, and the
    packages they are in), and those it imports inside a function; ``if TYPE_CHECKING:`` blocks
    load nothing."""
    module = module_name(path, root)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    at_import: set[str] = set()
    in_functions: set[str] = set()

    def loaded(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(2, len(parts) + 1) if ".".join(parts[:i]) in modules]

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = package[: len(package) - child.level + 1] if child.level else []
                target = ".".join(base + ([child.module] if child.module else []))
                names = [target, *(f"{target}.{alias.name}" for alias in child.names)]
            if inner:  # the module named (its packages are loaded already, with the module that defers it)
                in_functions.update(m for name in names if name.startswith("aap.") for m in loaded(name)[-1:])
            else:
                at_import.update(m for name in names if name.startswith("aap.") for m in loaded(name))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    parents = {".".join(module.split(".")[:i]) for i in range(2, module.count(".") + 1)}
    return (at_import | (parents & modules)) - {module}, in_functions - {module}


def test_no_function_level_import_hides_a_cycle() -> None:
    """An import inside a function keeps start-up light (docs/architecture.md, "Memory"); it is
    never a way around an import cycle: the module it loads does not import, at module level
    and through any chain of modules, the module that defers it."""
    modules = {module_name(p) for p in SOURCES}
    at_import: dict[str, set[str]] = {}
    deferred: dict[str, set[str]] = {}
    for path in SOURCES:
        at_import[module_name(path)], deferred[module_name(path)] = module_imports(path, modules)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(at_import.get(current, ()))
        return False

    hidden = {(source, target) for source, targets in deferred.items() for target in targets if reaches(target, source)}
    assert hidden <= KNOWN_LAZY_CYCLES, f"function-level imports around a cycle: {sorted(hidden - KNOWN_LAZY_CYCLES)}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from aap.server.app import create_app\n", ["aap.server.app"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aap.server import x\n", ["aap.server"]),
        ("def f():\n    import aap.cli.main\n", ["aap.cli.main"]),
    ],
)
def test_the_import_reader(tmp_path: Path, source: str, expected: list[str]) -> None:
    """The checker itself sees function-level and annotation-only imports."""
    pkg = tmp_path / "aap" / "store"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text(source)
    assert [t for _l, t in imports(pkg / "x.py", tmp_path)] == expected


def test_the_cycle_finder() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [scc for scc in _strongly_connected(graph) if len(scc) > 1] == [["a", "b", "c"]]
