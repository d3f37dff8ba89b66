"""`kaas up --agents`: every VM's agent claims an id, starts its broker, heals it, and keeps
its id across a VM restart with the same volume."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer

from management_plane.local.state import require_state
from tests.harness import ClusterHandle, wait_until

pytestmark = pytest.mark.drill


def _status(cluster: ClusterHandle) -> dict[str, Any]:
    result = cluster.kaas("status", "--json")
    assert result.returncode == 0, result.stderr
    value: dict[str, Any] = json.loads(result.stdout)
    return value


def _all_healthy(cluster: ClusterHandle, seen: list[dict[str, Any]] | None = None) -> bool:
    """Every agent healthy; `seen` keeps the status that said so (a later `kaas status`
    whose ZooKeeper read times out on a loaded machine names no broker ids)."""
    status = _status(cluster)
    healthy = all(vm["agent_state"] == "healthy" for vm in status["vms"])
    if healthy and seen is not None:
        seen[:] = [status]
    return healthy


def _agent_summary(vm: dict[str, Any]) -> str:
    keys = ("agent_state", "agent_sentence", "broker_registered", "processes")
    return json.dumps({key: vm.get(key) for key in keys})


def test_agents_claim_ids_start_heal_and_keep_ids(fresh_cluster_with_agents: ClusterHandle) -> None:
    cluster = fresh_cluster_with_agents
    healthy: list[dict[str, Any]] = []
    wait_until(
        lambda: _all_healthy(cluster, healthy), 120, "every agent to report a healthy broker"
    )
    status = healthy[0]
    ids = {vm["name"]: vm["broker_id"] for vm in status["vms"]}
    assert sorted(ids.values()) == [0, 1, 2]
    assert all(vm["broker_registered"] for vm in status["vms"])
    assert all(vm["processes"]["agent"]["state"] == "running" for vm in status["vms"])
    text = cluster.kaas("status").stdout
    assert "restart lock: free" in text
    assert re.search(r"vm1 agent( \(planner\))? running", text)

    # Every agent streams its broker's metrics to the metrics topic, keyed by broker id.
    consumer = Consumer(
        {
            **cluster.client_config(),
            "group.id": "metrics-check",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["_kaas_metrics"])
    seen: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + 90
    while len(seen) < 3 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            record = json.loads(message.value() or b"{}")
            assert message.key() == str(record["broker_id"]).encode()
            # The first records may predate the broker's MBeans (a read error, a null value).
            if record["broker"]["under_replicated_partitions"] is not None:
                seen[record["broker_id"]] = record
    consumer.close()
    assert sorted(seen) == [0, 1, 2]
    assert all(r["schema_version"] == 1 and r["cluster"] == "agents" for r in seen.values())
    assert all(r["broker"]["under_replicated_partitions"] == 0 for r in seen.values())

    # Exactly one agent is the planner; when its agent stops, another one takes over.
    def planners() -> list[str]:
        return [vm["name"] for vm in _status(cluster)["vms"] if vm["agent_role"] == "planner"]

    wait_until(lambda: len(planners()) == 1, 30, "one planner to be elected")
    first_planner = planners()[0]
    assert f"{first_planner} agent (planner) running" in cluster.kaas("status").stdout
    cluster.vm("stop", first_planner, "--only", "agent")
    wait_until(
        lambda: len(planners()) == 1 and planners()[0] != first_planner,
        60,
        "another agent to take over planning",
    )
    cluster.vm("start", first_planner, "--only", "agent")
    wait_until(lambda: _all_healthy(cluster), 120, f"{first_planner}'s agent to be back")
    assert len(planners()) == 1

    # Healing: the broker's process goes away; its agent starts it again through the lock.
    state = require_state(cluster.home)
    old = state.record("vm2", "kafka")
    assert old is not None
    cluster.vm("stop", "vm2", "--only", "kafka")

    def restarted() -> bool:
        record = require_state(cluster.home).record("vm2", "kafka")
        return record is not None and record.pid != old.pid and _all_healthy(cluster)

    # The start is a JVM and a TLS listener under the restart lock: on a machine running two
    # clusters at once it has taken over two minutes.
    try:
        wait_until(restarted, 240, "vm2's agent to start its broker again")
    except AssertionError as exc:
        vms = {vm["name"]: vm for vm in _status(cluster)["vms"]}
        raise AssertionError(f"{exc}; vm2 now: {_agent_summary(vms['vm2'])}") from None

    # A VM restarted with its data volume keeps its broker id.
    assert cluster.vm("stop", "vm3") == "vm3: stopped agent, kafka, zookeeper"
    assert cluster.vm("start", "vm3").startswith("vm3: started zookeeper, agent")
    wait_until(lambda: _all_healthy(cluster, healthy), 120, "vm3 to come back healthy")
    assert healthy[0]["vms"][2]["broker_id"] == ids["vm3"]
