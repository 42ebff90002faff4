"""Running tests/node/mcp_client.mjs (the official TypeScript MCP client, pinned by package-lock.json).

Node and npm come from the distribution (`.ci/run` installs `nodejs` and `npm` when missing and
runs `npm ci` before the suite). When ``node_modules`` is absent here, :func:`run_plan` runs
``npm ci`` once itself, from the lock file, so a developer's first run needs no extra step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE_PROJECT = Path(__file__).resolve().parent / "node"
SCRIPT = NODE_PROJECT / "mcp_client.mjs"
SDK = NODE_PROJECT / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"


def node_ready() -> str:
    """The ``node`` executable, with the pinned packages installed."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: apt-get install nodejs npm (see .ci/run)")
    if not SDK.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is not installed: apt-get install npm (see .ci/run)")
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_PROJECT, check=True, timeout=600, capture_output=True
        )
    return node


def run_plan(plan: dict[str, Any], directory: Path, *, ca_file: Path | None = None) -> dict[str, Any]:
    """Run one plan (see the script's header) in one Node process; its JSON report."""
    node = node_ready()
    plan_file = directory / "plan.json"
    plan_file.write_text(json.dumps(plan))
    env = dict(os.environ)
    if ca_file is not None:
        env["NODE_EXTRA_CA_CERTS"] = str(ca_file)  # the test CA of an HTTPS dealer
    done = subprocess.run(
        [node, str(SCRIPT), str(plan_file)], cwd=NODE_PROJECT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def installed_sdk_version() -> str:
    node_ready()  # installs the pinned packages on a first run
    return json.loads(SDK.read_text())["version"]
