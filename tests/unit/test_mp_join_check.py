"""The controller's join check reads the member record's state, registration and spec
generation, never the sentence (the cluster and the provider are fakes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from management_plane.service.db import OperationRow
from management_plane.service.operations import RUNNING, SUCCEEDED, OperationKind
from planner.contracts.member import MemberReadings, MemberState
from tests.unit.fake_cluster import BootstrappingProvider
from tests.unit.test_mp_controller import ZONES, World

pytestmark = pytest.mark.unit

PARAMS = {
    "broker_count": 3,
    "zones": list(ZONES),
    "instance_type": "small",
    "kafka_version": "3.8.1",
}


def at_wait_joined(tmp_path: Path) -> tuple[World, OperationRow]:
    """A new cluster whose three agents have joined; the test then spoils broker 2's record."""
    world = World(tmp_path, BootstrappingProvider())
    world.add_cluster()
    op = world.run(world.queue(OperationKind.CREATE_CLUSTER, PARAMS))
    assert str(op.step) == "wait_joined"
    for broker_id, vm in enumerate(world.db.cluster_vms("orders")):
        world.cluster.agent_joins(vm["address"], broker_id)
    return world, op


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        # The sentence says healthy, the state does not: still waiting.
        ({"state": MemberState.STARTING, "sentence": "healthy soon"}, "starting, spec generation"),
        ({"state": MemberState.UNKNOWN}, "unknown, spec generation"),
        ({"registered": False}, "(broker 2, healthy"),
        ({"spec_generation": 0}, "spec generation 0/1"),
    ],
)
def test_a_member_not_healthy_registered_and_current_is_not_joined(
    tmp_path: Path, changes: dict[str, Any], says: str
) -> None:
    world, op = at_wait_joined(tmp_path)
    spoiled = world.cluster.member_znodes[2]
    world.cluster.member_znodes[2] = replace(spoiled, **changes)
    op = world.run(op)
    assert str(op.step) == "wait_joined" and op.status == RUNNING
    assert says in op.message, op.message
    world.cluster.member_znodes[2] = spoiled
    assert world.run(op).status == SUCCEEDED


def test_an_unreadable_record_is_not_joined_and_is_named(tmp_path: Path) -> None:
    world, op = at_wait_joined(tmp_path)
    records = dict(world.cluster.member_znodes)
    del records[2]
    reason = "member.schema_version is 9, newer than this reader knows (it reads 1, 2)"
    world.cluster.members = lambda: MemberReadings(records, {2: reason})  # type: ignore[method-assign]
    op = world.run(op)
    assert str(op.step) == "wait_joined" and op.status == RUNNING
    assert (
        "agent not joined yet (unreadable member records: broker 2: member.schema_version is 9"
        in (op.message)
    )
