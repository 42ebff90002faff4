"""Request metrics in the Prometheus text exposition format (version 0.0.4).

A deliberately small registry: three series families fed by the access-log
middleware (:mod:`aap.web.accesslog`), rendered at ``GET /metrics`` (served by
:mod:`aap.server.operations`). Counters live in process memory, so
with several uvicorn workers each worker reports its own numbers and a scrape
reaches whichever worker the load balancer picks. Run one worker per scrape
target (or sum across targets) when exact totals matter; no customer state
depends on these counters, which is why they may stay in memory.
"""

from __future__ import annotations

import threading
from typing import Iterable

import aap

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds; chosen around the in-process search target (5 ms) and HTTP overhead.
BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Iterable[str], values: Iterable[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


class Metrics:
    """Requests, errors and latency by binding and skill. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = {}
        self._errors: dict[tuple[str, str, str], int] = {}
        self._latency: dict[tuple[str, str], list[float]] = {}  # bucket counts + [sum, count]

    def observe(self, *, binding: str, skill: str, status: int, code: str | None, seconds: float) -> None:
        """Record one finished request. ``code`` is the AAP code (or protocol error code) if it failed."""
        with self._lock:
            key = (binding, skill, str(status))
            self._requests[key] = self._requests.get(key, 0) + 1
            if code:
                ekey = (binding, skill, code)
                self._errors[ekey] = self._errors.get(ekey, 0) + 1
            series = self._latency.get((binding, skill))
            if series is None:
                series = self._latency[(binding, skill)] = [0.0] * (len(BUCKETS) + 2)
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    series[i] += 1
            series[-2] += seconds
            series[-1] += 1

    def render(self) -> str:
        """The exposition text."""
        with self._lock:
            requests = sorted(self._requests.items())
            errors = sorted(self._errors.items())
            latency = sorted((k, list(v)) for k, v in self._latency.items())
        out = [
            "# HELP aap_info Build information.",
            "# TYPE aap_info gauge",
            f'aap_info{{version="{aap.__version__}",aap_version="{aap.AAP_VERSION}"}} 1',
            "# HELP aap_requests_total HTTP requests by binding, skill and status.",
            "# TYPE aap_requests_total counter",
        ]
        for (binding, skill, status), n in requests:
            out.append(f"aap_requests_total{_labels(('binding', 'skill', 'status'), (binding, skill, status))} {n}")
        out += [
            "# HELP aap_errors_total Failed requests by binding, skill and error code (AAP code or JSON-RPC code).",
            "# TYPE aap_errors_total counter",
        ]
        for (binding, skill, code), n in errors:
            out.append(f"aap_errors_total{_labels(('binding', 'skill', 'code'), (binding, skill, code))} {n}")
        out += [
            "# HELP aap_request_duration_seconds Request latency by binding and skill.",
            "# TYPE aap_request_duration_seconds histogram",
        ]
        for (binding, skill), series in latency:
            names, values = ("binding", "skill"), (binding, skill)
            for i, bound in enumerate(BUCKETS):
                le = f'le="{_number(bound)}"'
                out.append(f"aap_request_duration_seconds_bucket{_labels(names, values, le)} {_number(series[i])}")
            inf = 'le="+Inf"'
            out.append(f"aap_request_duration_seconds_bucket{_labels(names, values, inf)} {_number(series[-1])}")
            out.append(f"aap_request_duration_seconds_sum{_labels(names, values)} {series[-2]!r}")
            out.append(f"aap_request_duration_seconds_count{_labels(names, values)} {_number(series[-1])}")
        return "\n".join(out) + "\n"

