"""Request metrics through ``prometheus_client``, one scrape for every worker.

Three families fed by the access-log middleware (:mod:`aap.web.accesslog`) —
``aap_requests_total`` (binding, skill, status), ``aap_errors_total`` (binding,
skill, AAP or JSON-RPC code), ``aap_request_duration_seconds`` (binding,
skill) —, on a platform two by tenant (``aap_tenant_requests_total``: tenant,
status class; ``aap_tenant_errors_total``: tenant, code) — plus ``aap_info`` and the library's process (``process_*``: memory, CPU,
open files) and platform (``python_info``) collectors, rendered at
``GET /metrics`` (served by :mod:`aap.server.operations`).

With several workers (``aap serve --workers N``) the runner gives them one
``PROMETHEUS_MULTIPROC_DIR`` (:func:`multiprocess_directory`); each worker's
counters then live in memory-mapped files there and a scrape reaching any worker
adds up every worker's series, so one scrape sees all the traffic. The
``process_*`` series are those of the worker that answered (the library cannot
sum them). No customer state depends on these counters.

Recording costs about 1–3 µs per request (measured: docs/benchmarks.md), small
next to a request, so each request is observed as it ends; the label children
are looked up once per label set and kept. The two tenant families are not the
library's labelled counters: a platform's workers each count every tenant they
serve, and a record of a table (:mod:`aap.web.tenant_counts`, in files of the same
directory) is a tenth of a label child's memory. A scrape is rendered off the event
loop: with a label set per tenant it is long.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

import aap
from aap.web.tenant_counts import TenantCounts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The environment variable ``prometheus_client`` reads for its multi-process directory.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds; chosen around the in-process search target (5 ms) and HTTP overhead.
BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# ``*_created`` series would double every counter's output for a start time nobody reads.
prometheus_client.disable_created_metrics()


def multiprocess_directory() -> str | None:
    """The shared directory of a multi-worker deployment, when there is one."""
    return os.environ.get(MULTIPROC_ENV) or None


@contextmanager
def shared_metrics_directory() -> Iterator[str]:
    """A fresh ``PROMETHEUS_MULTIPROC_DIR`` for the workers started inside (removed after).

    The workers inherit the variable and must see it before they import
    ``prometheus_client``. A directory the operator set is used as it is; it must
    be emptied between runs (files of old runs would be counted again).
    """
    given = multiprocess_directory()
    if given:
        yield given
        return
    directory = tempfile.mkdtemp(prefix="aap-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    try:
        yield directory
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


class _Info:
    """``aap_info``: the build, as a constant gauge (works in either mode)."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("aap_info", "Build information.", labels=["version", "aap_version"])
        info.add_metric([aap.__version__, aap.AAP_VERSION], 1)
        yield info


def tenant_gauges(broken: Iterable[str], suspended: Iterable[str]) -> str:
    """A platform's tenants that are not served, as two gauges labelled by tenant id (only
    registered ids: bounded by the registry): ``aap_tenant_broken`` (its stored configuration
    does not load) and ``aap_tenant_suspended``, each 1 for every such tenant. Read from the
    database at each scrape, so every worker reports the same (docs/platform.md)."""
    registry = CollectorRegistry(auto_describe=False)

    class _States:
        def collect(self) -> Iterator[Metric]:
            for name, help_text, ids in (
                ("aap_tenant_broken", "Platform tenants whose stored configuration does not load.", broken),
                ("aap_tenant_suspended", "Platform tenants suspended by the operator.", suspended),
            ):
                family = GaugeMetricFamily(name, help_text, labels=["tenant"])
                for tenant_id in ids:
                    family.add_metric([tenant_id], 1)
                yield family

    registry.register(_States())
    return generate_latest(registry).decode()


class Metrics:
    """Requests, errors and latency by binding and skill. Thread-safe (the library locks)."""

    def __init__(self, *, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir if multiprocess_dir is not None else multiprocess_directory()
        # This process's series; in multi-process mode the library writes their values
        # to the shared directory, and a scrape reads the directory instead.
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter(
            "aap_requests",
            "HTTP requests by binding, skill and status.",
            ("binding", "skill", "status"),
            registry=self.registry,
        )
        self._errors = Counter(
            "aap_errors",
            "Failed requests by binding, skill and error code (AAP code or JSON-RPC code).",
            ("binding", "skill", "code"),
            registry=self.registry,
        )
        self._latency = Histogram(
            "aap_request_duration_seconds",
            "Request latency by binding and skill.",
            ("binding", "skill"),
            buckets=BUCKETS,
            registry=self.registry,
        )
        #: On a platform (docs/platform.md): requests by tenant id and status class, and failed
        #: requests by tenant and code (the AAP and JSON-RPC codes, a few dozen), no more.
        self.tenants = TenantCounts(self.multiprocess_dir)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._error_children: dict[tuple[str, str, str], Any] = {}
        self._scrape = CollectorRegistry(auto_describe=False)
        if self.multiprocess_dir:
            MultiProcessCollector(self._scrape, path=self.multiprocess_dir)
        else:
            for collector in (self._requests, self._errors, self._latency):
                self._scrape.register(collector)
        self._scrape.register(_Info())
        ProcessCollector(registry=self._scrape)
        PlatformCollector(registry=self._scrape)

    def observe(self, *, binding: str, skill: str, status: int, code: str | None, seconds: float) -> None:
        """Record one finished request. ``code`` is the AAP code (or protocol error code) if it failed."""
        key = (binding, skill, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self._requests.labels(binding, skill, str(status)),
                self._latency.labels(binding, skill),
            )
        children[0].inc()
        children[1].observe(seconds)
        if code:
            ekey = (binding, skill, code)
            child = self._error_children.get(ekey)
            if child is None:
                child = self._error_children[ekey] = self._errors.labels(binding, skill, code)
            child.inc()

    def observe_tenant(self, tenant: str, status: int, code: str | None = None) -> None:
        """Count one finished request of platform tenant ``tenant`` (its id; ``2xx``, ``4xx``...),
        and its error ``code`` if it failed with one."""
        self.tenants.observe(tenant, status, code)

    def render(self) -> str:
        """The exposition text (every worker's series in multi-process mode)."""
        return generate_latest(self._scrape).decode() + self.tenants.exposition()
