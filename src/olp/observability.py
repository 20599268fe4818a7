"""Structured logging: one JSON line per event, written off the event loop.

`configure_logging()` installs a queue handler, so a slow stderr never blocks a request;
the returned listener must be stopped at shutdown to flush.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
import time
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import orjson

__all__ = ["LEVELS", "configure_logging", "event_logger", "redacted_url"]

LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure_logging(level: str, stream: TextIO | None = None) -> logging.handlers.QueueListener:
    """Route the `olp` logger through a background thread; returns the listener to stop."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter())
    q: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    listener = logging.handlers.QueueListener(q, handler)
    root = logging.getLogger("olp")
    root.handlers[:] = [logging.handlers.QueueHandler(q)]
    root.setLevel(LEVELS.get(level, logging.INFO))
    root.propagate = False
    listener.start()
    return listener


class EventLogger:
    """`log.info("hop", provider="a", ...)`: an event name plus structured fields."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(name)

    def enabled(self, level: int) -> bool:
        return self._log.isEnabledFor(level)

    def debug(self, event: str, **fields: Any) -> None:
        if self._log.isEnabledFor(logging.DEBUG):
            self._log.debug(event, extra={"fields": fields})

    def info(self, event: str, **fields: Any) -> None:
        if self._log.isEnabledFor(logging.INFO):
            self._log.info(event, extra={"fields": fields})

    def warning(self, event: str, **fields: Any) -> None:
        self._log.warning(event, extra={"fields": fields})

    def error(self, event: str, *, exc_info: bool = False, **fields: Any) -> None:
        self._log.error(event, extra={"fields": fields}, exc_info=exc_info)


def event_logger(name: str) -> EventLogger:
    return EventLogger(name)


def redacted_url(url: str) -> str:
    """The URL without its password, for logs and messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))
