"""The optimizer: from a cluster to a target placement that keeps every hard goal and
reaches the soft goals in priority order with as little movement as it can.

It follows Yelp kafka-utils' cluster balancer and kafka-tools: clone the model, mutate it
with greedy moves from the most-loaded broker to the least-loaded one (incremental counts,
no rescans), and diff it into moves at the end. The phases run again until a whole round
changes nothing, so the result is a fixed point: planning it again gives an empty plan.
"""

from __future__ import annotations

import random

from planner.chain_phase import ChainPhase
from planner.disk_phases import DiskPhases
from planner.feasibility import InfeasibleError, check_feasible
from planner.leader_phases import LeaderPhases
from planner.model import Cluster, PlannerSettings
from planner.replica_phases import ReplicaPhases
from planner.state import PlacementState


def optimize(cluster: Cluster, settings: PlannerSettings, seed: int = 0) -> PlacementState:
    """The target placement as a working state (`state.original` holds the input)."""
    state = PlacementState(cluster, settings)
    optimize_state(state, seed)
    return state


def optimize_state(state: PlacementState, seed: int = 0) -> None:
    """Move `state` to the target placement; raises InfeasibleError when no placement
    keeps the hard goals."""
    settings = state.settings
    check_feasible(state.cluster, settings)
    rng = random.Random(seed)
    replicas = ReplicaPhases(state, rng)
    disk = DiskPhases(replicas)
    leaders = LeaderPhases(state, replicas.tiebreak)
    chains = ChainPhase(replicas)
    for _ in range(settings.max_rounds):
        changed = replicas.repair_hard_goals()
        changed += replicas.balance_topics()
        changed += replicas.balance_counts()
        changed += disk.balance_disk()
        changed += leaders.balance_counts()
        changed += leaders.balance_load()
        if not changed:
            # Only once the goals are met: take back the moves a shorter chain avoids.
            changed = chains.shorten_chains()
        if not changed:
            break
    _restore_untouched_orders(state)
    broken = state.broken_hard_goals()
    if broken:
        goal, example = next(iter(broken.items()))
        raise InfeasibleError(
            f"the planner could not place every replica within the hard goals "
            f"({goal} broken, e.g. {example})",
            "add brokers in the racks with the fullest disks, or raise the disk share",
        )


def _restore_untouched_orders(state: PlacementState) -> None:
    """A partition that keeps its replicas and its leader keeps its original order: a
    follower reordering is a change with no benefit."""
    for p in list(state.changed):
        original = state.original[p]
        current = state.replicas[p]
        if current[0] == original[0] and set(current) == set(original):
            state.set_order(p, list(original))


def target_cluster(state: PlacementState) -> Cluster:
    cluster = state.cluster
    ids = state.broker_ids
    return cluster.with_assignment(
        {
            (cluster.partitions[p].topic, cluster.partitions[p].partition): [
                ids[b] for b in state.replicas[p]
            ]
            for p in state.changed
        }
    )
