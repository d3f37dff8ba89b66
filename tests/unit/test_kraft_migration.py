"""The migration of a ZooKeeper-mode cluster to KRaft: the contract (phases, refusals, Kafka's
migration record), the step lists, and every step driven by the real engine against fakes
of the cluster (the spec, the agents, Kafka's znodes), a service restart in between."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from management_plane.migration.steps import migration_phase
from management_plane.service.controller import STEPS, Controller
from management_plane.service.db import OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationKind,
    StepName,
    StepRef,
    migration_start,
    migration_steps,
    rollback_start,
    rollback_steps,
)
from management_plane.service.steps import Patience
from planner.contracts.kafka_release import KafkaMode
from planner.contracts.kraft_migration import (
    KraftMigration,
    MigrationError,
    MigrationPhase,
    ZkMigrationRecord,
    migration_refusal,
    migration_voters,
    parse_kafka_cluster_id,
    parse_migration,
    parse_zk_migration_record,
    rollback_refusal,
)
from planner.contracts.member import MemberState
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from tests.unit.api_server import running_api
from tests.unit.fake_cluster import FakeCluster
from tests.unit.test_mp_controller import World

pytestmark = pytest.mark.unit

K = OperationKind
P = MigrationPhase
V = ("3000@127.0.0.1:9093",)
ZONES = ("zone-a", "zone-b", "zone-c")


# -- the contract --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "migration", "refusal"),
    [
        ("3.9.2", None, ""),
        ("3.9.2", KraftMigration(P.BROKERS_MIGRATING, "id", V), ""),  # goes on from its phase
        ("3.9.2", KraftMigration(P.BROKERS_KRAFT, "id", V), ""),
        ("3.8.1", None, "starts only from Kafka 3.9 (upgrade it first)"),
        ("4.3.1", None, "runs KRaft already"),
        ("3.9.2", KraftMigration(P.FINALIZED, "id", V), "runs KRaft already"),
        ("3.9.2", KraftMigration(P.ROLLBACK_CONTROLLERS_STOPPED, "id", V), "a rollback"),
    ],
)
def test_migration_refusals(version: str, migration: KraftMigration | None, refusal: str) -> None:
    found = migration_refusal(version, migration)
    assert (refusal in found) if refusal else found == ""


@pytest.mark.parametrize(
    ("migration", "refusal"),
    [
        (None, "nothing to roll back"),
        (KraftMigration(P.FINALIZED, "id", V), "finalised"),
        (KraftMigration(P.BROKERS_KRAFT, "id", V), ""),
        (KraftMigration(P.CONTROLLERS, "id", V), ""),
        (KraftMigration(P.ROLLBACK_CONTROLLERS_STOPPED, "id", V), ""),
    ],
)
def test_rollback_refusals(migration: KraftMigration | None, refusal: str) -> None:
    found = rollback_refusal(migration)
    assert (refusal in found) if refusal else found == ""


def _spec(version: str = "3.9.2", migration: KraftMigration | None = None) -> ClusterSpec:
    return ClusterSpec("orders", version, 3, ZONES, migration=migration)


def test_the_spec_carries_the_migration_and_a_finalised_one_runs_kraft() -> None:
    plain = _spec()
    assert "migration" not in plain.to_json()  # a ZooKeeper-mode spec keeps its bytes
    for phase in P:
        spec = _spec(migration=KraftMigration(phase, "abc", V))
        parsed = parse_spec(spec.encode())
        assert parsed == spec
        expected = KafkaMode.KRAFT if phase is P.FINALIZED else KafkaMode.ZOOKEEPER
        assert parsed.kafka_mode is expected
    finalised = parse_spec(_spec(migration=KraftMigration(P.FINALIZED, "abc", V)).encode())
    assert finalised.to_json()["kraft"] == {"controllers": 3}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"phase": "sideways", "kafka_cluster_id": "x"}, "spec.migration.phase must be one of"),
        ({"phase": "controllers"}, "spec.migration.kafka_cluster_id must be a non-empty"),
        ({"phase": "controllers", "kafka_cluster_id": "x"}, "voters must be a non-empty list"),
        (
            {"phase": "controllers", "kafka_cluster_id": "x", "voters": ["1@h:9093"]},
            "is not <node id of 3000 or more>@<host>:<port>",
        ),
        (
            {"phase": "controllers", "kafka_cluster_id": "x", "voters": [*V, *V]},
            "1, 3 or 5 distinct controllers",
        ),
        ({"phase": "controllers", "kafka_cluster_id": "x", "x": 1}, "unknown keys: x"),
        ([], "spec.migration must be an object"),
    ],
)
def test_a_bad_migration_value_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(MigrationError, match=message):
        parse_migration(value)
    raw = _spec().to_json() | {"migration": value}
    with pytest.raises(SpecError, match=message):
        parse_spec(json.dumps(raw))


def test_only_a_39_spec_may_carry_a_migration() -> None:
    raw = _spec("3.8.1").to_json() | {
        "migration": {"phase": "controllers", "kafka_cluster_id": "x", "voters": list(V)}
    }
    with pytest.raises(SpecError, match=r"not a 3\.9 release"):
        parse_spec(json.dumps(raw))


@pytest.mark.parametrize(
    ("brokers", "size", "voters"),
    [
        ({0: "a", 1: "b", 2: "c", 3: "d"}, 3, ("3000@a:9093", "3001@b:9093", "3002@c:9093")),
        ({5: "f", 1: "b"}, 3, ("3001@b:9093",)),  # two VMs: a quorum of one
        (
            {0: "a", 1: "b", 2: "c", 3: "d", 4: "e", 6: "g"},
            5,
            tuple(
                f"{3000 + b}@{h}:9093"
                for b, h in ((0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e"))
            ),
        ),
    ],
)
def test_the_static_quorum_sits_beside_the_lowest_broker_ids(
    brokers: dict[int, str], size: int, voters: tuple[str, ...]
) -> None:
    assert migration_voters(brokers, size) == voters
    assert KraftMigration(P.CONTROLLERS, "x", voters).voter_broker_ids() == frozenset(
        sorted(brokers)[: len(voters)]
    )
    with pytest.raises(MigrationError, match="at least one broker"):
        migration_voters({}, 3)


def test_kafkas_migration_record_and_cluster_id() -> None:
    raw = json.dumps(
        {
            "version": 0,
            "kraft_controller_id": 3000,
            "kraft_controller_epoch": 1,
            "kraft_metadata_offset": -1,
            "kraft_metadata_epoch": -1,
        }
    )
    record = parse_zk_migration_record(raw)
    assert record == ZkMigrationRecord(3000, 1, -1, -1) and not record.metadata_migrated
    assert replace(record, kraft_metadata_offset=0).metadata_migrated
    with pytest.raises(MigrationError, match="kraft_metadata_offset must be an integer"):
        parse_zk_migration_record(json.dumps({**json.loads(raw), "kraft_metadata_offset": "1"}))
    with pytest.raises(MigrationError, match="not JSON"):
        parse_zk_migration_record(b"{")
    assert parse_kafka_cluster_id(b'{"version":"1","id":"Zk-Cluster_Id"}') == "Zk-Cluster_Id"
    with pytest.raises(MigrationError, match="holds no id"):
        parse_kafka_cluster_id(b'{"version":"1"}')


# -- the step lists ------------------------------------------------------------------------


def _names(steps: list[StepRef]) -> list[str]:
    return [str(s) for s in steps]


def test_a_migration_runs_every_phase_and_removes_kafkas_chroot_last() -> None:
    assert _names(migration_steps()) == [
        "migration_phase:0",
        "wait_applied:0",
        "migration_phase:1",
        "wait_applied:1",
        "wait_migrated",
        "migration_phase:2",
        "wait_applied:2",
        "migration_phase:3",
        "wait_applied:3",
        "remove_kafka_chroot",
        "finish",
    ]
    # Stopped before the finalisation, and resumed from the phase the spec holds.
    held = migration_steps(0, finalize=False)
    assert "migration_phase:3" not in _names(held) and "remove_kafka_chroot" not in _names(held)
    assert migration_start(P.BROKERS_KRAFT) == 2 and migration_start(None) == 0
    assert _names(migration_steps(migration_start(P.BROKERS_KRAFT))) == [
        "migration_phase:2",
        "wait_applied:2",
        "migration_phase:3",
        "wait_applied:3",
        "remove_kafka_chroot",
        "finish",
    ]
    with pytest.raises(ValueError, match="starts at phase"):
        migration_steps(3, finalize=False)


def test_a_rollback_goes_back_the_way_kafkas_documentation_orders() -> None:
    assert _names(rollback_steps(rollback_start(P.BROKERS_KRAFT))) == [
        "migration_phase:0",  # brokers back into migration mode
        "wait_applied:0",
        "migration_phase:1",  # controllers stopped
        "wait_applied:1",
        "clear_migration",  # Kafka's controller and migration znodes deleted
        "migration_phase:2",  # brokers back in plain ZooKeeper mode
        "wait_applied:2",
        "finish",
    ]
    assert rollback_start(P.BROKERS_MIGRATING) == 1
    assert _names(rollback_steps(rollback_start(P.CONTROLLERS))) == [
        "clear_migration",
        "migration_phase:2",
        "wait_applied:2",
        "finish",
    ]


def test_the_migration_steps_are_registered_with_their_patience() -> None:
    for kind in (K.MIGRATE_TO_KRAFT, K.ROLLBACK_KRAFT_MIGRATION):
        steps = migration_steps() if kind is K.MIGRATE_TO_KRAFT else rollback_steps()
        for ref in steps:
            assert kind in STEPS.lookup(ref, kind).kinds
    assert STEPS.lookup(StepRef(StepName.WAIT_MIGRATED), K.MIGRATE_TO_KRAFT).patience == (
        Patience.APPLIED
    )


# -- the steps against fakes ---------------------------------------------------------------


@dataclass
class MigratingCluster(FakeCluster):
    """The fake cluster with Kafka's own znodes a migration reads and clears."""

    kafka_id: str | None = "ZkClusterId0"
    migration_record: ZkMigrationRecord | None = None
    kafka_znodes: set[str] = field(default_factory=lambda: {"controller", "migration", "chroot"})

    def kafka_cluster_id(self) -> str | None:
        return self.kafka_id

    def zk_migration_record(self) -> ZkMigrationRecord | None:
        return self.migration_record

    def delete_kafka_controller_state(self) -> list[str]:
        found = sorted({"controller", "migration"} & self.kafka_znodes)
        self.kafka_znodes -= {"controller", "migration"}
        return found

    def remove_kafka_chroot(self) -> bool:
        found = "chroot" in self.kafka_znodes
        self.kafka_znodes.clear()
        return found

    def every_agent_applies(self) -> None:
        assert self.spec is not None
        for broker_id in list(self.member_znodes):
            self.agent_applies(broker_id, self.spec.generation, pending_restart=False)


