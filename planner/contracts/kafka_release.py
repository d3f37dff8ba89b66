"""Which Kafka releases KaaS runs and in which mode: 3.x with its metadata in ZooKeeper, 4.x
in KRaft mode (Kafka 4.0 removed ZooKeeper mode). Pure; one table, read by the spec parser,
the renderer, the local provider and the agents.
"""

from __future__ import annotations

from enum import Enum
from types import MappingProxyType
from typing import Final

from planner.contracts.fields import ContractError


class KafkaMode(Enum):
    ZOOKEEPER = "zookeeper"  # Kafka's metadata under its chroot in the cluster's ensemble
    KRAFT = "kraft"  # Kafka's metadata in its own controller quorum


class UnknownKafkaVersion(ContractError):
    """A Kafka version KaaS has no image artifacts and no mode for."""


# Every release the image carries (packer/pom.xml), with its mode.
KAFKA_RELEASES: Final = MappingProxyType(
    {
        "3.8.1": KafkaMode.ZOOKEEPER,
        "3.9.2": KafkaMode.ZOOKEEPER,
        "4.3.1": KafkaMode.KRAFT,
    }
)

# A quorum of 2 or 4 tolerates no more failures than one of 1 or 3 and needs more votes.
KRAFT_QUORUM_SIZES: Final = (1, 3, 5)
DEFAULT_KRAFT_QUORUM_SIZE: Final = 3


def kafka_mode(version: str) -> KafkaMode:
    try:
        return KAFKA_RELEASES[version]
    except KeyError:
        known = ", ".join(KAFKA_RELEASES)
        raise UnknownKafkaVersion(
            f"Kafka version {version!r} is unknown; KaaS runs {known}"
        ) from None


def is_kraft(version: str) -> bool:
    return kafka_mode(version) is KafkaMode.KRAFT


def kraft_quorum_size_problem(size: object, where: str = "the controller quorum size") -> str:
    """Why `size` cannot be a controller quorum's size, or "" when it can."""
    if not isinstance(size, int) or isinstance(size, bool) or size not in KRAFT_QUORUM_SIZES:
        sizes = ", ".join(str(s) for s in KRAFT_QUORUM_SIZES)
        return f"{where} must be one of {sizes}, got {size!r}"
    return ""
