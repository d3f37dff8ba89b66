"""The agent's own log: one structlog event per line into a size-bounded rotating file in
the VM's log dir, rolled at the spec's `logs.max_file_mb` and keeping `logs.files` rolled
files, like Kafka's and ZooKeeper's. Warnings and errors also go to stderr (the journal on a
VM), so a problem is seen where the service manager shows it.

The limits are known from the spec only once ZooKeeper is read: the file starts with the
defaults and `apply_limits` takes the spec's after each cycle.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path
from typing import Final

import structlog

from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits

AGENT_LOG: Final = "kaas-agent.log"
_MB = 1024 * 1024


def rotating_handler(
    logs_dir: Path, limits: LogLimits = DEFAULT_LOG_LIMITS
) -> logging.handlers.RotatingFileHandler:
    logs_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        logs_dir / AGENT_LOG,
        maxBytes=limits.max_file_mb * _MB,
        backupCount=limits.files,
        encoding="utf-8",
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def apply_limits(handler: logging.handlers.RotatingFileHandler, limits: LogLimits) -> bool:
    """Take the spec's limits (True: they changed); the next line that passes the new size
    rolls the file."""
    size, files = limits.max_file_mb * _MB, limits.files
    if (handler.maxBytes, handler.backupCount) == (size, files):
        return False
    handler.maxBytes, handler.backupCount = size, files
    return True


def configure_agent_logging(logs_dir: Path) -> logging.handlers.RotatingFileHandler | None:
    """structlog's events (INFO and up) and the libraries' warnings into the rotating file;
    warnings and errors of both also to stderr. A log dir the agent cannot write: everything
    to stderr instead, said once (None: no file to take limits)."""
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("%(message)s"))
    handler: logging.handlers.RotatingFileHandler | None
    try:
        handler = rotating_handler(logs_dir)
    except OSError as exc:
        handler = None
        print(f"kaas-agent: logging to stderr: {logs_dir}: {exc.strerror}", file=sys.stderr)
    else:
        handler.setLevel(logging.INFO)
        stderr.setLevel(logging.WARNING)
    root = logging.getLogger()
    root.setLevel(logging.WARNING)
    root.handlers[:] = [stderr] if handler is None else [handler, stderr]
    events = logging.getLogger("kaas.agent.events")
    events.setLevel(logging.INFO)
    events.propagate = True  # through the root's handlers, with their own levels
    # The libraries stay at WARNING (the root's level); only the agent's events at INFO.
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # The last processor's string is the stdlib logger's message, at the event's level.
            structlog.processors.KeyValueRenderer(
                key_order=["timestamp", "level", "event"], sort_keys=True
            ),
        ],
        logger_factory=lambda *_args: events,
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=True,
    )
    return handler
