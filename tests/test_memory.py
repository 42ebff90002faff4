"""The server's malloc settings (aap.memory): applied on glibc, an operator's setting left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(code: str, **env: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin", **env}
    ).stdout.strip()


def test_the_arena_cap_and_the_trim_apply_on_glibc():
    """Debian's glibc has both: a fresh process takes the cap, and freed memory goes back."""
    assert run("import aap.memory as m; print(m.limit_malloc_arenas(), m.return_free_memory())") == "True True"


def test_an_operators_malloc_arena_max_is_left_alone():
    assert run("import aap.memory as m; print(m.limit_malloc_arenas())", MALLOC_ARENA_MAX="4") == "False"


def test_the_trim_gives_back_what_a_large_build_freed():
    """40 MB of malloc'd blocks freed under one that stays (so malloc cannot shrink its heap from
    the top by itself): resident memory stays up without the trim and comes down with it."""
    code = (
        "import aap.memory as m, sys\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "blocks = [bytes(1000) + bytes([i % 256]) for i in range(40_000)]\n"
        "kept = bytes(1000) + b'!'\n"
        "del blocks\n"
        "before = rss()\n"
        "if sys.argv[-1] == 'trim':\n"
        "    m.return_free_memory()\n"
        "print(before - rss())\n"
    )

    def freed(*argv: str) -> int:
        return int(
            subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
        )

    assert freed("trim") > 20_000 > freed("keep")  # KiB


@pytest.mark.slow
def test_httpx_keeps_its_cli_out_of_the_server_only():
    """The `aap` command keeps httpx from loading its command-line tool (3 MiB); a program that
    imports the `aap.client` SDK gets httpx exactly as httpx ships."""
    check = "import sys, httpx; print(sys.modules.get('httpx._main', 'loaded or absent') is None)"
    assert run(f"import aap.cli.main; {check}") == "True"
    assert run(f"import aap.client; {check}") == "False"


@pytest.mark.slow
def test_a_worker_of_one_agent_loads_no_cryptography():
    """``cryptography`` (~7 MiB resident) comes with the first tenant secret sealed or opened, the
    first card signed or the first DPoP proof: the serving stack and the start-up checks of one
    agent's worker never import it (docs/benchmarks.md, "Memory: a worker at 100k listings")."""
    code = (
        "import sys, aap.cli.main, aap.server.runner\n"
        "from aap.config.environment import environment_problems\n"
        "from aap.config.loader import load_settings\n"
        "print(environment_problems(load_settings(None, environ={}), {}), 'cryptography' in sys.modules)\n"
        "from aap.secretbox import Keyring, new_key\n"
        "ring = Keyring.parse(new_key(), 'a test')\n"
        "print(ring.open(ring.seal('v', ['t', 'n']), ['t', 'n']), 'cryptography' in sys.modules)\n"
    )
    assert run(code).splitlines() == ["[] False", "v True"]
