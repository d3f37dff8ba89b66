"""LAYOUT.json and reassignment JSON: defaults, round trip, and errors naming the entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from planner.layout import (
    LAYOUT_SCHEMA_FILE,
    LayoutError,
    layout_document,
    load_layout,
    parse_layout,
)
from planner.model import UNLIMITED, BrokerState
from planner.reassignment import ReassignmentError, parse_reassignment

pytestmark = pytest.mark.unit

MINIMAL: dict[str, Any] = {
    "brokers": [{"id": 1, "rack": "a"}, {"id": 2, "rack": "b"}],
    "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}],
}


def test_only_ids_racks_and_replicas_are_required() -> None:
    c = parse_layout(MINIMAL)
    assert c.brokers[0].state is BrokerState.ACTIVE
    assert c.brokers[0].capacity.disk_bytes == UNLIMITED
    assert c.partitions[0].size_bytes == 1 and c.partitions[0].replicas == (1, 2)


def test_round_trip_and_schema_agree() -> None:
    full = {
        "brokers": [
            {
                "id": 1,
                "rack": "a",
                "state": "draining",
                "capacity": {
                    "disk_bytes": 10**12,
                    "nw_in_bytes_per_s": 10**8,
                    "nw_out_bytes_per_s": 10**8,
                },
            },
            {"id": 2, "rack": "b"},
        ],
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "replicas": [2, 1],
                "size_bytes": 5,
                "bytes_in_per_s": 2.5,
                "bytes_out_per_s": 3,
            }
        ],
    }
    schema = json.loads(LAYOUT_SCHEMA_FILE.read_text())
    jsonschema.validate(full, schema)
    jsonschema.validate(MINIMAL, schema)
    document = layout_document(parse_layout(full))
    jsonschema.validate(document, schema)
    assert parse_layout(document) == parse_layout(full)


BAD = [
    (
        "unknown broker",
        {**MINIMAL, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 7]}]},
        "partitions[0]",
    ),
    (
        "duplicate partition",
        {**MINIMAL, "partitions": [MINIMAL["partitions"][0], MINIMAL["partitions"][0]]},
        "duplicate partition t-0",
    ),
    (
        "negative size",
        {
            **MINIMAL,
            "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "size_bytes": -1}],
        },
        "size_bytes",
    ),
    (
        "duplicate broker",
        {**MINIMAL, "brokers": [{"id": 1, "rack": "a"}, {"id": 1, "rack": "b"}]},
        "brokers[1]",
    ),
    ("missing rack", {**MINIMAL, "brokers": [{"id": 1}]}, "brokers[0]"),
    ("bad state", {**MINIMAL, "brokers": [{"id": 1, "rack": "a", "state": "gone"}]}, "brokers[0]"),
    ("unknown key", {**MINIMAL, "extra": 1}, "unknown key 'extra'"),
    ("no brokers", {"partitions": []}, "brokers"),
    ("not an object", [1, 2], "JSON object"),
]


@pytest.mark.parametrize(("case", "document", "named"), BAD, ids=[b[0] for b in BAD])
def test_invalid_layouts_name_the_offending_entry(case: str, document: Any, named: str) -> None:
    with pytest.raises(LayoutError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_layout(document)


def test_malformed_json_names_the_position(tmp_path: Path) -> None:
    path = tmp_path / "layout.json"
    path.write_text('{"brokers": [}')
    with pytest.raises(LayoutError, match=r"not valid JSON.*line 1 column"):
        load_layout(path)


def test_reassignment_is_checked_against_the_layout() -> None:
    c = parse_layout(MINIMAL)
    assert parse_reassignment(
        {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 1]}]}, c
    ) == {("t", 0): [2, 1]}
    for document, named in [
        (
            {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [9]}]},
            "unknown broker 9",
        ),
        (
            {"version": 1, "partitions": [{"topic": "u", "partition": 0, "replicas": [1]}]},
            "u-0 is not in the layout",
        ),
        ({"version": 2, "partitions": []}, "version 2"),
    ]:
        with pytest.raises(ReassignmentError, match=named):
            parse_reassignment(document, c)
