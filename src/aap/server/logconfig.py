"""Logging for the server process (and every uvicorn worker), in JSON or text.

Each record becomes one line: time, level, logger, event, plus the record's
``fields`` (the access log's columns, a lead or delivery id, an error id, ...;
on a platform the ``tenant`` whose work wrote it, :mod:`aap.telemetry.logfields`),
passed as ``extra={"fields": {...}}`` so that ids are values a log pipeline can
filter on, never words inside the message. ``json`` (the default) writes one
JSON object per line for a log collector; ``text`` writes
``time level logger event key=value ...`` for a person at a terminal.
Exception information is deliberately dropped: a traceback can quote
customer values.

Every other library's logger (the multipart form parser's, asyncio's, Python's
own warnings once captured) reaches the root logger, which writes in the same
format: with JSON logs on, every line on stderr is JSON. The root logger
passes warnings and worse only (or the configured level, if higher): a
library's informational lines are not ours to publish, and some name URLs.
"""

from __future__ import annotations

import logging
import logging.config
from datetime import UTC, datetime
from typing import Any

import orjson

from aap.telemetry.logfields import current_fields

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("json", "text")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    # The tenant whose work wrote the line, on a platform (aap.telemetry.logfields); a field the
    # record gives itself comes after it and wins.
    context = current_fields()
    fields = getattr(record, "fields", None)
    if not isinstance(fields, dict):
        return context
    return {**context, **{k: v for k, v in fields.items() if v is not None}}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "event", **fields}`` on one line; never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        line.update(_fields(record))
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """``ts level logger event key=value ...`` on one line; never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), f"{record.levelname.lower():<7}", record.name, record.getMessage()]
        for key, value in _fields(record).items():
            text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
            if not text or any(c.isspace() or c in '"=' for c in text):
                text = orjson.dumps(text).decode()
            parts.append(f"{key}={text}")
        return " ".join(parts)


def log_config(level: str = "info", fmt: str = "json") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` mapping (also uvicorn's ``log_config``).

    uvicorn's own access log is switched off by the caller (it would log query
    strings); ours is ``aap.access``.
    """
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    formatter = JsonFormatter if fmt == "json" else TextFormatter
    root_level = level.upper() if LEVELS.index(level) > LEVELS.index("warning") else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"()": formatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}},
        "loggers": {
            "aap": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
        },
        "root": {"handlers": ["stderr"], "level": root_level},
    }


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Apply :func:`log_config` to this process (commands that run no uvicorn: ``aap deliver``)."""
    logging.config.dictConfig(log_config(level, fmt))
    logging.captureWarnings(True)
