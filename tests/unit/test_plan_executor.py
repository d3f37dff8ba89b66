"""The elected planner's tick (`PlanExecutor.tick`) against fakes: planning, a batch started,
checked and finished, a plan superseded, a refused plan journaled once, moves resubmitted
after Kafka lost them, the stall remedy, and a plan cut to fit one ZooKeeper transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.plan_housekeeping import VERIFY_EVERY_S
from planner.contracts.spec import ClusterSpec
from tests.unit.agent_fakes import Rig, make_rig

pytestmark = pytest.mark.unit

# Broker 0 drains: every partition gives up its replica on it (two batches).
SPEC = ClusterSpec(
    cluster="c",
    kafka_version="3.9.2",
    broker_count=4,
    zones=("a", "b", "c"),
    draining_broker_ids=frozenset({0}),
    generation=2,
)
LIVE = {("t", n): (0, 1, 2) if n % 2 else (1, 2, 0) for n in range(6)}


def planner(tmp_path: Path, **settings: Any) -> Rig:
    rig = make_rig(tmp_path, SPEC, **settings)
    rig.seat.elected = True
    rig.cluster.live = dict(LIVE)
    rig.cluster.registered = frozenset({0, 1, 2, 3})
    rig.cluster.racks = {0: "a", 1: "b", 2: "c", 3: "a"}
    return rig


def tick(rig: Rig) -> str:
    rig.clock.advance(10)
    return rig.agent.plan_executor.tick()


def test_a_plan_is_made_stored_executed_batch_by_batch_and_finished(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    stored = tick(rig)
    assert stored.startswith("planner: stored plan 1 (2 batches, ")
    plan = rig.store.plan
    assert plan is not None and plan.batch_count == 2
    assert rig.zookeeper.journaled("plan_stored")[0]["reason"] == (
        "planning: first look (or a plan just finished)"
    )

    assert "plan 1 batch 1/2: moving" in tick(rig)
    progress = rig.store.progress
    assert progress is not None and progress.state == "executing"
    assert progress.started_batch == 0
    submitted = rig.reassigner.executed[-1]
    assert {(m.topic, m.partition, m.replicas) for m in submitted} == set(plan.batch(0))
    assert rig.zookeeper.journaled("reassign")[-1]["result"] == (
        f"{len(submitted)} partitions submitted"
    )

    # Kafka moves nothing yet: the batch is checked, not started again.
    assert "partitions at their new replicas after 10 s" in tick(rig)
    assert len(rig.reassigner.executed) == 1

    for move in submitted:
        rig.cluster.live[(move.topic, move.partition)] = move.replicas
    assert tick(rig).endswith(": batch done")
    assert rig.reassigner.verified[-1] == submitted  # confirmed, and throttles dropped
    assert set(rig.cluster.elections) == {(m.topic, m.partition) for m in submitted}
    progress = rig.store.progress
    assert progress is not None
    assert (progress.completed_batches, progress.started_batch) == (1, None)

    rig.reassigner.instant = True
    assert "plan 1 batch 2/2: moving" in tick(rig)
    assert tick(rig).endswith(": batch done")
    assert tick(rig) == "planner: plan 1: all 2 batches done"
    assert rig.store.progress is not None and rig.store.progress.state == "done"
    assert rig.zookeeper.journaled("plan_done")
    # Broker 0 holds nothing any more; the next tick plans again at once and holds.
    assert all(0 not in replicas for replicas in rig.cluster.live.values())
    assert tick(rig).startswith("planner: placement balanced (score")
    assert rig.store.plan is not None and rig.store.plan.plan_id == 1


def test_a_partition_moved_by_someone_else_supersedes_the_plan(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    plan = rig.store.plan
    assert plan is not None
    topic, number, _ = plan.batch(0)[0]
    rig.cluster.live[(topic, number)] = (3, 2, 1)
    assert f"{topic}-{number} has replicas [3, 2, 1]" in tick(rig)
    assert rig.store.progress is not None and rig.store.progress.state == "superseded"
    assert rig.zookeeper.journaled("plan_superseded")[0]["result"] == "replanning"
    assert tick(rig).startswith("planner: stored plan 2 (")


def test_a_refused_plan_is_journaled_once_not_every_tick(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.store.corrupt = "meta: not JSON"
    first = tick(rig)
    assert first == (
        "planner: stored plan refused, not executed: meta: not JSON; delete it to replan"
    )
    assert tick(rig) == first
    assert tick(rig) == first
    assert len(rig.zookeeper.journaled("plan_refused")) == 1
    assert rig.reassigner.executed == []
    rig.store.corrupt = "meta: another cluster"
    tick(rig)
    assert len(rig.zookeeper.journaled("plan_refused")) == 2


def test_moves_kafka_refused_are_resubmitted_when_the_batch_is_checked(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    rig.reassigner.refuse = "Timed out waiting for a node assignment"
    assert "Kafka refused: Timed out waiting" in tick(rig)
    # Recorded as started before Kafka got it: the next ticks check it, not start it.
    assert rig.store.progress is not None and rig.store.progress.started_batch == 0
    rig.reassigner.refuse = None
    assert rig.reassigner.executed == []
    # The first check asks Kafka at once (nothing was verified since the start).
    assert "partitions at their new replicas" in tick(rig)
    plan = rig.store.plan
    assert plan is not None
    assert {(m.topic, m.partition, m.replicas) for m in rig.reassigner.executed[-1]} == set(
        plan.batch(0)
    )
    assert "resubmitted" in rig.zookeeper.journaled("reassign")[-1]["result"]
    verified = len(rig.reassigner.verified)
    tick(rig)
    assert len(rig.reassigner.verified) == verified  # Kafka is asked every VERIFY_EVERY_S
    # Now Kafka runs them: nothing is resubmitted at the next verify.
    rig.clock.advance(VERIFY_EVERY_S)
    tick(rig)
    assert len(rig.reassigner.verified) == verified + 1
    assert len(rig.reassigner.executed) == 1


def test_a_stalled_batch_asks_for_a_new_controller_once(tmp_path: Path) -> None:
    rig = planner(tmp_path, reassignment_stall_s=60)
    tick(rig)  # plan
    tick(rig)  # start batch 1
    assert not tick(rig).endswith("controller re-election requested")  # first look at it
    rig.clock.advance(61)
    assert tick(rig).endswith("stalled, controller re-election requested")
    assert rig.zookeeper.controller_elections == 1
    assert rig.store.progress is not None and rig.store.progress.controller_moved
    rig.clock.advance(61)
    assert not tick(rig).endswith("controller re-election requested")
    assert rig.zookeeper.controller_elections == 1


def test_a_plan_too_large_for_one_transaction_is_stored_halved(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.store.max_batches = 1
    assert tick(rig).startswith("planner: stored plan 1 (1 batches, ")
    assert rig.store.write_attempts == [2, 1]
    plan = rig.store.plan
    assert plan is not None and plan.summary["truncated_from_batches"] == 2


def test_a_plan_written_by_someone_else_meanwhile_is_read_again(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.store.conflict_next_write = True
    assert tick(rig) == "planner: the plan changed under this planner; reading it again"
    assert rig.store.plan is None
    assert tick(rig).startswith("planner: stored plan 1 (")


def test_an_unreadable_layout_plans_again_at_the_next_tick(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.cluster.layout_error = "broker 2: Jolokia unreachable"
    assert tick(rig) == ("planner: cannot read the cluster's layout: broker 2: Jolokia unreachable")
    rig.cluster.layout_error = None
    assert tick(rig).startswith("planner: stored plan 1 (")


def test_a_rolling_restart_holds_the_next_batch(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    rig.zookeeper.lock_holder = "broker 1"
    assert tick(rig) == "planner: plan 1 batch 1/2: waiting for the rolling restart to finish"
    assert rig.reassigner.executed == []
