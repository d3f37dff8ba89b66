"""The drill history's JSON lines: one parser that refuses a bad line naming its number and
field, records that contradict each other refused, and a writer the parser reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from management_plane.drills.history import (
    AssignmentRecord,
    FaultWindow,
    History,
    HistoryError,
    HistoryRecord,
    ProducerInfo,
    ReadRecord,
    SendRecord,
    history_lines,
    parse_history,
)
from management_plane.drills.history_file import read_history, write_history
from management_plane.errors import KaasError

pytestmark = pytest.mark.unit

HEADER = '{"kind": "history", "schema_version": 1}'
PRODUCER = '{"kind": "producer", "producer": "p1", "idempotent": true}'

RECORDS: list[HistoryRecord] = [
    ProducerInfo("p1", idempotent=True),
    ProducerInfo("p2", idempotent=False),
    FaultWindow("f1", "broker-sigkill", "broker 2", started_s=10.0, healed_s=20.5),
    FaultWindow("f2", "network-partition", "vm 3", started_s=30.0, healed_s=None),
    SendRecord("p1", "t", "k", 0, "k:0", 3, 17, 10.25, None),
    SendRecord("p2", "t", "k", 1, "k:1", None, None, 11.0, "Local: Message timed out"),
    SendRecord("p1", "t", "j", 0, "j:0", 1, 0, None, None),
    AssignmentRecord("c1", "g", "t", (1, 3), 9.0),
    ReadRecord("c1", "g", "t", 3, 17, "k", "k:0", 12.0),
]


def send_line(**changes: object) -> str:
    fields: dict[str, object] = {
        "kind": "send",
        "producer": "p1",
        "topic": "t",
        "key": "k",
        "sequence": 0,
        "value_id": "k:0",
        "partition": 0,
        "offset": 5,
        "time_s": 1.5,
        "error": None,
    }
    fields.update(changes)
    return json.dumps({name: value for name, value in fields.items() if value != "DROP"})


def read_line(**changes: object) -> str:
    fields: dict[str, object] = {
        "kind": "read",
        "consumer": "c1",
        "group": "g",
        "topic": "t",
        "partition": 0,
        "offset": 5,
        "key": "k",
        "value_id": "k:0",
        "time_s": 2.0,
    }
    fields.update(changes)
    return json.dumps({name: value for name, value in fields.items() if value != "DROP"})


def test_history_round_trips_through_its_lines() -> None:
    history = History.of(RECORDS)
    lines = list(history_lines(history))
    assert json.loads(lines[0]) == {"kind": "history", "schema_version": 1}
    assert parse_history(lines) == history
    assert list(parse_history(lines).records()) == RECORDS


def test_history_file_round_trips(tmp_path: Path) -> None:
    history = History.of(RECORDS)
    path = write_history(tmp_path / "drill" / "history.jsonl", history)
    assert read_history(path) == history
    assert path.read_text().count("\n") == len(RECORDS) + 1


def test_blank_lines_are_skipped() -> None:
    history = parse_history([HEADER, "", PRODUCER, "   ", send_line()])
    assert len(history.sends) == 1


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "history is empty: it has no header line"),
        ([PRODUCER], "history line 1: the first record must be the header"),
        (
            ['{"kind": "history", "schema_version": 2}'],
            "history line 1: schema_version 2 is not supported",
        ),
        (['{"kind": "history"}'], "history line 1: history.schema_version is missing"),
        ([HEADER, HEADER], "history line 2: a second header"),
        ([HEADER, "{not json"], "history line 2: not JSON"),
        ([HEADER, "[1, 2]"], "history line 2: must be a JSON object; got list"),
        ([HEADER, '{"kind": "poll"}'], "history line 2: kind must be one of history, producer"),
        ([HEADER, "{}"], "history line 2: kind must be one of .*; got None"),
        (
            [HEADER, '{"kind": "producer", "producer": "p1", "idempotent": "yes"}'],
            "history line 2: producer.idempotent must be true or false; got 'yes'",
        ),
        (
            [HEADER, PRODUCER, send_line(sequence=-1)],
            "history line 3: send.sequence must be a non-negative integer; got -1",
        ),
        (
            [HEADER, PRODUCER, send_line(offset=True)],
            "history line 3: send.offset must be a non-negative integer; got True",
        ),
        (
            [HEADER, PRODUCER, send_line(key="")],
            "history line 3: send.key must be a non-empty string; got ''",
        ),
        (
            [HEADER, PRODUCER, send_line(error="DROP")],
            "history line 3: send.error is missing",
        ),
        (
            [HEADER, PRODUCER, send_line(error=7)],
            "history line 3: send.error must be null .* or a non-empty string; got 7",
        ),
        (
            [HEADER, PRODUCER, send_line(time_s="soon")],
            "history line 3: send.time_s must be a number of seconds; got 'soon'",
        ),
        (
            [HEADER, PRODUCER, "", read_line(time_s="DROP")],
            "history line 4: read.time_s is missing",
        ),
        (
            [HEADER, read_line(partition=1.5)],
            "history line 2: read.partition must be a non-negative integer; got 1.5",
        ),
        (
            [HEADER, read_line(time_s=float("nan"))],
            "history line 2: read.time_s must be a number of seconds; got nan",
        ),
        (
            [
                HEADER,
                '{"kind": "assigned", "consumer": "c1", "group": "g", "topic": "t", '
                '"partitions": [0, -1], "time_s": 1}',
            ],
            r"history line 2: assigned.partitions must be a list of non-negative integers; "
            r"got \[0, -1\]",
        ),
        (
            [
                HEADER,
                '{"kind": "fault", "fault_id": "f1", "fault": "x", "target": "y", "started_s": 1}',
            ],
            "history line 2: fault.healed_s is missing",
        ),
        # Records that contradict earlier ones.
        (
            [HEADER, send_line()],
            "history line 2: send of 'k:0' names producer 'p1', which no earlier producer",
        ),
        ([HEADER, PRODUCER, PRODUCER], "history line 3: producer 'p1' is declared twice"),
        (
            [HEADER, PRODUCER, send_line(partition=None)],
            "history line 3: send of 'k:0' has no error, so it was acknowledged, but it lacks its "
            "partition",
        ),
        (
            [HEADER, PRODUCER, send_line(), send_line(sequence=1)],
            r"history line 4: value id 'k:0' is sent as two messages: topic, key, sequence "
            r"\('t', 'k', 0\) and \('t', 'k', 1\)",
        ),
        (
            [
                HEADER,
                '{"kind": "fault", "fault_id": "f1", "fault": "x", "target": "y", '
                '"started_s": 5, "healed_s": 4}',
            ],
            "history line 2: fault 'f1' healed_s 4.0 is before its started_s 5.0",
        ),
        (
            [
                HEADER,
                '{"kind": "fault", "fault_id": "f1", "fault": "x", "target": "y", '
                '"started_s": 5, "healed_s": null}',
                '{"kind": "fault", "fault_id": "f1", "fault": "z", "target": "y", '
                '"started_s": 6, "healed_s": null}',
            ],
            "history line 3: fault id 'f1' appears twice",
        ),
    ],
)
def test_bad_line_is_refused_naming_line_and_field(lines: list[str], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        parse_history(lines)


def test_history_errors_belong_to_the_management_plane_root() -> None:
    assert issubclass(HistoryError, KaasError)


def test_a_send_resent_with_the_same_message_is_two_attempts_of_one_value() -> None:
    history = parse_history(
        [HEADER, PRODUCER, send_line(partition=None, offset=None, error="timed out"), send_line()]
    )
    assert [s.acknowledged for s in history.sends] == [False, True]


def test_unreadable_history_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "none.jsonl"
    with pytest.raises(HistoryError, match=f"cannot read history {missing}"):
        read_history(missing)
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HistoryError, match=f"history {binary} is not UTF-8 text"):
        read_history(binary)
