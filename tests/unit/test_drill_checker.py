"""The drill checker on histories with known anomalies: each one flagged with its count and
example, a clean history valid, a large history checked in seconds."""

from __future__ import annotations

import pytest

from management_plane.drills.checker import (
    AnomalyKind,
    CheckError,
    Duplicate,
    LostValue,
    NonMonotonicPoll,
    OffsetConflict,
    Reorder,
    Stall,
    UnexpectedRead,
    Verdict,
    check,
)
from management_plane.drills.from_workload import workload_sends
from management_plane.drills.history import (
    AssignmentRecord,
    FaultWindow,
    History,
    HistoryRecord,
    ProducerInfo,
    ReadRecord,
    SendRecord,
    parse_history,
)

pytestmark = pytest.mark.unit

TOPIC = "drill"


def send(
    key: str,
    sequence: int,
    partition: int | None,
    offset: int | None,
    time_s: float | None = None,
    producer: str = "p1",
    error: str | None = None,
) -> SendRecord:
    return SendRecord(
        producer=producer,
        topic=TOPIC,
        key=key,
        sequence=sequence,
        value_id=f"{key}:{sequence}",
        partition=partition,
        offset=offset,
        time_s=time_s if time_s is not None else float(offset or 0),
        error=error,
    )


def read(
    consumer: str, key: str, sequence: int, partition: int, offset: int, time_s: float = 100.0
) -> ReadRecord:
    return ReadRecord(
        consumer=consumer,
        group="g",
        topic=TOPIC,
        partition=partition,
        offset=offset,
        key=key,
        value_id=f"{key}:{sequence}",
        time_s=time_s,
    )


def assigned(consumer: str, *partitions: int) -> AssignmentRecord:
    return AssignmentRecord(consumer, "g", TOPIC, partitions, 50.0)


IDEMPOTENT = ProducerInfo("p1", idempotent=True)

# Keys a and b on partition 0, key c on partition 1; every send acknowledged and read once.
CLEAN: list[HistoryRecord] = [
    IDEMPOTENT,
    send("a", 0, 0, 0),
    send("b", 0, 0, 1),
    send("a", 1, 0, 2),
    send("c", 0, 1, 0),
    send("c", 1, 1, 1),
    assigned("c1", 0, 1),
    read("c1", "a", 0, 0, 0),
    read("c1", "b", 0, 0, 1),
    read("c1", "a", 1, 0, 2),
    read("c1", "c", 0, 1, 0),
    read("c1", "c", 1, 1, 1),
]


def verdict_of(records: list[HistoryRecord], **options: object) -> Verdict:
    return check(History.of(records), **options)  # type: ignore[arg-type]


def nonzero_counts(verdict: Verdict) -> dict[AnomalyKind, int]:
    return {kind: count for kind, count in verdict.counts().items() if count}


def test_clean_history_is_valid() -> None:
    verdict = verdict_of(CLEAN)
    assert verdict.valid
    assert nonzero_counts(verdict) == {}
    assert (verdict.totals.sends, verdict.totals.acknowledged, verdict.totals.reads) == (5, 5, 5)
    assert verdict.totals.values_read == 5
    assert verdict.totals.consumers == 1


def test_failed_send_never_read_is_not_lost_and_read_failed_send_is_not_unexpected() -> None:
    records = [
        *CLEAN,
        send("d", 0, None, None, time_s=3.0, error="Local: Message timed out"),
        send("d", 1, None, None, time_s=3.0, error="Local: Message timed out"),
        # The broker wrote d:1 although the producer saw a timeout: indeterminate, allowed.
        read("c1", "d", 1, 1, 2),
    ]
    verdict = verdict_of(records)
    assert verdict.valid, nonzero_counts(verdict)
    assert (verdict.totals.failed, verdict.totals.values_sent) == (2, 7)


def test_lost_acknowledged_value_never_read() -> None:
    records = [r for r in CLEAN if r != read("c1", "a", 1, 0, 2)]
    verdict = verdict_of(records)
    assert not verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.LOST: 1}
    assert verdict.lost.examples == (
        LostValue(
            value_id="a:1",
            key="a",
            sequence=1,
            topic=TOPIC,
            partition=0,
            offset=2,
            acknowledged_s=2.0,
        ),
    )


