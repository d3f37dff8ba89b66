"""The steps of a ZooKeeper-mode cluster's migration to KRaft and of its rollback,
registered with the controller's one step registry, so the one runner journals them and a
service killed anywhere resumes at the persisted step.

The management plane only writes the phase into the spec and watches: the agents render
each phase's controller and broker config (`planner.contracts.vm_config.migration`) and
roll their VMs one at a time, as for any spec change; `wait_applied` (the controller's)
waits for every agent to have applied the phase's spec generation. Every step looks first
at what is already true, so running it again changes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, runtime_checkable

from management_plane.errors import PermanentError
from management_plane.service.controller import STEPS, Controller, done, wait
from management_plane.service.db import OperationRow
from management_plane.service.operations import (
    DONE,
    FAIL,
    MIGRATION_PHASES,
    ROLLBACK_PHASES,
    OperationKind,
    Outcome,
    StepName,
)
from management_plane.service.steps import Patience
from planner.contracts.kraft_migration import (
    KraftMigration,
    MigrationPhase,
    ZkMigrationRecord,
    migration_refusal,
    migration_voters,
    rollback_refusal,
)
from planner.contracts.member import MemberState
from planner.contracts.spec import ClusterSpec

K = OperationKind
MIGRATING = frozenset({K.MIGRATE_TO_KRAFT})
ROLLING_BACK = frozenset({K.ROLLBACK_KRAFT_MIGRATION})
step = STEPS.register


class MigrationRefused(PermanentError):
    """The cluster cannot take this migration step; the message says why."""


@runtime_checkable
class KafkaZookeeperPort(Protocol):
    """Kafka's own znodes a migration reads and clears (ClusterIO; a fake in unit tests)."""

    def kafka_cluster_id(self) -> str | None: ...

    def zk_migration_record(self) -> ZkMigrationRecord | None: ...

    def delete_kafka_controller_state(self) -> list[str]: ...

    def remove_kafka_chroot(self) -> bool: ...


def _kafka_port(controller: Controller, cluster: str) -> KafkaZookeeperPort:
    io = controller._io(cluster)
    if not isinstance(io, KafkaZookeeperPort):
        raise MigrationRefused(f"cluster {cluster}: its port cannot reach Kafka's znodes")
    return io


def _current_spec(controller: Controller, cluster: str) -> ClusterSpec:
    return controller._io(cluster).read_spec() or controller._spec(cluster)


def _write_phase(
    controller: Controller, cluster: str, migration: KraftMigration | None, spec: ClusterSpec
) -> Outcome:
    if spec.migration == migration:
        # Written already (by this step before a restart of the service): the agents may
        # still be applying it, which wait_applied sees.
        return done(_phase_sentence(migration, "asked already"), spec_generation=spec.generation)
    written = controller._write_spec(cluster, migration=migration)
    return done(_phase_sentence(migration, "asked"), spec_generation=written.generation)


def _phase_sentence(migration: KraftMigration | None, what: str) -> str:
    if migration is None:
        return f"ZooKeeper mode without migration {what}"
    return f"migration phase {migration.phase.value} {what}"