class MigrationWorld(World):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.cluster = MigratingCluster()
        self.tmp_path = tmp_path
        self.restart_service()

    def restart_service(self) -> None:
        """A new controller and engine over the same database (a killed service restarted)."""
        self.controller = Controller(self.db, self.provider, self.cluster.connect)
        self.engine = Engine(self.db, self.controller)

    @property
    def fake(self) -> MigratingCluster:
        assert isinstance(self.cluster, MigratingCluster)
        return self.cluster

    def phase(self) -> MigrationPhase | None:
        assert self.fake.spec is not None
        return self.fake.spec.migration.phase if self.fake.spec.migration else None

    def queue_steps(self, kind: OperationKind, steps: list[StepRef]) -> OperationRow:
        return self.db.add_operation("orders", kind, {}, steps, "test")


@pytest.fixture
def mworld(tmp_path: Path) -> MigrationWorld:
    world = MigrationWorld(tmp_path)
    world.running_cluster(kafka_version="3.9.2")
    return world


def test_a_migration_walks_the_phases_waiting_for_agents_and_kafka(mworld: MigrationWorld) -> None:
    op = mworld.run(mworld.queue_steps(K.MIGRATE_TO_KRAFT, migration_steps()))
    assert _at("wait_applied:0", op) and op.status == RUNNING
    assert mworld.phase() is P.CONTROLLERS
    assert mworld.fake.spec is not None
    # The static quorum: controllers beside the brokers of the lowest ids.
    addresses = {vm["broker_id"]: vm["address"] for vm in mworld.db.cluster_vms("orders")}
    voters = tuple(f"{3000 + b}@{addresses[b]}:9093" for b in (0, 1, 2))
    assert mworld.fake.spec.migration == KraftMigration(P.CONTROLLERS, "ZkClusterId0", voters)

    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert _at("wait_applied:1", op) and mworld.phase() is P.BROKERS_MIGRATING
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert _at("wait_migrated", op) and "waiting for the brokers to register" in op.message
    mworld.fake.migration_record = ZkMigrationRecord(-1, -1, -1, -1)  # as the controllers start
    op = mworld.run(op)
    assert _at("wait_migrated", op) and "waiting for the brokers to register" in op.message
    mworld.fake.migration_record = ZkMigrationRecord(3001, 1, -1, -1)
    op = mworld.run(op)
    assert _at("wait_migrated", op) and "controller 3001 is migrating" in op.message

    # The service is killed here and restarted: the operation resumes at its stored step.
    mworld.restart_service()
    mworld.fake.migration_record = ZkMigrationRecord(3001, 1, 120, 1)
    op = mworld.run(op)
    assert _at("wait_applied:2", op) and mworld.phase() is P.BROKERS_KRAFT
    assert "chroot" in mworld.fake.kafka_znodes  # dual write: ZooKeeper still kept
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert _at("wait_applied:3", op) and mworld.phase() is P.FINALIZED
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert op.status == SUCCEEDED, op.message
    assert mworld.fake.kafka_znodes == set()
    stored = mworld.db.cluster("orders")
    assert stored is not None
    assert parse_spec(stored["spec"]).kafka_mode is KafkaMode.KRAFT
    assert ("remove_kafka_chroot", "done") in mworld.journal(op)


