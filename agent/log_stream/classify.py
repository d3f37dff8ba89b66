"""Log lines into entries, entries into error classes. Pure.

The layouts are the renderer's (planner/contracts/vm_config): Kafka's `[%d] %p %m (%c)` for
the broker and the KRaft controller (Log4j 1 and 2), ZooKeeper's logback
`%d [myid:%X{myid}] %-5level [%t] %logger{1} - %msg`. A line that starts with neither layout
continues the entry before it (a stack trace, a message with newlines).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.contracts.log_record import MAX_MESSAGE_CHARS, LogErrorClass

_KAFKA_LINE = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] "
    r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL) (?P<message>.*?)"
    r"(?: \((?P<logger>[\w.$-]+)\))?$"
)
_ZOOKEEPER_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \[myid:[^\]]*\] "
    r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+\[(?P<thread>[^\]]*)\] "
    r"(?P<logger>\S+) - (?P<message>.*)$"
)
_ERROR_LEVELS = frozenset({"ERROR", "FATAL"})


@dataclass(frozen=True)
class LogEntry:
    logged_at: str
    level: str
    logger: str | None
    thread: str | None
    message: str  # the first line's message, then the continuation lines
    lines: int
    truncated: bool


@dataclass(frozen=True)
class NamedPattern:
    """A named error class: entries at one of `levels` whose logger, thread or message
    matches `pattern`."""

    error_class: LogErrorClass
    levels: frozenset[str]
    pattern: re.Pattern[str]


NAMED_PATTERNS: tuple[NamedPattern, ...] = (
    # "[ReplicaFetcher replicaId=1, leaderId=0, fetcherId=0] Error in response for fetch
    # request ..." (kafka.server.ReplicaFetcherThread): a follower that cannot fetch.
    NamedPattern(
        LogErrorClass.REPLICA_FETCHER,
        frozenset({"WARN", "ERROR", "FATAL"}),
        re.compile(r"ReplicaFetcher"),
    ),
    # "Truncating t-0 to offset 12 below high watermark 15": records the leader had
    # acknowledged are gone from this replica.
    NamedPattern(
        LogErrorClass.LOG_TRUNCATION,
        frozenset({"WARN", "ERROR"}),
        re.compile(r"\bTruncat(?:ing|ed)\b"),
    ),
    # ZooKeeper's "fsync-ing the write ahead log in SyncThread:1 took 1500ms which will
    # adversely effect operation latency": the disk stalls the quorum.
    NamedPattern(
        LogErrorClass.SLOW_FSYNC,
        frozenset({"WARN"}),
        re.compile(r"fsync-ing the write ahead log"),
    ),
)


BENIGN_PATTERNS: tuple[re.Pattern[str], ...] = (
    # ZooKeeper gives a session authenticated as x509 super user an id of scheme "super";
    # every znode such a session creates with an "auth" ACL logs this at ERROR (no provider
    # is registered for that scheme) though the create succeeds: the agents' and the
    # service's own writes, in bursts of a hundred at a cluster's start.
    re.compile(r"^Missing AuthenticationProvider for super$"),
)
"""ERROR lines of known harmless causes: not streamed, not counted."""


def _first_line(line: str) -> LogEntry | None:
    match = _KAFKA_LINE.match(line) or _ZOOKEEPER_LINE.match(line)
    if match is None:
        return None
    groups = match.groupdict()
    return LogEntry(
        logged_at=groups["at"],
        level=groups["level"],
        logger=groups.get("logger"),
        thread=groups.get("thread"),
        message=groups["message"],
        lines=1,
        truncated=False,
    )


def _with_continuation(entry: LogEntry, line: str) -> LogEntry:
    if entry.truncated:
        return LogEntry(**{**entry.__dict__, "lines": entry.lines + 1})
    message = f"{entry.message}\n{line}"
    truncated = len(message) > MAX_MESSAGE_CHARS
    return LogEntry(
        logged_at=entry.logged_at,
        level=entry.level,
        logger=entry.logger,
        thread=entry.thread,
        message=message[:MAX_MESSAGE_CHARS],
        lines=entry.lines + 1,
        truncated=truncated,
    )


@dataclass(frozen=True)
class SplitResult:
    entries: tuple[tuple[int, LogEntry], ...]
    """Complete entries and the byte offset (in the chunk) where each starts."""
    held_from: int | None
    """Where the last entry starts, when it is held back because more continuation lines
    may still be written; None: everything up to `consumed` is in `entries`."""
    consumed: int
    """Bytes of whole lines read (a line without its newline yet is left for later)."""


def split_entries(chunk: bytes, final: bool) -> SplitResult:
    """The entries in `chunk` (whole lines only). The last entry is held back unless `final`
    (the file has not grown since: the writer finished it, or the file was rotated away).
    Lines before the first entry's first line (a continuation whose start was read earlier,
    or a foreign line) make an entry of their own with no level, which no class keeps."""
    end = chunk.rfind(b"\n") + 1
    entries: list[tuple[int, LogEntry]] = []
    current: LogEntry | None = None
    current_start = 0
    position = 0
    for raw in chunk[:end].splitlines(keepends=True):
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        first = _first_line(line)
        if first is not None or current is None:
            if current is not None:
                entries.append((current_start, current))
            current = first or LogEntry("", "", None, None, line[:MAX_MESSAGE_CHARS], 1, False)
            current_start = position
        else:
            current = _with_continuation(current, line)
        position += len(raw)
    if current is None:
        return SplitResult((), None, end)
    if final:
        return SplitResult((*entries, (current_start, current)), None, end)
    return SplitResult(tuple(entries), current_start, end)


def classify(
    entry: LogEntry, patterns: Sequence[NamedPattern] = NAMED_PATTERNS
) -> LogErrorClass | None:
    """The entry's error class, or None for an entry KaaS does not stream."""
    if any(benign.search(entry.message) for benign in BENIGN_PATTERNS):
        return None
    subject = " ".join(part for part in (entry.logger, entry.thread, entry.message) if part)
    for named in patterns:
        if entry.level in named.levels and named.pattern.search(subject):
            return named.error_class
    return LogErrorClass.ERROR if entry.level in _ERROR_LEVELS else None


def kept(entries: Iterable[LogEntry]) -> list[tuple[LogEntry, LogErrorClass]]:
    """The entries of an error class, each with its class, in order."""
    result = []
    for entry in entries:
        error_class = classify(entry)
        if error_class is not None:
            result.append((entry, error_class))
    return result
