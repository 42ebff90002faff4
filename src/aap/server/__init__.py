"""The composition root: the app (:mod:`.app`), the operator endpoints (:mod:`.operations`),
and the uvicorn runner (:mod:`.runner`) with its JSON log format (:mod:`.logconfig`).

This is the only package that imports every surface; nothing imports it but the CLI.
"""

from aap.server.app import create_app
from aap.server.runner import SettingsSource, run

__all__ = ["SettingsSource", "create_app", "run"]
