"""The type checker passes on ``src/aap`` with the project's configuration.

mypy runs in-process with ``pyproject.toml``'s ``[tool.mypy]`` (strict on the
core packages, see docs/architecture.md, "Types"), so a type error fails the
suite like any other test, with mypy's report as the failure message. The
second test proves the check can fail: the same configuration run on a tiny
package with known errors must reject it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "pyproject.toml"


def mypy(target: Path, cache_dir: Path) -> tuple[int, str]:
    """(exit status, report) of mypy on ``target`` with the project's configuration."""
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(CONFIG),
            "--cache-dir",
            str(cache_dir),
            "--show-error-codes",
            "--no-color-output",
            "--no-pretty",
            str(target),
        ]
    )
    return status, stdout + stderr


@pytest.mark.slow
def test_source_passes_mypy(tmp_path: Path) -> None:
    status, report = mypy(ROOT / "src" / "aap", tmp_path / "cache")
    assert status == 0, f"mypy found type errors (run `mypy` in the repository root):\n{report}"


BAD_CORE_MODULE = """
def untyped(value):                  # strict on core packages: every function annotated
    return value


def total(prices: list[int]) -> int:
    return sum(prices) + "0"         # an error under any configuration
"""


@pytest.mark.slow
def test_the_check_rejects_type_errors(tmp_path: Path) -> None:
    package = tmp_path / "src" / "aap"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "agent.py").write_text(BAD_CORE_MODULE)  # a core module name: the strict section applies
    status, report = mypy(package, tmp_path / "cache")
    assert status == 1, report
    assert "agent.py:2: error" in report and "[no-untyped-def]" in report, report
    assert "agent.py:7: error" in report and "[operator]" in report, report


@pytest.mark.parametrize("flag", ["disallow_untyped_defs", "disallow_any_generics", "warn_return_any"])
def test_core_packages_are_strict(flag: str) -> None:
    """The strict section is there and covers the core packages (a loosened config fails here)."""
    import tomllib

    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = [o for o in config["overrides"] if o.get(flag) is True]
    assert strict, f"no [[tool.mypy.overrides]] section sets {flag}"
    modules = set(strict[0]["module"])
    core = {
        "aap",
        "aap.errors",
        "aap.loopback",
        "aap.paths",
        "aap.protocols",
        "aap.spec.*",
        "aap.config.*",
        "aap.inventory.*",
        "aap.store.*",
        "aap.leads.*",
        "aap.skills.*",
        "aap.agent",
        "aap.ratelimit",
        "aap.fairshare",
        "aap.memory",
        "aap.jsontext",
        "aap.util.*",
        "aap.gateway",
        "aap.work",
    }
    assert core <= modules, f"{flag} does not cover {sorted(core - modules)}"


def test_every_module_of_layers_0_to_4_is_strict() -> None:
    """docs/architecture.md, "Types": a new core module is strict without anyone remembering to list it."""
    import fnmatch
    import tomllib

    from test_layers import LAYERS, SOURCES, component, module_name

    config = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["mypy"]
    patterns = next(o for o in config["overrides"] if o.get("disallow_untyped_defs") is True)["module"]
    core = set().union(*(names for _layer, names in LAYERS[:5]))
    loose = [
        name
        for name in map(module_name, SOURCES)
        if component(name) in core
        # mypy reads "aap.spec.*" as aap.spec and every module below it
        and not any(fnmatch.fnmatchcase(name, p) or p == f"{name}.*" for p in patterns)
    ]
    assert not loose, f"add these to the strict [[tool.mypy.overrides]] of pyproject.toml: {loose}"
