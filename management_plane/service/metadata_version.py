"""The last step of a KRaft upgrade by replacement: once every VM runs the new release, the
cluster's finalised metadata.version goes up to the highest level the brokers support (what
`kafka-features upgrade --release-version` does). Before that the finalised level keeps the
old and the new brokers compatible; raised earlier, an old broker could not follow the
metadata log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from management_plane.service.operations import Outcome, OutcomeKind


@dataclass(frozen=True)
class MetadataVersionLevels:
    finalized: int  # the cluster's finalised metadata.version level
    supported_max: int  # the highest level the answering broker supports


class MetadataVersionPort(Protocol):
    def metadata_version(self) -> MetadataVersionLevels: ...

    def raise_metadata_version(self, level: int) -> None: ...


def stale_vms(vms: Iterable[Mapping[str, Any]], version: str) -> list[str]:
    """The running VMs not on `version` yet (pure)."""
    return sorted(
        str(vm["vm_id"])
        for vm in vms
        if vm["state"] in ("running", "joining", "draining") and vm["kafka_version"] != version
    )


def raise_metadata_version(
    kafka: MetadataVersionPort, vms: Iterable[Mapping[str, Any]], version: str
) -> Outcome:
    """Raise metadata.version once every VM runs `version`; a step safe to run again (a level
    already at the brokers' highest is left alone). The controllers refuse a level some
    registered broker does not support, so the answering broker's highest is safe to ask."""
    behind = stale_vms(vms, version)
    if behind:
        return Outcome(
            OutcomeKind.WAIT,
            f"metadata.version waits for {', '.join(behind)} to run Kafka {version}",
        )
    levels = kafka.metadata_version()
    if levels.finalized >= levels.supported_max:
        return Outcome(
            OutcomeKind.DONE,
            f"metadata.version at level {levels.finalized}, the highest of Kafka {version}",
        )
    kafka.raise_metadata_version(levels.supported_max)
    return Outcome(
        OutcomeKind.DONE,
        f"metadata.version raised from level {levels.finalized} to {levels.supported_max}: "
        f"every broker runs Kafka {version}",
    )
