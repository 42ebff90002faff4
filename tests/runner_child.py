"""``aap.server.runner.run`` in a child process with JSON logs on loopback: the real server,
with its protocol limits and proxy-header handling, as the tests that need it start it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx

from factories import free_port


class RunnerChild:
    """A child serving on ``self.port``; subclasses build their settings source, then :meth:`start`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, tmp_path: Path, source: str, env: dict[str, str] | None = None) -> None:
        """Run the server on ``source`` (a Python expression giving a ``SettingsSource``) until
        ``/healthz`` answers; its log lines go to ``server.log``."""
        script = textwrap.dedent(f"""
            from aap.server.runner import SettingsSource, run
            run({source}, host="127.0.0.1", port={self.port}, log_level="info", log_format="json")
            """)
        self.log_path = tmp_path / "server.log"
        self.log = open(self.log_path, "wb")
        environ = {k: v for k, v in os.environ.items() if not k.startswith("AAP_")} | (env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script], stdout=self.log, stderr=subprocess.STDOUT, env=environ
        )
        for _ in range(300):  # bounded by count (~30 s on a loaded machine)
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start: " + self.log_path.read_text()[-2000:])

    def lines(self) -> list[dict[str, Any]]:
        """The server's JSON log lines so far."""
        return [json.loads(line) for line in self.log_path.read_bytes().splitlines() if line.startswith(b"{")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
