"""`kaas status` of a local cluster: every VM's processes, what ZooKeeper, Kafka and the
KRaft quorum say of it, and its agent's record. A part that cannot be read is a problem
named in the report, never an exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from management_plane.local import kraft, probes
from management_plane.local.image import LocalImage, find_java
from management_plane.local.kraft_probe import quorum_replicas
from management_plane.local.processes import is_alive, is_paused, resident_bytes
from management_plane.local.state import ClusterState
from management_plane.local.tls import admin_client, admin_identity
from management_plane.monitoring.pipeline import PipelineLayout, pipeline_status
from planner.contracts.member import MemberRecord
from planner.contracts.plan_status import PlanStatus
from planner.pki.client_settings import client_files


def cluster_status(
    state: ClusterState, image: Callable[[], LocalImage], monitoring: PipelineLayout
) -> dict[str, Any]:
    layout = state.layout
    registered: set[int] = set()
    under_replicated: dict[int, int] = {}
    members: dict[str, MemberRecord] = {}
    lock_holder = None
    plan: PlanStatus | None = None
    problems = []
    try:
        if not state.kraft:  # a KRaft broker registers with the controllers instead
            registered = set(probes.broker_registrations(layout, timeout=3.0))
        if state.agents:
            members, lock_holder, plan = probes.agent_members(layout, timeout=3.0)
    except Exception as exc:
        problems.append(f"ZooKeeper ensemble unreachable: {exc}")
    try:
        under_replicated = probes.under_replicated_by_leader(admin_client(layout), timeout=5.0)
        if state.kraft:
            registered = probes.metadata_broker_ids(admin_client(layout), timeout=5.0)
    except Exception as exc:
        problems.append(f"Kafka metadata unavailable: {exc}")
    controller_roles: dict[str, str | None] = {}
    try:
        if state.kraft:
            replicas = quorum_replicas(
                layout, str(find_java()), str(image().kafka_libs(state.kafka_version))
            )
            controller_roles = kraft.controller_roles(layout, replicas)
    except Exception as exc:
        problems.append(f"KRaft controller quorum unavailable: {exc}")
    vms = []
    for vm in layout.vms:
        processes = {}
        for kind in state.vm_kinds(vm.name):
            record = state.record(vm.name, kind)
            alive = is_alive(record)
            processes[kind] = {
                "pid": record.pid if record and alive else None,
                "state": ("paused" if is_paused(record) else "running") if alive else "stopped",
                "rss_bytes": resident_bytes(record),
            }
        member = members.get(vm.name)
        # With agents the broker id is the one the VM's agent claimed.
        broker_id = member.broker_id if member else (None if state.agents else vm.broker_id)
        zookeeper_state = processes["zookeeper"]["state"]
        vms.append(
            {
                "name": vm.name,
                "address": vm.address,
                "zone": vm.zone,
                "broker_id": broker_id,
                "processes": processes,
                "zookeeper_mode": probes.zookeeper_mode(state.layout, vm)
                if zookeeper_state == "running"
                else zookeeper_state,
                "broker_registered": broker_id in registered,
                "under_replicated_partitions": under_replicated.get(broker_id)
                if broker_id is not None
                else None,
                "agent_sentence": member.sentence if member else None,
                "agent_state": member.state.value if member else None,
                "agent_role": member.role.value if member else None,
                # KRaft only: leader, voter, observer or absent; None without a controller.
                "controller_role": controller_roles.get(vm.name),
            }
        )
    return {
        "name": layout.name,
        "home": str(layout.home),
        "kafka_version": state.kafka_version,
        "agents": state.agents,
        "restart_lock_holder": lock_holder,
        "plan": plan.to_json() if plan is not None else None,
        "bootstrap_servers": layout.bootstrap_servers,
        "client": client_files(admin_identity(layout)),
        "zookeeper_connect": layout.zookeeper_connect,
        "vms": vms,
        "monitoring": pipeline_status(monitoring) if state.agents else None,
        "problems": problems,
    }
