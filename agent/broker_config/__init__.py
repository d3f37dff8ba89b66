"""Broker config: render server.properties from the spec and this VM's facts, classify what
changed (KIP-226: per-broker, cluster-wide, read-only), apply the dynamic part through the
Admin API and read it back. See docs/broker-config.md.

This package's namespace holds the pure part only (render, validation, classify and the
generated catalog), so the agent's pure `decide` can import it without the Kafka client.
The adapter is imported on its own: `from agent.broker_config.apply import ...`.
"""

from agent.broker_config.catalog import KAFKA_VERSION
from agent.broker_config.classify import (
    ChangeKind,
    ConfigChange,
    ConfigDiff,
    ConfigLayer,
    RunningValue,
    change_kind,
    diff_broker_config,
)
from agent.broker_config.definitions import ConfigDefinition, ConfigType, UpdateMode
from agent.broker_config.render import (
    LOCAL_HOST_SIZING,
    BrokerFacts,
    durable_defaults,
    parse_server_properties,
    render_server_properties,
    server_properties_text,
)
from agent.broker_config.validation import (
    AGENT_OWNED_KEYS,
    BROKER_CONFIGS,
    BrokerConfigError,
    ConfigProblem,
    broker_config_problems,
    check_broker_config,
)

__all__ = [
    "AGENT_OWNED_KEYS",
    "BROKER_CONFIGS",
    "KAFKA_VERSION",
    "LOCAL_HOST_SIZING",
    "BrokerConfigError",
    "BrokerFacts",
    "ChangeKind",
    "ConfigChange",
    "ConfigDefinition",
    "ConfigDiff",
    "ConfigLayer",
    "ConfigProblem",
    "ConfigType",
    "RunningValue",
    "UpdateMode",
    "broker_config_problems",
    "change_kind",
    "check_broker_config",
    "diff_broker_config",
    "durable_defaults",
    "parse_server_properties",
    "render_server_properties",
    "server_properties_text",
]
