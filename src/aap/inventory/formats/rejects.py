"""The rejects file of an import: every rejected row once, with its line, columns, values and problems.

A CSV a spreadsheet opens: ``line`` (the row's first physical line in the
feed), ``columns`` and ``values`` (the source columns and cells the problems
are about, one per line of the cell) and ``problems`` (each problem as the
import summary prints it, one per line of the cell).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable

from aap.inventory.formats.reader import RejectedRow

HEADER = ("line", "columns", "values", "problems")


def rejects_rows(rejected: Iterable[RejectedRow]) -> Iterable[tuple[str, str, str, str]]:
    for row in rejected:
        columns: list[str] = []
        values: list[str] = []
        for problem in row.problems:
            if problem.column is not None and problem.column not in columns:
                columns.append(problem.column)
                values.append(problem.value or "")
        yield (str(row.line), "\n".join(columns), "\n".join(values), "\n".join(str(p) for p in row.problems))


def write_rejects(path: str, rejected: Iterable[RejectedRow]) -> int:
    """Write the rejects file; returns the number of rows written."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for row in rejects_rows(rejected):
            writer.writerow(row)
            count += 1
    return count
