"""The management plane on a KRaft cluster of this file's own (a second one, so that these
minutes of VM replacement and plan execution run beside tests/integration/test_kraft_cluster.py
on the other worker): a controller VM replaced immutably with the quorum's majority kept, then
a fourth VM balanced in by the elected agent's planner and drained away again."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from management_plane.local import kraft
from management_plane.local.state import require_state
from management_plane.workload import BackgroundProducer, create_topic, read_back
from planner.contracts.journal import JournalAction
from planner.contracts.paths import ClusterPaths
from planner.pki.client_settings import ClientConfig
from tests import harness
from tests.harness import ClusterHandle
from tests.integration.test_kraft_cluster import kraft_cluster
from tests.kraft_watch import QuorumWatch
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration

__all__ = ["kraft_cluster"]  # the module-scoped cluster, one instance for this file


def test_replacing_a_controller_vm_through_the_service_keeps_the_quorum_and_every_message(
    kraft_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """First in this file (it changes the cluster's VMs): the management plane, adopting the
    cluster, replaces a follower controller's VM immutably under an acks=all producer. The new
    VM's controller joins as an observer and its agent adds it as a voter once it has caught
    up; the old voter is removed; the quorum, looked at every second through DescribeQuorum,
    never has fewer live voters than a majority; nothing acknowledged is lost."""
    watch = QuorumWatch(kraft_cluster.admin).start()
    harness.wait_until(lambda: bool(watch.samples), 30, "a first answer from the quorum")
    first = watch.samples[-1]
    old_vm = next(
        vm
        for vm in kraft_cluster.layout.vms
        if kraft.controller_facts(vm).node_id in first.voters
        and kraft.controller_facts(vm).node_id != first.leader_id
    )
    old_node = kraft.controller_facts(old_vm).node_id
    service = ServiceHandle(
        tmp_path_factory.mktemp("kraft-service") / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=("--adopt-local-cluster", str(kraft_cluster.home)),
    )
    topic = kraft_cluster.unique_topic("kraft-replace")
    connection = kraft_cluster.client_config()
    create_topic(connection, topic, 6, 3)
    service.start()
    load = BackgroundProducer(connection, topic, batch_messages=200, pause_s=0.2)
    started = time.monotonic()
    try:
        load.start()
        status, op = service.call(
            "POST", "/v1/clusters/kraft/replace", {"vm_id": f"kraft/{old_vm.name}"}
        )
        assert status == 202, op
        final = service.wait_operation(op["op_id"], 900)
        operation_s = time.monotonic() - started
        new_vm = next(v for v in require_state(kraft_cluster.home).layout.vms if v.name == "vm4")
        new_node = kraft.controller_facts(new_vm).node_id
        wanted = set(first.voters) - {old_node} | {new_node}
        harness.wait_until(
            lambda: bool(watch.samples) and set(watch.samples[-1].voters) == wanted,
            240,
            f"voters {sorted(wanted)}",
        )
        quorum_s = time.monotonic() - started
    finally:
        load.stop()
        watch.stop()
        service.stop()
    steps = [(j["step"], j["outcome"]) for j in final["journal"]]
    assert final["status"] == "succeeded" and ("recycle:0", "done") in steps, steps
    # The new controller was an observer (catching up) before it became a voter.
    as_voter = next(i for i, s in enumerate(watch.samples) if new_node in s.voters)
    assert any(new_node in s.observers for s in watch.samples[:as_voter])
    # The quorum kept a live majority in every look, and answered at least every few seconds.
    assert all(s.has_majority for s in watch.samples), [
        (round(s.at - started), sorted(s.voters), sorted(s.live_voters))
        for s in watch.samples
        if not s.has_majority
    ]
    assert max(len(s.voters) for s in watch.samples) <= 4
    assert watch.longest_silence_s() < 10, watch.unanswered[:5]
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    try:
        entries = harness.journal_entries(client, "kraft")
    finally:
        client.stop()
        client.close()
    done = [(e.action, e.vm_id) for e in entries if e.result == "done"]
    assert (JournalAction.ADD_CONTROLLER, new_vm.name) in done
    assert any(a is JournalAction.REMOVE_CONTROLLER for a, _ in done)
    assert load.errors == [], load.errors[:5]
    check = read_back(connection, topic, load.acknowledged)
    assert check.missing == 0, f"{check.missing} acknowledged messages lost"
    print(
        f"\ncontroller VM {old_vm.name} (node {old_node}) replaced by {new_vm.name} (node "
        f"{new_node}): operation {operation_s:.0f}s, quorum {sorted(wanted)} at {quorum_s:.0f}s; "
        f"{len(watch.samples)} quorum looks, longest silence {watch.longest_silence_s():.1f}s; "
        f"{len(load.acknowledged)} acknowledged, 0 lost, slowest batch {load.slowest_batch_s:.1f}s"
    )


def _sentences(cluster: ClusterHandle) -> list[str]:
    """The agents' last sentences (the elected planner's says why it moves nothing)."""
    client = cluster.zookeeper()
    client.start(timeout=30)
    try:
        return harness.agent_sentences(client, cluster.layout.name)
    finally:
        client.stop()
        client.close()


def _replicas_on(connection: ClientConfig, topic: str, broker: int) -> int:
    metadata = AdminClient(connection).list_topics(topic, timeout=10)
    return sum(broker in p.replicas for p in metadata.topics[topic].partitions.values())


def _in_sync(connection: ClientConfig, topic: str) -> bool:
    metadata = AdminClient(connection).list_topics(topic, timeout=10)
    return all(
        sorted(p.replicas) == sorted(p.isrs) for p in metadata.topics[topic].partitions.values()
    )


def test_plan_execution_balances_a_fourth_vm_in_and_drains_it(
    kraft_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """After the replacement above: the service scales the cluster to four VMs, the elected
    agent's planner moves a share of a topic onto the new broker, then scaling back to three
    drains the newest VM (the executor moving its replicas away) and recycles it, under an
    acks=all producer; the planner and executor reach Kafka only through the bootstrap
    servers: Kafka's chroot never appears in ZooKeeper."""
    service = ServiceHandle(
        tmp_path_factory.mktemp("kraft-plan-service") / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=("--adopt-local-cluster", str(kraft_cluster.home)),
    )
    connection = kraft_cluster.client_config()
    topic = kraft_cluster.unique_topic("kraft-grow")
    create_topic(connection, topic, 6, 3)
    service.start()
    load = BackgroundProducer(connection, topic, batch_messages=200, pause_s=0.2)
    started = time.monotonic()
    try:
        load.start()
        status, op = service.call("POST", "/v1/clusters/kraft/scale", {"broker_count": 4})
        assert status == 202, op
        grown = service.wait_operation(op["op_id"], 600)
        assert grown["status"] == "succeeded", grown
        state = require_state(kraft_cluster.home)
        newest = max(state.layout.vms, key=lambda v: v.index)
        assert "controller" not in state.vm_kinds(newest.name)  # a broker only
        joiner = max(vm["broker_id"] for vm in service.call("GET", "/v1/clusters/kraft")[1]["vms"])
        try:
            harness.wait_until(
                lambda: _replicas_on(connection, topic, joiner) > 0 and _in_sync(connection, topic),
                300,
                f"broker {joiner} to receive replicas of {topic}, all in sync",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the agents say: {_sentences(kraft_cluster)}") from None
        balanced_s = time.monotonic() - started
        status, op = service.call("POST", "/v1/clusters/kraft/scale", {"broker_count": 3})
        assert status == 202, op
        shrunk = service.wait_operation(op["op_id"], 900)
        drained_s = time.monotonic() - started
    finally:
        load.stop()
        service.stop()
    steps = [(j["step"], j["outcome"]) for j in shrunk["journal"]]
    assert shrunk["status"] == "succeeded" and ("wait_drained:0", "done") in steps, steps
    assert _replicas_on(connection, topic, joiner) == 0
    assert _in_sync(connection, topic)
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    try:
        assert client.exists(ClusterPaths("kraft").kafka_chroot) is None
    finally:
        client.stop()
        client.close()
    assert load.errors == [], load.errors[:5]
    check = read_back(connection, topic, load.acknowledged)
    assert check.missing == 0, f"{check.missing} acknowledged messages lost"
    print(
        f"\nKRaft plan execution: broker {joiner} balanced in at {balanced_s:.0f}s, drained and "
        f"recycled at {drained_s:.0f}s; {len(load.acknowledged)} acknowledged, 0 lost, "
        f"slowest batch {load.slowest_batch_s:.1f}s"
    )
