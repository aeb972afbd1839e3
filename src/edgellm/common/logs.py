"""structlog configured once: console renderer on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

_configured = False


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record to whatever sys.stderr is when it is emitted.

    Why: a handler bound to the stderr of the moment keeps writing to it after a caller swapped
    and closed it (pytest's capsys around `edgellm.cli.main`), and every later log line from a
    server thread then fails with "I/O operation on closed file".
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # under the handler's lock (Handler.handle)
        super().emit(record)


def configure_logging(level: str | None = None, json: bool | None = None) -> None:
    """Configure structlog and route stdlib logging through it (idempotent)."""
    global _configured
    level_name = (level or os.environ.get("EDGELLM_LOG_LEVEL", "INFO")).upper()
    if json is None:
        env = os.environ.get("EDGELLM_LOG_FORMAT")
        json = env == "json" if env else not sys.stderr.isatty()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level_name)
    _configured = True


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """Return a named structlog logger."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
