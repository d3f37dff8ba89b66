"""Every ZooKeeper path KaaS uses, named in one place.

Kafka's own data lives under /kafka/<cluster> (its chroot); KaaS's under /kaas/<cluster>.
"""

from __future__ import annotations

from dataclasses import dataclass


def validate_cluster_name(name: str) -> str:
    if not name or len(name) > 64 or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"cluster name {name!r} is invalid: use 1-64 letters, digits, '-' or '_'")
    return name


@dataclass(frozen=True)
class ClusterPaths:
    cluster: str

    def __post_init__(self) -> None:
        validate_cluster_name(self.cluster)

    @property
    def root(self) -> str:
        return f"/kaas/{self.cluster}"

    @property
    def kafka_chroot(self) -> str:
        return f"/kafka/{self.cluster}"

    @property
    def spec(self) -> str:
        return f"{self.root}/spec"

    @property
    def ids(self) -> str:
        return f"{self.root}/ids"

    def broker_id_claim(self, broker_id: int) -> str:
        return f"{self.ids}/{broker_id}"

    @property
    def members(self) -> str:
        return f"{self.root}/members"

    def member(self, broker_id: int) -> str:
        return f"{self.members}/{broker_id}"

    @property
    def plan(self) -> str:
        return f"{self.root}/plan"

    @property
    def plan_meta(self) -> str:
        return f"{self.plan}/meta"

    @property
    def plan_topics(self) -> str:
        return f"{self.plan}/topics"

    def plan_topic(self, topic: str) -> str:
        return f"{self.plan_topics}/{topic}"

    @property
    def plan_progress(self) -> str:
        """How far the elected planner's agent has executed the stored plan."""
        return f"{self.plan}/progress"

    @property
    def plan_score(self) -> str:
        return f"{self.plan}/score"

    @property
    def measured_load(self) -> str:
        """Measured load per partition (analytics), read by the planner's traffic goals."""
        return f"{self.root}/load"

    @property
    def mirror_flows(self) -> str:
        """MirrorMaker 2 flows into this cluster, one child per flow (mirror_flow.py)."""
        return f"{self.root}/mirror/flows"

    def mirror_flow(self, flow: str) -> str:
        return f"{self.mirror_flows}/{flow}"

    @property
    def mirror_lags(self) -> str:
        """Each flow's lag as its reporting agent last measured it (mirror_lag.py)."""
        return f"{self.root}/mirror/lag"

    def mirror_lag(self, flow: str) -> str:
        return f"{self.mirror_lags}/{flow}"

    @property
    def restart_lock(self) -> str:
        return f"{self.root}/locks/restart"

    @property
    def planner_election(self) -> str:
        return f"{self.root}/election/planner"

    @property
    def journal(self) -> str:
        return f"{self.root}/journal"

    @property
    def journal_entry_prefix(self) -> str:
        return f"{self.journal}/entry-"

    @property
    def ensemble_repair(self) -> str:
        """The management plane's request that the agents repair the ZooKeeper ensemble."""
        return f"{self.root}/ensemble/repair"

    @property
    def kafka_broker_ids(self) -> str:
        return f"{self.kafka_chroot}/brokers/ids"

    @property
    def kafka_controller(self) -> str:
        return f"{self.kafka_chroot}/controller"

    @property
    def kafka_cluster_id(self) -> str:
        return f"{self.kafka_chroot}/cluster/id"

    @property
    def kafka_migration(self) -> str:
        """Kafka's ZooKeeper-to-KRaft migration record, kept by the active KRaft controller."""
        return f"{self.kafka_chroot}/migration"

    @property
    def kafka_reassign_partitions(self) -> str:
        return f"{self.kafka_chroot}/admin/reassign_partitions"
