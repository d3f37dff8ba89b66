"""Whether a cluster is fit for a drill (pure): read from `kaas status`'s document, so the
drill refuses before it touches anything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JournalLine:
    """One of KaaS's own actions, for the report's timeline."""

    time_s: float
    text: str


SERVING_ZOOKEEPER_MODES = frozenset({"leader", "follower", "observer", "standalone"})
# A KRaft controller VM's role as the quorum states it (None: the VM runs no controller).
VOTING_CONTROLLER_ROLES = frozenset({"leader", "voter"})


def health_problems(status: Mapping[str, Any]) -> list[str]:
    """What is wrong with the cluster now, in words; empty when a drill may start: every
    process running (none paused), every ZooKeeper server serving, every broker registered,
    no partition under-replicated, every KRaft controller voting, nothing the status itself
    could not read."""
    problems = [str(problem) for problem in status.get("problems", [])]
    vms = status.get("vms", [])
    if not vms:
        problems.append("the cluster has no VM")
    for vm in vms:
        name = vm.get("name", "?")
        for kind, process in sorted(vm.get("processes", {}).items()):
            if process.get("state") != "running":
                problems.append(f"{name}'s {kind} is {process.get('state')}")
        mode = vm.get("zookeeper_mode")
        if mode not in SERVING_ZOOKEEPER_MODES:
            problems.append(f"{name}'s ZooKeeper server is {mode}")
        if not vm.get("broker_registered"):
            problems.append(f"{name}'s broker is not registered")
        role = vm.get("controller_role")
        if role is not None and role not in VOTING_CONTROLLER_ROLES:
            problems.append(f"{name}'s KRaft controller is {role} in the quorum")
        under = vm.get("under_replicated_partitions")
        if under:
            problems.append(f"{name}'s broker leads {under} under-replicated partition(s)")
    return problems