def test_an_ack_without_an_offset_counts_as_acknowledged() -> None:
    # librdkafka acknowledges an idempotent retry the broker found already stored without
    # its offset: the value must still be read, and is lost when it is not.
    read_once = verdict_of([*CLEAN, send("d", 0, 1, None, time_s=4.0), read("c1", "d", 0, 1, 2)])
    assert read_once.valid, nonzero_counts(read_once)
    assert read_once.totals.acknowledged == 6
    never_read = verdict_of([*CLEAN, send("d", 0, 1, None, time_s=4.0)])
    assert nonzero_counts(never_read) == {AnomalyKind.LOST: 1}
    (lost,) = never_read.lost.examples
    assert (lost.value_id, lost.partition, lost.offset) == ("d:0", 1, None)


def test_lost_counts_a_value_once_however_many_acks_it_had() -> None:
    # The application sent b:1 again after an ack it did not trust: two acks, one value.
    records = [*CLEAN, send("b", 1, 0, 3), send("b", 1, 0, 4)]
    verdict = verdict_of(records)
    assert verdict.lost.count == 1
    assert [lost.value_id for lost in verdict.lost.examples] == ["b:1"]
    assert verdict.duplicated.count == 1  # b:1 at offsets 3 and 4 of partition 0


def test_duplicate_at_two_offsets_of_an_idempotent_producer_is_invalid() -> None:
    records = [*CLEAN, read("c1", "a", 0, 0, 3)]  # a:0 at offset 0 and again at offset 3
    verdict = verdict_of(records)
    assert not verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.DUPLICATED: 1}
    assert verdict.duplicated.examples == (
        Duplicate(value_id="a:0", producer="p1", positions=((TOPIC, 0, 0), (TOPIC, 0, 3))),
    )


def test_duplicate_of_a_producer_declared_not_idempotent_is_tolerated() -> None:
    records = [ProducerInfo("p1", idempotent=False) if r == IDEMPOTENT else r for r in CLEAN] + [
        read("c1", "a", 0, 0, 3)
    ]
    verdict = verdict_of(records)
    assert verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.TOLERATED_DUPLICATE: 1}
    assert verdict.tolerated_duplicates.examples[0].positions == ((TOPIC, 0, 0), (TOPIC, 0, 3))


def test_redelivery_of_one_offset_to_the_group_is_not_a_duplicate() -> None:
    # c1 loses partition 0 before committing; c2 is assigned it and reads offsets 1 and 2 again.
    records = [
        *CLEAN,
        assigned("c2", 0),
        read("c2", "b", 0, 0, 1),
        read("c2", "a", 1, 0, 2),
    ]
    verdict = verdict_of(records)
    assert verdict.valid, nonzero_counts(verdict)
    assert verdict.totals.consumers == 2


def test_unexpected_read_of_a_value_never_sent() -> None:
    records = [*CLEAN, read("c1", "zz", 0, 1, 2, time_s=101.0)]
    verdict = verdict_of(records)
    assert not verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.UNEXPECTED: 1}
    assert verdict.unexpected.examples == (
        UnexpectedRead(
            value_id="zz:0",
            key="zz",
            consumer="c1",
            topic=TOPIC,
            partition=1,
            offset=2,
            read_s=101.0,
        ),
    )


def test_reordered_key_in_the_log() -> None:
    # a:1 written at offset 0, a:0 at offset 2: key a's sequence goes down as offsets go up.
    records: list[HistoryRecord] = [
        IDEMPOTENT,
        send("a", 1, 0, 0),
        send("b", 0, 0, 1),
        send("a", 0, 0, 2),
        send("a", 2, 0, 3),
        assigned("c1", 0),
        read("c1", "a", 1, 0, 0),
        read("c1", "b", 0, 0, 1),
        read("c1", "a", 0, 0, 2),
        read("c1", "a", 2, 0, 3),
    ]
    verdict = verdict_of(records)
    assert not verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.REORDERED: 1}
    assert verdict.reordered.examples == (
        Reorder(
            topic=TOPIC,
            partition=0,
            key="a",
            offset=2,
            sequence=0,
            previous_offset=0,
            previous_sequence=1,
        ),
    )


