"""The staff console at ``/console/``: leads, inventory, agent health, accounts (docs/console.md).

Server-rendered pages behind a sign-in (:mod:`aap.console.auth`), on the machinery of
:mod:`aap.console.core` (the :class:`Console`, the guard every page goes through), one module
per page group, each endpoint a named handler: :mod:`~aap.console.leads` (inbox, lead detail,
the pipeline, retry, handled, CSV export), :mod:`~aap.console.inventory` (the inventory
browser, one listing, counts, VIN/stock lookup), :mod:`~aap.console.feeds` (each feed, its
runs, warnings and rejects, "run now"), :mod:`~aap.console.health` (the conformance checker
run on demand, discovery links, counters from ``/metrics``, the delivery backlog, time to
first response) and :mod:`~aap.console.users` (accounts and the audit log, for admins); the
route table is :mod:`aap.console.routes`'.

Everything the console shows lives in the database (accounts, sessions,
sign-in counts, the audit log, check reports), so several workers serve one console.
This is the one surface that shows customer data, and it writes an audit entry
each time someone views or exports it. ``[web] console = false`` removes it.
"""

from aap.console.core import Console
from aap.console.routes import ERROR_SHAPES, PATHS, build

__all__ = ["ERROR_SHAPES", "PATHS", "Console", "build"]
