"""Scheduled and one-off feed imports: fetch, read, check, store, record.

=============  ===============================================================
``fetch``      bytes from https (conditional), sftp, or a path
``job``        one import with the safety rules, recorded in the history
``scheduler``  ``[[feeds]]`` on their schedules, one runner per feed (a lease)
``status``     feed health for ``/healthz`` and ``/metrics``
=============  ===============================================================

Core logic (docs/architecture.md): no HTTP serving here; ``aap serve`` runs
the scheduler as a background service and ``aap import`` / ``aap feeds``
call :func:`~aap.feeds.job.run_import` directly.
"""
