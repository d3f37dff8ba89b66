"""How big the host is, as server.properties needs it (threads, internal topics' partition
counts, retention): a named profile chosen explicitly by whoever starts the VM (the agent's
settings, `kaas up`), never guessed by the renderer. Heaps are on the JVM command lines,
which the providers own. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from planner.errors import PlannerError


class SizingProfile(StrEnum):
    LOCAL = "local"  # the local provider: six JVMs (three VMs) share two cores
    STANDARD = "standard"  # a VM of its own per broker: Kafka's own thread and partition defaults


class SizingError(PlannerError, ValueError):
    """An unknown sizing profile name; the message lists the known ones."""


# Rendered after the durable defaults; the spec's broker_config may still override a key.
SIZING_PROPERTIES: Final[Mapping[SizingProfile, Mapping[str, str]]] = MappingProxyType(
    {
        SizingProfile.LOCAL: MappingProxyType(
            {
                "num.partitions": "3",
                "num.network.threads": "2",
                "num.io.threads": "4",
                "num.replica.fetchers": "1",
                "background.threads": "4",
                "offsets.topic.num.partitions": "12",
                "transaction.state.log.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
                "log.retention.hours": "24",
            }
        ),
        SizingProfile.STANDARD: MappingProxyType({}),
    }
)


def sizing_profile(name: str) -> SizingProfile:
    """The profile of this name; SizingError names the known profiles."""
    try:
        return SizingProfile(name)
    except ValueError:
        known = ", ".join(p.value for p in SizingProfile)
        raise SizingError(f"unknown host sizing {name!r} (known: {known})") from None


def sizing_properties(profile: SizingProfile) -> Mapping[str, str]:
    return SIZING_PROPERTIES[profile]
