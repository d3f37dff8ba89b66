"""The controller's ensemble step against fakes: it asks the agents for a repair and waits
until the ensemble shows it done; it never reconfigures ZooKeeper itself."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from management_plane.providers.base import Provider
from management_plane.service.cluster_io import ClusterIO
from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.operations import DONE, WAIT
from planner.spec import ClusterSpec
from planner.zookeeper_ensemble import (
    EnsembleConfig,
    EnsembleRepairRequest,
    parse_ensemble_config,
)

pytestmark = pytest.mark.unit

OLD, NEW = "127.0.1.1", "127.0.1.4"
VOTERS = """server.2=127.0.1.2:2888:3888:participant;127.0.1.2:2181
server.3=127.0.1.3:2888:3888:participant;127.0.1.3:2181
version=100000005
"""
WITH_OLD = VOTERS + f"server.1={OLD}:2888:3888:participant;{OLD}:2181\n"
OBSERVING = f"server.4={NEW}:2888:3888:observer;{NEW}:2181\n"


class FakeDatabase:
    def __init__(self) -> None:
        spec = ClusterSpec("c", "3.9.2", 3, ("a", "b", "c"), zookeeper_participants=3)
        self.clusters = {"c": {"spec": json.dumps(spec.to_json())}}
        self.vms = {
            "local/vm1": {"vm_id": "local/vm1", "address": OLD, "state": "terminated"},
            "local/vm2": {"vm_id": "local/vm2", "address": "127.0.1.2", "state": "running"},
            "local/vm3": {"vm_id": "local/vm3", "address": "127.0.1.3", "state": "running"},
            "local/vm4": {"vm_id": "local/vm4", "address": NEW, "state": "running"},
        }

    def cluster(self, name: str) -> dict[str, Any] | None:
        return self.clusters.get(name)

    def cluster_vms(self, cluster: str) -> list[dict[str, Any]]:
        return [vm for vm in self.vms.values() if vm["state"] != "terminated"]

    def vm(self, vm_id: str) -> dict[str, Any] | None:
        return self.vms.get(vm_id)


class FakeProvider:
    def __init__(self, secret: str | None) -> None:
        self.secret = secret

    def zookeeper_admin_secret(self, cluster: str) -> str | None:
        return self.secret


class FakeEnsemble:
    """What the step reads and writes in ZooKeeper."""

    def __init__(self, config: str) -> None:
        self.config = config
        self.request: EnsembleRepairRequest | None = None
        self.withdrawn = 0

    def ensemble_config(self) -> EnsembleConfig:
        return parse_ensemble_config(self.config)

    def request_ensemble_repair(self, request: EnsembleRepairRequest) -> None:
        self.request = request

    def withdraw_ensemble_repair(self) -> None:
        self.request = None
        self.withdrawn += 1


class EnsembleController(Controller):
    def __init__(self, ensemble: FakeEnsemble, secret: str | None = "s3cret") -> None:
        super().__init__(cast(Database, FakeDatabase()), cast(Provider, FakeProvider(secret)))
        self.ensemble = ensemble

    def _io(self, cluster: str, exclude: tuple[str, ...] = ()) -> ClusterIO:
        return cast(ClusterIO, self.ensemble)


def operation() -> OperationRow:
    return OperationRow(
        op_id=7,
        cluster="c",
        kind="replace_vm",
        params={},
        status="running",
        steps=["ensemble:0"],
        step_index=0,
        context={"batches": [["local/vm1"]]},
        message="",
        created_by="test",
        created_at=0.0,
        updated_at=0.0,
        step_started_at=0.0,
    )


def test_the_step_asks_the_agents_and_waits_until_they_repaired_the_ensemble() -> None:
    ensemble = FakeEnsemble(WITH_OLD + OBSERVING)
    controller = EnsembleController(ensemble)

    first = controller.step_ensemble(operation(), 0)
    assert first.kind == WAIT
    assert "servers [1] of recycled VMs still in the ensemble" in first.message
    assert ensemble.request == EnsembleRepairRequest(frozenset({OLD}), "operation 7")

    ensemble.config = VOTERS + OBSERVING  # an agent removed the old server
    second = controller.step_ensemble(operation(), 0)
    assert second.kind == WAIT
    assert "2 of 3 participants while observers [4] could vote" in second.message

    ensemble.config = VOTERS + OBSERVING.replace("observer", "participant")  # promoted
    last = controller.step_ensemble(operation(), 0)
    assert last.kind == DONE
    assert "participants [2, 3, 4]" in last.message
    assert ensemble.request is None and ensemble.withdrawn == 1


def test_the_step_waits_for_a_live_vm_whose_server_is_not_in_the_ensemble_yet() -> None:
    ensemble = FakeEnsemble(VOTERS)
    outcome = EnsembleController(ensemble).step_ensemble(operation(), 0)
    assert outcome.kind == WAIT
    assert f"no server yet for the VMs at {NEW}" in outcome.message
    assert ensemble.request is None  # nothing of the recycled VM left to remove


def test_without_reconfiguring_agents_the_step_leaves_the_ensemble_to_them() -> None:
    ensemble = FakeEnsemble(WITH_OLD)
    outcome = EnsembleController(ensemble, secret=None).step_ensemble(operation(), 0)
    assert outcome.kind == DONE
    assert ensemble.request is None and ensemble.withdrawn == 0


def test_an_unreadable_config_waits_naming_the_problem() -> None:
    ensemble = FakeEnsemble("server.1=nonsense\n")
    outcome = EnsembleController(ensemble).step_ensemble(operation(), 0)
    assert outcome.kind == WAIT
    assert "unreadable server line" in outcome.message
