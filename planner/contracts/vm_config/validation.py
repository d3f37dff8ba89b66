"""Which broker config keys the spec may set, and whether their values are acceptable. Pure.

The spec's `broker_config` is refused as a whole when one key is wrong: the agent keeps the
last good config and changes nothing (the issue's "bad input" rule). Every problem names
its key.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from planner.contracts.vm_config.catalog import BROKER_CONFIG_TABLE, KAFKA_VERSION
from planner.contracts.vm_config.definitions import (
    ConfigDefinition,
    ConfigType,
    UpdateMode,
    ValidValues,
)
from planner.contracts.vm_config.kafka_tls import LISTENER_SECURITY_KEYS, RENDERED_OUTSIDE_CATALOG
from planner.contracts.vm_config.zookeeper_security import ZOOKEEPER_CLIENT_SECURITY_KEYS
from planner.errors import PlannerError

BROKER_CONFIGS: Final[Mapping[str, ConfigDefinition]] = {
    name: ConfigDefinition(name, ConfigType(kind), UpdateMode(mode), ValidValues.parse(valid))
    for name, (kind, mode, valid) in BROKER_CONFIG_TABLE.items()
}

# Set by the agent from this VM's facts (BrokerFacts), never by the spec.
AGENT_OWNED_KEYS: Final = (
    "broker.id",
    "broker.rack",
    "listeners",
    "advertised.listeners",
    "log.dirs",
    "zookeeper.connect",
)
# Synonyms of agent-owned keys, refused in the spec too: log.dir is the one-directory form of
# log.dirs; node.id is KRaft's broker.id, which a ZooKeeper-mode broker copies from broker.id.
AGENT_OWNED_SYNONYMS: Final = {"log.dir": "log.dirs", "node.id": "broker.id"}

# Replication quotas of DynamicConfig.Broker (not KafkaConfig): the agent's plan execution
# sets them per broker while replicas move, so the spec may not, and a config diff never
# removes them.
REPLICATION_THROTTLE_KEYS: Final = frozenset(
    {
        "follower.replication.throttled.rate",
        "leader.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)


# Keys that decide who a connection authenticates as, or what it may do: KaaS's, as the
# listeners and the authorizer are. A spec setting one could map a tenant to a super user or
# turn client authentication off. Refused in the spec only (spec_broker_config_problems):
# what KaaS renders itself may set them.
SECURITY_KEYS: Final = (
    frozenset(
        {
            "listener.security.protocol.map",
            "principal.builder.class",
            "ssl.principal.mapping.rules",
            "sasl.kerberos.principal.to.local.rules",
            "sasl.server.callback.handler.class",
            "sasl.mechanism.inter.broker.protocol",
            "ssl.client.auth",
            "security.providers",
            "zookeeper.set.acl",
        }
    )
    | ZOOKEEPER_CLIENT_SECURITY_KEYS
)


class BrokerConfigError(PlannerError, ValueError):
    """A broker config that must not be acted on; the message names every offending key."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(problem.message for problem in self.problems))


@dataclass(frozen=True)
class ConfigProblem:
    key: str
    message: str


def definition(key: str) -> ConfigDefinition:
    """Kafka's definition of a broker config key; BrokerConfigError for an unknown key."""
    try:
        return BROKER_CONFIGS[key]
    except KeyError:
        raise BrokerConfigError([unknown_key(key, "broker config")]) from None


def unknown_key(key: str, where: str) -> ConfigProblem:
    if key.startswith("listener.name."):
        return ConfigProblem(
            key,
            f"{where}: {key!r} is a listener-prefixed config; KaaS sets only cluster-wide "
            "keys without a listener prefix",
        )
    close = difflib.get_close_matches(key, BROKER_CONFIGS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigProblem(
        key, f"{where}: unknown key {key!r}: not a Kafka {KAFKA_VERSION} broker config{hint}"
    )


def broker_config_problems(
    config: Mapping[str, str], where: str = "spec.broker_config"
) -> tuple[ConfigProblem, ...]:
    """Everything wrong with a spec's broker_config, in key order; () when it may be used."""
    problems = []
    for key in sorted(config):
        value = config[key]
        if key in AGENT_OWNED_KEYS or key in AGENT_OWNED_SYNONYMS:
            owned = ", ".join((*AGENT_OWNED_KEYS, *AGENT_OWNED_SYNONYMS))
            problems.append(
                ConfigProblem(
                    key,
                    f"{where}: {key!r} is set by the agent from this VM's facts "
                    f"(agent-owned keys: {owned})",
                )
            )
            continue
        if key in LISTENER_SECURITY_KEYS or key in RENDERED_OUTSIDE_CATALOG:
            problems.append(
                ConfigProblem(
                    key,
                    f"{where}: {key!r} is set by KaaS for the listeners' TLS and authentication "
                    "and the ACL authorizer (docs/security.md)",
                )
            )
            continue
        if key in REPLICATION_THROTTLE_KEYS:
            problems.append(
                ConfigProblem(key, f"{where}: {key!r} is set by the agent while it moves replicas")
            )
            continue
        known = BROKER_CONFIGS.get(key)
        if known is None:
            problems.append(unknown_key(key, where))
            continue
        if known.type is ConfigType.PASSWORD:
            problems.append(
                ConfigProblem(
                    key,
                    f"{where}: {key!r} is a password; the spec is stored in ZooKeeper in "
                    "clear text, so it may not carry secrets",
                )
            )
            continue
        if not isinstance(value, str):
            problems.append(
                ConfigProblem(key, f"{where}: {key} must be a string, got {type(value).__name__}")
            )
            continue
        problem = known.problem(value)
        if problem is not None:
            problems.append(ConfigProblem(key, f"{where}: {problem}"))
    return tuple(problems)


def spec_broker_config_problems(
    config: Mapping[str, str], where: str = "spec.broker_config"
) -> tuple[ConfigProblem, ...]:
    """Everything wrong with a spec's broker_config: broker_config_problems, and the security
    keys only KaaS sets. The one check of what a spec may hold: the agent renders with it,
    the management plane's API refuses a request with it."""
    security = [
        ConfigProblem(
            key,
            f"{where}: {key!r} decides how clients authenticate or who they are; KaaS sets "
            "the cluster's security, the spec may not",
        )
        for key in sorted(config)
        if key in SECURITY_KEYS
    ]
    others = {key: value for key, value in config.items() if key not in SECURITY_KEYS}
    found = [*security, *broker_config_problems(others, where)]
    return tuple(sorted(found, key=lambda problem: problem.key))


def check_broker_config(config: Mapping[str, str], where: str = "spec.broker_config") -> None:
    """Raise BrokerConfigError naming every problem of a spec's `config`."""
    problems = spec_broker_config_problems(config, where)
    if problems:
        raise BrokerConfigError(problems)
