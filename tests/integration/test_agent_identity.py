"""Broker-id claims against the shared cluster's real ZooKeeper ensemble."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from agent.adapters import KazooAgentZooKeeper
from agent.identity import claim_broker_id, volume_id
from planner.contracts.claim import parse_claim
from planner.contracts.paths import ClusterPaths
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import zookeeper_client

pytestmark = pytest.mark.integration


def _claim(
    zk: tuple[str, IdentityFiles], paths: ClusterPaths, vm: str, volume: str, out: dict[str, int]
) -> None:
    client = zookeeper_client(*zk)
    client.start(timeout=15)
    try:
        out[vm] = claim_broker_id(client, paths, vm, volume, limit=5)
    finally:
        client.stop()
        client.close()


def test_vms_starting_at_once_get_distinct_lowest_ids(
    zk_hosts: str, zk_identity: IdentityFiles
) -> None:
    paths = ClusterPaths(f"ids-{uuid.uuid4().hex[:8]}")
    claimed: dict[str, int] = {}
    threads = [
        threading.Thread(
            target=_claim, args=((zk_hosts, zk_identity), paths, f"vm{i}", f"vol-{i}", claimed)
        )
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(claimed.values()) == [0, 1, 2]


def test_a_volume_keeps_its_id_across_restarts_and_vms(
    zk_hosts: str, zk_identity: IdentityFiles, tmp_path: Path
) -> None:
    paths = ClusterPaths(f"ids-{uuid.uuid4().hex[:8]}")
    client = zookeeper_client(zk_hosts, zk_identity)
    client.start(timeout=15)
    try:
        volume_a = volume_id(tmp_path / "a")
        assert volume_id(tmp_path / "a") == volume_a  # written once onto the volume
        first = claim_broker_id(client, paths, "vm-a", volume_a, limit=3)
        other = claim_broker_id(client, paths, "vm-b", volume_id(tmp_path / "b"), limit=3)
        assert (first, other) == (0, 1)
        # The VM comes back with the same volume: same id.
        assert claim_broker_id(client, paths, "vm-a", volume_a, limit=3) == 0
        # The volume is attached to a replacement VM: same id, and the claim names the new VM.
        assert claim_broker_id(client, paths, "vm-c", volume_a, limit=3) == 0
        raw, _ = client.get(paths.broker_id_claim(0))
        claim = parse_claim(0, raw)
        assert (claim.broker_id, claim.vm_id, claim.volume_id) == (0, "vm-c", volume_a)
        # vm-b's volume destroyed, a new one in its place: vm-b keeps its id, and the claim
        # names the new volume.
        assert claim_broker_id(client, paths, "vm-b", "vol-b-new", limit=3) == 1
        raw, _ = client.get(paths.broker_id_claim(1))
        assert parse_claim(1, raw).volume_id == "vol-b-new"
        # A volume Kafka already used as broker 2 gets id 2 while it is free.
        assert claim_broker_id(client, paths, "vm-d", "vol-d", limit=3, volume_broker=2) == 2
        # Every id taken: a clear error.
        with pytest.raises(RuntimeError, match=r"no free broker id in 0\.\.2"):
            claim_broker_id(client, paths, "vm-e", "vol-e", limit=3)
    finally:
        client.stop()
        client.close()


def test_a_restarted_agents_member_record_outlives_its_predecessors_session(
    zk_hosts: str, zk_identity: IdentityFiles
) -> None:
    """An agent killed while its member znode stands (its session not yet expired) is
    started again: the new process's record is its own, and stays when the old session
    ends, so the controllers' roll keeps seeing the broker it describes."""
    paths = ClusterPaths(f"members-{uuid.uuid4().hex[:8]}")
    before = KazooAgentZooKeeper(zk_hosts, paths, zk_identity)
    before.connect(15)
    after = KazooAgentZooKeeper(zk_hosts, paths, zk_identity)
    try:
        before.write_member(1, b"restarting")
        after.connect(15)
        after.write_member(1, b"starting")
        _, stat = after.client.get(paths.member(1))
        assert stat.ephemeralOwner == after.client.client_id[0]
        before.close()  # the predecessor's session ends
        assert after.read_members() == {1: b"starting"}
        after.write_member(1, b"healthy")  # its own node: set in place
        assert after.read_members() == {1: b"healthy"}
    finally:
        before.close()
        after.close()
