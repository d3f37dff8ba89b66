"""The elected planner's agent executes plans on a real cluster with agents: a fourth VM
that joins gets its share, a draining broker is emptied under an acks=all producer with
zero loss, the planner's agent killed mid-batch is resumed by the next one (same plan, not
a new one). A corrupt plan is refused, never executed: the store's refusal against real
ZooKeeper in tests/integration/test_plan_store.py, the planner's in
tests/unit/test_plan_executor.py.
A `make drills` test (over ten minutes of a worker): `make test` keeps its parts in short
form, a fourth VM balanced in and drained under load on KRaft (test_kraft_service.py) and
the planner's agent killed mid-reassignment (test_kaas_drill.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from analytics.ledger import ProducedLedger
from management_plane.workload import (
    BackgroundProducer,
    consume_group,
    create_topic,
    durable_producer,
    produce_keyed,
    verify_per_key_order,
)
from planner.contracts.journal import JournalEntry
from planner.contracts.member import MemberRecord, MemberRole
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ReassignmentBudget, parse_spec
from planner.pki.client_settings import ClientConfig
from tests import harness
from tests.harness import ClusterHandle, wait_for_healthy_agents, wait_until

pytestmark = [pytest.mark.drill, pytest.mark.long_drill]


@pytest.fixture
def four_vms_with_agents(tmp_path: Path) -> Iterator[ClusterHandle]:
    """vm1..vm4 in zone-a, zone-b, zone-c, zone-a, each with its agent."""
    handle = harness.start_cluster(
        tmp_path / "cluster",
        nodes=4,
        name="grow",
        address_base=harness.FRESH_CLUSTER_BASE,
        agents=True,
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


def members(zk: KazooClient, cluster: str) -> dict[int, MemberRecord]:
    return harness.member_records(zk, cluster)


def broker_of(zk: KazooClient, cluster: str, vm_name: str) -> int:
    """The broker id the VM's agent claimed (agents claim ids in any order)."""
    found = [b for b, m in members(zk, cluster).items() if m.vm_id == vm_name]
    assert len(found) == 1, f"{vm_name} has {len(found)} member znodes"
    return found[0]


def planner_member(zk: KazooClient, cluster: str) -> MemberRecord | None:
    found = [m for m in members(zk, cluster).values() if m.role == MemberRole.PLANNER]
    return found[0] if found else None


def progress(zk: KazooClient, cluster: str) -> dict[str, Any] | None:
    path = ClusterPaths(cluster).plan_progress
    if not zk.exists(path):
        return None
    value: dict[str, Any] = json.loads(zk.get(path)[0])
    return value


def assignment(connection: ClientConfig) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    metadata = AdminClient(connection).list_topics(timeout=10)
    return {
        (str(t.topic), p.id): (list(p.replicas), list(p.isrs))
        for t in metadata.topics.values()
        if not str(t.topic).startswith("__")
        for p in t.partitions.values()
    }


def replicas_on(connection: ClientConfig, broker: int) -> int:
    return sum(broker in r for r, _ in assignment(connection).values())


def all_in_sync(connection: ClientConfig) -> bool:
    return all(sorted(r) == sorted(i) for r, i in assignment(connection).values())


def plan_settled(zk: KazooClient, cluster: str) -> bool:
    """The planner has looked at the current cluster and has nothing running."""
    member = planner_member(zk, cluster)
    if member is None:
        return False
    state = progress(zk, cluster)
    running = state is not None and state["state"] in ("pending", "executing")
    return not running and "placement balanced" in member.sentence


def journal(zk: KazooClient, cluster: str) -> list[JournalEntry]:
    return harness.journal_entries(zk, cluster)


