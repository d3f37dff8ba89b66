"""The controller's join check reads the member record's state, registration and spec
generation, never the sentence (ZooKeeper and the database replaced by fakes)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from management_plane.service.controller import Controller
from management_plane.service.db import OperationRow
from management_plane.service.operations import DONE, WAIT
from planner.contracts.member import MemberReadings, MemberRecord, MemberRole, MemberState
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit

SPEC = ClusterSpec(cluster="c", kafka_version="3.9.2", broker_count=3, zones=("z",), generation=5)
JOINED = MemberRecord(
    broker_id=3,
    vm_id="c/vm4",
    address="127.0.2.4",
    jolokia_url="http://127.0.2.4:8778/jolokia/",
    agent_version="0.1.0",
    state=MemberState.HEALTHY,
    sentence="broker 3: healthy, config at spec generation 5",
    registered=True,
    spec_generation=5,
    pending_restart=False,
    role=MemberRole.MEMBER,
    updated_at_ms=1,
)


class FakeDatabase:
    def __init__(self) -> None:
        self.vms = {
            "c/vm4": {
                "vm_id": "c/vm4",
                "address": "127.0.2.4",
                "state": "joining",
                "broker_id": None,
            }
        }

    def vm(self, vm_id: str) -> dict[str, Any] | None:
        return self.vms.get(vm_id)

    def update_vm(self, vm_id: str, **values: Any) -> None:
        self.vms[vm_id].update(values)


class FakeClusterIO:
    def __init__(self, readings: MemberReadings, registered: set[int]) -> None:
        self.readings, self.registered = readings, registered

    def members(self) -> MemberReadings:
        return self.readings

    def registered_brokers(self) -> set[int]:
        return self.registered

    def read_spec(self) -> ClusterSpec:
        return SPEC


def operation() -> OperationRow:
    return OperationRow(
        1, "c", "replace_vm", {}, "running", ["wait_joined:0"], 0,
        {"new_vms": {"0": ["c/vm4"]}}, "", "admin", 0.0, 0.0, 0.0,
    )  # fmt: skip


def join_check(readings: MemberReadings, registered: set[int]) -> tuple[str, str, FakeDatabase]:
    db = FakeDatabase()
    controller = Controller(db, provider=None)  # type: ignore[arg-type]
    io = FakeClusterIO(readings, registered)
    controller._io = lambda cluster, exclude=(): io  # type: ignore[method-assign, assignment, return-value]
    outcome = controller.step_wait_joined(operation(), 0)
    return outcome.kind, outcome.message, db


@pytest.mark.parametrize(
    ("record", "registered", "status", "says"),
    [
        (JOINED, {3}, DONE, "c/vm4 joined as brokers [3]"),
        (JOINED, set(), WAIT, "c/vm4 (broker 3, healthy"),  # Kafka has not registered it
        (replace(JOINED, registered=False), {3}, WAIT, "c/vm4 (broker 3, healthy"),
        # The sentence says healthy; the state does not: still waiting.
        (replace(JOINED, state=MemberState.STARTING), {3}, WAIT, "starting, spec generation"),
        (replace(JOINED, state=MemberState.UNKNOWN), {3}, WAIT, "unknown"),
        (replace(JOINED, spec_generation=4), {3}, WAIT, "spec generation 4/5"),
        # Healthy without the word in the sentence: joined.
        (replace(JOINED, sentence="broker 3: all good"), {3}, DONE, "joined as brokers [3]"),
    ],
)
def test_join_check_reads_state_registration_and_generation(
    record: MemberRecord, registered: set[int], status: str, says: str
) -> None:
    found, message, db = join_check(MemberReadings({3: record}), registered)
    assert (found, says in message) == (status, True), message
    joined = db.vms["c/vm4"]
    assert (joined["state"], joined["broker_id"]) == (
        ("running", 3) if status == DONE else ("joining", None)
    )


def test_an_unreadable_record_is_not_joined_and_is_named() -> None:
    readings = MemberReadings(unreadable={3: "member.schema_version is 9, newer than ..."})
    found, message, _ = join_check(readings, {3})
    assert found == WAIT
    assert "c/vm4: agent not joined yet" in message
    assert "member.schema_version is 9" in message
