"""The agent's part of a ZooKeeper-mode cluster's migration to KRaft (KIP-866): which of
Kafka's registries its readings follow, whether the spec's phase runs a controller on this
VM, and that controller's metadata dir (formatted with the ZooKeeper-mode cluster's id, for a
static quorum; discarded after a rollback).

The decisions are pure; `MetadataDirStorage` is the adapter that runs Kafka's storage tool.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import structlog

from agent.broker_config.rendering import migration_metadata_dir
from agent.errors import AgentError
from agent.kraft_keeper import metadata_directory_id
from agent.ports import PAUSED, RUNNING, KafkaZnodes, ProcessState, StoreUnavailable
from agent.settings import AgentSettings
from agent.supervisor import kafka_libs
from planner.contracts.kraft_migration import MigrationPhase
from planner.contracts.member import MemberRecord, MemberState
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.kraft import StorageFormat, format_arguments

log = structlog.get_logger("kaas.agent")

STORAGE_TOOL = "kafka.tools.StorageTool"
FORMAT_TIMEOUT_S = 120.0


def kafka_reads_kraft(settings_kraft: bool, spec: ClusterSpec | None) -> bool:
    """Whether the brokers' registrations and the controller are read from KRaft (the
    controllers' metadata, through the brokers' Admin API) rather than Kafka's znodes: on a
    KRaft cluster, and in a migration once the brokers run as KRaft brokers (they no longer
    register in ZooKeeper). Until then migrating brokers still register there."""
    if settings_kraft:
        return True
    return spec is not None and spec.migration is not None and spec.migration.phase.brokers_in_kraft


def wants_controller(
    settings_runs_controller: bool, broker_id: int, spec: ClusterSpec | None
) -> bool:
    """Whether this VM runs a KRaft controller: a KRaft cluster's controller VM always; in a
    migration, a voter's VM while the phase runs controllers."""
    if settings_runs_controller:
        return True
    return (
        spec is not None
        and spec.migration is not None
        and spec.migration.runs_controller(broker_id)
    )


def format_cluster_id(
    settings_kraft: bool, broker_id: int, spec: ClusterSpec | None, formatted: bool
) -> str | None:
    """The cluster id a migration's controller formats its metadata dir with before its first
    start: Kafka's own (from its /cluster/id znode), so the brokers take it as the same
    cluster. None: nothing to format (formatted, or a KRaft cluster's, which `kaas up` or the
    image formats)."""
    if settings_kraft or formatted or spec is None or spec.migration is None:
        return None
    return spec.migration.kafka_cluster_id if spec.migration.runs_controller(broker_id) else None


def is_stray(wanted: bool, process: ProcessState | None) -> bool:
    """A controller runs that the spec's phase does not want here (a rollback stopped them)."""
    return not wanted and process in (RUNNING, PAUSED)


def storage_format_command(
    settings: AgentSettings, kafka_version: str, cluster_id: str, config_file: Path
) -> list[str]:
    return [
        settings.java,
        "-Xmx128m",
        "-XX:+UseSerialGC",
        *class_path_options(kafka_libs(settings.image_root, kafka_version)),
        STORAGE_TOOL,
        *format_arguments(cluster_id, str(config_file), StorageFormat.STATIC_QUORUM),
    ]


@dataclass(frozen=True)
class MetadataDirStorage:
    """The real ControllerStorage: Kafka's storage tool of the cluster's version on this
    VM's controller.properties."""

    settings: AgentSettings

    @property
    def directory(self) -> Path:
        return migration_metadata_dir(self.settings)

    def formatted(self) -> bool:
        return metadata_directory_id(self.directory) is not None

    def format(self, cluster_id: str, kafka_version: str) -> None:
        config = self.settings.config_dir / "controller.properties"
        command = storage_format_command(self.settings, kafka_version, cluster_id, config)
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AgentError(f"kafka-storage format: {exc}") from None
        if done.returncode != 0:
            lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise AgentError(f"kafka-storage format failed: {(lines or ['no output'])[-1][:300]}")

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class KafkaCleanup(Enum):
    """Kafka's own znodes a migration's phase has the elected agent delete: the nodes are
    ZooKeeper's super user, and Kafka's znodes carry the brokers' ACLs, so no other identity
    may delete them."""

    # Finalised: nothing of Kafka's reads ZooKeeper any more.
    CHROOT = "chroot"
    # Rolled back with the controllers stopped: a ZooKeeper-mode broker takes the controller
    # role back once the KRaft controller's znode is gone, and the migration record goes.
    KRAFT_CONTROLLER_STATE = "kraft_controller_state"


def kafka_cleanup(
    settings_kraft: bool,
    spec: ClusterSpec | None,
    elected: bool,
    members: Mapping[int, MemberRecord],
    expected_members: int,
) -> KafkaCleanup | None:
    """What of Kafka's znodes the elected agent deletes now: only once every agent has
    applied the phase and none has a restart left or running. Pure."""
    if settings_kraft or not elected or spec is None or spec.migration is None:
        return None
    phase = spec.migration.phase
    if phase not in (MigrationPhase.FINALIZED, MigrationPhase.ROLLBACK_CONTROLLERS_STOPPED):
        return None
    settled = len(members) >= expected_members and all(
        m.spec_generation >= spec.generation
        and not m.pending_restart
        and not m.controller_pending_restart
        and m.state is MemberState.HEALTHY
        for m in members.values()
    )
    if not settled:
        return None
    return (
        KafkaCleanup.CHROOT
        if phase is MigrationPhase.FINALIZED
        else (KafkaCleanup.KRAFT_CONTROLLER_STATE)
    )


def clean_kafka_znodes(
    znodes: KafkaZnodes,
    settings_kraft: bool,
    spec: ClusterSpec,
    elected: bool,
    members: Callable[[], Mapping[int, MemberRecord]],
    journal: Callable[[str, str, str], None],
) -> None:
    """The elected agent deletes what of Kafka's znodes the migration's phase leaves behind,
    once every agent has applied it (journaled when something went)."""
    if not elected:
        return
    cleanup = kafka_cleanup(settings_kraft, spec, elected, members(), spec.broker_count)
    if cleanup is None or spec.migration is None:
        return
    try:
        deleted = (
            znodes.delete_kafka_chroot()
            if cleanup is KafkaCleanup.CHROOT
            else znodes.delete_kraft_controller_state()
        )
    except StoreUnavailable as exc:
        log.warning("kafka_cleanup_failed", error=str(exc))
        return
    if deleted:
        reason = f"migration phase {spec.migration.phase.value}: Kafka's znodes go"
        journal("kafka_cleanup", reason, "deleted " + ", ".join(deleted))
