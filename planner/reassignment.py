"""Kafka's reassignment JSON (the format kafka-reassign-partitions reads and writes), read
back against a layout: `kaas plan score --plan` and the agent check a plan before use."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.errors import PlannerError
from planner.model import Cluster


class ReassignmentError(PlannerError, ValueError):
    """The reassignment document cannot be applied; the message names the entry at fault."""


def load_reassignment(path: Path | str, cluster: Cluster) -> dict[tuple[str, int], list[int]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ReassignmentError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReassignmentError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return parse_reassignment(document, cluster)


def parse_reassignment(document: Any, cluster: Cluster) -> dict[tuple[str, int], list[int]]:
    """{(topic, partition): replicas} for a document that names only partitions and brokers
    the layout has, each partition once."""
    if not isinstance(document, Mapping):
        raise ReassignmentError(
            "reassignment must be a JSON object with 'version' and 'partitions'"
        )
    if document.get("version") != 1:
        raise ReassignmentError(
            f"reassignment: version {document.get('version')!r} is not supported (only 1)"
        )
    entries = document.get("partitions")
    if not isinstance(entries, list):
        raise ReassignmentError("reassignment: 'partitions' must be a list")
    known_partitions = {(p.topic, p.partition) for p in cluster.partitions}
    known_brokers = {b.id for b in cluster.brokers}
    assignment: dict[tuple[str, int], list[int]] = {}
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        if not isinstance(entry, Mapping):
            raise ReassignmentError(f"{where}: must be an object")
        topic, number, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not isinstance(number, int) or isinstance(number, bool):
            raise ReassignmentError(f"{where}: needs a string 'topic' and an integer 'partition'")
        if not isinstance(replicas, list) or not replicas:
            raise ReassignmentError(
                f"{where} ({topic}-{number}): 'replicas' must be a non-empty list"
            )
        for broker in replicas:
            if not isinstance(broker, int) or isinstance(broker, bool):
                raise ReassignmentError(
                    f"{where} ({topic}-{number}): replica {broker!r} is not an id"
                )
            if broker not in known_brokers:
                raise ReassignmentError(
                    f"{where} ({topic}-{number}): unknown broker {broker} (not in the layout)"
                )
        key = (topic, number)
        if key not in known_partitions:
            raise ReassignmentError(f"{where}: partition {topic}-{number} is not in the layout")
        if key in assignment:
            raise ReassignmentError(f"{where}: partition {topic}-{number} is listed twice")
        assignment[key] = list(replicas)
    return assignment
