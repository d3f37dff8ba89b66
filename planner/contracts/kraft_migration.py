"""A ZooKeeper-mode cluster's migration to KRaft (KIP-866): the phase the spec asks for, and
Kafka's own migration record (`/migration` under Kafka's chroot), which both planes read.
Pure.

The management plane moves the phase forward one step at a time; the agents render each
VM's controller and broker config for the phase (`vm_config/migration.py`) and roll. Until
the controllers are finalised the cluster can go back: the phases of a rollback are
phases too, so an agent needs no other input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from planner.contracts.fields import ContractError
from planner.contracts.kafka_release import KafkaMode, kafka_mode

# KIP-866 migrates only from the bridge release line.
MIGRATION_SOURCE_LINE: Final = "3.9"


class MigrationError(ContractError):
    """A migration value or request that must not be acted on; the message names why."""


class MigrationPhase(Enum):
    """What the cluster runs, in the order a migration passes through."""

    # Controllers started in migration mode (ZooKeeper connection, migration flag); the
    # brokers are unchanged ZooKeeper-mode brokers.
    CONTROLLERS = "controllers"
    # Brokers still in ZooKeeper mode, with the migration flag and the controller quorum:
    # once all have registered, the active controller copies the metadata from ZooKeeper.
    BROKERS_MIGRATING = "brokers_migrating"
    # Brokers in KRaft mode; the controllers still write every change to ZooKeeper too
    # (dual write), so the cluster can still go back.
    BROKERS_KRAFT = "brokers_kraft"
    # Controllers without ZooKeeper: the migration is over, there is no way back.
    FINALIZED = "finalized"
    # Rollback: controllers stopped, brokers in migration mode, until Kafka's controller and
    # migration znodes are deleted and the brokers are rolled back into ZooKeeper mode.
    ROLLBACK_CONTROLLERS_STOPPED = "rollback_controllers_stopped"

    @property
    def runs_controllers(self) -> bool:
        return self is not MigrationPhase.ROLLBACK_CONTROLLERS_STOPPED

    @property
    def brokers_in_kraft(self) -> bool:
        return self in (MigrationPhase.BROKERS_KRAFT, MigrationPhase.FINALIZED)

    @property
    def can_roll_back(self) -> bool:
        return self is not MigrationPhase.FINALIZED


# The phases a migration passes through, in order.
FORWARD_PHASES: Final = (
    MigrationPhase.CONTROLLERS,
    MigrationPhase.BROKERS_MIGRATING,
    MigrationPhase.BROKERS_KRAFT,
    MigrationPhase.FINALIZED,
)


# Kafka 3.9 migrates onto a static quorum: its voters are chosen when the migration starts
# and kept until it ends. A VM's controller is node 3000 + its broker id (as in KRaft
# clusters) and listens on this port of the VM's address.
CONTROLLER_PORT: Final = 9093
CONTROLLER_NODE_ID_OFFSET: Final = 3000
_VOTER = re.compile(r"^(\d+)@([A-Za-z0-9.\-]+):(\d{1,5})$")


@dataclass(frozen=True)
class KraftMigration:
    """The spec's `migration` value."""

    phase: MigrationPhase
    kafka_cluster_id: str  # the ZooKeeper-mode cluster's id, which the controllers format with
    voters: tuple[str, ...] = ()  # "<node id>@<host>:<port>", the static controller quorum

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase.value,
            "kafka_cluster_id": self.kafka_cluster_id,
            "voters": list(self.voters),
        }

    def voter_broker_ids(self) -> frozenset[int]:
        """The brokers whose VMs run a controller."""
        return frozenset(int(v.split("@", 1)[0]) - CONTROLLER_NODE_ID_OFFSET for v in self.voters)

    def runs_controller(self, broker_id: int) -> bool:
        """Whether the phase has a controller running on the VM of `broker_id`."""
        return self.phase.runs_controllers and broker_id in self.voter_broker_ids()

    @property
    def controller_endpoints(self) -> str:
        """host:port of every voter, comma-separated (the quorum tools' bootstrap)."""
        return ",".join(v.split("@", 1)[1] for v in self.voters)


def migration_voters(brokers: dict[int, str], quorum_size: int) -> tuple[str, ...]:
    """The static quorum of a migration: controllers on the VMs of the lowest broker ids
    (as a KRaft cluster's first VMs run them), as many as the quorum size and the VMs allow
    (1, 3 or 5). `brokers`: broker id -> the VM's address."""
    size = max(n for n in (1, 3, 5) if n <= min(quorum_size, len(brokers))) if brokers else 0
    if size == 0:
        raise MigrationError("a migration needs at least one broker VM for a controller")
    return tuple(
        f"{CONTROLLER_NODE_ID_OFFSET + b}@{brokers[b]}:{CONTROLLER_PORT}"
        for b in sorted(brokers)[:size]
    )


