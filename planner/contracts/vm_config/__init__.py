"""What a VM runs for a given spec: the one renderer of the broker's configuration
(server.properties, log4j) and of ZooKeeper's (zoo.cfg, the dynamic file, myid, logback),
and the broker-config catalog and validation it needs, which the management plane's API
uses too. Pure; the agent, `kaas up` and the image build all call it.
"""

from planner.contracts.vm_config.broker import (
    BrokerFacts,
    agent_owned_properties,
    durable_defaults,
    render_kafka_log4j,
    render_server_properties,
)
from planner.contracts.vm_config.catalog import KAFKA_VERSION
from planner.contracts.vm_config.definitions import ConfigDefinition, ConfigType, UpdateMode
from planner.contracts.vm_config.properties import (
    parse_server_properties,
    server_properties_text,
)
from planner.contracts.vm_config.sizing import (
    SizingError,
    SizingProfile,
    sizing_profile,
    sizing_properties,
)
from planner.contracts.vm_config.validation import (
    AGENT_OWNED_KEYS,
    BROKER_CONFIGS,
    BrokerConfigError,
    ConfigProblem,
    broker_config_problems,
    check_broker_config,
    spec_broker_config_problems,
)
from planner.contracts.vm_config.zookeeper import (
    EnsembleServer,
    ZookeeperConfigError,
    ZookeeperRole,
    render_zoo_cfg,
    render_zookeeper_dynamic,
    render_zookeeper_logback,
    render_zookeeper_myid,
    voting_roles,
)
from planner.contracts.vm_config.zookeeper_security import (
    ZookeeperSecurity,
    ZookeeperTlsFiles,
)

__all__ = [
    "AGENT_OWNED_KEYS",
    "BROKER_CONFIGS",
    "KAFKA_VERSION",
    "BrokerConfigError",
    "BrokerFacts",
    "ConfigDefinition",
    "ConfigProblem",
    "ConfigType",
    "EnsembleServer",
    "SizingError",
    "SizingProfile",
    "UpdateMode",
    "ZookeeperConfigError",
    "ZookeeperRole",
    "ZookeeperSecurity",
    "ZookeeperTlsFiles",
    "agent_owned_properties",
    "broker_config_problems",
    "check_broker_config",
    "durable_defaults",
    "parse_server_properties",
    "render_kafka_log4j",
    "render_server_properties",
    "render_zoo_cfg",
    "render_zookeeper_dynamic",
    "render_zookeeper_logback",
    "render_zookeeper_myid",
    "server_properties_text",
    "sizing_profile",
    "sizing_properties",
    "spec_broker_config_problems",
    "voting_roles",
]
