"""This VM's controller as the agent's snapshot needs it (the fields of `Snapshot` about it):
what changed in its rendered controller.properties against the file it runs with, and the
quorum at the quorum keeper's last describe."""

from __future__ import annotations

from typing import Any

from agent.broker_config.rendering import desired_controller_properties
from agent.decide import STOPPED
from agent.kraft_keeper import QuorumKeeper, rest_caught_up
from agent.ports import ProcessState
from agent.restart_runner import read_properties
from agent.settings import AgentSettings
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import BrokerConfigError
from planner.contracts.vm_config.kraft import controller_node_id


def controller_view(
    settings: AgentSettings,
    broker_id: int,
    spec: ClusterSpec | None,
    process: ProcessState | None,
    keeper: QuorumKeeper | None,
) -> dict[str, Any]:
    """`process`: this VM's controller (None: the VM runs none for this spec)."""
    if spec is None or process is None or broker_id < 0:
        return {}
    try:
        rendered = desired_controller_properties(settings, broker_id, spec)
    except BrokerConfigError:
        return {}
    if rendered is None:
        return {}
    node_id = controller_node_id(broker_id)
    path = settings.config_dir / "controller.properties"
    running = read_properties(path) if path.exists() and process != STOPPED else rendered
    changed = tuple(
        sorted(k for k in set(rendered) | set(running) if rendered.get(k) != running.get(k))
    )
    replicas = keeper.state.replicas if keeper is not None else ()
    return {
        "controller_node_id": node_id,
        "controller_changed": changed,
        "controller_properties": rendered,
        "quorum_leader_id": keeper.state.leader_id if keeper is not None else None,
        "quorum_caught_up": rest_caught_up(replicas, node_id, settings.controller_caught_up_ms),
    }
