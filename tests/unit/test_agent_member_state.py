"""The state in the member record follows the cycle's decision: one state per branch of
`decide`, so the management plane never has to read the sentence."""

from __future__ import annotations

import pytest

from agent.broker_config.classify import ConfigChange, ConfigDiff
from agent.decide import PAUSED, RUNNING, STOPPED, BrokerView, ConfigChanges, Snapshot, decide
from agent.member_state import member_state
from agent.zk_membership import ReconfigChange, ReconfigKind
from planner.contracts.member import MemberState
from planner.contracts.spec import ClusterSpec
from planner.zookeeper_ensemble import ZkServer, ZookeeperRole

pytestmark = pytest.mark.unit

RENDERED = {"broker.id": "1"}


def read_only_changes(key: str) -> ConfigChanges:
    return ConfigChanges(
        rendered=RENDERED, diff=ConfigDiff(read_only=(ConfigChange(key, "old", "new"),))
    )


def dynamic_changes(key: str) -> ConfigChanges:
    return ConfigChanges(
        rendered=RENDERED, diff=ConfigDiff(per_broker=(ConfigChange(key, "1", "2"),))
    )


SPEC = ClusterSpec(cluster="c", kafka_version="3.9.2", broker_count=3, zones=("z",), generation=2)
HEALTHY = BrokerView(RUNNING, registered=True, responsive=True)
SERVER = ZkServer(4, "127.0.1.4", 2888, 3888, ZookeeperRole.PARTICIPANT, 2181)


def snap(**changes: object) -> Snapshot:
    base: dict[str, object] = {"broker_id": 1, "zk_connected": True, "spec": SPEC}
    base["broker"] = HEALTHY
    base.update(changes)
    return Snapshot(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("snapshot", "long_action", "state"),
    [
        (snap(long_action="restart 2/3: starting broker"), "restart", MemberState.RESTARTING),
        (snap(long_action="start 1/2: starting broker"), "start", MemberState.STARTING),
        (snap(spec=None, spec_error="no spec"), None, MemberState.WAITING_FOR_SPEC),
        (snap(broker=BrokerView(STOPPED, False, False)), None, MemberState.STARTING),
        (
            snap(
                zookeeper_change=ReconfigChange(ReconfigKind.ADD, SERVER, "adding server 4", 1, ())
            ),
            None,
            MemberState.RECONFIGURING_ZOOKEEPER,
        ),
        (snap(broker=BrokerView(PAUSED, True, False, 31.0)), None, MemberState.RESTARTING),
        (snap(broker=BrokerView(PAUSED, True, False, 2.0)), None, MemberState.UNRESPONSIVE),
        (snap(broker=BrokerView(RUNNING, True, False, 31.0)), None, MemberState.RESTARTING),
        (snap(broker=BrokerView(RUNNING, False, False, 3.0)), None, MemberState.UNRESPONSIVE),
        (snap(broker=BrokerView(RUNNING, False, True)), None, MemberState.JOINING),
        (snap(config=ConfigChanges(error="unknown key x")), None, MemberState.REFUSING),
        (
            snap(
                config=read_only_changes("num.io.threads"),
                controller_id=1,
                brokers_awaiting_restart=frozenset({0, 1}),
            ),
            None,
            MemberState.AWAITING_RESTART,
        ),
        (snap(config=read_only_changes("num.io.threads")), None, MemberState.RESTARTING),
        (
            snap(config=dynamic_changes("log.retention.ms")),
            None,
            MemberState.APPLYING_CONFIG,
        ),
        (snap(), None, MemberState.HEALTHY),
        (snap(spec_error="spec.broker_count must be at least 1"), None, MemberState.HEALTHY),
    ],
)
def test_state_follows_the_decision(
    snapshot: Snapshot, long_action: str | None, state: MemberState
) -> None:
    assert member_state(snapshot, decide(snapshot), long_action) == state


def test_healthy_state_and_healthy_sentence_agree() -> None:
    """The sentence people read and the state the controller reads say the same."""
    action = decide(snap())
    assert "healthy" in action.reason
    assert member_state(snap(), action, None) == MemberState.HEALTHY
