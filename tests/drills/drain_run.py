"""One drain of a broker under load on a fresh 4-VM local cluster with agents, measured: the
drill (tests/drills/test_drain.py) judges it, the benchmark (benchmarks/drain_bench.py) runs
it at larger sizes and prints it against the throttle's bound.

The drained broker's data is N bytes (what its replicas hold when the drain starts); the
bound is 1.3 x N / T + 30 s at throttle T. While it runs, an acks=all producer sends one
message every 20 ms (the longest delivery latency is the stall) and a keyed producer
records every acknowledged message in a ledger for the zero-loss check.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from kazoo.client import KazooClient

from agent.reassign_admin import KafkaReassignmentAdmin
from benchmarks.replace_bench import StallProbe
from management_plane.workload import (
    BackgroundProducer,
    consume_group,
    create_topic,
    durable_producer,
    verify_per_key_order,
)
from planner.contracts.member import MemberRole
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ReassignmentBudget, parse_spec
from planner.live_layout import read_live_layout
from planner.pki.tls import client_context
from tests import harness
from tests.harness import ClusterHandle, wait_for_healthy_agents, wait_until

MIB = 1024 * 1024
BASELINE_S = 20.0


@dataclass(frozen=True)
class DrainFigures:
    data_bytes: int
    """What the drained broker held when the drain started."""
    throttle_bytes_per_s: int
    seconds: float
    """From the spec change to no replica left on the broker and every ISR complete."""
    plan_done_s: float
    """From the spec change to the planner settled (no plan running, throttles cleared)."""
    longest_stall_s: float
    baseline_stall_s: float
    """The same probe's longest stall over BASELINE_S with nothing moving, just before."""
    stall_errors: int
    replicas_left: int
    leftover_throttles: dict[str, str]
    acknowledged: int
    missing: int
    produce_errors: int
    movements: tuple[dict[str, object], ...] = ()
    """The plan's movement figures (progress znode) as the drain went, when it moved bytes."""

    @property
    def bound_s(self) -> float:
        return 1.3 * self.data_bytes / self.throttle_bytes_per_s + 30.0

    def lines(self) -> list[str]:
        return [
            f"drain of {self.data_bytes / MIB:.0f} MiB at {self.throttle_bytes_per_s / MIB:.0f} "
            f"MiB/s: {self.seconds:.1f} s (planner settled at {self.plan_done_s:.1f} s) against the "
            f"bound {self.bound_s:.1f} s = 1.3 x N/T + 30 s (N/T alone {self.bound_s / 1.3 - 30 / 1.3:.1f} s)",
            f"longest acks=all produce stall: {self.longest_stall_s:.2f} s "
            f"({self.stall_errors} errors); with nothing moving, just before: "
            f"{self.baseline_stall_s:.2f} s",
            f"replicas left on the broker: {self.replicas_left}; leftover throttles: "
            f"{len(self.leftover_throttles)}; acknowledged {self.acknowledged}, missing "
            f"{self.missing}, produce errors {self.produce_errors}",
        ]


