"""A dealer server process for the crash tests: ``python lead_server.py CONFIG.json``.

It runs the real web server (``aap.server.runner.run``, what ``aap serve`` calls)
with the lead delivery worker in its lifespan, on a SQLite file, delivering to
the CRM URL named in the config. The tests kill it with SIGKILL.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from aap.config.leads import DeliverySettings  # noqa: E402
from aap.server.runner import run  # noqa: E402
from lead_support import http_route, lead_settings  # noqa: E402


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        config = json.load(handle)
    delivery = DeliverySettings(
        poll_seconds=config["poll_seconds"],
        timeout_seconds=config["timeout_seconds"],
        lease_seconds=config["lease_seconds"],
        base_backoff_seconds=0.2,
        max_backoff_seconds=1.0,
    )
    settings = lead_settings(
        routes=[http_route(config["crm_url"])], database_url=config["database_url"], delivery=delivery
    )
    settings = dataclasses.replace(settings, public_url=f"http://127.0.0.1:{config['port']}")
    run(settings, host="127.0.0.1", port=config["port"], log_level="warning")


if __name__ == "__main__":
    main()
