"""One record of the `_kaas_logs` topic: a log entry of an error class from a VM's Kafka
broker, KRaft controller or ZooKeeper server, as the VM's agent read it from the process's
log file. Keyed by `<vm_id>/<process>`, so one process's entries stay in order on one
partition. The analytics side and any consumer read it through `parse_log_record`. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from planner.contracts.fields import (
    ContractError,
    boolean,
    choice,
    dump,
    integer,
    load_object,
    schema_version,
    text,
)

LOGS_TOPIC: Final = "_kaas_logs"
LOG_RECORD_SCHEMA: Final = 1
MAX_MESSAGE_CHARS: Final = 8192
"""A longer entry (a deep stack trace) is cut here and marked `truncated`."""


class LogProcess(Enum):
    """Whose log file the entry was read from."""

    KAFKA = "kafka"  # the broker, ZooKeeper mode or KRaft
    CONTROLLER = "controller"  # a KRaft controller
    ZOOKEEPER = "zookeeper"  # the VM's ZooKeeper server


class LogErrorClass(Enum):
    """Why the entry was kept. The named classes come first: a ReplicaFetcherThread ERROR is
    a replica_fetcher entry, not a plain error."""

    ERROR = "error"  # any ERROR or FATAL entry not named below
    REPLICA_FETCHER = "replica_fetcher"  # a follower failing to fetch from its leader
    LOG_TRUNCATION = "log_truncation"  # a replica truncated below its high watermark
    SLOW_FSYNC = "slow_fsync"  # ZooKeeper's write-ahead log fsync slow enough to stall


@dataclass(frozen=True)
class LogRecord:
    cluster: str
    vm_id: str
    broker_id: int | None  # None: the agent has not claimed a broker id yet
    process: LogProcess
    file: str  # the log file's name in the VM's log dir, e.g. server.log
    error_class: LogErrorClass
    level: str  # as the line says it: ERROR, WARN, FATAL
    logger: str | None  # the logger (or class) named by the line, when the layout has one
    logged_at: str  # the line's own timestamp text (the JVM's local time, no zone)
    read_at_ms: int  # when the agent read it (epoch milliseconds)
    message: str  # the first line's message and any continuation lines (a stack trace)
    lines: int  # how many lines the entry had in the file
    truncated: bool  # message cut at MAX_MESSAGE_CHARS

    @property
    def key(self) -> bytes:
        return f"{self.vm_id}/{self.process.value}".encode()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": LOG_RECORD_SCHEMA,
            "cluster": self.cluster,
            "vm_id": self.vm_id,
            "broker_id": self.broker_id,
            "process": self.process.value,
            "file": self.file,
            "error_class": self.error_class.value,
            "level": self.level,
            "logger": self.logger,
            "logged_at": self.logged_at,
            "read_at_ms": self.read_at_ms,
            "message": self.message,
            "lines": self.lines,
            "truncated": self.truncated,
        }

    def to_json_bytes(self) -> bytes:
        return dump(self.to_json())


def _optional_text(value: dict[str, Any], key: str, what: str) -> str | None:
    if value.get(key) is None:
        if key not in value:
            raise ContractError(f"{what}.{key} is missing")
        return None
    return text(value, key, what)


def parse_log_record(raw: bytes | str, what: str = "log record") -> LogRecord:
    value = load_object(raw, what)
    schema_version(value, what, {LOG_RECORD_SCHEMA})
    broker_id = value.get("broker_id", "missing")
    if broker_id is not None:
        broker_id = integer(value, "broker_id", what, minimum=0)
    message = text(value, "message", what, allow_empty=True)
    if len(message) > MAX_MESSAGE_CHARS:
        raise ContractError(f"{what}.message is longer than {MAX_MESSAGE_CHARS} characters")
    return LogRecord(
        cluster=text(value, "cluster", what),
        vm_id=text(value, "vm_id", what),
        broker_id=broker_id,
        process=choice(value, "process", what, LogProcess),
        file=text(value, "file", what),
        error_class=choice(value, "error_class", what, LogErrorClass),
        level=text(value, "level", what),
        logger=_optional_text(value, "logger", what),
        logged_at=text(value, "logged_at", what),
        read_at_ms=integer(value, "read_at_ms", what, minimum=0),
        message=message,
        lines=integer(value, "lines", what, minimum=1),
        truncated=boolean(value, "truncated", what),
    )
