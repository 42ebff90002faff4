"""The console's agent-health page: a conformance run on demand, discovery links, counters, backlog.

**The conformance run** is ``aap check PUBLIC_URL --json`` in a child process
— the checker run against this deployment as any assistant reaches it. A child
process, not a thread, because the checker is a client of this very server (it
must not share the event loop or the interpreter lock it measures) and because
a process can be stopped: after ``[web] check_timeout_seconds`` it is killed.
(The checker is layer 8 in docs/architecture.md, above this surface, so it is
run, never imported.) The run and its JSON report are stored in the database,
so every worker shows the same report and one run at a time is enforced.

**Time to first response**: per rooftop, over the leads received in the last
30 days, the median time from a lead's arrival to its first status change or
note (:mod:`aap.store.lead_pipeline`), and how many still wait.

**Counters** are read from this server's own ``GET /metrics`` exposition
(through the app, parsed with ``prometheus_client``'s parser) by their stable
names — ``aap_requests_total``, ``aap_errors_total`` — whichever way the
registry behind them is kept.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from aap.console.auth import Visit
from aap.console.core import Console
from aap.console.leads import waited
from aap.paths import CONSOLE_PREFIX, HEALTHZ_PATH, METRICS_PATH
from aap.store.lead_inbox import LeadScope
from aap.web.pages import url

log = logging.getLogger("aap.console")

PAGE = CONSOLE_PREFIX + "health"
REPORT_LIMIT = 4 * 1024 * 1024
RESPONSE_WINDOW_DAYS = 30  # the first-response figures cover the leads received this recently


class CheckRunner:
    """Starts the conformance checker as a child process and records its report."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.tasks: set[asyncio.Task[None]] = set()
        self.processes: set[asyncio.subprocess.Process] = set()

    @property
    def timeout(self) -> int:
        return self.console.settings.web.check_timeout_seconds

    def command(self, target: str) -> list[str]:
        return [sys.executable, "-m", "aap", "check", target, "--json"]

    async def start(self, started_by: str) -> str | None:
        """A new run in the background; None when one is already running."""
        target = self.console.settings.public_url
        now = self.console.now_ms()
        run_id = await self.console.blocking(
            self.console.stores.console.start_check, started_by, target, now, now - (self.timeout + 30) * 1000
        )
        if run_id is not None:
            task = asyncio.create_task(self._run(run_id, target))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return run_id

    async def _run(self, run_id: str, target: str) -> None:
        state, report = "failed", None
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command(target),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            self.processes.add(process)
            try:
                output, _ = await asyncio.wait_for(process.communicate(), self.timeout)
                parsed = orjson.loads(output[:REPORT_LIMIT]) if output else None
                if isinstance(parsed, dict) and "results" in parsed:
                    state, report = "done", parsed
            except TimeoutError:
                state = "timeout"
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                self.processes.discard(process)
        except (OSError, ValueError) as exc:
            log.error("conformance run failed", extra={"fields": {"error_type": type(exc).__name__}})
        finally:
            await self.console.blocking(
                self.console.stores.console.finish_check, run_id, state, report, self.console.now_ms()
            )

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Stops a run still going when the server stops (its row is then marked failed)."""
        try:
            yield
        finally:
            for process in list(self.processes):
                if process.returncode is None:
                    process.kill()
            if self.tasks:
                await asyncio.wait(list(self.tasks), timeout=10)


def counters(exposition: str) -> dict[str, Any]:
    """Requests by binding and status class, and errors by code, from the Prometheus text."""
    requests: dict[str, dict[str, float]] = {}
    errors: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "aap_requests_total":
                binding = sample.labels.get("binding", "other")
                status = sample.labels.get("status", "")
                row = requests.setdefault(binding, {"total": 0.0, "2xx": 0.0, "4xx": 0.0, "429": 0.0, "5xx": 0.0})
                row["total"] += sample.value
                if status == "429":
                    row["429"] += sample.value
                if status[:1] in ("2", "4", "5"):
                    row[status[0] + "xx"] += sample.value
            elif sample.name == "aap_errors_total":
                code = sample.labels.get("code", "")
                errors[code] = errors.get(code, 0.0) + sample.value
    return {
        "requests": sorted(requests.items()),
        "errors": sorted(errors.items(), key=lambda item: -item[1]),
        "rate_limited": errors.get("RATE_LIMITED", 0.0),
        "server_errors": sum(row["5xx"] for row in requests.values()),
    }


async def read_metrics(request: Request) -> dict[str, Any] | None:
    """This server's own ``/metrics``, read through the app (no network, the exposition as served)."""
    transport = httpx.ASGITransport(app=request.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.internal") as client:
        answer = await client.get(METRICS_PATH)
    if answer.status_code != 200:
        return None
    try:
        return counters(answer.text)
    except ValueError:
        return None


def discovery_links(console: Console) -> list[tuple[str, str]]:
    urls = console.settings.urls
    links = [
        ("Agent card", urls.agent_card),
        ("llms.txt", urls.llms_txt),
        ("API catalog", urls.api_catalog),
        ("A2A OpenAPI", urls.a2a_openapi),
        ("JSON Schemas", urls.schemas),
        ("MCP endpoint", urls.mcp),
    ]
    if console.settings.poppy.enabled:
        links += [("Poppy document", urls.poppy), ("Poppy OpenAPI", urls.poppy_openapi)]
    return links + [("Health", urls.url(HEALTHZ_PATH)), ("Metrics", urls.url(METRICS_PATH))]


async def page(console: Console, runner: CheckRunner, request: Request, visit: Visit) -> Response:
    run = await console.blocking(console.stores.console.latest_check)
    scope = console.accounts.scope_of(visit.session.user)
    backlog = await console.blocking(console.stores.lead_inbox.backlog, console.now_ms(), scope)
    since = console.now_ms() - RESPONSE_WINDOW_DAYS * 86_400_000
    responses = await console.blocking(console.stores.lead_pipeline.first_response, scope, since)
    everything = scope == LeadScope()  # the endpoint's own counters: not a seller's to read
    return console.page(
        request,
        "health.html",
        {
            "run": run,
            "links": discovery_links(console),
            "metrics": await read_metrics(request) if everything else None,
            "everything": everything,
            "backlog": backlog,
            "responses": sorted(responses.items(), key=lambda item: item[0] or ""),
            "response_days": RESPONSE_WINDOW_DAYS,
            "waited": waited,
            "timeout": runner.timeout,
            "target": console.settings.public_url,
            "command": " ".join(["aap", "check", console.settings.public_url, "--json"]),
            "started": request.query_params.get("started"),
        },
        visit=visit,
    )


async def start(console: Console, runner: CheckRunner, request: Request, visit: Visit) -> Response:
    """POST: a conformance run (one at a time), audited."""
    run_id = await runner.start(visit.email)
    await console.blocking(console.audit, visit.email, "check.start", run_id, {"started": run_id is not None})
    return RedirectResponse(url(request, f"{PAGE}?started={'1' if run_id else '0'}"), status_code=303)


async def state(console: Console, request: Request, visit: Visit) -> Response:
    """The latest run's state: what the page polls while a run goes on."""
    run = await console.blocking(console.stores.console.latest_check)
    return JSONResponse({"state": f"{run.run_id}:{run.state}" if run else ""}, headers={"Cache-Control": "no-store"})


def routes(console: Console, runner: CheckRunner) -> list[Route]:
    return [
        Route(PAGE, console.guarded(partial(page, console, runner)), methods=["GET"]),
        Route(PAGE + "/check", console.guarded(partial(start, console, runner)), methods=["POST"]),
        Route(PAGE + "/state", console.endpoint(state), methods=["GET"]),
    ]