def parse_migration(value: object, where: str = "spec.migration") -> KraftMigration:
    if not isinstance(value, dict):
        raise MigrationError(f"{where} must be an object")
    unknown = set(value) - {"phase", "kafka_cluster_id", "voters"}
    if unknown:
        raise MigrationError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    phase = value.get("phase")
    try:
        parsed = MigrationPhase(phase)
    except ValueError:
        names = ", ".join(p.value for p in MigrationPhase)
        raise MigrationError(f"{where}.phase must be one of {names}, got {phase!r}") from None
    cluster_id = value.get("kafka_cluster_id")
    if not isinstance(cluster_id, str) or not cluster_id.strip():
        raise MigrationError(f"{where}.kafka_cluster_id must be a non-empty string")
    voters = value.get("voters", [])
    if not isinstance(voters, list) or not voters:
        raise MigrationError(f"{where}.voters must be a non-empty list of node@host:port")
    for voter in voters:
        match = _VOTER.match(voter) if isinstance(voter, str) else None
        if match is None or int(match[1]) < CONTROLLER_NODE_ID_OFFSET:
            raise MigrationError(
                f"{where}.voters: {voter!r} is not <node id of {CONTROLLER_NODE_ID_OFFSET} "
                "or more>@<host>:<port>"
            )
    if len(voters) not in (1, 3, 5) or len({v.split("@")[0] for v in voters}) != len(voters):
        raise MigrationError(f"{where}.voters must be 1, 3 or 5 distinct controllers: {voters}")
    return KraftMigration(parsed, cluster_id, tuple(voters))


def effective_mode(kafka_version: str, migration: KraftMigration | None) -> KafkaMode:
    """A 3.9 cluster whose migration is finalised runs KRaft, whatever its version says."""
    if migration is not None and migration.phase is MigrationPhase.FINALIZED:
        return KafkaMode.KRAFT
    return kafka_mode(kafka_version)


def migration_refusal(kafka_version: str, migration: KraftMigration | None) -> str:
    """Why a migration to KRaft cannot start (or go on) on this cluster, or "" when it can.
    A migration stopped before its finalisation goes on from its phase."""
    if effective_mode(kafka_version, migration) is KafkaMode.KRAFT:
        return f"the cluster runs KRaft already (Kafka {kafka_version}): nothing to migrate"
    if migration is not None and migration.phase not in FORWARD_PHASES:
        return (
            f"a rollback of the migration is under way (phase {migration.phase.value}); "
            "finish it with --rollback first"
        )
    if not kafka_version.startswith(MIGRATION_SOURCE_LINE + "."):
        return (
            f"the cluster runs Kafka {kafka_version}; a migration to KRaft starts only from "
            f"Kafka {MIGRATION_SOURCE_LINE} (upgrade it first)"
        )
    return ""


def rollback_refusal(migration: KraftMigration | None) -> str:
    """Why a migration cannot be rolled back, or "" when it can."""
    if migration is None:
        return "no migration to KRaft is under way: nothing to roll back"
    if not migration.phase.can_roll_back:
        return "the migration is finalised: the cluster cannot go back to ZooKeeper mode"
    return ""


@dataclass(frozen=True)
class ZkMigrationRecord:
    """Kafka's `/migration` znode under its chroot, written by the active KRaft controller.
    Its metadata offset stays negative until the controller has copied ZooKeeper's metadata
    into the metadata log."""

    kraft_controller_id: int
    kraft_controller_epoch: int
    kraft_metadata_offset: int
    kraft_metadata_epoch: int

    @property
    def metadata_migrated(self) -> bool:
        return self.kraft_metadata_offset >= 0


def parse_zk_migration_record(raw: bytes | str) -> ZkMigrationRecord:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise MigrationError(f"Kafka's /migration znode is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise MigrationError("Kafka's /migration znode must be a JSON object")
    fields = {}
    for key in (
        "kraft_controller_id",
        "kraft_controller_epoch",
        "kraft_metadata_offset",
        "kraft_metadata_epoch",
    ):
        item = value.get(key)
        if not isinstance(item, int) or isinstance(item, bool):
            raise MigrationError(
                f"Kafka's /migration znode: {key} must be an integer, got {item!r}"
            )
        fields[key] = item
    return ZkMigrationRecord(**fields)


def parse_kafka_cluster_id(raw: bytes | str) -> str:
    """Kafka's `/cluster/id` znode ({"version": "1", "id": "..."}): the id the controllers
    must format their storage with, so the brokers accept them as the same cluster."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise MigrationError(f"Kafka's /cluster/id znode is not JSON ({exc})") from None
    cluster_id = value.get("id") if isinstance(value, dict) else None
    if not isinstance(cluster_id, str) or not cluster_id:
        raise MigrationError(f"Kafka's /cluster/id znode holds no id: {value!r}")
    return cluster_id