def test_one_key_on_two_partitions_is_ordered_per_partition() -> None:
    records: list[HistoryRecord] = [
        IDEMPOTENT,
        send("a", 1, 0, 0),
        send("a", 0, 1, 0),
        assigned("c1", 0, 1),
        read("c1", "a", 1, 0, 0),
        read("c1", "a", 0, 1, 0),
    ]
    assert verdict_of(records).reordered.count == 0


def test_inconsistent_offsets_between_two_consumers() -> None:
    records = [*CLEAN, assigned("c2", 1), read("c2", "a", 0, 1, 1)]
    verdict = verdict_of(records)
    assert not verdict.valid
    # The log keeps the first value seen at a position, so a:0 read at 1/1 does not also
    # count as a second copy of a:0; c:1 was read by c1, so nothing is lost.
    assert nonzero_counts(verdict) == {AnomalyKind.INCONSISTENT_OFFSETS: 1}
    assert verdict.inconsistent_offsets.examples == (
        OffsetConflict(
            topic=TOPIC,
            partition=1,
            offset=1,
            seen=(("c:1", "acknowledged to producer p1"), ("a:0", "read by consumer c2")),
        ),
    )


def test_inconsistent_offsets_between_the_ack_and_the_read() -> None:
    records: list[HistoryRecord] = [
        IDEMPOTENT,
        send("a", 0, 0, 0),
        send("a", 1, 0, 1),
        assigned("c1", 0),
        read("c1", "a", 1, 0, 0),
        read("c1", "a", 0, 0, 1),
    ]
    verdict = verdict_of(records)
    assert verdict.inconsistent_offsets.count == 2
    assert verdict.inconsistent_offsets.examples[0].seen == (
        ("a:0", "acknowledged to producer p1"),
        ("a:1", "read by consumer c1"),
    )


def test_non_monotonic_poll_within_one_consumer() -> None:
    records = [*CLEAN, read("c1", "b", 0, 0, 1, time_s=102.0)]  # offset 1 again, after 2
    verdict = verdict_of(records)
    assert not verdict.valid
    assert nonzero_counts(verdict) == {AnomalyKind.NON_MONOTONIC_POLL: 1}
    assert verdict.non_monotonic_polls.examples == (
        NonMonotonicPoll(
            consumer="c1", topic=TOPIC, partition=0, offset=1, previous_offset=2, read_s=102.0
        ),
    )


def test_reassignment_allows_a_consumer_to_read_again_from_the_committed_offset() -> None:
    records = [*CLEAN, assigned("c1", 0), read("c1", "b", 0, 0, 1)]
    assert verdict_of(records).valid


def test_examples_are_capped_and_counts_are_not() -> None:
    records: list[HistoryRecord] = [IDEMPOTENT]
    records += [send("k", sequence, 0, sequence) for sequence in range(30)]
    verdict = verdict_of(records, max_examples=3)
    assert verdict.lost.count == 30
    assert [lost.offset for lost in verdict.lost.examples] == [0, 1, 2]
    assert verdict_of(records, max_examples=0).lost.examples == ()


