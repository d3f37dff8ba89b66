"""The log stream's pure core (line classes, entries with their stack traces, following a
rolling file), the `_kaas_logs` record's parser, and the shipper against real files that are
rolled by renaming as Log4j and logback do."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.log_stream.classify import LogEntry, classify, kept, split_entries
from agent.log_stream.follow import FileState, FollowNote, Position, Read, next_read
from agent.log_stream.shipper import ErrorRate, FollowedLog, LogShipper, followed_logs
from agent.metrics.gauges import extra_gauges
from planner.contracts.fields import ContractError
from planner.contracts.log_record import (
    MAX_MESSAGE_CHARS,
    LogErrorClass,
    LogProcess,
    LogRecord,
    parse_log_record,
)

pytestmark = pytest.mark.unit

KAFKA_ERROR = (
    "[2026-11-24 13:07:48,123] ERROR Exception while processing request from "
    "127.0.1.1:9093-127.0.0.1:40000-3 (kafka.network.Processor)"
)
FETCHER_WARN = (
    "[2026-11-24 13:07:49,001] WARN [ReplicaFetcher replicaId=1, leaderId=0, fetcherId=0] "
    "Error in response for fetch request (kafka.server.ReplicaFetcherThread)"
)
TRUNCATION_WARN = (
    "[2026-11-24 13:07:50,000] WARN [ReplicaFetcher replicaId=1, leaderId=0, fetcherId=0] "
    "Truncating t-0 to offset 12 below high watermark 15 (kafka.server.AbstractFetcherThread)"
)
KAFKA_INFO = "[2026-11-24 13:07:51,000] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)"
KAFKA_WARN_OTHER = "[2026-11-24 13:07:52,000] WARN Unexpected close (org.apache.kafka.Selector)"
ZK_ERROR = (
    "2026-11-24 13:07:53,000 [myid:1] ERROR [nioEventLoopGroup-4-1] NettyServerCnxnFactory"
    " - Unsuccessful handshake with session 0x0"
)
ZK_FSYNC = (
    "2026-11-24 13:07:54,000 [myid:2] WARN  [SyncThread:2] FileTxnLog - fsync-ing the write "
    "ahead log in SyncThread:2 took 1500ms which will adversely effect operation latency."
)
ZK_INFO = "2026-11-24 13:07:55,000 [myid:2] INFO  [main] QuorumPeer - LOOKING"


def one_entry(line: str) -> LogEntry:
    split = split_entries(f"{line}\n".encode(), final=True)
    assert len(split.entries) == 1
    return split.entries[0][1]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (KAFKA_ERROR, LogErrorClass.ERROR),
        (FETCHER_WARN, LogErrorClass.REPLICA_FETCHER),
        (TRUNCATION_WARN, LogErrorClass.REPLICA_FETCHER),  # the fetcher names it first
        (TRUNCATION_WARN.replace("ReplicaFetcher", "Follower"), LogErrorClass.LOG_TRUNCATION),
        (KAFKA_INFO, None),
        (KAFKA_WARN_OTHER, None),
        (KAFKA_INFO.replace("INFO", "FATAL"), LogErrorClass.ERROR),
        (ZK_ERROR, LogErrorClass.ERROR),
        (ZK_FSYNC, LogErrorClass.SLOW_FSYNC),
        (ZK_INFO, None),
        # harmless: a super user's create with an auth ACL (ZooKeeper's own quirk)
        (
            "2026-11-24 14:05:47,025 [myid:] ERROR [ProcessThread(sid:3 cport:-1):] "
            "o.a.z.s.PrepRequestProcessor - Missing AuthenticationProvider for super",
            None,
        ),
        (
            "2026-11-24 14:05:47,025 [myid:] ERROR [ProcessThread(sid:3 cport:-1):] "
            "o.a.z.s.PrepRequestProcessor - Missing AuthenticationProvider for digest",
            LogErrorClass.ERROR,
        ),
        ("[2026-11-24 13:07:51,000] INFO Truncating t-0 to offset 3 (kafka.log.UnifiedLog)", None),
    ],
)
def test_classify(line: str, expected: LogErrorClass | None) -> None:
    assert classify(one_entry(line)) is expected


def test_first_line_fields_of_both_layouts() -> None:
    kafka = one_entry(KAFKA_ERROR)
    assert (kafka.logged_at, kafka.level, kafka.logger) == (
        "2026-11-24 13:07:48,123",
        "ERROR",
        "kafka.network.Processor",
    )
    assert kafka.message.startswith("Exception while processing request from 127.0.1.1")
    zk = one_entry(ZK_FSYNC)
    assert (zk.level, zk.logger, zk.thread) == ("WARN", "FileTxnLog", "SyncThread:2")


def test_stack_trace_joins_its_entry_and_the_last_entry_is_held() -> None:
    text = "\n".join(
        [
            KAFKA_INFO,
            KAFKA_ERROR,
            "org.apache.kafka.common.errors.InvalidRequestException: Error parsing request header",
            "\tat kafka.network.RequestChannel.parse(RequestChannel.scala:1)",
            KAFKA_INFO,
            "",
        ]
    ).encode()
    split = split_entries(text, final=False)
    assert [e.level for _, e in split.entries] == ["INFO", "ERROR"]
    error = split.entries[1][1]
    assert error.lines == 3 and "InvalidRequestException" in error.message
    assert "RequestChannel.scala" in error.message
    assert split.held_from == text.rindex(KAFKA_INFO.encode())
    assert split.entries[1][0] == len(KAFKA_INFO) + 1
    final = split_entries(text, final=True)
    assert final.held_from is None and len(final.entries) == 3


def test_partial_last_line_is_left_for_later() -> None:
    text = f"{KAFKA_ERROR}\n{KAFKA_INFO[:20]}".encode()
    split = split_entries(text, final=True)
    assert split.consumed == len(KAFKA_ERROR) + 1 and len(split.entries) == 1


def test_long_trace_is_cut_and_marked() -> None:
    trace = "\n".join(f"\tat frame{i}(X.java:{i})" for i in range(2000))
    entry = one_entry(f"{KAFKA_ERROR}\n{trace}")
    assert entry.truncated and len(entry.message) == MAX_MESSAGE_CHARS and entry.lines == 2001


def test_lines_before_any_entry_are_kept_by_no_class() -> None:
    text = f"\tat somewhere(X.java:1)\n{KAFKA_ERROR}\n".encode()
    assert [c for _, c in kept(e for _, e in split_entries(text, True).entries)] == [
        LogErrorClass.ERROR
    ]


LIVE = FileState("server.log", inode=10, size=500)
ROLLED = FileState("server.log.1", inode=9, size=300)


@pytest.mark.parametrize(
    ("position", "live", "rotated", "first_look", "read", "after", "note"),
    [
        # never read, first look: a long past is skipped
        (None, LIVE, [], True, None, Position(10, 500), FollowNote.STARTED_AT_END),
        # never read, first look at a short file (a new VM's): from its start
        (None, FileState("server.log", 10, 50), [], True, Read("server.log", 10, 0, 50, False), Position(10, 50), FollowNote.NONE),
        # never read, found later: from its start
        (None, LIVE, [], False, Read("server.log", 10, 0, 100, False), Position(10, 100), FollowNote.NONE),
        # same inode, grown: from the offset, at most max_bytes
        (Position(10, 450), LIVE, [], False, Read("server.log", 10, 450, 500, False), Position(10, 500), FollowNote.NONE),
        (Position(10, 500), LIVE, [], False, None, Position(10, 500), FollowNote.NONE),
        # shrank under the same inode: truncated in place
        (Position(10, 900), LIVE, [], False, Read("server.log", 10, 0, 100, False), Position(10, 100), FollowNote.TRUNCATED),
        # rolled: the rest of the old inode under its new name first, marked final
        (Position(9, 250), LIVE, [ROLLED], False, Read("server.log.1", 9, 250, 300, True), Position(9, 300), FollowNote.ROTATED),
        (Position(9, 100), LIVE, [ROLLED], False, Read("server.log.1", 9, 100, 200, False), Position(9, 200), FollowNote.ROTATED),
        # the old one read to its end: the new live file from its start
        (Position(9, 300), LIVE, [ROLLED], False, Read("server.log", 10, 0, 100, False), Position(10, 100), FollowNote.ROTATED),
        # the old one rolled past the last index: lost, on with the live file
        (Position(8, 10), LIVE, [ROLLED], False, Read("server.log", 10, 0, 100, False), Position(10, 100), FollowNote.ROTATED_AWAY),
        # no live file (the process has not started): nothing, position kept
        (Position(10, 5), None, [], False, None, Position(10, 5), FollowNote.NONE),
    ],
)  # fmt: skip
def test_next_read(
    position: Position | None,
    live: FileState | None,
    rotated: list[FileState],
    first_look: bool,
    read: Read | None,
    after: Position,
    note: FollowNote,
) -> None:
    step = next_read(position, live, rotated, first_look, max_bytes=100, history_bytes=100)
    assert (step.read, step.position, step.note) == (read, after, note)


def test_error_rate_window() -> None:
    rate = ErrorRate(window_s=60)
    rate.count(100.0, LogErrorClass.ERROR)
    rate.count(130.0, LogErrorClass.REPLICA_FETCHER)
    rate.count(150.0, LogErrorClass.ERROR)
    now = rate.per_minute(155.0)
    assert now["errors_per_minute"] == 3 and now["error_per_minute"] == 2
    assert now["slow_fsync_per_minute"] == 0
    later = rate.per_minute(190.0)  # the first two left the window
    assert later["errors_per_minute"] == 1 and later["replica_fetcher_per_minute"] == 0


def test_log_rates_become_gauges() -> None:
    gauges = dict(extra_gauges("prod.eu", 2, {}, {}, {}, {"errors_per_minute": 4.0}))
    assert gauges == {"prod_eu.brokers.2.logs.errors_per_minute": 4.0}


def test_followed_logs_by_the_processes_a_vm_runs() -> None:
    names = [f.name for f in followed_logs(kafka=True, controller=True, zookeeper=True)]
    assert names == ["server.log", "controller-server.log", "zookeeper-server.log"]
    assert [f.process for f in followed_logs(True, False, False)] == [LogProcess.KAFKA]


RECORD = LogRecord(
    cluster="prod",
    vm_id="vm-3",
    broker_id=2,
    process=LogProcess.KAFKA,
    file="server.log",
    error_class=LogErrorClass.REPLICA_FETCHER,
    level="WARN",
    logger="kafka.server.ReplicaFetcherThread",
    logged_at="2026-11-24 13:07:49,001",
    read_at_ms=1_790_000_000_000,
    message="Error in response for fetch request",
    lines=1,
    truncated=False,
)


def test_log_record_round_trip_and_key() -> None:
    assert parse_log_record(RECORD.to_json_bytes()) == RECORD
    assert RECORD.key == b"vm-3/kafka"
    no_id = LogRecord(**{**RECORD.__dict__, "broker_id": None, "logger": None})
    assert parse_log_record(no_id.to_json_bytes()) == no_id


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"schema_version": 2}, "schema_version is 2"),
        ({"process": "broker"}, "process must be one of kafka, controller, zookeeper"),
        ({"error_class": "oops"}, "error_class must be one of"),
        ({"broker_id": -1}, "broker_id must be at least 0"),
        ({"lines": 0}, "lines must be at least 1"),
        ({"message": "x" * (MAX_MESSAGE_CHARS + 1)}, "message is longer than"),
        ({"vm_id": ""}, "vm_id must not be empty"),
    ],
)
def test_log_record_refusals(change: dict[str, object], problem: str) -> None:
    with pytest.raises(ContractError, match=problem):
        parse_log_record(json.dumps({**RECORD.to_json(), **change}))


def test_log_record_missing_field_named() -> None:
    value = RECORD.to_json()
    del value["logger"]
    with pytest.raises(ContractError, match="logger is missing"):
        parse_log_record(json.dumps(value))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def shipper(tmp_path: Path, clock: Clock) -> tuple[LogShipper, list[LogRecord]]:
    sent: list[LogRecord] = []
    ship = LogShipper(
        "prod",
        "vm-1",
        tmp_path / "logs",
        tmp_path / "state",
        followed_logs(True, False, True),
        None,
        lambda: 0,
        hold_s=2.0,
        clock=clock,
    )
    original = ship._poll_file

    def capture(followed: FollowedLog) -> list[LogRecord]:
        records = original(followed)
        sent.extend(records)
        return records

    ship._poll_file = capture  # type: ignore[method-assign]
    return ship, sent


def append(path: Path, *lines: str, at: float) -> None:
    with path.open("a") as out:
        out.write("".join(f"{line}\n" for line in lines))
    os.utime(path, (at, at))


def test_shipper_follows_across_rotation_and_restart(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "state").mkdir()
    clock = Clock()
    server = tmp_path / "logs" / "server.log"
    # Written before the agent's first look: a short file is read from its start, a long one
    # (an agent upgraded on a VM with history) from its end.
    append(server, KAFKA_ERROR, at=clock.now - 5)
    ship, sent = shipper(tmp_path, clock)
    assert ship.poll() == 1 and [r.error_class for r in sent] == [LogErrorClass.ERROR]
    sent.clear()
    # zookeeper-server.log appears after the first look: read from its start
    append(tmp_path / "logs" / "zookeeper-server.log", ZK_INFO, ZK_ERROR, at=clock.now)
    append(server, KAFKA_INFO, FETCHER_WARN, "\tat trace(X.java:1)", at=clock.now)
    ship.poll()  # both last entries were just written: held
    assert [r.process for r in sent] == []
    clock.now += 3
    ship.poll()
    assert {(r.process, r.error_class, r.lines) for r in sent} == {
        (LogProcess.ZOOKEEPER, LogErrorClass.ERROR, 1),
        (LogProcess.KAFKA, LogErrorClass.REPLICA_FETCHER, 2),
    }
    assert ship.rate.per_minute(clock.now)["errors_per_minute"] == 3  # with the first
    sent.clear()
    # A line, then a roll by renaming (server.log -> server.log.1) and a new live file.
    append(server, KAFKA_ERROR.replace("13:07:48", "13:08:00"), at=clock.now)
    server.rename(tmp_path / "logs" / "server.log.1")
    append(server, KAFKA_ERROR.replace("13:07:48", "13:08:01"), at=clock.now - 5)
    ship.poll()
    ship.poll()
    assert [r.logged_at for r in sent] == ["2026-11-24 13:08:00,123", "2026-11-24 13:08:01,123"]
    sent.clear()
    # A new shipper (the agent restarted) goes on from the stored offsets: nothing again.
    again, resent = shipper(tmp_path, clock)
    append(server, FETCHER_WARN, at=clock.now - 5)
    again.poll()
    assert [r.error_class for r in resent] == [LogErrorClass.REPLICA_FETCHER]
    stored = json.loads((tmp_path / "state" / "log-offsets.json").read_text())
    assert stored["server.log"]["offset"] == server.stat().st_size
