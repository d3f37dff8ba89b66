"""The elected planner's traffic goals take the measured load from ZooKeeper when it is
fresh, and fall back to sizes (saying so in its sentence and the plan's inputs) when it is
missing, stale, refused by the contract's parser, or measured on another cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from planner.contracts.measured_load import MeasuredLoad, PartitionLoad
from planner.contracts.spec import ClusterSpec
from tests.unit.agent_fakes import Rig, make_rig

pytestmark = pytest.mark.unit

SPEC = ClusterSpec(
    cluster="c", kafka_version="3.9.2", broker_count=3, zones=("a", "b", "c"), generation=1
)
# Leaders are even by count (six each) and replicas by count and size, but every partition
# of the hot topic is led by broker 0.
LIVE = {
    **{("hot", n): (0, 1, 2) if n % 2 else (0, 2, 1) for n in range(6)},
    **{("cold", n): [(1, 2, 0), (1, 0, 2), (2, 0, 1), (2, 1, 0)][n % 4] for n in range(12)},
}


def _planner(tmp_path: Path) -> Rig:
    rig = make_rig(tmp_path, SPEC)
    rig.seat.elected = True
    rig.cluster.live = dict(LIVE)
    rig.cluster.registered = frozenset({0, 1, 2})
    rig.cluster.racks = {0: "a", 1: "b", 2: "c"}
    return rig


def _load(rig: Rig, age_s: float, cluster: str = "c") -> bytes:
    end = datetime.fromtimestamp(rig.clock.time(), UTC) - timedelta(seconds=age_s)
    rates = {"hot": 50_000.0, "cold": 100.0}
    load = MeasuredLoad(
        cluster=cluster,
        window_start=(end - timedelta(hours=1)).isoformat(),
        window_end=end.isoformat(),
        window_s=3600,
        computed_at=end.isoformat(),
        partitions=tuple(
            PartitionLoad(topic, number, rates[topic], 2 * rates[topic], 10.0)
            for topic, number in LIVE
        ),
    )
    return json.dumps(load.to_json()).encode()


def _tick(rig: Rig) -> str:
    rig.clock.advance(10)
    return rig.agent.plan_executor.tick()


def _hot_leaders(rig: Rig) -> list[int]:
    plan = rig.store.plan
    assert plan is not None
    targets = {(p.topic, p.partition): p.target for p in plan.partitions}
    return sorted(targets.get(key, LIVE[key])[0] for key in LIVE if key[0] == "hot")


def test_a_new_fresh_measured_load_plans_again_and_spreads_the_hot_topics_leadership(
    tmp_path: Path,
) -> None:
    rig = _planner(tmp_path)
    assert _tick(rig).startswith("planner: placement balanced (score")
    assert _tick(rig) == (
        "planner: placement balanced; traffic goals use sizes: no measured load"
    )  # held: nothing changed

    rig.zookeeper.set_measured_load(_load(rig, age_s=60))
    sentence = _tick(rig)
    assert sentence.startswith("planner: stored plan 1 (")
    assert "traffic goals use measured load of 18/18 partitions" in sentence
    plan = rig.store.plan
    assert plan is not None
    assert plan.inputs["why"] == "planning: measured load changed"
    assert "measured load of 18/18" in plan.inputs["traffic"]
    assert "measured load of 18/18" in rig.zookeeper.journaled("plan_stored")[0]["result"]
    # The hot topic's six leaders are spread two per broker.
    assert _hot_leaders(rig) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "traffic goals use sizes: no measured load"),
        ("stale", "traffic goals use sizes: measured load is 7200 s old (over 3600 s)"),
        ("other", "traffic goals use sizes: measured load is of cluster 'other', not 'c'"),
        (b"{not json", "traffic goals use sizes: measured load refused: "),
        (b'{"schema_version": 9}', "traffic goals use sizes: measured load refused: "),
    ],
)
def test_without_a_usable_load_the_planner_balances_sizes_and_says_why(
    tmp_path: Path, value: bytes | str | None, why: str
) -> None:
    rig = _planner(tmp_path)
    if value == "stale":
        rig.zookeeper.set_measured_load(_load(rig, age_s=7200 - 10))
    elif value == "other":
        rig.zookeeper.set_measured_load(_load(rig, age_s=60, cluster="other"))
    else:
        assert not isinstance(value, str)
        rig.zookeeper.set_measured_load(value)
    sentence = _tick(rig)
    # Sizes and counts are even: nothing to do, and the sentence names the input it used.
    assert sentence.startswith("planner: placement balanced (score")
    assert why in sentence
    assert rig.store.plan is None