def test_a_phase_written_before_a_kill_is_not_written_again(mworld: MigrationWorld) -> None:
    op = mworld.run(mworld.queue_steps(K.MIGRATE_TO_KRAFT, migration_steps()))
    assert mworld.fake.spec is not None
    generation = mworld.fake.spec.generation
    # The step runs again (its transition was lost): the spec stays as it is.
    again = migration_phase(mworld.controller, op, 0)
    assert again.message == "migration phase controllers asked already"
    assert again.context == {"spec_generation": generation}
    assert mworld.fake.spec.generation == generation
    assert op.status == RUNNING


def test_a_migration_waits_for_kafkas_cluster_id(mworld: MigrationWorld) -> None:
    mworld.fake.kafka_id = None
    op = mworld.run(mworld.queue_steps(K.MIGRATE_TO_KRAFT, migration_steps()))
    assert _at("migration_phase:0", op) and "cluster id" in op.message
    assert mworld.phase() is None


def test_a_migration_of_a_cluster_that_cannot_is_failed_without_a_change(
    tmp_path: Path,
) -> None:
    world = MigrationWorld(tmp_path)
    world.running_cluster(kafka_version="3.8.1")
    op = world.run(world.queue_steps(K.MIGRATE_TO_KRAFT, migration_steps()))
    assert op.status == FAILED and "starts only from Kafka 3.9" in op.message
    assert world.phase() is None and world.fake.spec is not None
    assert world.fake.spec.generation == 1


