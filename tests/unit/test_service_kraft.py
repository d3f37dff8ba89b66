"""KRaft clusters through the management plane: the request checks (pure), the API refusing
bad input with nothing stored, the create and replacement steps asking the provider for
controllers, and the local provider placing them by name. No JVM."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from management_plane.cli import _parser
from management_plane.local import kraft
from management_plane.local.layout import plan_layout
from management_plane.local.state import ClusterState
from management_plane.service import client as client_module
from management_plane.service.metadata_version import MetadataVersionLevels, raise_metadata_version
from management_plane.service.operations import (
    SUCCEEDED,
    OperationKind,
    OperationStatus,
    OutcomeKind,
)
from management_plane.service.validation import (
    ValidationError,
    default_kafka_version,
    default_kraft_quorum,
    mode_change_refusal,
    validate_kraft_controllers,
)
from planner.contracts.kraft_migration import KraftMigration, MigrationPhase
from planner.contracts.spec import ClusterSpec
from tests.unit.api_server import running_api
from tests.unit.fake_cluster import BootstrappingProvider, FakeCluster
from tests.unit.test_mp_controller import ZONES, World, _at, _replace
from tests.unit.test_mp_controller import world as world  # the fixture

pytestmark = pytest.mark.unit

K = OperationKind


# -- the request checks (pure) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("controllers", "version", "brokers", "expected"),
    [
        (None, "4.3.1", 3, 3),
        (None, "4.3.1", 6, 3),
        (None, "4.3.1", 2, 1),
        (None, "4.3.1", 1, 1),
        (5, "4.3.1", 5, 5),
        (1, "4.3.1", 3, 1),
        (None, "3.9.2", 3, None),
        (2, "4.3.1", 3, "must be one of 1, 3, 5, got 2"),
        (4, "4.3.1", 6, "must be one of 1, 3, 5, got 4"),
        (0, "4.3.1", 3, "must be one of 1, 3, 5, got 0"),
        (True, "4.3.1", 3, "must be one of 1, 3, 5, got True"),
        (5, "4.3.1", 3, "kraft_controllers is 5, above the broker count 3"),
        (3, "4.3.1", 1, "kraft_controllers is 3, above the broker count 1"),
        (3, "3.9.2", 3, "Kafka 3.9.2 runs in ZooKeeper mode"),
    ],
)
def test_the_quorum_size_a_request_gets(
    controllers: int | None, version: str, brokers: int, expected: int | str | None
) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValidationError, match="kraft_controllers") as refused:
            validate_kraft_controllers(controllers, version, brokers)
        assert expected in str(refused.value)
    else:
        assert validate_kraft_controllers(controllers, version, brokers) == expected


def test_default_quorum_sizes() -> None:
    assert [default_kraft_quorum(n) for n in range(1, 8)] == [1, 1, 3, 3, 3, 3, 3]


def test_a_request_naming_no_version_stays_in_zookeeper_mode_until_the_default_moves() -> None:
    assert default_kafka_version(("3.8.1", "3.9.2", "4.3.1")) == "3.9.2"
    assert default_kafka_version(("4.3.1",)) == "4.3.1"


def _spec(version: str, migration: KraftMigration | None = None) -> ClusterSpec:
    return ClusterSpec(
        cluster="c",
        kafka_version=version,
        broker_count=3,
        zones=ZONES,
        zookeeper_participants=3,
        migration=migration,
    )


def test_an_upgrade_keeps_the_metadata_mode() -> None:
    voters = tuple(f"{3000 + i}@10.0.0.{i}:9093" for i in range(3))
    finalized = KraftMigration(MigrationPhase.FINALIZED, "ZkClusterId0", voters)
    migrating = replace(finalized, phase=MigrationPhase.BROKERS_KRAFT)
    assert mode_change_refusal(_spec("3.8.1"), "3.9.2") == ""
    assert "migrate it first" in mode_change_refusal(_spec("3.9.2"), "4.3.1")
    assert "migrate it first" in mode_change_refusal(_spec("3.9.2", migrating), "4.3.1")
    assert mode_change_refusal(_spec("3.9.2", finalized), "4.3.1") == ""
    assert "runs KRaft already" in mode_change_refusal(_spec("4.3.1"), "3.9.2")


# -- the API ---------------------------------------------------------------------------------


def test_the_api_creates_a_kraft_cluster_with_its_quorum_size(tmp_path: Path) -> None:
    with running_api(tmp_path / "service") as api:
        assert "4.3.1" in api.service.provider.kafka_versions()
        assert {"3.8.1", "3.9.2"} <= set(api.service.provider.kafka_versions())
        status, op = api.call(
            "POST",
            "/v1/clusters",
            {"name": "quorum", "kafka_version": "4.3.1", "broker_count": 5, "kraft_controllers": 5},
        )
        assert status == 202, op
        stored = json.loads(api.service.db.cluster("quorum")["spec"])  # type: ignore[index]
        assert stored["kafka_version"] == "4.3.1" and stored["kraft"] == {"controllers": 5}
        status, op = api.call("POST", "/v1/clusters", {"name": "small", "kafka_version": "4.3.1"})
        assert status == 202, op
        stored = json.loads(api.service.db.cluster("small")["spec"])  # type: ignore[index]
        assert stored["kraft"] == {"controllers": 3}
        status, op = api.call("POST", "/v1/clusters", {"name": "zkmode"})
        assert status == 202, op
        stored = json.loads(api.service.db.cluster("zkmode")["spec"])  # type: ignore[index]
        assert stored["kafka_version"] == "3.9.2" and "kraft" not in stored


def test_bad_kraft_requests_are_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"kafka_version": "4.0.0"}, 400, "kafka_version '4.0.0' is not available"),
        ({"kafka_version": "4.3.1", "kraft_controllers": 2}, 400, "must be one of 1, 3, 5"),
        (
            {"kafka_version": "4.3.1", "broker_count": 6, "kraft_controllers": 4},
            400,
            "must be one of 1, 3, 5, got 4",
        ),
        ({"kafka_version": "4.3.1", "kraft_controllers": 5}, 400, "above the broker count 3"),
        ({"kafka_version": "3.9.2", "kraft_controllers": 3}, 400, "ZooKeeper mode"),
        ({"kafka_version": "4.3.1", "kraft_controllers": "three"}, 422, ""),
    ]
    with running_api(tmp_path / "service") as api:
        for body, status, fragment in cases:
            answer = api.call("POST", "/v1/clusters", {"name": "refused", **body})
            assert answer[0] == status, (body, answer)
            assert fragment in json.dumps(answer[1]), (body, answer)
            assert api.service.db.cluster("refused") is None
        assert api.service.db.list_operations(None, 100) == []


def test_an_upgrade_across_modes_and_a_scale_below_the_quorum_are_refused(
    tmp_path: Path,
) -> None:
    with running_api(tmp_path / "service") as api:
        for name, version in (("bridge", "3.9.2"), ("modern", "4.3.1")):
            status, op = api.call("POST", "/v1/clusters", {"name": name, "kafka_version": version})
            assert status == 202, op
            api.service.db.save_operation(op["op_id"], OperationStatus.SUCCEEDED, 0, {}, "test")
        before = [o.op_id for o in api.service.db.list_operations(None, 100)]
        specs = {n: api.service.db.cluster(n)["spec"] for n in ("bridge", "modern")}  # type: ignore[index]
        cases = [
            ("bridge", "upgrade", {"kafka_version": "4.3.1"}, 409, "migrate it first"),
            ("modern", "upgrade", {"kafka_version": "3.9.2"}, 409, "runs KRaft already"),
            ("modern", "scale", {"broker_count": 2}, 400, "below the controller quorum's size 3"),
        ]
        for name, action, body, status, fragment in cases:
            answer = api.call("POST", f"/v1/clusters/{name}/{action}", body)
            assert answer[0] == status and fragment in answer[1]["message"], answer
        assert [o.op_id for o in api.service.db.list_operations(None, 100)] == before
        for name, spec in specs.items():
            assert api.service.db.cluster(name)["spec"] == spec  # type: ignore[index]


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        self.calls.append((method, path, body))
        return {"op_id": 1, "kind": "create_cluster", "cluster": "k", "steps": ["create_vms"]}


def test_the_cli_sends_the_quorum_size(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = RecordingClient()
    monkeypatch.setattr(client_module, "_client", lambda _args: recorder)
    for extra, expected in ((["--controllers", "5"], 5), ([], None)):
        args = _parser().parse_args(
            ["cluster", "create", "k", "--brokers", "5", "--kafka-version", "4.3.1", *extra]
        )
        assert client_module.run(args) == 0
        body = recorder.calls[-1][2]
        assert body["kafka_version"] == "4.3.1"
        assert body.get("kraft_controllers") == expected


# -- the steps against the fakes -------------------------------------------------------------


def test_a_kraft_cluster_asks_for_controllers_on_its_first_vms(tmp_path: Path) -> None:
    world = World(tmp_path, BootstrappingProvider())
    world.add_cluster(brokers=5, kafka_version="4.3.1", kraft_controllers=3)
    params = {
        "broker_count": 5,
        "zones": list(ZONES),
        "instance_type": "small",
        "kafka_version": "4.3.1",
    }
    world.run(world.queue(K.CREATE_CLUSTER, params))
    assert [r.controller for r in world.provider.requests] == [True, True, True, False, False]


def test_a_zookeeper_mode_cluster_asks_for_no_controller(tmp_path: Path) -> None:
    world = World(tmp_path, BootstrappingProvider())
    world.add_cluster(brokers=3)
    params = {"broker_count": 3, "zones": list(ZONES), "instance_type": "small"}
    world.run(world.queue(K.CREATE_CLUSTER, {**params, "kafka_version": "3.8.1"}))
    assert [r.controller for r in world.provider.requests] == [False] * 3


@pytest.mark.parametrize(("broker_id", "controller"), [(0, True), (2, False)])
def test_a_replacement_takes_over_the_controller_role(
    tmp_path: Path, broker_id: int, controller: bool
) -> None:
    world = World(tmp_path)
    world.running_cluster(kafka_version="4.3.1")
    old = world.vm_of(broker_id)
    world.provider.vms[old["vm_id"]] = replace(
        world.provider.vms[old["vm_id"]], controller=controller
    )
    world.run(_replace(world, broker_id))
    assert [r.controller for r in world.provider.requests[3:]] == [controller]


# -- the local provider: controllers by name -------------------------------------------------


def test_a_local_quorum_of_the_size_asked(tmp_path: Path) -> None:
    layout = kraft.with_controllers(plan_layout("k", tmp_path, 5, "127.0.9"), 3)
    assert [vm.name for vm in kraft.controller_vms(layout)] == ["vm1", "vm2", "vm3"]
    assert kraft.local_kraft_spec(layout, "4.3.1").kraft_controllers == 3
    for count in (2, 4, 7):
        with pytest.raises(Exception, match="cannot be"):
            kraft.with_controllers(layout, count)


def test_a_replacement_controller_vm_is_named_and_formatted_to_join(tmp_path: Path) -> None:
    layout = kraft.with_controllers(plan_layout("k", tmp_path, 4, "127.0.9"), 3)
    # vm4 replaces vm1: both run a controller until vm1 is recycled.
    layout = replace(layout, controllers=("vm2", "vm3", "vm4", "vm1"))
    assert [vm.name for vm in kraft.controller_vms(layout)] == ["vm1", "vm2", "vm3", "vm4"]
    assert kraft.local_kraft_spec(layout, "4.3.1").kraft_controllers == 3
    vm4 = layout.vm("vm4")
    assert kraft.CONTROLLER_PROPERTIES in kraft.config_files(layout, vm4, "4.3.1")
    controller_run, broker_run = kraft.format_commands("java", "/libs", layout, vm4, "id", (), True)
    assert "--no-initial-controllers" in controller_run and "--initial-controllers" not in (
        controller_run
    )
    assert str(vm4.config_dir / kraft.CONTROLLER_PROPERTIES) in controller_run
    assert "--no-initial-controllers" in broker_run


def test_the_cluster_file_keeps_the_controller_names(tmp_path: Path) -> None:
    layout = replace(plan_layout("k", tmp_path, 4, "127.0.9"), controllers=("vm2", "vm4"))
    state = ClusterState(layout=layout, kafka_version="4.3.1", agents=True)
    again = ClusterState.from_json(json.loads(json.dumps(state.to_json())), tmp_path)
    assert again.layout.controllers == ("vm2", "vm4")
    assert again.vm_kinds("vm1") == ("zookeeper", "agent", "kafka")
    assert again.vm_kinds("vm4") == ("zookeeper", "agent", "controller", "kafka")
    older = state.to_json()
    del older["controllers"]  # a file written before the names were kept
    assert ClusterState.from_json(older, tmp_path).layout.controllers is None


# -- upgrading a migrated cluster to 4.x by replacement: metadata.version raised last ------------


def test_metadata_version_is_raised_only_once_every_vm_runs_the_release() -> None:
    fake = FakeCluster(metadata_levels=MetadataVersionLevels(21, 27))
    vms = [
        {"vm_id": "c/vm4", "state": "running", "kafka_version": "4.3.1"},
        {"vm_id": "c/vm1", "state": "draining", "kafka_version": "3.9.2"},
        {"vm_id": "c/vm0", "state": "terminated", "kafka_version": "3.9.2"},
    ]
    outcome = raise_metadata_version(fake, vms, "4.3.1")
    assert outcome.kind is OutcomeKind.WAIT and "c/vm1" in outcome.message
    assert fake.metadata_raises == []
    outcome = raise_metadata_version(fake, vms[:1] + vms[2:], "4.3.1")
    assert outcome.kind is OutcomeKind.DONE and "from level 21 to 27" in outcome.message
    assert fake.metadata_raises == [27]
    again = raise_metadata_version(fake, vms[:1], "4.3.1")  # run again after a service kill
    assert again.kind is OutcomeKind.DONE and fake.metadata_raises == [27]


def test_a_finalised_migrated_cluster_upgrades_to_4x_by_replacement(world: World) -> None:
    voters = tuple(f"{3000 + i}@10.0.0.{i + 1}:9093" for i in range(3))
    world.running_cluster(
        kafka_version="3.9.2",
        migration=KraftMigration(MigrationPhase.FINALIZED, "ZkClusterId0", voters),
    )
    world.cluster.metadata_levels = MetadataVersionLevels(21, 21)  # what 3.9 brokers support
    olds = [world.vm_of(b)["vm_id"] for b in range(3)]
    op = world.queue(
        K.UPGRADE,
        {
            "kafka_version": "4.3.1",
            "spec_changes": {"kafka_version": "4.3.1", "migration": None, "kraft_controllers": 3},
        },
        1,
        batches=[olds],
    )
    op = world.run(op)
    assert op.context["pinned_protocol"] is False  # KRaft brokers have no protocol to pin
    assert world.cluster.spec is not None
    assert "inter.broker.protocol.version" not in world.cluster.spec.broker_config
    assert _at("wait_joined:0", op), op.message
    assert {r.kafka_version for r in world.provider.requests[3:]} == {"4.3.1"}
    for broker_id, vm_id in enumerate(op.context["new_vms"]["0"], start=3):
        world.cluster.agent_joins(world.db.vm(vm_id)["address"], broker_id)  # type: ignore[index]
    for old in range(3):
        del world.cluster.member_znodes[old]
    world.cluster.place({"orders-0": (3, 4, 5)})
    world.cluster.metadata_levels = MetadataVersionLevels(21, 27)  # 4.3 brokers support more
    op = world.run(op)
    assert op.status == SUCCEEDED, op.message
    assert world.cluster.metadata_raises == [27]
    assert world.cluster.spec.kafka_version == "4.3.1" and world.cluster.spec.migration is None
    journal = [s for s, outcome in world.journal(op) if outcome == "done"]
    assert journal.index("recycle:0") < journal.index("unpin_protocol")


def test_the_upgrade_of_a_finalised_migration_drops_the_migration_record(tmp_path: Path) -> None:
    voters = [f"{3000 + i}@10.0.0.{i + 1}:9093" for i in range(3)]
    with running_api(tmp_path / "service") as api:
        status, op = api.call("POST", "/v1/clusters", {"name": "moved", "kafka_version": "3.9.2"})
        assert status == 202, op
        api.service.db.save_operation(op["op_id"], OperationStatus.SUCCEEDED, 0, {}, "test")
        spec = json.loads(api.service.db.cluster("moved")["spec"])  # type: ignore[index]
        migration = {"phase": "finalized", "kafka_cluster_id": "ZkClusterId0", "voters": voters}
        for phase, status_wanted in (("brokers_kraft", 409), ("finalized", 202)):
            stored = {**spec, "migration": {**migration, "phase": phase}}
            api.service.db.update_cluster("moved", spec=json.dumps(stored, sort_keys=True))
            answer = api.call("POST", "/v1/clusters/moved/upgrade", {"kafka_version": "4.3.1"})
            assert answer[0] == status_wanted, answer
        (upgrade,) = [o for o in api.service.db.list_operations("moved", 10) if o.unfinished]
        assert upgrade.params["spec_changes"] == {
            "kafka_version": "4.3.1",
            "migration": None,
            "kraft_controllers": 3,
        }
