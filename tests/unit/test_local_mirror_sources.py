"""A local cluster keeps its mirror flows' source credentials and writes them into every VM,
also one added after the flow was made (its agent reads only its own folder)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agent.mirror_maker import VmMirrorCredentials
from agent.settings import AgentSettings
from management_plane.local.mirror_sources import MirrorSourceStore
from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import SOURCE_CA_FILE, SOURCE_CLIENT_FILE, source_credentials_dir

pytestmark = pytest.mark.unit


def _held_by_agent(vm_dir: Path) -> frozenset[str]:
    """What the VM's agent sees, through its own adapter."""
    settings = AgentSettings(
        cluster="backup",
        zookeeper_hosts="127.0.2.1:2181",
        vm_id=vm_dir.name,
        address="127.0.2.1",
        zone="a",
        data_dir=vm_dir / "data",
        config_dir=vm_dir / "config",
        state_dir=vm_dir,
    )
    return VmMirrorCredentials(settings).sources_held()


def test_a_vm_made_after_the_flow_gets_its_source_credentials(tmp_path: Path) -> None:
    store = MirrorSourceStore(tmp_path / "cluster")
    vms = [tmp_path / "cluster" / f"vm{i}" for i in (1, 2, 3)]
    store.deliver(vms, "orders-dr", b"key and certificate", b"source ca")
    store.deliver(vms, "billing-dr", b"other key", b"other ca")
    assert all(_held_by_agent(vm) == {"orders-dr", "billing-dr"} for vm in vms)

    added = tmp_path / "cluster" / "vm4"
    assert _held_by_agent(added) == frozenset()
    assert store.provision(added) == ["billing-dr", "orders-dr"]
    assert _held_by_agent(added) == {"orders-dr", "billing-dr"}
    folder = source_credentials_dir(added, "orders-dr")
    assert (folder / SOURCE_CLIENT_FILE).read_bytes() == b"key and certificate"
    assert (folder / SOURCE_CA_FILE).read_bytes() == b"source ca"
    for path in (folder / SOURCE_CLIENT_FILE, folder / SOURCE_CA_FILE):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    store.withdraw([*vms, added], "orders-dr")
    assert all(_held_by_agent(vm) == {"billing-dr"} for vm in [*vms, added])
    later = tmp_path / "cluster" / "vm5"
    assert store.provision(later) == ["billing-dr"], "a withdrawn flow's are not kept"
    store.withdraw([later], "orders-dr")  # gone already: nothing to do


def test_a_half_kept_flow_is_not_provisioned_and_a_bad_name_is_refused(tmp_path: Path) -> None:
    store = MirrorSourceStore(tmp_path)
    (store.kept / "orders-dr").mkdir(parents=True)
    (store.kept / "orders-dr" / SOURCE_CLIENT_FILE).write_bytes(b"key")
    assert store.provision(tmp_path / "vm1") == []
    with pytest.raises(ContractError, match="flow name"):
        store.deliver([], "../escape", b"k", b"c")
