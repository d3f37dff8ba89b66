"""ZooKeeper membership changes against the shared cluster's real ensemble: two agents'
deciders racing from one config version land exactly one change, and the management
plane's repair request makes an agent remove a recycled VM's server at once.

The ensemble's three voters are never touched: each test adds observers at loopback
addresses where nothing runs (a server that never serves, as a recycled VM's), lets the
deciders remove them, and removes whatever is left at the end.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from agent.settings import AgentSettings
from agent.zk_ensemble import EnsembleKeeper, ReconfigOutcome, ReconfigResult
from agent.zk_membership import ReconfigChange, ReconfigKind
from management_plane.service.cluster_io import ClusterIO
from planner.contracts.ensemble_repair import EnsembleRepairRequest
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.zookeeper_client import zookeeper_client
from planner.zookeeper_ensemble import (
    EnsembleConfig,
    ZkServer,
    ZookeeperRole,
    parse_ensemble_config,
    repair_outstanding,
)
from tests import harness
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

CONFIG = "/zookeeper/config"
Journal = list[tuple[str, str, str]]


def super_client(cluster: ClusterHandle) -> KazooClient:
    """A client as the nodes' identity, ZooKeeper's super user (the one that may reconfig)."""
    client = zookeeper_client(cluster.zookeeper_hosts, cluster.node_identity, timeout=10)
    client.start(timeout=15)
    return client


def read_config(zk: KazooClient) -> EnsembleConfig:
    zk.sync(CONFIG)  # the leader's config: the client may be connected to a lagging follower
    return parse_ensemble_config(zk.get(CONFIG)[0].decode())


def ghost(server_id: int) -> ZkServer:
    """An observer at a scratch address where no server runs. Added by an incremental reconfig,
    which wants a client part in the line; no server runs to bind it."""
    address = f"{harness.SCRATCH_BASE}.{server_id}"
    return ZkServer(server_id, address, 2888, 3888, ZookeeperRole.OBSERVER, 2182, address)


@contextmanager
def ghost_observers(zk: KazooClient, *server_ids: int) -> Iterator[list[ZkServer]]:
    ghosts = [ghost(i) for i in server_ids]
    zk.reconfig(
        joining=",".join(g.line() for g in ghosts), leaving=None, new_members=None, from_config=-1
    )
    try:
        yield ghosts
    finally:
        left = sorted(set(server_ids) & set(read_config(zk).servers))
        if left:
            zk.reconfig(
                joining=None,
                leaving=",".join(map(str, left)),
                new_members=None,
                from_config=-1,
            )


def keeper(
    cluster: ClusterHandle,
    paths_cluster: str,
    zk: KazooClient,
    me: ZkServer,
    journal: Journal,
    tmp_path: Path,
    gone_s: float,
) -> EnsembleKeeper:
    settings = AgentSettings(
        cluster=paths_cluster,
        zookeeper_hosts=cluster.zookeeper_hosts,
        vm_id=f"vm-of-server-{me.server_id}",
        address=me.address,
        zone="zone-a",
        data_dir=tmp_path / f"data-{me.server_id}",
        config_dir=tmp_path / f"config-{me.server_id}",
        zookeeper_server_id=me.server_id,
        zookeeper_peer_port=me.peer_port,
        zookeeper_election_port=me.election_port,
        zookeeper_gone_s=gone_s,
        tls_dir=cluster.node_identity.directory,
    )
    return EnsembleKeeper(zk, settings, settings.identity, lambda *entry: journal.append(entry))


def spec(cluster: str) -> ClusterSpec:
    return ClusterSpec(cluster, "3.9.2", 3, ("zone-a",), zookeeper_participants=3)


def voter(cluster: ClusterHandle, index: int) -> ZkServer:
    vm = cluster.layout.vms[index]
    return ZkServer(vm.index, vm.address, 2888, 3888, ZookeeperRole.PARTICIPANT)


def test_two_deciders_racing_from_one_config_version_land_exactly_one_change(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    name = f"race-{uuid.uuid4().hex[:8]}"
    zk_a, zk_b = super_client(kafka_cluster), super_client(kafka_cluster)
    try:
        with ghost_observers(zk_a, 241, 242) as (ghost_241, ghost_242):
            before = read_config(zk_a)
            journal_a: Journal = []
            journal_b: Journal = []
            # Agent A runs voter 1; agent B runs the (stopped) server 241. With no gone
            # threshold each removes the first server that does not answer and is not its
            # own: two different changes, decided from the same config.
            a = keeper(kafka_cluster, name, zk_a, voter(kafka_cluster, 0), journal_a, tmp_path, 0)
            b = keeper(kafka_cluster, name, zk_b, ghost_241, journal_b, tmp_path, 0)
            now = time.monotonic()
            change_a, change_b = a.change(spec(name), now), b.change(spec(name), now)
            assert change_a is not None and change_b is not None
            assert (change_a.kind, change_a.leaving) == (ReconfigKind.REMOVE, "241")
            assert (change_b.kind, change_b.leaving) == (ReconfigKind.REMOVE, "242")
            assert change_a.from_config == change_b.from_config == before.version

            results: dict[str, ReconfigResult] = {}
            start = threading.Barrier(2)

            def apply(who: str, agent: EnsembleKeeper, change: ReconfigChange) -> None:
                start.wait(10)
                results[who] = agent.apply(change)

            threads = [
                threading.Thread(target=apply, args=("a", a, change_a)),
                threading.Thread(target=apply, args=("b", b, change_b)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)

            # The loser is refused either with BadVersion (the winner's change committed
            # first) or as a reconfig in process (it is committing): a lost race both ways.
            outcomes = {who: r.outcome for who, r in results.items()}
            assert sorted(outcomes.values()) == [
                ReconfigOutcome.APPLIED,
                ReconfigOutcome.LOST_RACE,
            ], results
            winner = "a" if outcomes["a"] is ReconfigOutcome.APPLIED else "b"
            landed = ghost_241 if winner == "a" else ghost_242
            kept = ghost_242 if winner == "a" else ghost_241
            after = read_config(zk_a)
            # Exactly the winner's change landed: one server fewer, the loser's still there.
            assert set(after.servers) == set(before.servers) - {landed.server_id}
            assert kept.server_id in after.servers
            assert after.version != before.version
            # Both journaled, the loser as a race to re-read, not as an error.
            loser_journal = journal_b if winner == "a" else journal_a
            assert [e[2] for e in (journal_a if winner == "a" else journal_b)] == ["done"]
            assert len(loser_journal) == 1 and "re-reading next cycle" in loser_journal[0][2]

            # The loser's next cycle decides again from the new config, and lands.
            loser = b if winner == "a" else a
            again = loser.change(spec(name), time.monotonic())
            if winner == "a":
                # Agent B never removes its own server 241, and 242 is still there.
                assert again is not None and again.leaving == "242"
            else:
                assert again is not None and again.leaving == "241"
            assert again.from_config == after.version
            assert loser.apply(again).outcome is ReconfigOutcome.APPLIED
            assert set(read_config(zk_a).servers) == set(before.servers) - {241, 242}
    finally:
        for client in (zk_a, zk_b):
            client.stop()
            client.close()


def test_of_two_deciders_from_one_config_version_the_later_gets_bad_version(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The same race with the applies one after the other: the later one's reconfig is
    refused with BadVersion, since the config it was decided from is gone, and changes
    nothing (unconditional, it would have removed a second server)."""
    name = f"stale-{uuid.uuid4().hex[:8]}"
    zk_a, zk_b = super_client(kafka_cluster), super_client(kafka_cluster)
    try:
        with ghost_observers(zk_a, 243, 244) as (ghost_243, _):
            journal_a: Journal = []
            journal_b: Journal = []
            a = keeper(kafka_cluster, name, zk_a, voter(kafka_cluster, 1), journal_a, tmp_path, 0)
            b = keeper(kafka_cluster, name, zk_b, ghost_243, journal_b, tmp_path, 0)
            now = time.monotonic()
            change_a, change_b = a.change(spec(name), now), b.change(spec(name), now)
            assert change_a is not None and change_a.leaving == "243"
            assert change_b is not None and change_b.leaving == "244"
            assert change_a.from_config == change_b.from_config

            assert b.apply(change_b).outcome is ReconfigOutcome.APPLIED
            changed = read_config(zk_a)
            result = a.apply(change_a)
            assert result.outcome is ReconfigOutcome.LOST_RACE
            assert f"changed since config version {change_a.from_config:x}" in result.text
            assert read_config(zk_a) == changed  # 243 still there, same version
            assert journal_a == [("zk_reconfig", change_a.reason, result.text)]
    finally:
        for client in (zk_a, zk_b):
            client.stop()
            client.close()


