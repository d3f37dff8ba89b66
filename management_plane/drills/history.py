"""A drill's history: what the producers sent and got acknowledged, what every consumer read,
and when each fault was injected and healed. The checker (`checker.py`) judges it.

The history is JSON lines, one record per line; the first line says the schema:

    {"kind": "history", "schema_version": 1}
    {"kind": "producer", "producer": "p1", "idempotent": true}
    {"kind": "fault", "fault_id": "f1", "fault": "broker-sigkill", "target": "broker 2",
     "started_s": 1767225600.0, "healed_s": 1767225630.0}
    {"kind": "send", "producer": "p1", "topic": "t", "key": "k-1", "sequence": 0,
     "value_id": "k-1:0", "partition": 3, "offset": 17, "time_s": 1767225600.2, "error": null}
    {"kind": "assigned", "consumer": "c1", "group": "g", "topic": "t", "partitions": [0, 3],
     "time_s": 1767225600.3}
    {"kind": "read", "consumer": "c1", "group": "g", "topic": "t", "partition": 3,
     "offset": 17, "key": "k-1", "value_id": "k-1:0", "time_s": 1767225600.4}

Every field is present on its line (null where allowed). Times are seconds on one clock for
the whole history. A send without an error was
acknowledged at (partition, offset); a send with an error may or may not have been written.
A consumer's reads and assignments are recorded in the order its polls returned them.
`parse_history` is the one parser: it refuses a bad line naming its number and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from management_plane.errors import KaasError

HISTORY_SCHEMA_VERSION = 1


class HistoryError(KaasError):
    """A history the checker cannot judge: a malformed line or records that contradict."""


class RecordKind(StrEnum):
    HISTORY = "history"  # the header line: the schema version
    PRODUCER = "producer"  # a producer and whether it was idempotent
    FAULT = "fault"  # a fault window
    SEND = "send"  # one produce attempt and its outcome
    ASSIGNED = "assigned"  # partitions (re)assigned to a consumer
    READ = "read"  # one record a consumer's poll returned


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    producer: str
    idempotent: bool


@dataclass(frozen=True, slots=True)
class FaultWindow:
    fault_id: str  # unique within the history
    fault: str  # what was done, e.g. "broker-sigkill"
    target: str  # to what, e.g. "broker 2"
    started_s: float
    healed_s: float | None  # None: not healed within the history


@dataclass(frozen=True, slots=True)
class SendRecord:
    producer: str
    topic: str
    key: str
    sequence: int  # per key, 0, 1, 2... in the order the producer sent them
    value_id: str  # names the message's value; the same for every attempt of one message
    partition: int | None  # where it was acknowledged; None when not acknowledged
    offset: int | None  # also None for an acknowledged duplicate (see HistoryBuilder)
    time_s: float | None  # when the outcome arrived; None when the recorder had no clock
    error: str | None  # None: acknowledged

    @property
    def acknowledged(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class AssignmentRecord:
    """Partitions given to a consumer: its next read of each may start anywhere (the group's
    committed offset), so offsets going back after this are a redelivery, not an anomaly."""

    consumer: str
    group: str
    topic: str
    partitions: tuple[int, ...]
    time_s: float


@dataclass(frozen=True, slots=True)
class ReadRecord:
    consumer: str
    group: str
    topic: str
    partition: int
    offset: int
    key: str
    value_id: str
    time_s: float  # when the poll returned it


HistoryRecord = ProducerInfo | FaultWindow | SendRecord | AssignmentRecord | ReadRecord
ConsumerEvent = ReadRecord | AssignmentRecord


@dataclass(frozen=True)
class History:
    """A checked set of records: build it with `History.of` (or `parse_history`), which
    refuses records that contradict each other."""

    producers: Mapping[str, ProducerInfo]
    faults: tuple[FaultWindow, ...]
    sends: tuple[SendRecord, ...]
    consumer_events: tuple[ConsumerEvent, ...]  # in the order each consumer saw them

    @classmethod
    def of(cls, records: Iterable[HistoryRecord]) -> History:
        builder = HistoryBuilder()
        for record in records:
            builder.add(record)
        return builder.build()

    def records(self) -> Iterator[HistoryRecord]:
        yield from self.producers.values()
        yield from self.faults
        yield from self.sends
        yield from self.consumer_events


@dataclass
class HistoryBuilder:
    """Adds records one at a time and refuses the first that contradicts an earlier one:
    a send by an undeclared producer, one value id sent as two messages, a fault id twice."""

    producers: dict[str, ProducerInfo] = field(default_factory=dict)
    faults: list[FaultWindow] = field(default_factory=list)
    sends: list[SendRecord] = field(default_factory=list)
    consumer_events: list[ConsumerEvent] = field(default_factory=list)
    _fault_ids: set[str] = field(default_factory=set)
    _messages: dict[str, tuple[str, str, int]] = field(default_factory=dict)

    def add(self, record: HistoryRecord) -> None:
        if isinstance(record, ReadRecord | AssignmentRecord):
            self.consumer_events.append(record)
        elif isinstance(record, SendRecord):
            self._add_send(record)
        elif isinstance(record, ProducerInfo):
            if record.producer in self.producers:
                raise HistoryError(f"producer {record.producer!r} is declared twice")
            self.producers[record.producer] = record
        else:
            if record.fault_id in self._fault_ids:
                raise HistoryError(f"fault id {record.fault_id!r} appears twice")
            if record.healed_s is not None and record.healed_s < record.started_s:
                raise HistoryError(
                    f"fault {record.fault_id!r} healed_s {record.healed_s} is before its "
                    f"started_s {record.started_s}"
                )
            self._fault_ids.add(record.fault_id)
            self.faults.append(record)

    def _add_send(self, send: SendRecord) -> None:
        if send.producer not in self.producers:
            raise HistoryError(
                f"send of {send.value_id!r} names producer {send.producer!r}, "
                "which no earlier producer record declares"
            )
        # The offset may be missing: librdkafka acknowledges an idempotent producer's retry
        # that the broker found a duplicate of a stored batch without telling where it is.
        if send.acknowledged and send.partition is None:
            raise HistoryError(
                f"send of {send.value_id!r} has no error, so it was acknowledged, "
                "but it lacks its partition"
            )
        message = (send.topic, send.key, send.sequence)
        known = self._messages.setdefault(send.value_id, message)
        if known != message:
            raise HistoryError(
                f"value id {send.value_id!r} is sent as two messages: topic, key, sequence "
                f"{known} and {message}"
            )
        self.sends.append(send)

    def build(self) -> History:
        return History(
            producers=dict(self.producers),
            faults=tuple(self.faults),
            sends=tuple(self.sends),
            consumer_events=tuple(self.consumer_events),
        )


# --- JSON lines ------------------------------------------------------------------------


def header_line() -> str:
    return json.dumps({"kind": RecordKind.HISTORY.value, "schema_version": HISTORY_SCHEMA_VERSION})


def encode_record(record: HistoryRecord) -> str:
    """One record as one JSON line (no newline)."""
    if isinstance(record, ProducerInfo):
        body: dict[str, object] = {"producer": record.producer, "idempotent": record.idempotent}
        kind = RecordKind.PRODUCER
    elif isinstance(record, FaultWindow):
        body = {
            "fault_id": record.fault_id,
            "fault": record.fault,
            "target": record.target,
            "started_s": record.started_s,
            "healed_s": record.healed_s,
        }
        kind = RecordKind.FAULT
    elif isinstance(record, SendRecord):
        body = {
            "producer": record.producer,
            "topic": record.topic,
            "key": record.key,
            "sequence": record.sequence,
            "value_id": record.value_id,
            "partition": record.partition,
            "offset": record.offset,
            "time_s": record.time_s,
            "error": record.error,
        }
        kind = RecordKind.SEND
    elif isinstance(record, AssignmentRecord):
        body = {
            "consumer": record.consumer,
            "group": record.group,
            "topic": record.topic,
            "partitions": list(record.partitions),
            "time_s": record.time_s,
        }
        kind = RecordKind.ASSIGNED
    else:
        body = {
            "consumer": record.consumer,
            "group": record.group,
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "key": record.key,
            "value_id": record.value_id,
            "time_s": record.time_s,
        }
        kind = RecordKind.READ
    return json.dumps({"kind": kind.value, **body})


def history_lines(history: History) -> Iterator[str]:
    """The history as JSON lines (each without its newline), header first."""
    yield header_line()
    for record in history.records():
        yield encode_record(record)


def parse_history(lines: Iterable[str]) -> History:
    """Parse a history's JSON lines. Blank lines are skipped; any other bad line is refused
    with a `HistoryError` naming its number (counting from 1) and the field."""
    builder = HistoryBuilder()
    header_seen = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = _load_line(line, number)
        kind = _kind(value, number)
        if not header_seen:
            if kind is not RecordKind.HISTORY:
                raise HistoryError(
                    f"history line {number}: the first record must be the header "
                    f'{{"kind": "history", "schema_version": {HISTORY_SCHEMA_VERSION}}}; '
                    f"got kind {kind.value!r}"
                )
            version = _Fields(value, number, kind).integer("schema_version")
            if version != HISTORY_SCHEMA_VERSION:
                raise HistoryError(
                    f"history line {number}: schema_version {version} is not supported "
                    f"(this reader knows {HISTORY_SCHEMA_VERSION})"
                )
            header_seen = True
            continue
        if kind is RecordKind.HISTORY:
            raise HistoryError(f"history line {number}: a second header")
        record = parse_record(value, number)
        try:
            builder.add(record)
        except HistoryError as exc:
            raise HistoryError(f"history line {number}: {exc}") from None
    if not header_seen:
        raise HistoryError("history is empty: it has no header line")
    return builder.build()


def parse_record(value: Mapping[str, object], number: int) -> HistoryRecord:
    """One decoded line (not the header) as its record; `number` is for the error message."""
    kind = _kind(value, number)
    read = _Fields(value, number, kind)
    if kind is RecordKind.PRODUCER:
        return ProducerInfo(producer=read.text("producer"), idempotent=read.boolean("idempotent"))
    if kind is RecordKind.FAULT:
        return FaultWindow(
            fault_id=read.text("fault_id"),
            fault=read.text("fault"),
            target=read.text("target"),
            started_s=read.time("started_s"),
            healed_s=read.optional_time("healed_s"),
        )
    if kind is RecordKind.SEND:
        error = read.nullable("error")
        if error is not None and not (isinstance(error, str) and error):
            raise read.refuse("error", "must be null (acknowledged) or a non-empty string", error)
        return SendRecord(
            producer=read.text("producer"),
            topic=read.text("topic"),
            key=read.text("key"),
            sequence=read.integer("sequence"),
            value_id=read.text("value_id"),
            partition=read.optional_integer("partition"),
            offset=read.optional_integer("offset"),
            time_s=read.optional_time("time_s"),
            error=error,
        )
    if kind is RecordKind.ASSIGNED:
        return AssignmentRecord(
            consumer=read.text("consumer"),
            group=read.text("group"),
            topic=read.text("topic"),
            partitions=read.integers("partitions"),
            time_s=read.time("time_s"),
        )
    if kind is RecordKind.READ:
        return ReadRecord(
            consumer=read.text("consumer"),
            group=read.text("group"),
            topic=read.text("topic"),
            partition=read.integer("partition"),
            offset=read.integer("offset"),
            key=read.text("key"),
            value_id=read.text("value_id"),
            time_s=read.time("time_s"),
        )
    raise HistoryError(f"history line {number}: a header is not a record")


def _load_line(line: str, number: int) -> dict[str, object]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise HistoryError(f"history line {number}: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise HistoryError(
            f"history line {number}: must be a JSON object; got {type(value).__name__}"
        )
    return value


def _kind(value: Mapping[str, object], number: int) -> RecordKind:
    kind = value.get("kind")
    try:
        return RecordKind(str(kind))
    except ValueError:
        known = ", ".join(k.value for k in RecordKind)
        raise HistoryError(
            f"history line {number}: kind must be one of {known}; got {kind!r}"
        ) from None


@dataclass(frozen=True, slots=True)
class _Fields:
    """Typed access to one line's fields; every refusal names line, kind and field."""

    value: Mapping[str, object]
    number: int
    kind: RecordKind

    def refuse(self, name: str, requirement: str, got: object) -> HistoryError:
        return HistoryError(
            f"history line {self.number}: {self.kind.value}.{name} {requirement}; got {got!r}"
        )

    def _get(self, name: str) -> object:
        if name not in self.value:
            raise HistoryError(f"history line {self.number}: {self.kind.value}.{name} is missing")
        return self.value[name]

    def nullable(self, name: str) -> object:
        """A field that must be present and may be null."""
        return self._get(name)

    def text(self, name: str) -> str:
        got = self._get(name)
        if not isinstance(got, str) or not got:
            raise self.refuse(name, "must be a non-empty string", got)
        return got

    def boolean(self, name: str) -> bool:
        got = self._get(name)
        if not isinstance(got, bool):
            raise self.refuse(name, "must be true or false", got)
        return got

    def integer(self, name: str) -> int:
        got = self._get(name)
        if isinstance(got, bool) or not isinstance(got, int) or got < 0:
            raise self.refuse(name, "must be a non-negative integer", got)
        return got

    def optional_integer(self, name: str) -> int | None:
        return None if self._get(name) is None else self.integer(name)

    def integers(self, name: str) -> tuple[int, ...]:
        got = self._get(name)
        if not isinstance(got, list) or any(
            isinstance(item, bool) or not isinstance(item, int) or item < 0 for item in got
        ):
            raise self.refuse(name, "must be a list of non-negative integers", got)
        return tuple(got)

    def time(self, name: str) -> float:
        got = self._get(name)
        if isinstance(got, bool) or not isinstance(got, int | float) or not math.isfinite(got):
            raise self.refuse(name, "must be a number of seconds", got)
        return float(got)

    def optional_time(self, name: str) -> float | None:
        return None if self._get(name) is None else self.time(name)
