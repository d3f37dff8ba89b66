"""The difference between the rendered config and what one broker runs, sorted by how each
change can be made (KIP-226): on this broker's dynamic config, on the cluster-wide dynamic
default, or only by a restart with the new server.properties. Pure.

What the broker runs comes from describe_configs on its own resource: for every key the value
in effect and the layer it comes from. Kafka's precedence is: per-broker dynamic override,
then cluster-wide dynamic default, then server.properties, then Kafka's default. A change
is made at the layer that decides the key's value:

- an override on this broker that disagrees with the spec is replaced (per-broker keys) or
  removed (every other key), so that the layers below decide;
- a cluster-wide default that disagrees is replaced (cluster-wide keys) or removed;
- otherwise a dynamic key gets the value at its own level (per-broker keys on this broker,
  cluster-wide keys as the cluster-wide default), and a read-only key needs a restart.

A change that needs two steps (remove a stale override, then set the default) takes two
cycles: each diff is made against what the broker reports after the previous one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from planner.contracts.vm_config.definitions import ConfigDefinition, UpdateMode
from planner.contracts.vm_config.kafka_tls import RENDERED_OUTSIDE_CATALOG as ZK_MODE_OUTSIDE
from planner.contracts.vm_config.kraft import KRAFT_RENDERED_OUTSIDE_CATALOG
from planner.contracts.vm_config.validation import (
    AGENT_OWNED_KEYS,
    AGENT_OWNED_SYNONYMS,
    BROKER_CONFIGS,
    REPLICATION_THROTTLE_KEYS,
    BrokerConfigError,
    ConfigProblem,
    unknown_key,
)

# Rendered keys outside the catalog in either mode (a key of the other mode is never rendered).
RENDERED_OUTSIDE_CATALOG: Final = ZK_MODE_OUTSIDE | KRAFT_RENDERED_OUTSIDE_CATALOG

# SslConfigs.RECONFIGURABLE_CONFIGS: Kafka updates these dynamically only with a listener
# prefix ("These security configs can be dynamically updated only per-listener using the
# listener prefix", DynamicBrokerConfig.validateConfigs). Without one, only a restart
# changes them, whatever the update-mode table says.
LISTENER_PREFIX_ONLY_KEYS: Final = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
)


class ConfigLayer(StrEnum):
    """Where a broker's value of a key comes from (Kafka's ConfigSource for a broker)."""

    PER_BROKER = "per-broker dynamic config"  # DYNAMIC_BROKER_CONFIG
    CLUSTER_DEFAULT = "cluster-wide dynamic default"  # DYNAMIC_DEFAULT_BROKER_CONFIG
    STATIC = "server.properties"  # STATIC_BROKER_CONFIG
    DEFAULT = "Kafka's default"  # DEFAULT_CONFIG
    OTHER = "another source"


@dataclass(frozen=True)
class RunningValue:
    value: str | None  # None: no value, or a sensitive one the broker does not show
    layer: ConfigLayer


class ChangeKind(StrEnum):
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"
    READ_ONLY = "read-only"


def change_kind(key: str) -> ChangeKind:
    """How a changed value of `key` reaches the broker when no dynamic override is in the way:
    Kafka's update mode, except that agent-owned keys (listeners, log.dirs, ...) and the
    listener-prefix-only security keys always take a controlled restart."""
    known = BROKER_CONFIGS.get(key)
    if known is None:
        raise BrokerConfigError([unknown_key(key, "broker config")])
    return _change_kind(known)


def _change_kind(known: ConfigDefinition) -> ChangeKind:
    if (
        known.update_mode is UpdateMode.READ_ONLY
        or known.name in AGENT_OWNED_KEYS
        or known.name in AGENT_OWNED_SYNONYMS
        or known.name in LISTENER_PREFIX_ONLY_KEYS
    ):
        return ChangeKind.READ_ONLY
    if known.update_mode is UpdateMode.PER_BROKER:
        return ChangeKind.PER_BROKER
    return ChangeKind.CLUSTER_WIDE


@dataclass(frozen=True, order=True)
class ConfigChange:
    key: str
    current: str | None  # what the broker runs now
    desired: str | None  # None: remove the dynamic value (or, read-only: drop it from the file)

    def __str__(self) -> str:
        wanted = "(removed)" if self.desired is None else self.desired
        return f"{self.key}: {self.current} -> {wanted}"


@dataclass(frozen=True)
class ConfigDiff:
    """Changes by where they are made. `per_broker` goes to this broker's dynamic config,
    `cluster_wide` to the cluster-wide dynamic default, `read_only` into server.properties
    and a controlled restart. Each tuple is sorted by key; a key is in at most one."""

    per_broker: tuple[ConfigChange, ...] = ()
    cluster_wide: tuple[ConfigChange, ...] = ()
    read_only: tuple[ConfigChange, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.per_broker or self.cluster_wide or self.read_only)

    @property
    def dynamic(self) -> tuple[ConfigChange, ...]:
        return self.per_broker + self.cluster_wide

    @property
    def dynamic_keys(self) -> tuple[str, ...]:
        return tuple(sorted(change.key for change in self.dynamic))

    @property
    def read_only_keys(self) -> tuple[str, ...]:
        return tuple(change.key for change in self.read_only)

    def describe(self) -> str:
        """One clause for a cycle sentence."""
        parts = [
            f"{label} {', '.join(str(change) for change in changes)}"
            for label, changes in (
                ("per-broker", self.per_broker),
                ("cluster-wide", self.cluster_wide),
                ("restart", self.read_only),
            )
            if changes
        ]
        return "; ".join(parts) if parts else "no config change"


_SET_AT_LAYER: Final = {
    ConfigLayer.PER_BROKER: ChangeKind.PER_BROKER,
    ConfigLayer.CLUSTER_DEFAULT: ChangeKind.CLUSTER_WIDE,
}


def diff_broker_config(
    desired: Mapping[str, str], running: Mapping[str, RunningValue]
) -> ConfigDiff:
    """What must change for the broker described by `running` to run `desired` (a rendered
    server.properties). Keys the agent's replica moves throttle are left alone."""
    problems = [
        unknown_key(key, "rendered config")
        for key in desired
        if key not in BROKER_CONFIGS and key not in RENDERED_OUTSIDE_CATALOG
    ]
    problems += [
        ConfigProblem(key, f"the broker does not report {key!r}: is it running Kafka 3.9?")
        for key in desired
        if key in BROKER_CONFIGS and key not in running
    ]
    if problems:
        raise BrokerConfigError(problems)
    set_elsewhere = {
        key
        for key, entry in running.items()
        if entry.layer in (ConfigLayer.PER_BROKER, ConfigLayer.CLUSTER_DEFAULT, ConfigLayer.STATIC)
    }
    # A ZooKeeper-mode broker reports node.id, copied from broker.id, as if from its file.
    # A KRaft broker reports broker.id, copied from node.id, the same way.
    implied = (
        {"node.id": desired["broker.id"]}
        if "broker.id" in desired
        else {"broker.id": desired["node.id"]}
        if "node.id" in desired
        else {}
    )
    changes: dict[ChangeKind, list[ConfigChange]] = {kind: [] for kind in ChangeKind}
    for key in sorted((set(desired) | set_elsewhere) - REPLICATION_THROTTLE_KEYS):
        wanted = desired.get(key, implied.get(key))
        entry = running.get(key)
        if entry is None:  # a rendered key outside the catalog that the broker's file lacks
            found: tuple[ChangeKind, ConfigChange] | None = (
                ChangeKind.READ_ONLY,
                ConfigChange(key, None, wanted),
            )
        else:
            found = _change_for(key, wanted, entry)
        if found is not None:
            changes[found[0]].append(found[1])
    return ConfigDiff(
        per_broker=tuple(changes[ChangeKind.PER_BROKER]),
        cluster_wide=tuple(changes[ChangeKind.CLUSTER_WIDE]),
        read_only=tuple(changes[ChangeKind.READ_ONLY]),
    )


