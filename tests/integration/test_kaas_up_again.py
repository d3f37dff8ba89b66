"""`kaas up` run again on a fresh KAAS_HOME, as `make demo` does after `make down`: it
reuses a running cluster, starts a stopped one and replaces a partly running one, and says
which it did."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from management_plane.local.state import require_state
from tests.harness import SCRATCH_BASE, kaas_cli, remember

pytestmark = pytest.mark.integration


def test_up_again_reuses_starts_or_replaces_the_cluster(tmp_path: Path) -> None:
    home = tmp_path / "kaas-home"
    env = {**os.environ, "KAAS_HOME": str(home)}
    up = ("up", "--nodes", "1", "--name", "again", "--address-base", SCRATCH_BASE, "--no-service")

    def kaas(*args: str) -> str:
        result = kaas_cli(*args, env=env)
        if (home / "cluster.json").exists():
            remember(home)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    try:
        assert "cluster again: 1 VMs up in" in kaas(*up)
        first_zookeeper = require_state(home).record("vm1", "zookeeper")

        assert "1 VMs already running, reused (it was running and serving)" in kaas(*up)
        assert require_state(home).record("vm1", "zookeeper") == first_zookeeper

        kaas("down")
        again = kaas(*up)
        assert "1 VMs started again in" in again and "(it was stopped)" in again
        assert kaas("status", "--json").count('"broker_registered": true') == 1

        # The agent stopped alone leaves the cluster half running: it is replaced.
        kaas("vm", "stop", "vm1", "--only", "agent")
        replaced = kaas(*up)
        assert "1 VMs replaced by a new cluster, up in" in replaced, replaced
        assert "(it was partly running (2 of 3 processes))" in replaced, replaced
        assert require_state(home).record("vm1", "zookeeper") != first_zookeeper
        assert kaas("status", "--json").count('"broker_registered": true') == 1
    finally:
        kaas_cli("down", "--purge", env=env)