@step(StepName.MIGRATION_PHASE, MIGRATING)
def migration_phase(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    """Ask the agents for the next phase of the migration."""
    phase = MIGRATION_PHASES[batch]
    spec = _current_spec(controller, op.cluster)
    if spec.migration is not None and spec.migration.phase is phase:
        return _write_phase(controller, op.cluster, spec.migration, spec)
    refusal = migration_refusal(spec.kafka_version, spec.migration)
    if refusal:
        return Outcome(FAIL, f"migration of {op.cluster} refused: {refusal}")
    if spec.migration is not None:
        return _write_phase(controller, op.cluster, replace(spec.migration, phase=phase), spec)
    found = _kafka_port(controller, op.cluster).kafka_cluster_id()
    if found is None:
        return wait("Kafka has not written its cluster id to ZooKeeper yet")
    brokers = {
        int(vm["broker_id"]): str(vm["address"])
        for vm in controller.db.cluster_vms(op.cluster)
        if vm["state"] == "running" and vm["broker_id"] is not None
    }
    voters = migration_voters(brokers, spec.kraft_controllers)
    return _write_phase(controller, op.cluster, KraftMigration(phase, found, voters), spec)


@step(StepName.WAIT_APPLIED, MIGRATING | ROLLING_BACK, Patience.APPLIED)
def wait_phase_applied(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    """Every agent read the phase, and no broker or controller restart of it is left or
    running: a phase's controllers restart after its brokers (finalising restarts only
    them), and the next phase (or Kafka's chroot removed) must find them all through."""
    applied = controller.wait_applied(op, batch)
    if applied.kind != DONE:
        return applied
    members = controller._io(op.cluster).members().records
    busy = [
        f"broker {b}: {m.sentence}"
        for b, m in sorted(members.items())
        if m.controller_pending_restart or m.state is not MemberState.HEALTHY
    ]
    if busy:
        return wait("waiting for the phase's restarts: " + "; ".join(busy))
    return applied


@step(StepName.WAIT_MIGRATED, MIGRATING, Patience.APPLIED)
def wait_migrated(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    """The active KRaft controller has copied ZooKeeper's metadata into its log (its
    migration record names a metadata offset): the brokers may leave ZooKeeper."""
    record = _kafka_port(controller, op.cluster).zk_migration_record()
    if record is None or record.kraft_controller_id < 0:
        # The active controller claims the record once every broker has registered with it
        # in migration mode.
        return wait("waiting for the brokers to register with the KRaft controllers")
    if not record.metadata_migrated:
        return wait(
            f"controller {record.kraft_controller_id} is migrating the metadata from ZooKeeper"
        )
    return done(
        f"metadata migrated to KRaft by controller {record.kraft_controller_id} "
        f"(metadata log offset {record.kraft_metadata_offset})",
        migrated_offset=record.kraft_metadata_offset,
    )


@step(StepName.REMOVE_KAFKA_CHROOT, MIGRATING)
def remove_kafka_chroot(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    """Kafka's ZooKeeper data, last: only once the spec says finalised and every agent has
    applied it does nothing of Kafka's read it any more."""
    spec = _current_spec(controller, op.cluster)
    if spec.migration is None or spec.migration.phase is not MigrationPhase.FINALIZED:
        return Outcome(FAIL, "the migration is not finalised: Kafka's ZooKeeper data stays")
    removed = _kafka_port(controller, op.cluster).remove_kafka_chroot()
    return done(
        f"Kafka's ZooKeeper chroot {'removed' if removed else 'was gone already'}; "
        f"{op.cluster} runs KRaft"
    )


@step(StepName.MIGRATION_PHASE, ROLLING_BACK)
def rollback_phase(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    """Ask the agents for the next phase of the rollback (the last: no migration)."""
    phase = ROLLBACK_PHASES[batch]
    spec = _current_spec(controller, op.cluster)
    if phase is not None and spec.migration is not None and spec.migration.phase is phase:
        return _write_phase(controller, op.cluster, spec.migration, spec)
    if phase is None and spec.migration is None:
        return _write_phase(controller, op.cluster, None, spec)
    refusal = rollback_refusal(spec.migration)
    if refusal:
        return Outcome(FAIL, f"rollback of {op.cluster} refused: {refusal}")
    assert spec.migration is not None
    wanted = None if phase is None else replace(spec.migration, phase=phase)
    return _write_phase(controller, op.cluster, wanted, spec)


@step(StepName.CLEAR_MIGRATION, ROLLING_BACK)
def clear_migration(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    """With the KRaft controllers stopped, delete Kafka's controller znode (a ZooKeeper-mode
    broker takes the controller role back) and its migration record (a later migration
    starts afresh), as Kafka's rollback procedure says."""
    spec = _current_spec(controller, op.cluster)
    if spec.migration is not None and spec.migration.phase.runs_controllers:
        return Outcome(
            FAIL,
            f"the KRaft controllers still run (phase {spec.migration.phase.value}): "
            "Kafka's controller znode stays",
        )
    deleted = _kafka_port(controller, op.cluster).delete_kafka_controller_state()
    return done(f"deleted {', '.join(deleted) if deleted else 'nothing (gone already)'}")
