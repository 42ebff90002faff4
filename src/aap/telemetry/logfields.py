"""The tenant a log line was written for, on a platform (docs/platform.md, "Operating tenants").

A platform worker serves many tenants in one process, and the core it runs for each — a lead
delivery, a feed, an unexpected error in a skill — does not know it is one of many, so its log
lines could not name the tenant. The composition root says whose work a task is doing
(:func:`working_for`, around a request of a tenant and around each tenant's background work);
the log formatter (:mod:`aap.server.logconfig`) adds ``tenant`` to every line written in that
context. A context variable follows the work: tasks and ``asyncio.to_thread`` calls started
inside inherit it, and nothing outside sees it. The value is a registered tenant id, never
anything a tenant's customers sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_tenant: ContextVar[str | None] = ContextVar("aap_log_tenant", default=None)


def current_fields() -> dict[str, str]:
    """The fields of the work in progress: ``{"tenant": ID}`` inside :func:`working_for`, else ``{}``."""
    tenant = _tenant.get()
    return {} if tenant is None else {"tenant": tenant}


@contextmanager
def working_for(tenant_id: str) -> Iterator[None]:
    """Every log line written inside (in this task, and in what it starts) names ``tenant_id``."""
    token = _tenant.set(tenant_id)
    try:
        yield
    finally:
        _tenant.reset(token)
