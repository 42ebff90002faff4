"""How the scheduled feeds are doing, for ``/healthz`` and ``/metrics``.

Read from the database (shared by every worker), so any worker answers the
same. A feed is *overdue* when it has not succeeded within twice its
schedule: since its last success, or, never having succeeded, since its
first recorded run. An overdue feed does not make the agent unhealthy (it
still serves the last good inventory); ``/healthz`` names it so monitoring
can alert.
"""

from __future__ import annotations

from dataclasses import dataclass

from aap.config.model import Settings
from aap.store import Stores

OUTCOMES = ("imported", "unchanged", "checked", "rejected", "refused", "failed")


@dataclass(frozen=True)
class FeedStatus:
    name: str
    last_success_ms: int | None
    last_run_ms: int | None
    last_outcome: str | None
    next_run_ms: int | None
    failures: int
    overdue: bool

    def to_json(self) -> dict[str, object]:
        return {
            "status": "overdue" if self.overdue else ("ok" if self.last_success_ms else "pending"),
            "last_success_ms": self.last_success_ms,
            "last_run_ms": self.last_run_ms,
            "last_outcome": self.last_outcome,
            "next_run_ms": self.next_run_ms,
            "failures": self.failures,
        }


def feed_statuses(stores: Stores, settings: Settings, now: float) -> list[FeedStatus]:
    """One status per configured feed."""
    if not settings.feeds:
        return []
    states = {s.feed: s for s in stores.feeds.states()}
    out = []
    for feed in settings.feeds:
        state = states.get(feed.name)
        limit_ms = 2 * feed.schedule.period(now) * 1000
        now_ms = now * 1000
        if state is not None and state.last_success_ms is not None:
            overdue = now_ms - state.last_success_ms > limit_ms
        else:
            first = stores.feeds.runs(limit=1, feed=feed.name, oldest=True)
            overdue = bool(first) and now_ms - first[0].started_ms > limit_ms
        out.append(
            FeedStatus(
                feed.name,
                state.last_success_ms if state else None,
                state.last_run_ms if state else None,
                state.last_outcome if state else None,
                state.next_run_ms if state else None,
                state.failures if state else 0,
                overdue,
            )
        )
    return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_metrics(statuses: list[FeedStatus]) -> str:
    """The feed series in the Prometheus text format (appended to ``/metrics``)."""
    if not statuses:
        return ""
    out = [
        "# HELP aap_feed_last_success_timestamp_seconds When each feed last imported (or found "
        "its source unchanged); 0 when never.",
        "# TYPE aap_feed_last_success_timestamp_seconds gauge",
    ]
    for s in statuses:
        out.append(
            f'aap_feed_last_success_timestamp_seconds{{feed="{_label(s.name)}"}} {(s.last_success_ms or 0) / 1000:.3f}'
        )
    out += [
        "# HELP aap_feed_last_outcome The outcome of each feed's last run (1 for that outcome).",
        "# TYPE aap_feed_last_outcome gauge",
    ]
    for s in statuses:
        for outcome in OUTCOMES:
            value = 1 if s.last_outcome == outcome else 0
            out.append(f'aap_feed_last_outcome{{feed="{_label(s.name)}",outcome="{outcome}"}} {value}')
    out += [
        "# HELP aap_feed_overdue 1 when a feed has not succeeded within twice its schedule.",
        "# TYPE aap_feed_overdue gauge",
    ]
    for s in statuses:
        out.append(f'aap_feed_overdue{{feed="{_label(s.name)}"}} {int(s.overdue)}')
    out += [
        "# HELP aap_feed_consecutive_failures Failed runs of each feed since its last success.",
        "# TYPE aap_feed_consecutive_failures gauge",
    ]
    for s in statuses:
        out.append(f'aap_feed_consecutive_failures{{feed="{_label(s.name)}"}} {s.failures}')
    return "\n".join(out) + "\n"
