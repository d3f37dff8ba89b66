from __future__ import annotations

import socket
import time

import pytest

from management_plane.errors import KaasError
from management_plane.workload import create_topic, decode, encode, verify_per_key_order

pytestmark = pytest.mark.unit


def test_value_encoding_round_trips_keys_with_colons() -> None:
    assert decode(encode("a:b", 42)) == ("a:b", 42)


@pytest.mark.parametrize(
    ("records", "missing", "duplicates", "out_of_order"),
    [
        ([[("a", 0), ("a", 1), ("b", 0)], [("b", 1)]], 0, 0, 0),
        ([[("a", 0), ("b", 0)], [("b", 1)]], 1, 0, 0),  # a:1 never arrived
        ([[("a", 0), ("a", 1), ("a", 1), ("b", 0), ("b", 1)]], 0, 1, 1),  # a:1 twice
        ([[("a", 1), ("a", 0), ("b", 0), ("b", 1)]], 0, 0, 1),  # a reordered
        ([[("a", 0), ("a", 1), ("b", 0), ("b", 1), ("zz", 0)]], 0, 1, 0),  # a key never sent
    ],
)
def test_verification_counts_each_kind_of_fault(
    records: list[list[tuple[str, int]]], missing: int, duplicates: int, out_of_order: int
) -> None:
    result = verify_per_key_order({"a": 2, "b": 2}, records)
    assert (result.missing, result.duplicates, result.out_of_order_keys) == (
        missing,
        duplicates,
        out_of_order,
    )
    assert result.exactly_once_in_order == (missing == duplicates == out_of_order == 0)


def test_create_topic_keeps_asking_until_its_deadline_and_then_names_the_topic() -> None:
    # A loopback port nothing listens on: every attempt fails retriably (all brokers down,
    # timed out), so create_topic asks again until its deadline instead of giving up or
    # hanging, and its error names the topic and the last reason.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(KaasError, match=r"cannot create topic t-unreachable within 4 s"):
        create_topic({"bootstrap.servers": f"127.0.0.1:{port}"}, "t-unreachable", 1, 1, timeout_s=4)
    assert 3 <= time.monotonic() - started < 30