def test_a_repair_request_makes_an_agent_remove_a_recycled_server_at_once(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    name = f"repair-{uuid.uuid4().hex[:8]}"
    zk = super_client(kafka_cluster)
    io = ClusterIO(
        name, [vm.address for vm in kafka_cluster.layout.vms], kafka_cluster.admin_identity
    )
    live = frozenset(vm.address for vm in kafka_cluster.layout.vms)
    try:
        with ghost_observers(zk, 245) as (recycled,):
            journal: Journal = []
            # The production threshold: a server just gone is kept.
            agent = keeper(kafka_cluster, name, zk, voter(kafka_cluster, 2), journal, tmp_path, 60)
            assert agent.change(spec(name), time.monotonic()) is None
            addresses = frozenset({recycled.address})
            assert repair_outstanding(io.ensemble_config(), addresses, live, 3) == [
                "servers [245] of recycled VMs still in the ensemble"
            ]

            io.request_ensemble_repair(EnsembleRepairRequest(addresses, "operation 1"))
            io.request_ensemble_repair(EnsembleRepairRequest(addresses, "operation 1"))  # again
            change = agent.change(spec(name), time.monotonic())
            assert change is not None and change.leaving == "245"
            assert "its VM" in change.reason and "is recycled" in change.reason
            assert agent.apply(change).outcome is ReconfigOutcome.APPLIED
            assert repair_outstanding(io.ensemble_config(), addresses, live, 3) == []

            io.withdraw_ensemble_repair()
            io.withdraw_ensemble_repair()  # gone already: no error
            with pytest.raises(NoNodeError):
                zk.get(ClusterPaths(name).ensemble_repair)
            assert journal == [("zk_reconfig", change.reason, "done")]
    finally:
        zk.stop()
        zk.close()


def test_the_agents_whole_member_list_adds_a_server_whose_line_names_no_client_port(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The agent's add, as ZooKeeper takes it: a non-incremental reconfig with a line
    without a client part (an incremental one refuses such a joining line), conditional on
    the config version; the other servers' lines stay as they were."""
    name = f"whole-{uuid.uuid4().hex[:8]}"
    zk = super_client(kafka_cluster)
    try:
        before = read_config(zk)
        added = ZkServer(246, f"{harness.SCRATCH_BASE}.246", 2888, 3888, ZookeeperRole.OBSERVER)
        agent = keeper(kafka_cluster, name, zk, voter(kafka_cluster, 0), [], tmp_path, 60)
        addition = ReconfigChange(
            ReconfigKind.ADD, added, "test", before.version, tuple(before.servers.values())
        )
        assert agent.apply(addition).outcome is ReconfigOutcome.APPLIED
        after = read_config(zk)
        assert after.servers[246] == added
        assert after.servers[246].client_port is None
        assert {i: s for i, s in after.servers.items() if i != 246} == before.servers
        removal = ReconfigChange(
            ReconfigKind.REMOVE, added, "test", after.version, tuple(after.servers.values())
        )
        assert agent.apply(removal).outcome is ReconfigOutcome.APPLIED
        assert read_config(zk).servers == before.servers
    finally:
        zk.stop()
        zk.close()
