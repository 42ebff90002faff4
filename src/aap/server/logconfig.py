"""Structured JSON logging for the server process (and every uvicorn worker).

Each record becomes one JSON object: time, level, logger, event, plus the
record's ``fields`` (the access log's columns, an error id, ...). Exception
information is deliberately dropped: a traceback can quote customer values.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "event", **fields}`` on one line; never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if v is not None})
        return orjson.dumps(line, default=str).decode()


def log_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` mapping for uvicorn's ``log_config``.

    uvicorn's own access log is switched off by the caller (it would log query
    strings); ours is ``aap.access``.
    """
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
        "loggers": {
            "aap": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
        },
    }
