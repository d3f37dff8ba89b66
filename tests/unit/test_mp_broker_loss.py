"""Broker-loss decisions (pure): only the whole threshold of absence of both the agent and
the broker counts, never while another operation runs, one VM at a time."""

from __future__ import annotations

import pytest

from management_plane.service.broker_loss import VmObservation, decide_losses
from management_plane.service.operations import expand_steps

pytestmark = pytest.mark.unit

THRESHOLD = 60.0


def seen(
    vm: str, broker: int, agent: bool, registered: bool, state: str = "stopped"
) -> VmObservation:
    return VmObservation(vm, broker, agent, registered, state)


def test_a_vm_gone_for_the_whole_threshold_is_replaced() -> None:
    looks = [seen("c/vm1", 0, True, True, "running"), seen("c/vm2", 1, False, False)]
    clocks, decisions = decide_losses(looks, {}, now=1000.0, threshold_s=THRESHOLD, busy=False)
    assert clocks == {"c/vm2": 1000.0} and decisions == []
    clocks, decisions = decide_losses(looks, clocks, now=1059.0, threshold_s=THRESHOLD, busy=False)
    assert decisions == []
    clocks, decisions = decide_losses(looks, clocks, now=1060.0, threshold_s=THRESHOLD, busy=False)
    assert [(d.vm_id, d.broker_id) for d in decisions] == [("c/vm2", 1)]
    assert "agent and broker both gone for 60s" in decisions[0].reason
    assert "provider says stopped" in decisions[0].reason


@pytest.mark.parametrize(
    ("agent", "registered", "state"),
    [
        (True, False, "running"),  # a rolling restart: the broker is down, the agent is not
        (False, True, "running"),  # an agent restarting: the broker stays registered
        (False, False, "pending"),  # the provider is still booting the VM
    ],
)
def test_a_restarting_or_booting_vm_is_never_lost(
    agent: bool, registered: bool, state: str
) -> None:
    looks = [seen("c/vm2", 1, agent, registered, state)]
    clocks, decisions = decide_losses(
        looks, {"c/vm2": 0.0}, now=10_000.0, threshold_s=THRESHOLD, busy=False
    )
    assert clocks == {} and decisions == []


def test_coming_back_once_restarts_the_clock() -> None:
    gone = [seen("c/vm2", 1, False, False)]
    back = [seen("c/vm2", 1, True, False, "running")]
    clocks, _ = decide_losses(gone, {}, now=0.0, threshold_s=THRESHOLD, busy=False)
    clocks, _ = decide_losses(back, clocks, now=50.0, threshold_s=THRESHOLD, busy=False)
    clocks, decisions = decide_losses(gone, clocks, now=70.0, threshold_s=THRESHOLD, busy=False)
    assert clocks == {"c/vm2": 70.0} and decisions == []


def test_nothing_is_decided_while_an_operation_runs_and_the_clock_starts_after_it() -> None:
    gone = [seen("c/vm2", 1, False, False)]
    clocks, decisions = decide_losses(
        gone, {"c/vm2": 0.0}, now=500.0, threshold_s=THRESHOLD, busy=True
    )
    assert clocks == {} and decisions == []
    clocks, decisions = decide_losses(gone, clocks, now=501.0, threshold_s=THRESHOLD, busy=False)
    assert clocks == {"c/vm2": 501.0} and decisions == []


def test_two_lost_vms_are_replaced_one_at_a_time_longest_gone_first() -> None:
    gone = [seen("c/vm1", 0, False, False), seen("c/vm3", 2, False, False)]
    clocks, decisions = decide_losses(
        gone, {"c/vm1": 100.0, "c/vm3": 10.0}, now=200.0, threshold_s=THRESHOLD, busy=False
    )
    assert [d.vm_id for d in decisions] == ["c/vm3"]
    assert set(clocks) == {"c/vm1", "c/vm3"}


def test_the_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        decide_losses([], {}, now=0.0, threshold_s=0.0, busy=False)


def test_a_lost_vm_is_recycled_before_its_replacement_keeps_the_id() -> None:
    steps = [str(s) for s in expand_steps("replace_lost_vm")]
    assert steps == [
        "recycle_lost:0",
        "create_vm:0",
        "wait_joined:0",
        "wait_replicated:0",
        "ensemble:0",
        "finish",
    ]
    assert not any(s.startswith("drain") for s in steps)  # the data is gone: nothing to drain
