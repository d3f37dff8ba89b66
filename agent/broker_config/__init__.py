"""Broker config on this VM: the facts the renderer (planner.contracts.vm_config) needs from
the agent's settings, what changed between the rendered config and what the broker runs
(KIP-226: per-broker, cluster-wide, read-only), and the adapter that applies the dynamic part
through the Admin API and reads it back. See docs/broker-config.md.

This package's namespace holds the pure part only (rendering and classify), so the agent's pure
`decide` can import it without the Kafka client. The adapter is imported on its own:
`from agent.broker_config.apply import ...`.
"""

from agent.broker_config.classify import (
    ChangeKind,
    ConfigChange,
    ConfigDiff,
    ConfigLayer,
    RunningValue,
    change_kind,
    diff_broker_config,
)
from agent.broker_config.rendering import broker_facts, desired_server_properties

__all__ = [
    "ChangeKind",
    "ConfigChange",
    "ConfigDiff",
    "ConfigLayer",
    "RunningValue",
    "broker_facts",
    "change_kind",
    "desired_server_properties",
    "diff_broker_config",
]
