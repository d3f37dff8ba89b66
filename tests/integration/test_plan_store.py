"""The plan store on real ZooKeeper: one transaction, version checks, whole reads, and
corrupt or foreign values refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_records import Progress
from planner.model import Broker, BrokerState, Cluster, Partition
from planner.pki.files import IdentityFiles
from planner.plan import make_plan
from planner.store import (
    PlanConflictError,
    PlanStore,
    PlanStoreError,
    PlanTooLargeError,
    StoredPlan,
)
from planner.zookeeper_client import zookeeper_client

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str, zk_identity: IdentityFiles) -> Iterator[KazooClient]:
    client = zookeeper_client(zk_hosts, zk_identity, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def cluster_name(zk: KazooClient) -> Iterator[str]:
    name = f"plantest-{uuid.uuid4().hex[:8]}"
    yield name
    zk.delete(ClusterPaths(name).root, recursive=True)


def a_plan(name: str, plan_id: int, drain: int = 0) -> StoredPlan:
    brokers = tuple(Broker(i, "abc"[i % 3]) for i in range(6))
    parts = tuple(Partition(f"t{n % 3}", n, (n % 6, (n + 1) % 6, (n + 2) % 6)) for n in range(18))
    cluster = Cluster(brokers, parts).with_broker_states({drain: BrokerState.DRAINING})
    return StoredPlan.from_plan(name, plan_id, make_plan(cluster), {"draining": [drain]})


def test_write_read_round_trip_and_conditional_replace(zk: KazooClient, cluster_name: str) -> None:
    store = PlanStore(zk, cluster_name)
    assert store.read() is None
    first = store.write(a_plan(cluster_name, 1), expected_meta_version=None)
    read = store.read()
    assert read is not None and read.plan_id == 1
    assert read.partitions == first.partitions and read.batch_count == first.batch_count
    assert read.batch(0)  # the first batch has steps
    progress = store.read_progress()
    assert progress is not None and (progress.plan_id, progress.state) == (1, "pending")

    # A second writer that read the same version loses; the winner's plan is whole.
    second = store.write(a_plan(cluster_name, 2, drain=1), expected_meta_version=read.meta_version)
    with pytest.raises(PlanConflictError):
        store.write(a_plan(cluster_name, 3, drain=2), expected_meta_version=read.meta_version)
    with pytest.raises(PlanConflictError):
        store.write(a_plan(cluster_name, 3, drain=2), expected_meta_version=None)
    now = store.read()
    assert now is not None and now.plan_id == 2 and now.partitions == second.partitions
    # Topics that the new plan does not touch are gone from the store.
    assert set(zk.get_children(ClusterPaths(cluster_name).plan_topics)) == set(now.topics())


def test_progress_is_conditional(zk: KazooClient, cluster_name: str) -> None:
    store = PlanStore(zk, cluster_name)
    store.write(a_plan(cluster_name, 7), expected_meta_version=None)
    progress = store.read_progress()
    assert progress is not None
    advanced = store.write_progress(Progress(7, 1, "executing", version=progress.version))
    with pytest.raises(PlanConflictError):
        store.write_progress(Progress(7, 2, "executing", version=progress.version))
    with pytest.raises(PlanConflictError):
        store.write_progress(Progress(6, 2, "executing", version=advanced.version))
    latest = store.read_progress()
    assert latest is not None and (latest.completed_batches, latest.state) == (1, "executing")


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("meta", b"{not json", "not JSON"),
        (
            "meta",
            json.dumps({"kind": "kaas.plan.meta", "schema_version": 99}).encode(),
            "schema_version 99",
        ),
        ("meta", json.dumps({"kind": "something.else"}).encode(), "kind"),
        ("foreign", b"", "foreign plan"),
        ("topic", b"[1, 2]", "not a JSON object"),
        ("topic-bad-replicas", b"", "must be distinct broker ids"),
    ],
)
def test_corrupt_or_foreign_values_are_refused(
    zk: KazooClient, cluster_name: str, where: str, value: bytes, message: str
) -> None:
    store = PlanStore(zk, cluster_name)
    stored = store.write(a_plan(cluster_name, 1), expected_meta_version=None)
    paths = ClusterPaths(cluster_name)
    topic = sorted(stored.topics())[0]
    if where == "meta":
        zk.set(paths.plan_meta, value)
    elif where == "foreign":
        meta = json.loads(zk.get(paths.plan_meta)[0])
        meta["cluster"] = "someone-else"
        zk.set(paths.plan_meta, json.dumps(meta).encode())
    elif where == "topic":
        zk.set(paths.plan_topic(topic), value)
    else:
        document = json.loads(zk.get(paths.plan_topic(topic))[0])
        document["partitions"][0]["target"] = [1, 1, 2]
        zk.set(paths.plan_topic(topic), json.dumps(document).encode())
    with pytest.raises(PlanStoreError, match=message):
        store.read()


def test_a_plan_too_big_for_one_transaction_is_refused_whole(
    zk: KazooClient, cluster_name: str
) -> None:
    store = PlanStore(zk, cluster_name, max_transaction_bytes=2_000)
    with pytest.raises(PlanTooLargeError, match="store fewer batches"):
        store.write(a_plan(cluster_name, 1), expected_meta_version=None)
    assert store.read() is None
    assert not zk.exists(ClusterPaths(cluster_name).plan_meta)
