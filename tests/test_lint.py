"""The linter and the formatter pass on the repository, with ``pyproject.toml``'s ``[tool.ruff]``.

ruff runs as a child process (it is a binary, not a library), so a lint finding or
an unformatted file fails the suite like a failing test, with ruff's report as the
message. The last test proves the gate can fail: the same configuration must reject
a file with a known finding.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ["src", "tests", "bench", "tools"]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``ruff ARGS`` with the project's configuration, from the virtualenv that runs the suite."""
    binary = Path(sys.executable).with_name("ruff")
    command = [str(binary)] if binary.exists() else [shutil.which("ruff") or "ruff"]
    return subprocess.run(
        [*command, *args, "--config", str(ROOT / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_ruff_check_passes() -> None:
    result = ruff("check", "--no-cache", *TREES)
    assert result.returncode == 0, f"`ruff check` found problems (run `ruff check --fix`):\n{result.stdout}"


def test_ruff_format_is_applied() -> None:
    result = ruff("format", "--check", "--no-cache", *TREES)
    assert result.returncode == 0, f"files need `ruff format`:\n{result.stdout}"


def test_the_gate_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n", encoding="utf-8")  # F401: imported and never used
    result = ruff("check", "--no-cache", str(bad), cwd=tmp_path)
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr
