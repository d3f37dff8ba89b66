"""LogShipper: every `poll_s`, the new entries of the error classes in the VM's Kafka,
KRaft controller and ZooKeeper log files go to the `_kaas_logs` topic, and their rate over
the last minute is kept for the metrics loop's statsd gauges.

Where each file was read to is stored in the agent's state dir (`log-offsets.json`), so a
restarted agent goes on where it stopped. Entries reach Kafka at most once: the offset moves
on once the records are handed to the producer, which retries for two minutes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from agent.log_stream.classify import kept, split_entries
from agent.log_stream.follow import FileState, FollowNote, Position, Read, next_read
from agent.metrics.topic import ensure_topic
from planner.contracts.log_record import LOGS_TOPIC, LogErrorClass, LogProcess, LogRecord
from planner.contracts.vm_config.broker import KAFKA_SERVER_LOG
from planner.contracts.vm_config.kraft import KRAFT_CONTROLLER_LOG
from planner.contracts.vm_config.zookeeper import ZOOKEEPER_SERVER_LOG
from planner.pki.client_settings import InternalClient
from planner.private_files import write_private

log = structlog.get_logger("kaas.agent.logs")
_RDKAFKA_LOG = logging.getLogger("kaas.agent.logs.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)

OFFSETS_FILE = "log-offsets.json"
LOGS_RETENTION_MS = 3 * 24 * 3600 * 1000
RATE_WINDOW_S = 60.0


@dataclass(frozen=True)
class FollowedLog:
    process: LogProcess
    name: str  # the live file's name in the log dir


def followed_logs(kafka: bool, controller: bool, zookeeper: bool) -> list[FollowedLog]:
    """The log files of the processes this VM runs (names from the renderer)."""
    logs = [FollowedLog(LogProcess.KAFKA, KAFKA_SERVER_LOG)] if kafka else []
    logs += [FollowedLog(LogProcess.CONTROLLER, KRAFT_CONTROLLER_LOG)] if controller else []
    logs += [FollowedLog(LogProcess.ZOOKEEPER, ZOOKEEPER_SERVER_LOG)] if zookeeper else []
    return logs


class ErrorRate:
    """Kept entries per class over the last `window_s`. Thread-safe: the shipper counts,
    the metrics loop reads."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, LogErrorClass]] = deque()
        self._lock = threading.Lock()

    def count(self, at: float, error_class: LogErrorClass) -> None:
        with self._lock:
            self._seen.append((at, error_class))

    def per_minute(self, now: float) -> dict[str, float]:
        """`errors_per_minute` (every class) and `<class>_per_minute` for each class, 0 for
        a class not seen: a quiet minute is a 0 in Graphite, not a gap."""
        with self._lock:
            while self._seen and self._seen[0][0] <= now - self.window_s:
                self._seen.popleft()
            counts = {f"{kind.value}_per_minute": 0.0 for kind in LogErrorClass}
            for _, kind in self._seen:
                counts[f"{kind.value}_per_minute"] += 1
        scale = 60.0 / self.window_s
        rates = {name: value * scale for name, value in counts.items()}
        rates["errors_per_minute"] = sum(rates.values())
        return rates


def _stat(path: Path) -> FileState | None:
    try:
        result = path.stat()
    except FileNotFoundError:
        return None
    return FileState(str(path), result.st_ino, result.st_size)


_ROLLED_INDEX = re.compile(r"\.(\d+)$")


def _rotated(directory: Path, name: str) -> list[FileState]:
    states = []
    for path in directory.glob(f"{name}.*"):
        if _ROLLED_INDEX.search(path.name) and (state := _stat(path)) is not None:
            states.append(state)
    return states


def _read(read: Read) -> bytes | None:
    """The read's bytes, or None when the path no longer holds that inode (rolled between
    the stat and the open: the next look finds it under its new name)."""
    try:
        with open(read.path, "rb") as file:
            if os.fstat(file.fileno()).st_ino != read.inode:
                return None
            file.seek(read.start)
            return file.read(read.end - read.start)
    except FileNotFoundError:
        return None