def test_longest_stall_and_fault_timings() -> None:
    records: list[HistoryRecord] = [
        IDEMPOTENT,
        FaultWindow("f1", "broker-sigkill", "broker 2", started_s=10.5, healed_s=20.0),
        FaultWindow("f2", "broker-sigstop", "broker 3", started_s=40.0, healed_s=None),
        send("a", 0, 0, 0, time_s=10.0),
        send("a", 1, 0, 1, time_s=16.0),  # 6 s after the last ack: the longest stall
        send("a", 2, 0, 2, time_s=18.0),
        send("a", 3, None, None, time_s=19.0, error="Local: Message timed out"),
        send("a", 4, 0, 3, time_s=21.0),
    ]
    verdict = verdict_of(records, isr_complete_s={"f1": 27.5})
    availability = verdict.availability
    assert availability.longest_stall == Stall(after_ack_s=10.0, next_ack_s=16.0, seconds=6.0)
    first, second = availability.faults
    assert (first.first_ack_after_start_s, first.unavailable_s) == (16.0, 5.5)
    assert (first.isr_complete_s, first.recovery_s) == (27.5, 7.5)
    # No ack after f2 started, and it never healed: nothing to measure.
    assert (second.first_ack_after_start_s, second.unavailable_s, second.recovery_s) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("isr_complete_s", "message"),
    [
        ({"nope": 30.0}, "fault 'nope', which the history does not hold (its faults: f1, f2)"),
        ({"f2": 50.0}, "fault 'f2', which never healed"),
        ({"f1": 15.0}, "fault 'f1': the ISR-complete time 15.0 is before the fault healed"),
    ],
)
def test_isr_complete_time_that_does_not_fit_the_history_is_refused(
    isr_complete_s: dict[str, float], message: str
) -> None:
    history = History.of(
        [
            FaultWindow("f1", "broker-sigkill", "broker 2", started_s=10.0, healed_s=20.0),
            FaultWindow("f2", "zookeeper-quorum-loss", "zk 1, zk 2", 40.0, None),
        ]
    )
    with pytest.raises(CheckError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(history, isr_complete_s=isr_complete_s)


def test_negative_max_examples_is_refused() -> None:
    with pytest.raises(CheckError, match="max_examples must be zero or more; got -1"):
        check(History.of(CLEAN), max_examples=-1)


# One recorded history holding one anomaly of every kind, as a drill writes it.
RECORDED = """\
{"kind": "history", "schema_version": 1}
{"kind": "producer", "producer": "p1", "idempotent": true}
{"kind": "producer", "producer": "p2", "idempotent": false}
{"kind": "fault", "fault_id": "f1", "fault": "broker-sigkill", "target": "broker 2", \
"started_s": 5.0, "healed_s": 8.0}
{"kind": "send", "producer": "p1", "topic": "t", "key": "a", "sequence": 0, "value_id": "a0", \
"partition": 0, "offset": 0, "time_s": 1.0, "error": null}
{"kind": "send", "producer": "p1", "topic": "t", "key": "a", "sequence": 2, "value_id": "a2", \
"partition": 0, "offset": 1, "time_s": 2.0, "error": null}
{"kind": "send", "producer": "p1", "topic": "t", "key": "a", "sequence": 1, "value_id": "a1", \
"partition": 0, "offset": 2, "time_s": 3.0, "error": null}
{"kind": "send", "producer": "p1", "topic": "t", "key": "b", "sequence": 0, "value_id": "b0", \
"partition": 1, "offset": 0, "time_s": 3.5, "error": null}
{"kind": "send", "producer": "p1", "topic": "t", "key": "b", "sequence": 1, "value_id": "b1", \
"partition": 1, "offset": 1, "time_s": 9.0, "error": null}
{"kind": "send", "producer": "p2", "topic": "t", "key": "n", "sequence": 0, "value_id": "n0", \
"partition": 2, "offset": 0, "time_s": 9.5, "error": null}
{"kind": "send", "producer": "p1", "topic": "t", "key": "b", "sequence": 2, "value_id": "b2", \
"partition": 1, "offset": 2, "time_s": 10.0, "error": null}
{"kind": "assigned", "consumer": "c1", "group": "g", "topic": "t", "partitions": [0, 1, 2], \
"time_s": 0.5}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 0, "offset": 0, \
"key": "a", "value_id": "a0", "time_s": 11.0}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 0, "offset": 1, \
"key": "a", "value_id": "a2", "time_s": 11.1}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 0, "offset": 2, \
"key": "a", "value_id": "a1", "time_s": 11.2}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 0, "offset": 3, \
"key": "a", "value_id": "a0", "time_s": 11.3}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 1, "offset": 0, \
"key": "b", "value_id": "b0", "time_s": 11.4}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 1, "offset": 2, \
"key": "b", "value_id": "b2", "time_s": 11.5}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 1, "offset": 2, \
"key": "b", "value_id": "b2", "time_s": 11.6}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 2, "offset": 0, \
"key": "n", "value_id": "n0", "time_s": 11.7}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 2, "offset": 1, \
"key": "n", "value_id": "n0", "time_s": 11.8}
{"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 2, "offset": 2, \
"key": "x", "value_id": "x0", "time_s": 11.9}
{"kind": "assigned", "consumer": "c2", "group": "g", "topic": "t", "partitions": [1], \
"time_s": 12.0}
{"kind": "read", "consumer": "c2", "group": "g", "topic": "t", "partition": 1, "offset": 1, \
"key": "b", "value_id": "b2", "time_s": 12.1}
"""


def test_recorded_history_with_every_anomaly() -> None:
    verdict = check(parse_history(RECORDED.splitlines()), isr_complete_s={"f1": 12.0})
    assert not verdict.valid
    assert verdict.counts() == {
        AnomalyKind.LOST: 1,  # b1: acknowledged at 1/1, where c2 read b2 instead
        AnomalyKind.DUPLICATED: 1,  # a0 at 0/0 and 0/3
        AnomalyKind.TOLERATED_DUPLICATE: 1,  # n0 at 2/0 and 2/1, from p2 (not idempotent)
        AnomalyKind.UNEXPECTED: 1,  # x0
        AnomalyKind.REORDERED: 1,  # a1 at 0/2 after a2 at 0/1
        AnomalyKind.INCONSISTENT_OFFSETS: 1,  # 1/1: b1 acknowledged, b2 read
        AnomalyKind.NON_MONOTONIC_POLL: 1,  # c1 read 1/2 twice
    }
    assert [lost.value_id for lost in verdict.lost.examples] == ["b1"]
    assert verdict.duplicated.examples == (Duplicate("a0", "p1", (("t", 0, 0), ("t", 0, 3))),)
    assert verdict.tolerated_duplicates.examples[0].producer == "p2"
    assert verdict.unexpected.examples[0].value_id == "x0"
    assert verdict.reordered.examples == (Reorder("t", 0, "a", 2, 1, 1, 2),)
    assert verdict.inconsistent_offsets.examples[0].offset == 1
    assert verdict.non_monotonic_polls.examples[0].previous_offset == 2
    assert verdict.availability.longest_stall == Stall(3.5, 9.0, 5.5)
    (fault,) = verdict.availability.faults
    assert (fault.unavailable_s, fault.recovery_s) == (4.0, 4.0)
    report = verdict.to_json()
    assert report["valid"] is False
    assert report["lost"] == {
        "kind": "lost",
        "count": 1,
        "examples": [
            {
                "value_id": "b1",
                "key": "b",
                "sequence": 1,
                "topic": "t",
                "partition": 1,
                "offset": 1,
                "acknowledged_s": 9.0,
            },
        ],
    }


def test_workload_acknowledgements_convert_and_check() -> None:
    acknowledged = [("b0-key-00000", 0, 0, 0), ("b0-key-00001", 0, 1, 0)]
    records: list[HistoryRecord] = [*workload_sends("load", TOPIC, acknowledged)]
    records += [
        ReadRecord("audit", "audit", TOPIC, 0, 0, "b0-key-00000", "b0-key-00000:0", 1.0),
    ]
    verdict = check(History.of(records))
    assert records[0] == ProducerInfo("load", idempotent=True)
    assert verdict.lost.count == 1
    assert verdict.lost.examples[0].value_id == "b0-key-00001:0"
    assert verdict.availability.longest_stall is None  # the workload records no ack times


def clean_history(partitions: int, keys_per_partition: int, per_key: int) -> History:
    """Every send acknowledged and read once, in order: a valid history of any size (also
    the checker benchmark's input)."""
    records: list[HistoryRecord] = [IDEMPOTENT]
    reads: list[HistoryRecord] = [assigned("c1", *range(partitions))]
    for partition in range(partitions):
        offset = 0
        for sequence in range(per_key):
            for key_index in range(keys_per_partition):
                key = f"k{partition}-{key_index}"
                value_id = f"{key}:{sequence}"
                time_s = offset * 0.001
                records.append(
                    SendRecord(
                        "p1", TOPIC, key, sequence, value_id, partition, offset, time_s, None
                    )
                )
                reads.append(
                    ReadRecord("c1", "g", TOPIC, partition, offset, key, value_id, time_s + 1)
                )
                offset += 1
    return History.of(records + reads)


def test_a_large_clean_history_is_valid() -> None:
    verdict = check(clean_history(10, 50, 40))  # 20,000 sends and 20,000 reads
    assert verdict.valid, nonzero_counts(verdict)
    assert verdict.totals.reads == 20_000
