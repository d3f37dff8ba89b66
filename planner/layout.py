"""LAYOUT.json: parsing with errors that name the offending entry, and writing.

The format is documented by planner/schemas/layout.schema.json. Only broker ids, racks and
replica lists are required; defaults: state active, sizes and rates 1, capacity unlimited.
Parsing is hand-written (not a schema validator) because it must name the entry at fault
in words and must read a 100,000-partition layout in well under a second.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.model import UNLIMITED, Broker, BrokerState, Capacity, Cluster, Partition

LAYOUT_SCHEMA_FILE = Path(__file__).parent / "schemas" / "layout.schema.json"

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
"""Kafka's legal topic names (also safe as a ZooKeeper path segment)."""

_TOP_KEYS = frozenset({"version", "brokers", "partitions", "min_insync_replicas"})
_BROKER_KEYS = frozenset({"id", "rack", "state", "capacity"})
_CAPACITY_KEYS = ("disk_bytes", "nw_in_bytes_per_s", "nw_out_bytes_per_s")
_PARTITION_KEYS = frozenset(
    {
        "topic",
        "partition",
        "replicas",
        "size_bytes",
        "bytes_in_per_s",
        "bytes_out_per_s",
        "min_insync_replicas",
    }
)


class LayoutError(PlannerError, ValueError):
    """The layout cannot be used; the message names the entry at fault."""


def load_layout(path: Path | str) -> Cluster:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LayoutError(f"cannot read layout {path}: {exc.strerror or exc}") from None
    return parse_layout_text(text, source=str(path))


