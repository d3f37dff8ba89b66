"""The elected planner's tick (`PlanExecutor.tick`) against fakes: planning, the pipelined
execution (a finished move's slot taken at once, throttles set and cleared per move,
preferred leaders elected), progress figures, a plan superseded, a refused plan journaled
once, moves Kafka refused submitted again, a takeover mid-plan, the concurrency backing off,
the stall remedy, and a plan cut to fit one ZooKeeper transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


def _throttled(rig: Rig) -> dict[str, str]:
    return rig.reassignments.throttle_configs({"t"}, {0, 1, 2, 3})


def test_a_plan_is_made_stored_and_executed_as_a_pipeline_then_finished(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    stored = tick(rig)
    assert stored.startswith("planner: stored plan 1 (2 batches, ")
    plan = rig.store.plan
    assert plan is not None and plan.batch_count == 2
    assert rig.zookeeper.journaled("plan_stored")[0]["reason"] == (
        "planning: first look (or a plan just finished)"
    )
    steps = plan.batch(0) + plan.batch(1)
    assert len(steps) == 6

    # Five moves out of broker 0 at once: its per-broker cap (the spec's budget).
    assert "plan 1: 0/6 steps done, 5 moving (concurrency 10)" in tick(rig)
    progress = rig.store.progress
    assert progress is not None and progress.state == "executing"
    submitted = rig.reassignments.submitted[-1]
    assert submitted == steps[:5]
    assert rig.zookeeper.journaled("reassign")[-1]["result"] == "5 partitions submitted"
    throttled = _throttled(rig)
    assert throttled["broker 3 follower.replication.throttled.rate"] == str(
        SPEC.budget.throttle_bytes_per_s
    )
    assert "0:3" in throttled["topic t follower.replication.throttled.replicas"]

    # Kafka moves nothing yet: the moves are looked at, not started again.
    assert "0/6 steps done, 5 moving" in tick(rig)
    assert len(rig.reassignments.submitted) == 1

    # One move ends: its slot goes to the sixth at once, while four others still run (no
    # batch barrier); its throttle entries go, its preferred leader is elected.
    first = (submitted[0][0], submitted[0][1])
    rig.reassignments.finish(first)
    assert "1/6 steps done, 5 moving" in tick(rig)
    assert rig.reassignments.submitted[-1] == steps[5:]
    assert rig.cluster.elections == [first]
    leader_side = _throttled(rig)["topic t leader.replication.throttled.replicas"]
    assert f"{first[1]}:" not in leader_side

    rig.reassignments.finish_all()
    assert tick(rig) == "planner: plan 1: all 6 steps done"
    assert _throttled(rig) == {}  # no throttle left behind
    assert set(rig.cluster.elections) == {(t, p) for t, p, _ in steps}
    progress = rig.store.progress
    assert progress is not None and progress.state == "done"
    assert progress.completed_batches == 2
    assert rig.zookeeper.journaled("plan_done")
    # Broker 0 holds nothing any more; the next tick plans again at once and holds.
    assert all(0 not in replicas for replicas in rig.cluster.live.values())
    assert tick(rig).startswith("planner: placement balanced (score")
    assert rig.store.plan is not None and rig.store.plan.plan_id == 1


def test_progress_reports_bytes_rate_and_time_left(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.cluster.sizes = {key: 100 * 1024**2 for key in LIVE}
    tick(rig)
    tick(rig)  # five moves start
    for key in [("t", n) for n in range(6)][:2]:
        if key in rig.reassignments.running:
            rig.reassignments.finish(key)
    sentence = tick(rig)
    movement = rig.store.progress.movement if rig.store.progress else None
    assert movement is not None
    done = movement.bytes_moved
    assert movement.bytes_total == 6 * 100 * 1024**2
    assert 0 < done < movement.bytes_total
    # Two moves of 100 MiB in the 10 s between the looks.
    assert movement.rate_bytes_per_s == pytest.approx(done / 10)
    assert movement.eta_s == pytest.approx((movement.bytes_total - done) / (done / 10))
    assert "MiB/s" in sentence and "s left" in sentence
    status = rig.store.read_status()
    assert status.movement == movement


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


def test_throttles_of_a_superseded_plans_moves_go_once_they_end(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    tick(rig)  # five moves start, throttled
    assert _throttled(rig)
    plan = rig.store.plan
    assert plan is not None
    sixth = (plan.batch(0) + plan.batch(1))[5]
    rig.cluster.live[(sixth[0], sixth[1])] = (3, 2, 1)  # someone else moved it
    assert "planning again" in tick(rig)
    assert _throttled(rig), "the superseded plan's moves still run"
    rig.reassignments.finish_all()
    tick(rig)
    assert _throttled(rig) == {}


def test_a_refused_plan_is_journaled_once_not_every_tick(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    rig.store.corrupt = "meta: not JSON"
    first = tick(rig)
    assert first == (
        "planner: stored plan refused, not executed: meta: not JSON; delete it to replan"
    )
    assert tick(rig) == first
    assert tick(rig) == first
    (refusal,) = rig.zookeeper.journaled("plan_refused")
    assert "not executed" in refusal["result"]
    assert rig.reassignments.submitted == []
    rig.store.corrupt = "meta: another cluster"
    tick(rig)
    assert len(rig.zookeeper.journaled("plan_refused")) == 2
    # The operator deletes the stored plan: the planner starts over.
    rig.store.corrupt = None
    assert tick(rig).startswith("planner: stored plan 1 (2 batches, ")
    assert len(rig.zookeeper.journaled("plan_stored")) == 1


def test_moves_kafka_refused_are_submitted_again_at_the_next_look(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    rig.reassignments.refuse = "NotControllerError"
    tick(rig)
    assert "0 partitions submitted, 5 refused" in rig.zookeeper.journaled("reassign")[-1]["result"]
    assert rig.reassignments.submitted == []
    rig.reassignments.refuse = None
    # Kafka runs none of them: the partitions still stand at their source, so they start.
    assert "0/6 steps done, 5 moving" in tick(rig)
    plan = rig.store.plan
    assert plan is not None
    assert rig.reassignments.submitted[-1] == (plan.batch(0) + plan.batch(1))[:5]
    tick(rig)
    assert len(rig.reassignments.submitted) == 1  # running now: not submitted again


def test_a_planner_elected_mid_plan_resumes_it_from_kafkas_state(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    tick(rig)  # five moves start
    rig.reassignments.finish(("t", rig.reassignments.submitted[-1][0][1]))
    # Another agent takes over: it knows nothing of this one's memory.
    rig.agent.plan_executor.memory = type(rig.agent.plan_executor.memory)()
    rig.agent.plan_executor.facts = None
    rig.reassignments.configs["topic t"]["leader.replication.throttled.replicas"] = "9:9"
    assert "1/6 steps done, 5 moving" in tick(rig)
    assert len(rig.reassignments.submitted) == 2  # only the sixth was new
    assert rig.store.plan is not None and rig.store.plan.plan_id == 1
    # What the earlier planner left on the plan's topic is replaced by what runs now.
    assert "9:9" not in _throttled(rig)["topic t leader.replication.throttled.replicas"]


def test_concurrency_backs_off_at_min_isr_and_grows_back(tmp_path: Path) -> None:
    rig = planner(tmp_path, reassignment_concurrency=4)
    tick(rig)
    assert "4 moving (concurrency 4)" in tick(rig)
    rig.reassignments.short_isr = {("t", 5)}
    key = (rig.reassignments.submitted[-1][0][0], rig.reassignments.submitted[-1][0][1])
    rig.reassignments.finish(key)
    # Halved to 2 with 3 still moving: the freed slot is not used.
    assert "3 moving (concurrency 2)" in tick(rig)
    assert len(rig.reassignments.submitted) == 1
    rig.reassignments.short_isr = set()
    assert "(concurrency 3)" in tick(rig)
    assert len(rig.reassignments.submitted) == 1
    assert "(concurrency 4)" in tick(rig)
    assert len(rig.reassignments.submitted) == 2


def test_a_long_request_queue_backs_off_too(tmp_path: Path) -> None:
    rig = planner(tmp_path, reassignment_concurrency=4, request_queue_busy=50)
    tick(rig)
    rig.reassignments.queues = {2: 51}
    assert "(concurrency 2)" in tick(rig)
    assert len(rig.reassignments.submitted[-1]) == 2


def test_a_stalled_plan_asks_for_a_new_controller_once(tmp_path: Path) -> None:
    rig = planner(tmp_path, reassignment_stall_s=60)
    tick(rig)  # plan
    tick(rig)  # moves start
    assert not tick(rig).endswith("controller re-election requested")
    rig.clock.advance(61)
    assert tick(rig).endswith("controller re-election requested")
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


def test_a_rolling_restart_holds_new_moves(tmp_path: Path) -> None:
    rig = planner(tmp_path)
    tick(rig)
    rig.zookeeper.lock_holder = "broker 1"
    assert tick(rig).startswith(
        "planner: plan 1: waiting for the rolling restart to finish; plan 1: 0/6 steps done"
    )
    assert rig.reassignments.submitted == []
    rig.zookeeper.lock_holder = None
    assert "5 moving" in tick(rig)
