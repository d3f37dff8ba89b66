"""The VM's Kafka and ZooKeeper logging files follow the spec's log bounds (`spec.logs`).

The VM's first files are rendered when it is made; afterwards a change of the spec's bounds
reaches a running VM through its agent, which renders the same files again and replaces the
ones that differ. Log4j 2 (Kafka 4's broker and controller) and logback (ZooKeeper) watch
their file and take the new bounds within their reload interval, with no restart; the 3.x
broker's Log4j 1 reads its file once, so there the bounds apply from its next start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agent.settings import AgentSettings
from agent.supervisor import KAFKA_LOG4J2
from planner.contracts.log_limits import LogLimits
from planner.contracts.vm_config.broker import render_kafka_log4j
from planner.contracts.vm_config.kraft import render_kafka_log4j2
from planner.contracts.vm_config.zookeeper import render_zookeeper_logback

log = structlog.get_logger("kaas.agent.events")

LOGGING_FILE_MODE = 0o644  # read by the Kafka and ZooKeeper users; nothing secret in them


def rendered_logging_files(settings: AgentSettings, limits: LogLimits) -> dict[Path, str]:
    """Path -> text of every logging file of this VM the agent keeps. Pure."""
    files: dict[Path, str] = {}
    if settings.kraft:
        files[settings.config_dir / KAFKA_LOG4J2] = render_kafka_log4j2(limits)
    elif settings.broker_log_config is not None:
        files[settings.broker_log_config] = render_kafka_log4j(limits)
    if settings.zookeeper_log_config is not None:
        files[settings.zookeeper_log_config] = render_zookeeper_logback(limits)
    return files


def replace_file(path: Path, text: str) -> None:
    """Write `text` to `path` by a rename, so a logging framework that reloads it reads the
    old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, LOGGING_FILE_MODE)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@dataclass
class LoggingFiles:
    """Keeps the logging files at the spec's bounds; looks at the disk only when the bounds
    differ from those it last applied."""

    settings: AgentSettings
    applied: LogLimits | None = None
    problem: str | None = None  # the last write that failed, for the cycle's sentence
    written: list[Path] = field(default_factory=list)

    def follow(self, limits: LogLimits) -> None:
        if limits == self.applied:
            return
        self.written = []
        try:
            for path, text in rendered_logging_files(self.settings, limits).items():
                if _current(path) != text:
                    replace_file(path, text)
                    self.written.append(path)
        except OSError as exc:
            self.problem = f"logging files not updated: {exc.strerror}: {exc.filename}"
            log.warning("logging_files_failed", error=self.problem)
            return
        self.problem = None
        self.applied = limits
        if self.written:
            log.info(
                "logging_files_updated",
                files=[str(p) for p in self.written],
                max_file_mb=limits.max_file_mb,
                rolled_files=limits.files,
            )


def _current(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
