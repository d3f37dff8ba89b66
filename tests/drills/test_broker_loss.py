"""`kaas down` on a fresh cluster of its own: no process and no listening port left, also with
a paused broker. (A broker lost under acks=all load is `kaas drill run broker-sigkill`, in
test_kaas_drill.py.)"""

from __future__ import annotations

import pytest

from management_plane.local.probes import port_open
from management_plane.local.processes import is_alive
from management_plane.local.state import require_state
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill


def test_down_leaves_no_process_and_no_listening_port(fresh_cluster: ClusterHandle) -> None:
    state = require_state(fresh_cluster.home)
    records = [state.record(vm.name, k) for vm in state.layout.vms for k in ("zookeeper", "kafka")]
    assert all(is_alive(r) for r in records)
    fresh_cluster.vm("pause", "vm3", "--only", "kafka")  # a paused broker must not block shutdown
    result = fresh_cluster.kaas("down")
    assert result.returncode == 0, result.stderr
    assert not any(is_alive(r) for r in records)
    endpoints = [(vm.address, port) for vm in state.layout.vms for port in vm.ports.all().values()]
    assert [e for e in endpoints if port_open(*e, timeout=0.2)] == []