def audit_produced(
    cluster: ClusterHandle, ledger_path: Path, group: str, out: Path
) -> dict[str, Any]:
    """`kaas analytics audit` on the drill's ledger, as `make demo` runs it; its summary."""
    audit = harness.kaas_cli(
        "analytics", "audit", "--bootstrap-servers", cluster.bootstrap_servers,
        "--client-dir", str(cluster.admin.identity.directory), "--ledger", str(ledger_path),
        "--groups", group, "--out", str(out),
    )  # fmt: skip
    assert audit.returncode == 0, f"audit exited {audit.returncode}: {audit.stdout}{audit.stderr}"
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def test_join_drain_and_planner_takeover(
    four_vms_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = four_vms_with_agents
    name = cluster.layout.name
    connection = cluster.client_config()
    paths = ClusterPaths(name)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    try:
        wait_for_healthy_agents(zk, name, count=4, timeout=180)
        wait_until(lambda: plan_settled(zk, name), 240, "the planner to settle the new cluster")

        # vm4 (zone-a, like vm1) away: a topic made now lands on the other three brokers.
        joiner = broker_of(zk, name, "vm4")
        zone_a_peer = broker_of(zk, name, "vm1")
        cluster.vm("stop", "vm4")
        wait_until(
            lambda: str(joiner) not in zk.get_children(paths.kafka_broker_ids),
            60,
            f"broker {joiner} to leave the cluster",
        )
        topic = cluster.unique_topic("grow")
        create_topic(connection, topic, partitions=8)
        mine = {k: v for k, v in assignment(connection).items() if k[0] == topic}
        assert all(joiner not in replicas for replicas, _ in mine.values())
        # Every acknowledged message is counted in the ledger the audit job checks Kafka against.
        ledger = ProducedLedger(producer="plan-execution-drill")
        seed = produce_keyed(
            durable_producer(connection), topic, 30000, 40, key_prefix="seed", ledger=ledger
        )
        assert seed.errors == []

        with BackgroundProducer(connection, topic, 1000, 10, pause_s=0.3, ledger=ledger) as load:
            # vm4 comes back with its volume (same broker id): the planner notices the broker
            # set changed and moves a share of zone-a's replicas onto it.
            cluster.vm("start", "vm4")
            wait_until(
                lambda: any(m.vm_id == "vm4" for m in members(zk, name).values()),
                60,
                "vm4's agent to register its member znode",
            )
            assert broker_of(zk, name, "vm4") == joiner
            # The spec asks for 3 ZooKeeper participants: the fourth VM's server observes.
            vm4_status = next(
                vm
                for vm in json.loads(cluster.kaas("status", "--json").stdout)["vms"]
                if vm["name"] == "vm4"
            )
            assert vm4_status["zookeeper_mode"] == "observer", vm4_status
            wait_until(
                lambda: any(
                    joiner in r for (t, _), (r, _) in assignment(connection).items() if t == topic
                ),
                300,
                f"broker {joiner} to receive replicas of the new topic",
            )
            wait_until(lambda: plan_settled(zk, name), 300, "the planner to settle after the join")
            on_zone_a = (replicas_on(connection, zone_a_peer), replicas_on(connection, joiner))
            assert abs(on_zone_a[0] - on_zone_a[1]) <= 1, on_zone_a
            assert all_in_sync(connection)

            # Drain the joiner slowly (few moves at once, low throttle) and kill the
            # planner's agent while moves run: the next planner resumes the same plan.
            raw, stat = zk.get(paths.spec)
            spec = parse_spec(raw)
            draining = replace(
                spec,
                draining_broker_ids=frozenset({joiner}),
                budget=ReassignmentBudget(
                    throttle_bytes_per_s=300_000, max_partitions_per_broker=2
                ),
                generation=spec.generation + 1,
            )
            zk.set(paths.spec, draining.encode(), version=stat.version)

            def moves_running() -> bool:
                state = progress(zk, name)
                return bool(
                    state
                    and state["state"] == "executing"
                    and (state.get("movement") or {}).get("moving", 0) > 0
                    and json.loads(zk.get(paths.plan_meta)[0])["inputs"].get("draining") == [joiner]
                )

            wait_until(moves_running, 180, "moves of the drain plan to run")
            plan_id = json.loads(zk.get(paths.plan_meta)[0])["plan_id"]
            status = cluster.kaas("status")
            assert f"plan: {plan_id} executing, batch " in status.stdout, status.stdout
            first_planner = planner_member(zk, name)
            assert first_planner is not None
            killed_vm = first_planner.vm_id
            cluster.vm("kill", killed_vm, "--only", "agent")

            def another_planner() -> bool:
                member = planner_member(zk, name)
                return member is not None and member.broker_id != first_planner.broker_id

            wait_until(another_planner, 120, "another agent to be elected planner")
            wait_until(
                lambda: replicas_on(connection, joiner) == 0 and all_in_sync(connection),
                480,
                f"broker {joiner} to hold no replica with every ISR complete",
            )
            wait_until(
                lambda: (progress(zk, name) or {}).get("state") == "done",
                120,
                "the drain plan to be marked done",
            )
            final = progress(zk, name)
            assert final is not None and final["plan_id"] == plan_id, (
                "the new planner made a new plan instead of resuming"
            )
            cluster.vm("start", killed_vm, "--only", "agent")

        errors = load.errors
        assert errors == []
        acknowledged = load.acknowledged + seed.acknowledged
        consumed = consume_group(connection, topic, f"{topic}-check", 1, expected=len(acknowledged))
        check = verify_per_key_order(
            dict(Counter(k for k, _, _, _ in acknowledged)), consumed.records_by_consumer
        )
        assert check.missing == 0, "acknowledged messages were lost"
        ledger_path = ledger.write(tmp_path / "ledger" / f"{topic}.jsonl")
        audit = audit_produced(cluster, ledger_path, f"{topic}-check", tmp_path / "audit")
        assert audit["completeness"]["completeness_percent"] == 100.0, audit["completeness"]
        assert audit["completeness"]["produced"] == len(acknowledged) == ledger.total()
        assert audit["consumer_groups"][0]["total_lag"] == 0, audit["consumer_groups"]
        actions = [e.action for e in journal(zk, name)]
        assert "plan_stored" in actions and "reassign" in actions and "plan_done" in actions
    finally:
        zk.stop()
        zk.close()