def parse_layout_text(text: str, source: str = "layout") -> Cluster:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LayoutError(
            f"{source} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return parse_layout(document)


def parse_layout(document: Any) -> Cluster:
    if not isinstance(document, Mapping):
        raise LayoutError(f"layout must be a JSON object, got {_kind(document)}")
    _reject_unknown(document, _TOP_KEYS, "layout")
    version = document.get("version", 1)
    if version != 1:
        raise LayoutError(f"layout: version {version!r} is not supported (only 1)")
    for key in ("brokers", "partitions"):
        if key not in document:
            raise LayoutError(f"layout: missing required key '{key}'")
        if not isinstance(document[key], list):
            raise LayoutError(f"layout: '{key}' must be a list, got {_kind(document[key])}")
    brokers = tuple(_parse_broker(entry, i) for i, entry in enumerate(document["brokers"]))
    if not brokers:
        raise LayoutError("layout: 'brokers' is empty")
    seen_brokers: dict[int, int] = {}
    for index, broker in enumerate(brokers):
        if broker.id in seen_brokers:
            raise LayoutError(
                f"brokers[{index}]: duplicate broker id {broker.id} "
                f"(also brokers[{seen_brokers[broker.id]}])"
            )
        seen_brokers[broker.id] = index
    default_min_isr = document.get("min_insync_replicas")
    if default_min_isr is not None:
        default_min_isr = _positive_int(default_min_isr, "layout: 'min_insync_replicas'")
    partitions: list[Partition] = []
    seen_partitions: dict[tuple[str, int], int] = {}
    for index, entry in enumerate(document["partitions"]):
        partition = _parse_partition(entry, index, seen_brokers)
        partition_key = (partition.topic, partition.partition)
        if partition_key in seen_partitions:
            raise LayoutError(
                f"partitions[{index}]: duplicate partition {partition.name} "
                f"(also partitions[{seen_partitions[partition_key]}])"
            )
        seen_partitions[partition_key] = index
        partitions.append(partition)
    return Cluster(brokers, tuple(partitions), default_min_isr)


def _parse_broker(entry: Any, index: int) -> Broker:
    where = f"brokers[{index}]"
    if not isinstance(entry, Mapping):
        raise LayoutError(f"{where}: expected an object, got {_kind(entry)}")
    if "id" in entry:
        where = f"brokers[{index}] (id {entry['id']!r})"
    _reject_unknown(entry, _BROKER_KEYS, where)
    if "id" not in entry:
        raise LayoutError(f"{where}: missing required key 'id'")
    broker_id = _int(entry["id"], f"{where}: 'id'")
    if broker_id < 0:
        raise LayoutError(f"{where}: 'id' must be >= 0")
    rack = entry.get("rack")
    if not isinstance(rack, str) or not rack:
        raise LayoutError(f"{where}: 'rack' must be a non-empty string, got {rack!r}")
    state_text = entry.get("state", BrokerState.ACTIVE.value)
    try:
        state = BrokerState(state_text)
    except ValueError:
        allowed = ", ".join(s.value for s in BrokerState)
        raise LayoutError(f"{where}: 'state' {state_text!r} is not one of {allowed}") from None
    capacity = _parse_capacity(entry.get("capacity", {}), where)
    return Broker(broker_id, rack, state, capacity)


def _parse_capacity(entry: Any, where: str) -> Capacity:
    if not isinstance(entry, Mapping):
        raise LayoutError(f"{where}: 'capacity' must be an object, got {_kind(entry)}")
    _reject_unknown(entry, frozenset(_CAPACITY_KEYS), f"{where} capacity")
    values = []
    for key in _CAPACITY_KEYS:
        value = entry.get(key)
        if value is None:
            values.append(UNLIMITED)
            continue
        number = _number(value, f"{where}: capacity '{key}'")
        if number <= 0:
            raise LayoutError(f"{where}: capacity '{key}' must be > 0, got {value!r}")
        values.append(number)
    return Capacity(values[0], values[1], values[2])


def _parse_partition(entry: Any, index: int, broker_ids: Mapping[int, int]) -> Partition:
    where = f"partitions[{index}]"
    if not isinstance(entry, Mapping):
        raise LayoutError(f"{where}: expected an object, got {_kind(entry)}")
    topic = entry.get("topic")
    if not isinstance(topic, str) or not TOPIC_NAME.match(topic):
        raise LayoutError(
            f"{where}: 'topic' must be a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -), "
            f"got {topic!r}"
        )
    if "partition" not in entry:
        raise LayoutError(f"{where} (topic {topic!r}): missing required key 'partition'")
    number = _int(entry["partition"], f"{where} (topic {topic!r}): 'partition'")
    if number < 0:
        raise LayoutError(f"{where} (topic {topic!r}): 'partition' must be >= 0")
    where = f"{where} ({topic}-{number})"
    _reject_unknown(entry, _PARTITION_KEYS, where)
    replicas_value = entry.get("replicas")
    if not isinstance(replicas_value, list) or not replicas_value:
        raise LayoutError(f"{where}: 'replicas' must be a non-empty list of broker ids")
    replicas = tuple(_int(r, f"{where}: replica") for r in replicas_value)
    for replica in replicas:
        if replica not in broker_ids:
            raise LayoutError(f"{where}: replica {replica} is not a broker in 'brokers'")
    if len(set(replicas)) != len(replicas):
        raise LayoutError(f"{where}: 'replicas' {list(replicas)} names a broker twice")
    size = _int(entry.get("size_bytes", 1), f"{where}: 'size_bytes'")
    if size < 0:
        raise LayoutError(f"{where}: 'size_bytes' must be >= 0, got {size}")
    rates = []
    for key in ("bytes_in_per_s", "bytes_out_per_s"):
        rate = _number(entry.get(key, 1.0), f"{where}: '{key}'")
        if rate < 0:
            raise LayoutError(f"{where}: '{key}' must be >= 0, got {rate}")
        rates.append(rate)
    min_isr = entry.get("min_insync_replicas")
    if min_isr is not None:
        min_isr = _positive_int(min_isr, f"{where}: 'min_insync_replicas'")
    return Partition(topic, number, replicas, size, rates[0], rates[1], min_isr)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LayoutError(f"{what} must be an integer, got {value!r}")
    return value


def _positive_int(value: Any, what: str) -> int:
    number = _int(value, what)
    if number < 1:
        raise LayoutError(f"{what} must be >= 1, got {number}")
    return number


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise LayoutError(f"{what} must be a finite number, got {value!r}")
    return float(value)


def _reject_unknown(entry: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise LayoutError(
            f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
        )


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), repr(value))


def layout_document(cluster: Cluster) -> dict[str, Any]:
    """The cluster as a LAYOUT.json document (unlimited capacities left out)."""
    brokers = []
    for broker in cluster.brokers:
        capacity = {
            key: _plain(getattr(broker.capacity, key))
            for key in _CAPACITY_KEYS
            if getattr(broker.capacity, key) != UNLIMITED
        }
        entry: dict[str, Any] = {"id": broker.id, "rack": broker.rack}
        if broker.state is not BrokerState.ACTIVE:
            entry["state"] = broker.state.value
        if capacity:
            entry["capacity"] = capacity
        brokers.append(entry)
    partitions = []
    for p in cluster.partitions:
        entry = {
            "topic": p.topic,
            "partition": p.partition,
            "replicas": list(p.replicas),
            "size_bytes": p.size_bytes,
            "bytes_in_per_s": _plain(p.bytes_in_per_s),
            "bytes_out_per_s": _plain(p.bytes_out_per_s),
        }
        if p.min_insync_replicas is not None:
            entry["min_insync_replicas"] = p.min_insync_replicas
        partitions.append(entry)
    document: dict[str, Any] = {"version": 1, "brokers": brokers, "partitions": partitions}
    if cluster.default_min_insync_replicas is not None:
        document["min_insync_replicas"] = cluster.default_min_insync_replicas
    return document


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value
