"""The drill checker: judges a history (`history.py`) in the manner of Jepsen's queue and
Kafka checkers. Pure: a history in, a verdict out.

The log is what the history says each partition holds: every acknowledged send names its
(topic, partition, offset), every read too. From it:

- lost: acknowledged, and no consumer ever read the value;
- duplicated: one value at two or more offsets of the log (a redelivery of one offset to the
  group is not a duplicate); tolerated, and reported apart, when the producer that sent the
  value was declared not idempotent;
- unexpected: read, and no producer ever attempted to send the value;
- reordered: within one partition, a key's sequence numbers going down as offsets go up;
- inconsistent offsets: two different values at one (topic, partition, offset), between any
  two of the sends and the reads;
- non-monotonic polls: one consumer reading a partition at an offset not above its previous
  read of that partition, with no assignment of the partition in between.

Any of these (except a tolerated duplicate) makes the verdict invalid. Availability is
measured, not judged: the longest gap between successful acks, and per fault the time from
its start to the first successful ack and, given when every ISR was complete again, the
recovery time from its heal. Every pass is linear in the records, apart from sorting each
partition's offsets and the ack times.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from management_plane.drills.history import (
    History,
    HistoryError,
    ReadRecord,
    SendRecord,
)

DEFAULT_MAX_EXAMPLES = 10

Position = tuple[str, int, int]  # topic, partition, offset


class AnomalyKind(StrEnum):
    LOST = "lost"
    DUPLICATED = "duplicated"
    TOLERATED_DUPLICATE = "tolerated_duplicate"
    UNEXPECTED = "unexpected"
    REORDERED = "reordered"
    INCONSISTENT_OFFSETS = "inconsistent_offsets"
    NON_MONOTONIC_POLL = "non_monotonic_poll"


@dataclass(frozen=True)
class LostValue:
    value_id: str
    key: str
    sequence: int
    topic: str
    partition: int
    offset: int | None  # None: acknowledged as a duplicate of a stored batch
    acknowledged_s: float | None


@dataclass(frozen=True)
class Duplicate:
    value_id: str
    producer: str | None  # None: a value no producer sent (it is unexpected, too)
    positions: tuple[Position, ...]  # every offset of the log holding the value, sorted


@dataclass(frozen=True)
class UnexpectedRead:
    value_id: str
    key: str
    consumer: str
    topic: str
    partition: int
    offset: int
    read_s: float


@dataclass(frozen=True)
class Reorder:
    topic: str
    partition: int
    key: str
    offset: int
    sequence: int
    # The key's highest sequence number at a lower offset of the partition, and that offset.
    previous_offset: int
    previous_sequence: int


@dataclass(frozen=True)
class OffsetConflict:
    topic: str
    partition: int
    offset: int
    seen: tuple[tuple[str, str], ...]  # (value id, who saw it there), one per distinct value


@dataclass(frozen=True)
class NonMonotonicPoll:
    consumer: str
    topic: str
    partition: int
    offset: int
    previous_offset: int
    read_s: float


Example = TypeVar("Example")


@dataclass(frozen=True)
class Finding(Generic[Example]):
    kind: AnomalyKind
    count: int
    examples: tuple[Example, ...]  # the first few, in the history's order


@dataclass(frozen=True)
class Totals:
    sends: int  # attempts, acknowledged or not
    acknowledged: int
    failed: int
    values_sent: int  # distinct value ids attempted
    reads: int
    values_read: int  # distinct value ids read
    consumers: int


@dataclass(frozen=True)
class Stall:
    """The longest time between two successful acks."""

    after_ack_s: float
    next_ack_s: float
    seconds: float


@dataclass(frozen=True)
class FaultTiming:
    fault_id: str
    fault: str
    target: str
    started_s: float
    healed_s: float | None
    first_ack_after_start_s: float | None  # None: no successful ack from the start on
    unavailable_s: float | None  # first_ack_after_start_s - started_s
    isr_complete_s: float | None  # as given to the checker
    recovery_s: float | None  # isr_complete_s - healed_s


@dataclass(frozen=True)
class Availability:
    longest_stall: Stall | None  # None: fewer than two acks with a time
    faults: tuple[FaultTiming, ...]


@dataclass(frozen=True)
class Verdict:
    valid: bool
    totals: Totals
    lost: Finding[LostValue]
    duplicated: Finding[Duplicate]
    tolerated_duplicates: Finding[Duplicate]
    unexpected: Finding[UnexpectedRead]
    reordered: Finding[Reorder]
    inconsistent_offsets: Finding[OffsetConflict]
    non_monotonic_polls: Finding[NonMonotonicPoll]
    availability: Availability

    def counts(self) -> dict[AnomalyKind, int]:
        return {
            finding.kind: finding.count
            for finding in (
                self.lost,
                self.duplicated,
                self.tolerated_duplicates,
                self.unexpected,
                self.reordered,
                self.inconsistent_offsets,
                self.non_monotonic_polls,
            )
        }

    def to_json(self) -> dict[str, object]:
        """The verdict as plain JSON values (objects, lists, strings, numbers), for a
        drill's report."""
        plain: dict[str, object] = json.loads(json.dumps(dataclasses.asdict(self)))
        return plain