def test_a_rollback_from_kraft_brokers_returns_to_zookeeper_mode(mworld: MigrationWorld) -> None:
    assert mworld.fake.spec is not None
    mworld.fake.spec = replace(
        mworld.fake.spec, migration=KraftMigration(P.BROKERS_KRAFT, "ZkClusterId0", V)
    )
    steps = rollback_steps(rollback_start(P.BROKERS_KRAFT))
    op = mworld.run(mworld.queue_steps(K.ROLLBACK_KRAFT_MIGRATION, steps))
    assert _at("wait_applied:0", op) and mworld.phase() is P.BROKERS_MIGRATING
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert _at("wait_applied:1", op) and mworld.phase() is P.ROLLBACK_CONTROLLERS_STOPPED
    assert "controller" in mworld.fake.kafka_znodes  # not before the controllers stopped
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert _at("wait_applied:2", op) and mworld.phase() is None
    assert mworld.fake.kafka_znodes == {"chroot"}
    mworld.fake.every_agent_applies()
    op = mworld.run(op)
    assert op.status == SUCCEEDED, op.message
    assert ("clear_migration", "done") in mworld.journal(op)


def test_controller_state_stays_while_the_controllers_run(mworld: MigrationWorld) -> None:
    assert mworld.fake.spec is not None
    mworld.fake.spec = replace(
        mworld.fake.spec, migration=KraftMigration(P.BROKERS_MIGRATING, "ZkClusterId0", V)
    )
    op = mworld.run(
        mworld.queue_steps(K.ROLLBACK_KRAFT_MIGRATION, [StepRef(StepName.CLEAR_MIGRATION)])
    )
    assert op.status == FAILED and "controllers still run" in op.message
    assert "controller" in mworld.fake.kafka_znodes


