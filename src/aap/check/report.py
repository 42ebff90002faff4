"""Human (rich table) and machine (JSON) renderings of a check report."""

from __future__ import annotations

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aap.check.runner import Report

STYLES = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim", "error": "bold magenta"}
LABELS = {"pass": "PASS", "fail": "FAIL", "warn": "WARN", "skip": "skip", "error": "ERROR"}


def render_table(report: Report, console: Console, *, verbose: bool = False) -> None:
    """One row per rule; failures show their spec reference and every problem."""
    if report.unreachable is not None:
        console.print(Text.assemble(Text("UNREACHABLE", style="bold red"), f"  {report.unreachable}"))
        console.print(
            Text.assemble(Text("NOT CONFORMANT", style="bold red"), "  (no rule ran: nothing answers at the target)")
        )
        return
    title = f"AAP conformance: {report.target}"
    if report.card_url:
        title += f"  (card {report.card_url})"
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("Result", no_wrap=True)
    table.add_column("Rule", no_wrap=True)
    table.add_column("What is checked / what was found")
    for result in report.results:
        label = Text(LABELS[result.status], style=STYLES[result.status])
        body = Text(result.rule.title)
        if result.status in ("fail", "warn", "error"):
            body.append(f"\n{result.message}", style=STYLES[result.status])
            for detail in result.details:
                body.append(f"\n  • {detail}")
            body.append(f"\n  spec: {result.rule.spec}", style="cyan")
        elif result.message and (verbose or result.status == "skip"):
            body.append(f"\n{result.message}", style="dim")
        table.add_row(label, result.rule.id, body)
    console.print(table)
    counts = report.counts()
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = Text("CONFORMANT" if report.ok else "NOT CONFORMANT", style="bold green" if report.ok else "bold red")
    console.print(Text.assemble(verdict, f"  ({summary})"))


def render_json(report: Report) -> str:
    return orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode()