def _change_for(
    key: str, wanted: str | None, entry: RunningValue
) -> tuple[ChangeKind, ConfigChange] | None:
    known = BROKER_CONFIGS.get(key)
    if wanted is not None and known is not None and known.same_value(entry.value, wanted):
        return None
    if (
        key in RENDERED_OUTSIDE_CATALOG
        and wanted is not None
        and entry.layer is ConfigLayer.STATIC
        and entry.value in (None, wanted)
    ):
        # The broker hides the value of a key outside its table; it is in the file, and the
        # renderer writes it as a constant.
        return None
    if wanted is None and entry.layer in (ConfigLayer.DEFAULT, ConfigLayer.OTHER):
        return None
    # A key the broker reports but Kafka's table does not (a listener-prefixed key someone
    # set): the spec never sets those, so its value is removed from wherever it is.
    kind = _change_kind(known) if known is not None else ChangeKind.READ_ONLY
    if entry.layer in _SET_AT_LAYER:
        layer_kind = _SET_AT_LAYER[entry.layer]
        # Replace the dynamic value where it lives when the key belongs at that level;
        # otherwise remove it, so that the layers below (or the restart) decide.
        desired = wanted if kind is layer_kind else None
        return layer_kind, ConfigChange(key, entry.value, desired)
    if wanted is None or kind is ChangeKind.READ_ONLY:
        # In server.properties only: the restart with the new file changes or drops it.
        return ChangeKind.READ_ONLY, ConfigChange(key, entry.value, wanted)
    return kind, ConfigChange(key, entry.value, wanted)