def test_a_finalised_migration_cannot_be_rolled_back(mworld: MigrationWorld) -> None:
    assert mworld.fake.spec is not None
    mworld.fake.spec = replace(
        mworld.fake.spec, migration=KraftMigration(P.FINALIZED, "ZkClusterId0", V)
    )
    op = mworld.run(mworld.queue_steps(K.ROLLBACK_KRAFT_MIGRATION, rollback_steps(0)))
    assert op.status == FAILED and "finalised" in op.message
    assert mworld.phase() is P.FINALIZED


def _at(step: str, op: OperationRow) -> bool:
    return str(op.step) == step


# -- the API: bad input gets a 4xx and changes nothing ---------------------------------------


def test_a_migration_the_cluster_cannot_take_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    with running_api(tmp_path / "service") as api:
        versions = api.service.provider.kafka_versions()
        made = {}
        for name, version in (("old", "3.8.1"), ("bridge", "3.9.2"), ("new", "4.3.1")):
            if version in versions:
                status, op = api.call(
                    "POST", "/v1/clusters", {"name": name, "kafka_version": version}
                )
                assert status == 202, op
                made[name] = api.service.db.cluster(name)["spec"]  # type: ignore[index]
        assert {"old", "bridge"} <= set(made)
        operations = [op.op_id for op in api.service.db.list_operations(None, 1000)]
        cases = [
            ("old", {}, 409, "not_migratable", "starts only from Kafka 3.9"),
            ("old", {"rollback": True}, 409, "not_migrating", "nothing to roll back"),
            ("bridge", {"rollback": True}, 409, "not_migrating", "nothing to roll back"),
            # Its create operation has not run (the engine is paused): one at a time.
            ("bridge", {}, 409, "cluster_busy", "wait for it to finish"),
            ("nosuch", {}, 404, "not_found", "no cluster named nosuch"),
        ]
        if "new" in made:
            cases.append(("new", {}, 409, "not_migratable", "runs KRaft already"))
        for name, body, status, code, fragment in cases:
            answer = api.call("POST", f"/v1/clusters/{name}/migrate-to-kraft", body)
            assert answer[0] == status and answer[1]["code"] == code, (name, body, answer)
            assert fragment in answer[1]["message"], answer
        refused = api.call("POST", "/v1/clusters/old/migrate-to-kraft", {"sideways": True})
        assert refused[0] == 422
        assert [op.op_id for op in api.service.db.list_operations(None, 1000)] == operations
        for name, spec in made.items():
            assert api.service.db.cluster(name)["spec"] == spec  # type: ignore[index]


def test_a_phase_waits_for_its_controller_restarts_and_running_restarts(
    mworld: MigrationWorld,
) -> None:
    """Finalising changes only the controllers: the phase is applied once no controller
    restart is left or running, not when the brokers have read it."""
    op = mworld.run(mworld.queue_steps(K.MIGRATE_TO_KRAFT, migration_steps()))
    assert _at("wait_applied:0", op)
    mworld.fake.every_agent_applies()
    first = next(iter(mworld.fake.member_znodes))
    mworld.fake.member_znodes[first] = replace(
        mworld.fake.member_znodes[first],
        controller_pending_restart=True,
        sentence="the active controller restarts last",
    )
    op = mworld.run(op)
    assert _at("wait_applied:0", op)
    assert "waiting for the phase's restarts" in op.message
    assert "the active controller restarts last" in op.message
    mworld.fake.member_znodes[first] = replace(
        mworld.fake.member_znodes[first],
        controller_pending_restart=False,
        state=MemberState.RESTARTING,
        sentence="controller restart 3/3",
    )
    op = mworld.run(op)
    assert _at("wait_applied:0", op) and "controller restart 3/3" in op.message
    mworld.fake.member_znodes[first] = replace(
        mworld.fake.member_znodes[first], state=MemberState.HEALTHY
    )
    op = mworld.run(op)
    assert _at("wait_applied:1", op)