class CheckError(HistoryError):
    """The checker was asked something the history cannot answer."""


def check(
    history: History,
    isr_complete_s: Mapping[str, float] | None = None,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> Verdict:
    """Judge a history. `isr_complete_s` maps a fault id to the time every ISR was complete
    again after that fault healed (for its recovery time); `max_examples` caps the examples
    kept per anomaly."""
    if max_examples < 0:
        raise CheckError(f"max_examples must be zero or more; got {max_examples}")
    isr_complete = dict(isr_complete_s or {})
    _check_isr_times(history, isr_complete)

    sent: dict[str, SendRecord] = {}
    for send in history.sends:
        sent.setdefault(send.value_id, send)
    log, conflicts = _build_log(history)
    reads = [e for e in history.consumer_events if isinstance(e, ReadRecord)]
    read_values = {read.value_id for read in reads}

    lost = _lost(history, read_values, max_examples)
    duplicated, tolerated = _duplicates(history, sent, log, max_examples)
    unexpected = _unexpected(reads, sent, max_examples)
    reordered = _reorders(sent, log, max_examples)
    inconsistent = _inconsistent(conflicts, max_examples)
    non_monotonic = _non_monotonic(history, max_examples)

    acknowledged = sum(1 for s in history.sends if s.acknowledged)
    totals = Totals(
        sends=len(history.sends),
        acknowledged=acknowledged,
        failed=len(history.sends) - acknowledged,
        values_sent=len(sent),
        reads=len(reads),
        values_read=len(read_values),
        consumers=len({e.consumer for e in history.consumer_events}),
    )
    invalidating = (lost, duplicated, unexpected, reordered, inconsistent, non_monotonic)
    return Verdict(
        valid=all(finding.count == 0 for finding in invalidating),
        totals=totals,
        lost=lost,
        duplicated=duplicated,
        tolerated_duplicates=tolerated,
        unexpected=unexpected,
        reordered=reordered,
        inconsistent_offsets=inconsistent,
        non_monotonic_polls=non_monotonic,
        availability=_availability(history, isr_complete),
    )


def _check_isr_times(history: History, isr_complete: Mapping[str, float]) -> None:
    faults = {fault.fault_id: fault for fault in history.faults}
    for fault_id, complete_s in isr_complete.items():
        fault = faults.get(fault_id)
        if fault is None:
            known = ", ".join(sorted(faults)) or "none"
            raise CheckError(
                f"an ISR-complete time is given for fault {fault_id!r}, which the history "
                f"does not hold (its faults: {known})"
            )
        if fault.healed_s is None:
            raise CheckError(
                f"an ISR-complete time is given for fault {fault_id!r}, which never healed"
            )
        if complete_s < fault.healed_s:
            raise CheckError(
                f"fault {fault_id!r}: the ISR-complete time {complete_s} is before the fault "
                f"healed ({fault.healed_s})"
            )


# What the log holds at one position, and the record that says so (the first one seen).
LogEntry = tuple[str, SendRecord | ReadRecord]


def _build_log(
    history: History,
) -> tuple[dict[Position, LogEntry], dict[Position, dict[str, SendRecord | ReadRecord]]]:
    """Every position the history names and the value there; positions where records
    disagree, with each distinct value and the first record that saw it."""
    log: dict[Position, LogEntry] = {}
    conflicts: dict[Position, dict[str, SendRecord | ReadRecord]] = {}

    def place(position: Position, value_id: str, record: SendRecord | ReadRecord) -> None:
        entry = log.setdefault(position, (value_id, record))
        if entry[0] != value_id:
            seen = conflicts.setdefault(position, {entry[0]: entry[1]})
            seen.setdefault(value_id, record)

    for send in history.sends:
        if send.partition is not None and send.offset is not None and send.error is None:
            place((send.topic, send.partition, send.offset), send.value_id, send)
    for event in history.consumer_events:
        if isinstance(event, ReadRecord):
            place((event.topic, event.partition, event.offset), event.value_id, event)
    return log, conflicts


def _lost(history: History, read_values: set[str], max_examples: int) -> Finding[LostValue]:
    lost: set[str] = set()
    examples: list[LostValue] = []
    for send in history.sends:
        # An acknowledged send always names its partition (`HistoryBuilder` refuses one that
        # does not), so that test only narrows the type; its offset may be unknown.
        if send.error is not None or send.partition is None:
            continue
        if send.value_id in read_values or send.value_id in lost:
            continue
        lost.add(send.value_id)
        if len(examples) < max_examples:
            examples.append(
                LostValue(
                    value_id=send.value_id,
                    key=send.key,
                    sequence=send.sequence,
                    topic=send.topic,
                    partition=send.partition,
                    offset=send.offset,
                    acknowledged_s=send.time_s,
                )
            )
    return Finding(AnomalyKind.LOST, len(lost), tuple(examples))


def _duplicates(
    history: History,
    sent: Mapping[str, SendRecord],
    log: Mapping[Position, LogEntry],
    max_examples: int,
) -> tuple[Finding[Duplicate], Finding[Duplicate]]:
    first_position: dict[str, Position] = {}
    more_positions: dict[str, list[Position]] = {}
    for position, (value_id, _) in log.items():
        first = first_position.setdefault(value_id, position)
        if first != position:
            more_positions.setdefault(value_id, [first]).append(position)
    duplicated: list[Duplicate] = []
    tolerated: list[Duplicate] = []
    for value_id, positions in more_positions.items():
        send = sent.get(value_id)
        producer = history.producers.get(send.producer) if send is not None else None
        duplicate = Duplicate(
            value_id=value_id,
            producer=producer.producer if producer is not None else None,
            positions=tuple(sorted(positions)),
        )
        (tolerated if producer is not None and not producer.idempotent else duplicated).append(
            duplicate
        )
    return (
        Finding(AnomalyKind.DUPLICATED, len(duplicated), tuple(duplicated[:max_examples])),
        Finding(AnomalyKind.TOLERATED_DUPLICATE, len(tolerated), tuple(tolerated[:max_examples])),
    )


def _unexpected(
    reads: list[ReadRecord], sent: Mapping[str, SendRecord], max_examples: int
) -> Finding[UnexpectedRead]:
    unexpected: set[str] = set()
    examples: list[UnexpectedRead] = []
    for read in reads:
        if read.value_id in sent or read.value_id in unexpected:
            continue
        unexpected.add(read.value_id)
        if len(examples) < max_examples:
            examples.append(
                UnexpectedRead(
                    value_id=read.value_id,
                    key=read.key,
                    consumer=read.consumer,
                    topic=read.topic,
                    partition=read.partition,
                    offset=read.offset,
                    read_s=read.time_s,
                )
            )
    return Finding(AnomalyKind.UNEXPECTED, len(unexpected), tuple(examples))


def _reorders(
    sent: Mapping[str, SendRecord], log: Mapping[Position, LogEntry], max_examples: int
) -> Finding[Reorder]:
    partitions: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    for (topic, partition, offset), (value_id, _) in log.items():
        partitions[(topic, partition)][offset] = value_id
    count = 0
    examples: list[Reorder] = []
    for (topic, partition), values in partitions.items():
        highest: dict[str, tuple[int, int]] = {}  # key -> (sequence, offset)
        placed: set[str] = set()
        for offset in sorted(values):
            value_id = values[offset]
            send = sent.get(value_id)
            # A value not sent is unexpected; a value's second copy is a duplicate: each has
            # its own finding, and neither says anything about the order of the key.
            if send is None or value_id in placed:
                continue
            placed.add(value_id)
            previous = highest.get(send.key)
            if previous is not None and send.sequence < previous[0]:
                count += 1
                if len(examples) < max_examples:
                    examples.append(
                        Reorder(
                            topic=topic,
                            partition=partition,
                            key=send.key,
                            offset=offset,
                            sequence=send.sequence,
                            previous_offset=previous[1],
                            previous_sequence=previous[0],
                        )
                    )
            else:
                highest[send.key] = (send.sequence, offset)
    return Finding(AnomalyKind.REORDERED, count, tuple(examples))


def _who(record: SendRecord | ReadRecord) -> str:
    if isinstance(record, SendRecord):
        return f"acknowledged to producer {record.producer}"
    return f"read by consumer {record.consumer}"


def _inconsistent(
    conflicts: Mapping[Position, Mapping[str, SendRecord | ReadRecord]], max_examples: int
) -> Finding[OffsetConflict]:
    examples = [
        OffsetConflict(
            topic=topic,
            partition=partition,
            offset=offset,
            seen=tuple((value_id, _who(record)) for value_id, record in seen.items()),
        )
        for (topic, partition, offset), seen in list(conflicts.items())[:max_examples]
    ]
    return Finding(AnomalyKind.INCONSISTENT_OFFSETS, len(conflicts), tuple(examples))


def _non_monotonic(history: History, max_examples: int) -> Finding[NonMonotonicPoll]:
    last: dict[tuple[str, str, int], int] = {}  # (consumer, topic, partition) -> offset
    count = 0
    examples: list[NonMonotonicPoll] = []
    for event in history.consumer_events:
        if not isinstance(event, ReadRecord):
            for partition in event.partitions:
                last.pop((event.consumer, event.topic, partition), None)
            continue
        where = (event.consumer, event.topic, event.partition)
        previous = last.get(where)
        last[where] = event.offset
        if previous is not None and event.offset <= previous:
            count += 1
            if len(examples) < max_examples:
                examples.append(
                    NonMonotonicPoll(
                        consumer=event.consumer,
                        topic=event.topic,
                        partition=event.partition,
                        offset=event.offset,
                        previous_offset=previous,
                        read_s=event.time_s,
                    )
                )
    return Finding(AnomalyKind.NON_MONOTONIC_POLL, count, tuple(examples))


def _availability(history: History, isr_complete: Mapping[str, float]) -> Availability:
    ack_times = sorted(s.time_s for s in history.sends if s.error is None and s.time_s is not None)
    longest: Stall | None = None
    for before, after in itertools.pairwise(ack_times):
        if longest is None or after - before > longest.seconds:
            longest = Stall(after_ack_s=before, next_ack_s=after, seconds=after - before)
    timings = []
    for fault in history.faults:
        index = bisect.bisect_left(ack_times, fault.started_s)
        first_ack = ack_times[index] if index < len(ack_times) else None
        complete = isr_complete.get(fault.fault_id)
        timings.append(
            FaultTiming(
                fault_id=fault.fault_id,
                fault=fault.fault,
                target=fault.target,
                started_s=fault.started_s,
                healed_s=fault.healed_s,
                first_ack_after_start_s=first_ack,
                unavailable_s=None if first_ack is None else first_ack - fault.started_s,
                isr_complete_s=complete,
                recovery_s=(
                    None
                    if complete is None or fault.healed_s is None
                    else complete - fault.healed_s
                ),
            )
        )
    return Availability(longest_stall=longest, faults=tuple(timings))