class LogShipper:
    def __init__(
        self,
        cluster: str,
        vm_id: str,
        logs_dir: Path,
        state_dir: Path,
        logs: Sequence[FollowedLog],
        kafka: InternalClient | None,
        broker_id: Callable[[], int | None],
        *,
        topic: str = LOGS_TOPIC,
        topic_replication_factor: int = 3,
        max_read_bytes: int = 1024 * 1024,
        hold_s: float = 2.0,
        flush_timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.vm_id = vm_id
        self.logs_dir = logs_dir
        self.offsets_file = state_dir / OFFSETS_FILE
        self.logs = tuple(logs)
        self.kafka = kafka
        self.broker_id = broker_id
        self.topic = topic
        self.topic_replication_factor = topic_replication_factor
        self.max_read_bytes = max_read_bytes
        self.hold_s = hold_s
        self.flush_timeout_s = flush_timeout_s
        self.clock = clock
        self.rate = ErrorRate()
        self._positions, self._first_look = self._load_positions()
        self._producer: Producer | None = None
        self._admin: AdminClient | None = None
        self._topic_ready = False
        self._problem: str | None = None

    @property
    def problem(self) -> str | None:
        """What went wrong at the last poll, for the cycle sentence; None: nothing."""
        return self._problem

    def _load_positions(self) -> tuple[dict[str, Position], bool]:
        try:
            stored = json.loads(self.offsets_file.read_text())
            positions = {
                name: Position(int(value["inode"]), int(value["offset"]))
                for name, value in stored.items()
            }
            return positions, False
        except FileNotFoundError:
            return {}, True
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("log_offsets_unreadable", file=str(self.offsets_file), error=str(exc))
            return {}, True

    def _store_positions(self) -> None:
        value = {
            name: {"inode": p.inode, "offset": p.offset} for name, p in self._positions.items()
        }
        write_private(self.offsets_file, json.dumps(value, sort_keys=True))

    def poll(self) -> int:
        """One look at every file; returns how many records were produced."""
        records: list[LogRecord] = []
        before = dict(self._positions)
        for followed in self.logs:
            records += self._poll_file(followed)
        self._first_look = False
        problems = self._produce(records) if records and self.kafka is not None else []
        if self._positions != before:
            self._store_positions()
        self._problem = "; ".join(problems) or None
        return len(records)

    def _poll_file(self, followed: FollowedLog) -> list[LogRecord]:
        live = _stat(self.logs_dir / followed.name)
        rotated = _rotated(self.logs_dir, followed.name)
        position = self._positions.get(followed.name)
        step = next_read(
            position, live, rotated, self._first_look, self.max_read_bytes, self.max_read_bytes
        )
        if step.note not in (FollowNote.NONE, FollowNote.STARTED_AT_END):
            log.info("log_followed", file=followed.name, note=step.note.value)
        if step.read is None:
            if step.position is not None:
                self._positions[followed.name] = step.position
            return []
        chunk = _read(step.read)
        if chunk is None:
            return []
        now = self.clock()
        read = step.read
        length = len(chunk)
        if read.final and not chunk.endswith(b"\n"):
            chunk += b"\n"  # a rolled file's last line: nothing more will be written to it
        final = read.final or (
            live is not None and read.end == live.size and self._quiet(live, now)
        )
        split = split_entries(chunk, final)
        if split.held_from == 0 and len(chunk) >= self.max_read_bytes:
            split = split_entries(chunk, True)  # one entry longer than a read: send it cut
        handled = split.held_from if split.held_from is not None else split.consumed
        self._positions[followed.name] = Position(read.inode, read.start + min(handled, length))
        records = []
        broker_id = self.broker_id()
        for entry, error_class in kept(entry for _, entry in split.entries):
            self.rate.count(now, error_class)
            records.append(
                LogRecord(
                    cluster=self.cluster,
                    vm_id=self.vm_id,
                    broker_id=broker_id,
                    process=followed.process,
                    file=followed.name,
                    error_class=error_class,
                    level=entry.level,
                    logger=entry.logger,
                    logged_at=entry.logged_at,
                    read_at_ms=int(now * 1000),
                    message=entry.message,
                    lines=entry.lines,
                    truncated=entry.truncated,
                )
            )
        return records

    def _quiet(self, live: FileState, now: float) -> bool:
        """The live file has not been written for `hold_s`: its last entry is complete."""
        try:
            return now - os.stat(live.path).st_mtime >= self.hold_s
        except FileNotFoundError:
            return True

    def _produce(self, records: Sequence[LogRecord]) -> list[str]:
        assert self.kafka is not None
        problems: list[str] = []
        if not self._topic_ready:
            if self._admin is None:
                self._admin = AdminClient(
                    self.kafka.librdkafka(**{"socket.timeout.ms": 5000}), logger=_RDKAFKA_LOG
                )
            problem = ensure_topic(
                self._admin, self.topic, 6, self.topic_replication_factor, LOGS_RETENTION_MS, 5.0
            )
            if problem is not None:
                problems.append(problem)
            else:
                self._topic_ready = True
        if self._producer is None:
            self._producer = Producer(
                {
                    **self.kafka.librdkafka(),
                    "client.id": "kaas-agent-logs",
                    "compression.type": "lz4",
                    "message.timeout.ms": 120_000,
                    "queue.buffering.max.messages": 10_000,
                },
                logger=_RDKAFKA_LOG,
            )
        failures: list[str] = []

        def on_delivery(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                failures.append(error.str())

        for record in records:
            try:
                self._producer.produce(
                    self.topic,
                    value=record.to_json_bytes(),
                    key=record.key,
                    on_delivery=on_delivery,
                )
            except (BufferError, KafkaException) as exc:
                problems.append(f"log record to {self.topic} dropped: {exc}")
                break
        self._producer.flush(self.flush_timeout_s)
        if failures:
            problems.append(f"{len(failures)} log records not delivered: {failures[0]}")
        return problems

    def close(self, timeout_s: float = 5.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None


def start_log_shipper(
    shipper: LogShipper, poll_s: float, stop: threading.Event
) -> threading.Thread:
    """Poll every `poll_s` on a thread of its own until `stop`; a failed poll is logged and
    the next one tries again."""

    def run() -> None:
        try:
            while not stop.wait(poll_s):
                try:
                    shipper.poll()
                except Exception as exc:  # never let the log stream take the agent down
                    log.error("log_poll_failed", error=str(exc))
        finally:
            shipper.close()

    thread = threading.Thread(target=run, name="agent-logs", daemon=True)
    thread.start()
    return thread
