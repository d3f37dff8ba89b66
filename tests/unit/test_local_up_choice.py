"""What `kaas up` does with the cluster it finds in its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from management_plane.errors import KaasError
from management_plane.local.cluster import LocalCluster
from management_plane.local.layout import plan_layout
from management_plane.local.state import ClusterState
from management_plane.local.tls import cluster_authority
from management_plane.local.up_choice import (
    ClusterPredatesTls,
    RecordedCluster,
    UpChoice,
    address_base_of,
    decide_up,
)

pytestmark = pytest.mark.unit

HOME = Path("/home/u/.kaas/local")


def recorded(alive: int, problem: str | None = None, vms: int = 3) -> RecordedCluster:
    return RecordedCluster(
        vm_count=vms,
        address_base="127.0.1",
        processes_alive=alive,
        processes_expected=3 * vms,
        serving_problem=problem,
    )


@pytest.mark.parametrize(
    ("found", "choice", "reason"),
    [
        (None, UpChoice.CREATE, f"no cluster at {HOME}"),
        (recorded(9), UpChoice.REUSE, "it was running and serving"),
        (recorded(0), UpChoice.START, "it was stopped"),
        (recorded(1), UpChoice.REPLACE, "it was partly running (1 of 9 processes)"),
        (recorded(8), UpChoice.REPLACE, "it was partly running (8 of 9 processes)"),
        (
            recorded(9, "the ZooKeeper server of vm2 is not serving"),
            UpChoice.REPLACE,
            "its processes ran but it did not serve: the ZooKeeper server of vm2 is not serving",
        ),
        (
            recorded(9, "2 of 3 brokers registered"),
            UpChoice.REPLACE,
            "its processes ran but it did not serve: 2 of 3 brokers registered",
        ),
    ],
)
def test_up_creates_reuses_starts_or_replaces(
    found: RecordedCluster | None, choice: UpChoice, reason: str
) -> None:
    decision = decide_up(found, 3, "127.0.1", HOME)
    assert (decision.choice, decision.reason) == (choice, reason)


@pytest.mark.parametrize(
    ("nodes", "address_base"),
    [(5, "127.0.1"), (3, "127.0.7")],
)
def test_a_cluster_of_another_shape_is_refused_not_replaced(nodes: int, address_base: str) -> None:
    for alive in (0, 4, 9):
        with pytest.raises(KaasError) as refused:
            decide_up(recorded(alive), nodes, address_base, HOME)
        assert str(refused.value) == (
            f"a cluster of 3 VMs on 127.0.1.x already lives at {HOME}, not the {nodes} VMs on "
            f"{address_base}.x asked for: `kaas up --nodes 3 --address-base 127.0.1` uses it, "
            f"`kaas down --purge --home {HOME}` deletes it"
        )


def test_the_address_base_is_the_first_three_octets() -> None:
    assert address_base_of("127.0.1.4") == "127.0.1"
    assert address_base_of("127.0.11.12") == "127.0.11"


@pytest.mark.parametrize("alive", [0, 4, 9])
def test_a_cluster_made_before_tls_is_refused_by_name_whatever_runs(alive: int) -> None:
    """Neither started with secured files, nor replaced (which would delete its data)."""
    before_tls = RecordedCluster(3, "127.0.1", alive, 9, name="shop", has_authority=False)
    with pytest.raises(ClusterPredatesTls) as refused:
        decide_up(before_tls, 3, "127.0.1", HOME)
    message = str(refused.value)
    assert f"cluster 'shop' at {HOME} predates TLS" in message
    assert "plaintext Kafka listeners, ZooKeeper without TLS or ACLs" in message
    assert f"kaas down --purge --home {HOME}" in message


def test_a_recorded_cluster_without_its_ca_is_one_made_before_tls(tmp_path: Path) -> None:
    """What `kaas up` reads from the folder: a stopped cluster (nothing to probe) whose
    folder has no `secrets/ca` was made before TLS; with the CA it is a secured one."""
    layout = plan_layout("shop", tmp_path, 3, "127.0.9")
    state = ClusterState(layout=layout, kafka_version="3.9.2")
    local = LocalCluster(tmp_path)
    found = local._recorded(state)
    assert found is not None and (found.name, found.has_authority) == ("shop", False)
    cluster_authority(layout)
    found = local._recorded(state)
    assert found is not None and found.has_authority