def fill_random(bootstrap: str, topic: str, mib: int) -> None:
    """`mib` MiB of random values: the producer compresses, so only random bytes land on
    the disks as written."""
    producer = durable_producer(bootstrap, **{"linger.ms": 50, "batch.size": 1_000_000})
    for index in range(mib * MIB // 10_000):
        value = os.urandom(10_000)
        while True:
            try:
                producer.produce(topic, key=str(index % 64).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(900) == 0, "the fill did not finish"


def _bytes_on(bootstrap: str, broker: int, jolokia: ssl.SSLContext) -> int:
    layout = read_live_layout(bootstrap, jolokia_context=jolokia)
    return sum(int(p["size_bytes"]) for p in layout["partitions"] if broker in p["replicas"])


def _replicas_on(admin: KafkaReassignmentAdmin, broker: int) -> tuple[int, bool]:
    """(replicas on `broker`, every ISR complete)."""
    isr = admin.isr()
    on = sum(1 for replicas, _ in isr.values() if broker in replicas)
    return on, all(set(replicas) == set(in_sync) for replicas, in_sync in isr.values())


def _planner_settled(zk: KazooClient, name: str) -> bool:
    members = harness.member_records(zk, name)
    planner = [m for m in members.values() if m.role == MemberRole.PLANNER]
    return bool(planner) and "placement balanced" in planner[0].sentence


def _plan_state(zk: KazooClient, paths: ClusterPaths) -> str:
    if not zk.exists(paths.plan_progress):
        return "none"
    return str(json.loads(zk.get(paths.plan_progress)[0]).get("state"))


def _movement(zk: KazooClient, paths: ClusterPaths) -> dict[str, object] | None:
    if not zk.exists(paths.plan_progress):
        return None
    movement = json.loads(zk.get(paths.plan_progress)[0]).get("movement")
    return movement if isinstance(movement, dict) else None


def start_drain_cluster(home: Path) -> ClusterHandle:
    return harness.start_cluster(
        home, nodes=4, name="drain", address_base=harness.FRESH_CLUSTER_BASE, agents=True
    )


def drain_under_load(
    cluster: ClusterHandle, data_mib: int, throttle_mib: int, partitions: int = 24
) -> DrainFigures:
    name = cluster.layout.name
    bootstrap = cluster.bootstrap_servers
    paths = ClusterPaths(name)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    jolokia = client_context(cluster.node_identity)  # Jolokia takes the nodes' certificate only
    admin = KafkaReassignmentAdmin(bootstrap, jolokia_port=8778, jolokia_context=jolokia)
    try:
        wait_for_healthy_agents(zk, name, count=4, timeout=240)
        wait_until(lambda: _planner_settled(zk, name), 300, "the planner to settle")
        data, probe_topic, keyed = (
            cluster.unique_topic(t) for t in ("drain-data", "drain-probe", "drain-keyed")
        )
        create_topic(bootstrap, data, partitions=partitions)
        create_topic(bootstrap, probe_topic, partitions=3)
        create_topic(bootstrap, keyed, partitions=6)
        # Rack-aware RF 3 on three zones: every zone holds one copy, and zone-a's is split
        # between vm1 and vm4, so the drained vm4 holds about half of what is written.
        fill_random(bootstrap, data, data_mib * 2)
        wait_until(lambda: _planner_settled(zk, name), 300, "the planner to settle the topics")
        # vm4 shares zone-a with vm1: draining it keeps every zone's share possible.
        drained = next(b for b, m in harness.member_records(zk, name).items() if m.vm_id == "vm4")
        data_bytes = _bytes_on(bootstrap, drained, jolokia)

        # The machine's own stall first: the same probe for a quiet stretch before the drain.
        quiet = StallProbe(bootstrap, probe_topic)
        quiet.thread.start()
        time.sleep(BASELINE_S)
        quiet.stopping.set()
        quiet.thread.join(60)
        probe = StallProbe(bootstrap, probe_topic)
        probe.thread.start()
        with BackgroundProducer(bootstrap, keyed, 200, 20, pause_s=0.2) as load:
            time.sleep(3)
            raw, stat = zk.get(paths.spec)
            spec = parse_spec(raw)
            draining = replace(
                spec,
                draining_broker_ids=frozenset({drained}),
                budget=ReassignmentBudget(throttle_bytes_per_s=throttle_mib * MIB),
                generation=spec.generation + 1,
            )
            started = time.monotonic()
            zk.set(paths.spec, draining.encode(), version=stat.version)
            limit = 1.3 * data_bytes / (throttle_mib * MIB) + 600

            seen: list[dict[str, object]] = []

            def emptied() -> bool:
                movement = _movement(zk, paths)
                if movement and int(str(movement.get("bytes_total", 0))) > 0:
                    seen.append(movement)
                left, in_sync = _replicas_on(admin, drained)
                return left == 0 and in_sync

            wait_until(emptied, limit, f"broker {drained} to hold no replica", interval=0.5)
            seconds = time.monotonic() - started
            # Settled: no plan runs and the planner finds nothing to move (a plan superseded
            # mid-drain is followed by another, or by none when the drain is complete).
            wait_until(
                lambda: (
                    _plan_state(zk, paths) not in ("pending", "executing")
                    and _planner_settled(zk, name)
                ),
                120,
                "the planner to settle after the drain",
                0.5,
            )
            plan_done_s = time.monotonic() - started
            time.sleep(2)
        probe.stopping.set()
        probe.thread.join(240)
        replicas_left, _ = _replicas_on(admin, drained)
        layout = read_live_layout(bootstrap, jolokia_context=jolokia)
        topics = {p["topic"] for p in layout["partitions"]}
        brokers = {b["id"] for b in layout["brokers"]}
        # Broker configs reach every broker through ZooKeeper a moment after the write.
        leftovers = admin.throttle_configs(topics, brokers)
        deadline = time.monotonic() + 15
        while leftovers and time.monotonic() < deadline:
            time.sleep(1)
            leftovers = admin.throttle_configs(topics, brokers)
        acknowledged = load.acknowledged
        consumed = consume_group(bootstrap, keyed, f"{keyed}-check", 1, expected=len(acknowledged))
        check = verify_per_key_order(
            dict(Counter(k for k, _, _, _ in acknowledged)), consumed.records_by_consumer
        )
        return DrainFigures(
            data_bytes=data_bytes,
            throttle_bytes_per_s=throttle_mib * MIB,
            seconds=seconds,
            plan_done_s=plan_done_s,
            longest_stall_s=probe.max_latency,
            baseline_stall_s=quiet.max_latency,
            stall_errors=len(probe.errors),
            replicas_left=replicas_left,
            leftover_throttles=leftovers,
            acknowledged=len(acknowledged),
            missing=check.missing,
            produce_errors=len(load.errors),
            movements=tuple(seen),
        )
    finally:
        admin.close()
        zk.stop()
        zk.close()
