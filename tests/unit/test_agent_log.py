"""The agent's own log: a rotating file bounded by the spec's log limits, structlog events
in it one per line, warnings also on stderr, and stderr only when the log dir is unwritable."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from agent.agent_log import AGENT_LOG, apply_limits, configure_agent_logging, rotating_handler
from planner.contracts.log_limits import LogLimits

pytestmark = pytest.mark.unit


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()


def test_limits_follow_the_spec_and_bound_the_files(tmp_path: Path) -> None:
    handler = rotating_handler(tmp_path, LogLimits(max_file_mb=100, files=10))
    assert (handler.maxBytes, handler.backupCount) == (100 * 2**20, 10)
    assert apply_limits(handler, LogLimits(max_file_mb=1, files=2))
    assert not apply_limits(handler, LogLimits(max_file_mb=1, files=2))
    logger = logging.getLogger("test.agent_log.bound")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        line = "x" * 1000
        for _ in range(5000):  # about 5 MB against 1 MB x (2 + 1)
            logger.error(line)
    finally:
        logger.removeHandler(handler)
        handler.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [AGENT_LOG, f"{AGENT_LOG}.1", f"{AGENT_LOG}.2"]
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 3 * 2**20 + 3 * 1001


def test_events_go_to_the_file_and_warnings_also_to_stderr(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = configure_agent_logging(tmp_path / "logs")
    assert handler is not None
    log = structlog.get_logger("kaas.agent")
    log.info("agent_started", broker_id=2)
    log.warning("zookeeper_slow", seconds=3)
    logging.getLogger("kazoo.client").info("library chatter")  # libraries: warnings only
    handler.flush()
    lines = (tmp_path / "logs" / AGENT_LOG).read_text().splitlines()
    assert len(lines) == 2
    assert "level='info'" in lines[0] and "event='agent_started'" in lines[0]
    assert "broker_id=2" in lines[0] and "timestamp=" in lines[0]
    assert "event='zookeeper_slow'" in lines[1]
    err = capsys.readouterr().err
    assert "zookeeper_slow" in err and "agent_started" not in err


def test_an_unwritable_log_dir_logs_to_stderr(
    tmp_path: Path, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert configure_agent_logging(blocked / "logs") is None
    structlog.get_logger("kaas.agent").info("agent_started")
    err = capsys.readouterr().err
    assert "logging to stderr" in err and "agent_started" in err
