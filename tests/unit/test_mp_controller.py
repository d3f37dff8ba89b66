"""Every controller step driven against fakes of its two ports (the provider and the
cluster's ZooKeeper and Kafka), with the real database in the test's folder and the real
engine's runner: joins waited for, drains, recycles, the ensemble, broker loss, upgrades,
finishing, failures and timeouts, each in milliseconds."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from management_plane.errors import PermanentError
from management_plane.providers.base import Provider, VmRequest
from management_plane.service.cluster_io import PartitionState
from management_plane.service.controller import STEPS, Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    CLUSTER_KINDS,
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationKind,
    StepName,
    StepRef,
    expand_steps,
)
from management_plane.service.steps import Patience, StepTimeouts
from planner.contracts.log_limits import LogLimits
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.spec import ClusterSpec
from tests.unit.fake_cluster import (
    BootstrappingProvider,
    ClusterDeletingProvider,
    FakeCluster,
    FakeProvider,
    ZookeeperKeepingProvider,
)

pytestmark = pytest.mark.unit

K = OperationKind
ZONES = ("zone-a", "zone-b", "zone-c")


class World:
    """A database, a provider, a cluster and the engine that runs operations against them."""

    def __init__(self, tmp_path: Path, provider: FakeProvider | None = None) -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
        self.provider = provider or FakeProvider()
        self.cluster = FakeCluster()
        self.controller = Controller(self.db, self._provider(), self.cluster.connect)
        self.engine = Engine(self.db, self.controller)

    def _provider(self) -> Provider:
        return self.provider

    def add_cluster(self, name: str = "orders", brokers: int = 3, **spec: Any) -> ClusterSpec:
        value = ClusterSpec(
            cluster=name,
            kafka_version=spec.pop("kafka_version", "3.8.1"),
            broker_count=brokers,
            zones=ZONES,
            zookeeper_participants=spec.pop("participants", 3),
            **spec,
        )
        self.db.add_cluster(name, "fake", "small", json.dumps(value.to_json(), sort_keys=True))
        return value

    def running_cluster(self, name: str = "orders", brokers: int = 3, **spec: Any) -> None:
        """A cluster that runs: VMs with brokers 0..n-1 whose agents are healthy, and its spec
        in ZooKeeper."""
        value = self.add_cluster(name, brokers, **spec)
        self.db.update_cluster(name, status="running")
        for broker_id in range(brokers):
            info = self.provider.create_vm(
                _request(name, ZONES[broker_id % 3], value.kafka_version)
            )
            self.db.upsert_vm(
                info.vm_id,
                name,
                info.zone,
                info.address,
                "small",
                value.kafka_version,
                "running",
                broker_id,
            )
            self.cluster.agent_joins(info.address, broker_id)
        self.cluster.spec = ClusterSpec(**{**value.__dict__, "generation": 1})
        self.cluster.place({"orders-0": (0, 1, 2)[: min(3, brokers)]})

    def queue(
        self,
        kind: OperationKind,
        params: dict[str, Any] | None = None,
        batch_count: int = 0,
        **ctx: Any,
    ) -> OperationRow:
        return self.db.add_operation(
            "orders", kind, params or {}, expand_steps(kind, batch_count), "test", ctx or None
        )

    def run(self, op: OperationRow) -> OperationRow:
        """One engine cycle: the operation goes on until a step waits, fails or it is done."""
        self.engine.run_once()
        found = self.db.operation(op.op_id)
        assert found is not None
        return found

    def vm_of(self, broker_id: int) -> dict[str, Any]:
        (vm,) = [v for v in self.db.cluster_vms("orders") if v["broker_id"] == broker_id]
        return vm

    def journal(self, op: OperationRow) -> list[tuple[str, str]]:
        return [(j["step"], j["outcome"]) for j in self.db.operation_journal(op.op_id)]


def _request(cluster: str, zone: str, version: str) -> VmRequest:
    return VmRequest(cluster=cluster, zone=zone, instance_type="small", kafka_version=version)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _at(step: str, op: OperationRow) -> bool:
    return str(op.step) == step


# -- the registry ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(CLUSTER_KINDS))
def test_every_step_of_every_cluster_operation_has_a_registered_variant(
    kind: OperationKind,
) -> None:
    for step in expand_steps(kind, 2):
        found = STEPS.lookup(step, kind)
        assert found.name == step.name and kind in found.kinds


def test_waiting_steps_get_their_own_timeouts() -> None:
    patience = {
        (StepName.CREATE_VMS, K.CREATE_CLUSTER): Patience.CREATE,
        (StepName.WAIT_JOINED, K.REPLACE_VM): Patience.JOINED,
        (StepName.WAIT_DRAINED, K.SCALE_DOWN): Patience.DRAINED,
        (StepName.WAIT_REPLICATED, K.REPLACE_LOST_VM): Patience.DRAINED,
        (StepName.WAIT_APPLIED, K.CHANGE_CONFIG): Patience.APPLIED,
        (StepName.RECYCLE_ALL, K.DELETE_CLUSTER): Patience.CREATE,
        (StepName.DRAIN, K.REPLACE_VM): Patience.OTHER,
    }
    for (name, kind), expected in patience.items():
        assert STEPS.lookup(StepRef(name), kind).patience == expected
    timeouts = StepTimeouts()
    assert [timeouts.seconds(p) for p in Patience] == [
        900.0,
        600.0,
        3600.0,
        1200.0,
        300.0,
        7200.0,
    ]
    assert StepTimeouts.capped(5).seconds(Patience.DRAINED) == 5
    with pytest.raises(ValueError, match="must be positive"):
        StepTimeouts.capped(0)


def test_a_step_no_variant_serves_fails_the_operation_naming_it(world: World) -> None:
    world.running_cluster()
    op = world.db.add_operation(
        "orders", K.CHANGE_CONFIG, {}, [StepRef(StepName.RECYCLE_ALL)], "test"
    )
    op = world.run(op)
    assert op.status == FAILED
    assert "no step recycle_all is registered for change_config operations" in op.message


# -- create ------------------------------------------------------------------------------


def test_create_waits_for_every_agent_to_join_then_runs(tmp_path: Path) -> None:
    world = World(tmp_path, BootstrappingProvider())
    spec = world.add_cluster()
    params = {
        "broker_count": 3,
        "zones": list(ZONES),
        "instance_type": "small",
        "kafka_version": "3.8.1",
    }
    op = world.run(world.queue(K.CREATE_CLUSTER, params))
    assert _at("wait_joined", op) and op.status == RUNNING
    assert "agent not joined yet" in op.message
    assert isinstance(world.provider, BootstrappingProvider)
    assert world.provider.bootstraps == 1
    assert [r.reuse_broker_id for r in world.provider.requests] == [0, 1, 2]
    assert world.cluster.spec is not None and world.cluster.spec.generation == 1
    assert world.cluster.spec.broker_count == spec.broker_count
    vms = world.db.cluster_vms("orders")
    assert [v["state"] for v in vms] == ["joining"] * 3

    # Two agents report healthy, the third is still starting its broker: still waiting.
    for broker_id, vm in enumerate(vms):
        world.cluster.agent_joins(vm["address"], broker_id, healthy=broker_id < 2)
    op = world.run(op)
    assert _at("wait_joined", op) and "starting the broker" in op.message
    assert world.db.cluster("orders")["status"] == "creating"  # type: ignore[index]

    world.cluster.agent_joins(vms[2]["address"], 2)
    op = world.run(op)
    assert op.status == SUCCEEDED
    assert [(v["broker_id"], v["state"]) for v in world.db.cluster_vms("orders")] == [
        (0, "running"),
        (1, "running"),
        (2, "running"),
    ]
    assert world.db.cluster("orders")["status"] == "running"  # type: ignore[index]
    assert world.journal(op)[-1] == ("finish", "done")


def test_create_keeps_the_monitoring_targets_the_provider_wrote(tmp_path: Path) -> None:
    world = World(tmp_path, BootstrappingProvider())
    spec = world.add_cluster()
    targets = MonitoringTargets("127.0.2.253", 8125, "http://127.0.2.253:8080")
    world.cluster.spec = replace(spec, monitoring=targets)  # as the provider's `kaas up` wrote it
    params = {
        "broker_count": 3,
        "zones": list(ZONES),
        "instance_type": "small",
        "kafka_version": "3.8.1",
    }
    world.run(world.queue(K.CREATE_CLUSTER, params))
    assert world.cluster.spec is not None and world.cluster.spec.monitoring == targets
    stored = json.loads(world.db.cluster("orders")["spec"])  # type: ignore[index]
    assert stored["monitoring"]["graphite_url"] == "http://127.0.2.253:8080"


def test_create_without_the_bootstrap_capability_makes_the_missing_vms_one_by_one(
    world: World,
) -> None:
    world.add_cluster()
    world.provider.create_vm(_request("orders", "zone-a", "3.8.1"))  # made before a crash
    params = {
        "broker_count": 3,
        "zones": list(ZONES),
        "instance_type": "small",
        "kafka_version": "3.8.1",
    }
    op = world.run(world.queue(K.CREATE_CLUSTER, params))
    assert _at("wait_joined", op)
    assert len(world.provider.vms) == 3  # the one made before is adopted, two more
    states = sorted(v["state"] for v in world.db.cluster_vms("orders"))
    assert states == ["joining", "joining", "running"]


def test_a_failed_create_marks_the_cluster_failed(world: World) -> None:
    world.add_cluster()
    world.engine.timeouts = StepTimeouts.capped(0.001)
    world.provider.refuse_create = "quota exceeded"
    params = {"broker_count": 1, "zones": ["zone-a"], "instance_type": "small"}
    op = world.run(world.queue(K.CREATE_CLUSTER, {**params, "kafka_version": "3.8.1"}))
    assert op.status == RUNNING and "quota exceeded" in op.message  # a provider error waits
    world.db.save_operation(op.op_id, RUNNING, 0, op.context, op.message, step_started=True)
    time.sleep(0.01)
    op = world.run(op)
    assert op.status == FAILED
    assert "did not finish within 0s: create_vms: quota exceeded" in op.message
    assert world.db.cluster("orders")["status"] == "failed"  # type: ignore[index]


# -- replacement -------------------------------------------------------------------------


def _replace(world: World, broker_id: int) -> OperationRow:
    old = world.vm_of(broker_id)["vm_id"]
    return world.queue(K.REPLACE_VM, {"vm_id": old}, 1, batches=[[old]])


def test_a_replacement_joins_drains_recycles_and_undrains(world: World) -> None:
    world.running_cluster()
    old = world.vm_of(2)
    op = world.run(_replace(world, 2))
    assert _at("wait_joined:0", op)
    (new_id,) = op.context["new_vms"]["0"]
    new = world.db.vm(new_id)
    assert new is not None and new["zone"] == old["zone"] and new["state"] == "joining"

    world.cluster.agent_joins(new["address"], 3)
    op = world.run(op)
    assert _at("wait_drained:0", op)
    assert world.cluster.spec is not None and world.cluster.spec.draining_broker_ids == {2}
    assert world.db.vm(old["vm_id"])["state"] == "draining"  # type: ignore[index]
    assert "still hold 1 replicas" in op.message

    # The planner moved the data: broker 3 took 2's place, but its copy is not in sync yet.
    world.cluster.partition_states = [PartitionState("orders", 0, (0, 1, 3), (0, 1))]
    op = world.run(op)
    assert _at("wait_drained:0", op) and "1 partitions below a full ISR" in op.message

    world.cluster.place({"orders-0": (0, 1, 3)})
    op = world.run(op)
    assert op.status == SUCCEEDED
    assert world.provider.recycled == [old["vm_id"]]
    assert world.db.vm(old["vm_id"])["state"] == "terminated"  # type: ignore[index]
    assert world.cluster.released_claims == [2]
    assert world.provider.released == [("orders", 2)]
    assert world.cluster.spec.draining_broker_ids == frozenset()
    assert world.cluster.repair_requests == []  # this provider's agents cannot reconfigure
    steps = [s for s, outcome in world.journal(op) if outcome == "done"]
    assert steps == [str(s) for s in expand_steps(K.REPLACE_VM, 1)]


def test_recycle_refuses_while_the_old_broker_holds_data(world: World) -> None:
    world.running_cluster()
    op = _replace(world, 2)
    world.db.save_operation(op.op_id, RUNNING, 5, op.context, "at recycle")  # recycle:0
    op = world.run(world.db.operation(op.op_id))  # type: ignore[arg-type]
    assert op.status == FAILED and _at("recycle:0", op)
    assert "refusing to recycle" in op.message and "orders-0" in op.message
    assert world.provider.recycled == []
    assert world.db.cluster("orders")["status"] == "running"  # type: ignore[index]


def test_a_replacement_in_two_batches_replaces_one_batch_after_the_other(world: World) -> None:
    world.running_cluster()
    olds = [world.vm_of(b)["vm_id"] for b in (1, 2)]
    op = world.queue(
        K.CHANGE_INSTANCE_TYPE, {"instance_type": "large"}, 2, batches=[[olds[0]], [olds[1]]]
    )
    op = world.run(op)
    (first,) = op.context["new_vms"]["0"]
    assert world.db.vm(first)["instance_type"] == "large"  # type: ignore[index]
    world.cluster.agent_joins(world.db.vm(first)["address"], 3)  # type: ignore[index]
    world.cluster.place({"orders-0": (0, 2, 3)})
    op = world.run(op)
    assert _at("wait_joined:1", op)
    assert world.provider.recycled == [olds[0]]
    (second,) = op.context["new_vms"]["1"]
    world.cluster.agent_joins(world.db.vm(second)["address"], 4)  # type: ignore[index]
    world.cluster.place({"orders-0": (0, 3, 4)})
    op = world.run(op)
    assert op.status == SUCCEEDED and world.provider.recycled == olds
    assert world.db.cluster("orders")["instance_type"] == "large"  # type: ignore[index]


# -- the ZooKeeper ensemble ---------------------------------------------------------------


def _server(n: int, address: str, role: str = "participant") -> str:
    return f"server.{n}={address}:2888:3888:{role};{address}:2181\n"


def test_the_ensemble_step_asks_the_agents_and_waits_until_they_repaired_it(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, ZookeeperKeepingProvider())
    world.running_cluster()
    op = _replace(world, 2)
    old = world.vm_of(2)
    world.db.update_vm(old["vm_id"], state="terminated")
    new = world.provider.create_vm(_request("orders", "zone-c", "3.8.1"))
    world.db.upsert_vm(new.vm_id, "orders", new.zone, new.address, "small", "3.8.1", "running")
    voters = "".join(_server(n + 1, world.vm_of(n)["address"]) for n in (0, 1))
    observer = _server(4, new.address, "observer")
    world.cluster.ensemble_text = voters + _server(3, old["address"]) + observer
    world.db.save_operation(op.op_id, RUNNING, 6, op.context, "at ensemble")  # ensemble:0

    op = world.run(world.db.operation(op.op_id))  # type: ignore[arg-type]
    assert _at("ensemble:0", op) and op.status == RUNNING
    assert "servers [3] of recycled VMs still in the ensemble" in op.message
    (request,) = world.cluster.repair_requests
    assert request.recycled_addresses == frozenset({old["address"]})

    world.cluster.ensemble_text = voters + observer  # an agent removed the old server
    op = world.run(op)
    assert _at("ensemble:0", op)
    assert "2 of 3 participants while observers [4] could vote" in op.message
    assert len(world.cluster.repair_requests) == 1  # nothing recycled left to name

    world.cluster.ensemble_text = voters + _server(4, new.address)  # the new one promoted
    op = world.run(op)
    done_entries = [
        e
        for e in world.db.operation_journal(op.op_id)
        if e["step"] == "ensemble:0" and e["outcome"] == "done"
    ]
    assert "participants [1, 2, 4]" in done_entries[-1]["message"]
    assert world.cluster.repair_withdrawn == 1
    # Every reading went through the provider's client certificate of the cluster.
    assert world.cluster.identities_seen
    assert set(world.cluster.identities_seen) == {
        world.provider.client_identity("orders")  # type: ignore[attr-defined]
    }


def test_the_ensemble_step_leaves_the_ensemble_to_agents_without_a_client_identity(
    world: World,
) -> None:
    world.running_cluster()
    op = _replace(world, 2)
    world.cluster.ensemble_text = _server(3, world.vm_of(2)["address"])
    world.db.save_operation(op.op_id, RUNNING, 6, op.context, "at ensemble")
    op = world.run(world.db.operation(op.op_id))  # type: ignore[arg-type]
    assert not _at("ensemble:0", op)
    assert world.cluster.repair_requests == [] and world.cluster.repair_withdrawn == 0


def test_an_unreadable_ensemble_config_waits_naming_the_problem(tmp_path: Path) -> None:
    world = World(tmp_path, ZookeeperKeepingProvider())
    world.running_cluster()
    op = _replace(world, 2)
    world.cluster.ensemble_text = "server.1=nonsense\n"
    world.db.save_operation(op.op_id, RUNNING, 6, op.context, "at ensemble")
    op = world.run(world.db.operation(op.op_id))  # type: ignore[arg-type]
    assert _at("ensemble:0", op) and op.status == RUNNING
    assert "unreadable server line" in op.message


# -- scale -------------------------------------------------------------------------------


def test_scale_up_places_new_vms_in_the_emptiest_zones(world: World) -> None:
    world.running_cluster(brokers=2)
    changes = {"broker_count": 4, "zookeeper_participants": 3}
    op = world.run(world.queue(K.SCALE_UP, {"add": 2, "spec_changes": changes}, batches=[[]]))
    new = [world.db.vm(v) for v in op.context["new_vms"]["0"]]
    assert sorted(v["zone"] for v in new) == ["zone-a", "zone-c"]  # type: ignore[index]
    assert [r.reuse_broker_id for r in world.provider.requests[-2:]] == [None, None]
    for broker_id, vm in enumerate(new, start=2):
        world.cluster.agent_joins(vm["address"], broker_id)  # type: ignore[index]
    op = world.run(op)
    assert op.status == SUCCEEDED
    assert world.cluster.spec is not None and world.cluster.spec.broker_count == 4
    stored = json.loads(world.db.cluster("orders")["spec"])  # type: ignore[index]
    assert stored["broker_count"] == 4


def test_scale_down_drains_and_recycles_without_a_new_vm(world: World) -> None:
    world.running_cluster(brokers=4)
    world.cluster.place({"orders-0": (0, 1, 2)})
    leaving = world.vm_of(3)["vm_id"]
    changes = {"broker_count": 3, "zookeeper_participants": 3}
    op = world.queue(
        K.SCALE_DOWN, {"remove": [leaving], "spec_changes": changes}, 1, batches=[[leaving]]
    )
    op = world.run(op)
    assert op.status == SUCCEEDED
    assert world.provider.requests[4:] == []  # no VM made
    assert world.provider.recycled == [leaving]
    assert world.provider.released == [("orders", 3)]
    assert world.cluster.spec is not None and world.cluster.spec.broker_count == 3


# -- broker loss -------------------------------------------------------------------------


def _replace_lost(world: World, broker_id: int) -> OperationRow:
    lost = world.vm_of(broker_id)["vm_id"]
    return world.queue(
        K.REPLACE_LOST_VM, {"vm_id": lost, "broker_id": broker_id}, 1, batches=[[lost]]
    )


def test_a_lost_vm_is_replaced_by_one_keeping_its_broker_id(world: World) -> None:
    world.running_cluster()
    lost = world.vm_of(1)
    del world.cluster.member_znodes[1]
    world.cluster.registered.discard(1)
    world.cluster.partition_states = [PartitionState("orders", 0, (0, 1, 2), (0, 2))]
    op = world.run(_replace_lost(world, 1))
    assert _at("wait_joined:0", op)
    assert world.provider.recycled == [lost["vm_id"]] and world.cluster.released_claims == [1]
    assert world.provider.requests[-1].reuse_broker_id == 1
    assert world.provider.requests[-1].zone == lost["zone"]
    (new_id,) = op.context["new_vms"]["0"]
    world.cluster.agent_joins(world.db.vm(new_id)["address"], 1)  # type: ignore[index]
    op = world.run(op)
    assert _at("wait_replicated:0", op)
    assert "broker 1 back in 0/1 ISRs; waiting for orders-0" in op.message
    world.cluster.place({"orders-0": (0, 1, 2)})
    op = world.run(op)
    assert op.status == SUCCEEDED
    assert world.vm_of(1)["vm_id"] == new_id


def test_a_lost_vm_that_came_back_is_not_replaced(world: World) -> None:
    world.running_cluster()
    op = world.run(_replace_lost(world, 1))
    assert op.status == FAILED and _at("recycle_lost:0", op)
    assert "came back (agent and broker 1 present): not replaced" in op.message
    assert world.provider.recycled == []


def test_a_replacement_holding_another_id_fails_the_broker_loss(world: World) -> None:
    world.running_cluster()
    del world.cluster.member_znodes[1]
    world.cluster.registered.discard(1)
    op = world.run(_replace_lost(world, 1))
    (new_id,) = op.context["new_vms"]["0"]
    world.cluster.agent_joins(world.db.vm(new_id)["address"], 7)  # type: ignore[index]
    op = world.run(op)
    assert op.status == FAILED and _at("wait_replicated:0", op)
    assert "holds broker ids [7], not the lost id 1" in op.message


# -- upgrade and config ---------------------------------------------------------------------


def test_an_upgrade_pins_the_protocol_until_every_broker_runs_the_new_version(
    world: World,
) -> None:
    world.running_cluster()
    olds = [world.vm_of(b)["vm_id"] for b in range(3)]
    op = world.queue(
        K.UPGRADE,
        {"kafka_version": "3.9.2", "spec_changes": {"kafka_version": "3.9.2"}},
        1,
        batches=[olds],
    )
    op = world.run(op)
    assert _at("wait_applied:0", op)
    spec = world.cluster.spec
    assert spec is not None and spec.broker_config["inter.broker.protocol.version"] == "3.8"
    assert "3/3 agents; waiting for broker 0" in op.message
    for broker_id in range(3):
        world.cluster.agent_applies(broker_id, spec.generation, pending_restart=broker_id == 2)
    op = world.run(op)
    assert _at("wait_applied:0", op) and "broker 2" in op.message  # a restart still pending
    world.cluster.agent_applies(2, spec.generation, pending_restart=False)
    op = world.run(op)
    assert _at("wait_joined:0", op)
    assert world.cluster.spec is not None and world.cluster.spec.kafka_version == "3.9.2"
    assert {r.kafka_version for r in world.provider.requests[3:]} == {"3.9.2"}
    for broker_id, vm_id in enumerate(op.context["new_vms"]["0"], start=3):
        world.cluster.agent_joins(world.db.vm(vm_id)["address"], broker_id)  # type: ignore[index]
    for old in range(3):
        del world.cluster.member_znodes[old]
    world.cluster.place({"orders-0": (3, 4, 5)})
    op = world.run(op)
    assert _at("wait_applied:1", op)
    spec = world.cluster.spec
    assert spec is not None and "inter.broker.protocol.version" not in spec.broker_config
    for broker_id in (3, 4, 5):
        world.cluster.agent_applies(broker_id, spec.generation, pending_restart=False)
    op = world.run(op)
    assert op.status == SUCCEEDED


def test_an_upgrade_leaves_a_protocol_the_user_set(world: World) -> None:
    world.running_cluster(broker_config={"inter.broker.protocol.version": "3.7"})
    op = world.queue(K.UPGRADE, {"spec_changes": {"kafka_version": "3.9.2"}}, 0, batches=[])
    op = world.run(op)
    assert op.context["pinned_protocol"] is False
    assert world.cluster.spec is not None
    assert world.cluster.spec.broker_config["inter.broker.protocol.version"] == "3.7"


def test_a_config_change_waits_for_every_agent_to_apply_it(world: World) -> None:
    world.running_cluster()
    config = {"log.retention.hours": "48"}
    op = world.run(world.queue(K.CHANGE_CONFIG, {"spec_changes": {"broker_config": config}}))
    assert _at("wait_applied", op) and op.context["spec_generation"] == 2
    for broker_id in range(3):
        world.cluster.agent_applies(broker_id, 2, pending_restart=False)
    op = world.run(op)
    assert op.status == SUCCEEDED
    stored = json.loads(world.db.cluster("orders")["spec"])  # type: ignore[index]
    assert stored["broker_config"] == config and stored["generation"] == 2


def test_a_log_bound_change_writes_spec_logs(world: World) -> None:
    world.running_cluster()
    logs = {"max_file_mb": 5, "files": 3}
    op = world.run(world.queue(K.CHANGE_CONFIG, {"spec_changes": {"logs": logs}}))
    assert _at("wait_applied", op)
    assert world.cluster.spec is not None and world.cluster.spec.log_limits == LogLimits(5, 3)
    stored = json.loads(world.db.cluster("orders")["spec"])  # type: ignore[index]
    assert stored["logs"] == logs


# -- delete ------------------------------------------------------------------------------


def test_delete_uses_the_providers_own_cluster_deletion(tmp_path: Path) -> None:
    world = World(tmp_path, ClusterDeletingProvider())
    world.running_cluster()
    op = world.run(world.queue(K.DELETE_CLUSTER))
    assert op.status == SUCCEEDED
    assert isinstance(world.provider, ClusterDeletingProvider)
    assert world.provider.deleted == ["orders"] and world.provider.recycled == []
    assert world.db.cluster_vms("orders") == []
    assert world.db.cluster("orders")["status"] == "deleted"  # type: ignore[index]


def test_delete_without_it_recycles_every_vm_and_frees_every_broker(world: World) -> None:
    world.running_cluster()
    op = world.run(world.queue(K.DELETE_CLUSTER))
    assert op.status == SUCCEEDED
    assert len(world.provider.recycled) == 3 and world.provider.vms == {}
    assert sorted(world.provider.released) == [("orders", 0), ("orders", 1), ("orders", 2)]
    assert world.db.cluster("orders")["status"] == "deleted"  # type: ignore[index]


# -- errors ------------------------------------------------------------------------------


def test_an_unreachable_cluster_makes_the_step_wait(world: World) -> None:
    world.running_cluster()
    world.cluster.reachable = False
    op = world.run(world.queue(K.CHANGE_CONFIG, {"spec_changes": {}}))
    assert op.status == RUNNING and _at("write_spec", op)
    assert "write_spec: cluster not reachable yet (ZooKeeper of orders" in op.message
    world.cluster.reachable = True
    op = world.run(op)
    assert _at("wait_applied", op)


def test_a_permanent_error_fails_the_operation_at_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.running_cluster()

    def broken(_spec: Any) -> Any:
        raise PermanentError("the spec cannot be written: schema too new")

    monkeypatch.setattr(world.cluster, "write_spec", broken)
    op = world.run(world.queue(K.CHANGE_CONFIG, {"spec_changes": {}}))
    assert op.status == FAILED
    assert op.message == "write_spec: the spec cannot be written: schema too new"
    assert world.journal(op)[-1] == ("write_spec", "failed")
    assert world.db.cluster("orders")["status"] == "running"  # type: ignore[index]


def test_a_step_past_its_timeout_fails_with_its_last_message(world: World) -> None:
    world.running_cluster()
    op = world.run(world.queue(K.CHANGE_CONFIG, {"spec_changes": {}}))
    assert _at("wait_applied", op) and op.status == RUNNING
    world.engine.timeouts = StepTimeouts(applied=0.0)
    op = world.run(op)
    assert op.status == FAILED
    assert op.message.startswith("step wait_applied did not finish within 0s: 3/3 agents")
