"""One drill run under load as the drill tests check it (shared by the ZooKeeper-mode drill
cluster's tests and the KRaft cluster's): the cluster steadily healthy first, then the drill
at its short (or, under `make drills`, full) duration, the checker's verdict valid, recovered,
its report written, nothing left behind. `short_s`: the short duration, when not the default."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from management_plane.drills.catalog import GAME_DAY_DRILLS, Drill, find_drill
from management_plane.drills.faults import ManagementPlane
from management_plane.drills.health import health_problems
from management_plane.drills.local_cluster import LocalFaultCluster
from management_plane.drills.network import NftablesRules
from management_plane.drills.runner import DrillOptions, DrillResult, run_drill
from management_plane.local import probes
from tests import harness
from tests.harness import ClusterHandle

FULL = os.environ.get("KAAS_DRILL_FULL") == "1"
SHORT_S = 3.0
GAME_DAY_SHORT_S = 2.0

STEADY_S = 10.0
# The game day's faults in `make test` (the KRaft short game day), less the broker kill: its
# recovery (the agent's restart, then the ISR complete again) is the longest, about 100 s,
# and the broker-sigkill drill test runs it alone; `make drills` runs the whole game day.
CI_GAME_DAY_DRILLS = tuple(d for d in GAME_DAY_DRILLS if d != "broker-sigkill")
# One bounce per bounce drill in `make test` (three under `make drills`): the bounce loop's
# count and pacing are unit-tested against fakes; on real servers one bounce is the point.
CI_BOUNCES = 1


def wait_healthy(home: Path) -> None:
    cluster = LocalFaultCluster(home)
    last: list[str] = []
    # The last problems seen, and when: a timeout with a healthy last look means the cluster
    # flapped, and the problem it flapped on is what the failure has to name.
    last_seen: list[tuple[float, list[str]]] = []
    flips = [0]
    healthy_since: list[float] = []
    started = time.monotonic()

    def steady() -> bool:
        # Healthy for STEADY_S in a row: a check before this one may leave an agent about to
        # restart its broker (a paused broker is restarted after a grace period), and the
        # drill's own refusal looks at the cluster again a moment later.
        last[:] = health_problems(cluster.status())
        if last:
            if healthy_since:
                flips[0] += 1
            last_seen[:] = [(time.monotonic() - started, list(last))]
            healthy_since.clear()
            return False
        if not healthy_since:
            healthy_since.append(time.monotonic())
        return time.monotonic() - healthy_since[0] >= STEADY_S

    try:
        harness.wait_until(steady, 180, "the cluster healthy again, steadily")
    except AssertionError as exc:
        seen = (
            f"; last unhealthy {last_seen[0][0]:.0f}s in: {'; '.join(last_seen[0][1])}"
            if last_seen
            else ""
        )
        raise AssertionError(
            f"{exc}: now {'; '.join(last) or 'healthy'}; healthy then not {flips[0]} times{seen}"
        ) from None


def run_and_check(
    drill_cluster: ClusterHandle,
    name: str,
    tmp_path: Path,
    plane: ManagementPlane | None = None,
    drill: Drill | None = None,
    short_s: float | None = None,
) -> DrillResult:
    """The drill `name` (or `drill`, a game day of a chosen set) under load at its short (or,
    under `make drills`, full) duration: the checker's verdict valid, recovered, its report
    written, nothing left behind. `short_s`: the short duration, when not the default."""
    wait_healthy(drill_cluster.home)
    drill = drill or find_drill(name)
    options = DrillOptions(
        duration_s=None
        if FULL
        else (short_s or (SHORT_S if name != "game-day" else GAME_DAY_SHORT_S)),
        rate_per_s=100.0,
        bounces=3 if FULL else CI_BOUNCES,
    )
    network = NftablesRules()
    before = network.listing()
    result = run_drill(
        drill,
        LocalFaultCluster(drill_cluster.home),
        options,
        tmp_path / "report",
        network,
        plane=plane,
    )
    verdict = result.verdict
    assert verdict.valid, json.dumps(result.report["summary"], indent=2)
    assert verdict.lost.count == verdict.unexpected.count == verdict.reordered.count == 0
    assert verdict.totals.acknowledged > 0
    assert verdict.totals.values_read >= verdict.totals.acknowledged
    assert result.recovered, [vars(o) for o in result.outcomes]
    faults = result.report["summary"]["faults"]
    assert [f["fault"] for f in faults] == [f.name for f in drill.faults()]
    assert all(f["recovery_s"] is not None and f["recovery_s"] >= 0 for f in faults)
    assert result.report["summary"]["longest_stall_s"] is not None
    assert network.listing() == before  # no rule left behind
    admin = probes.admin_client(drill_cluster.admin)
    harness.wait_until(  # read back, judged, and deleted
        lambda: result.topic not in admin.list_topics(timeout=10).topics,
        60,
        f"the drill's topic {result.topic} deleted",
    )
    assert network.cgroup_root is not None
    assert list(network.cgroup_root.glob(f"kaas_drill_{os.getpid()}_*")) == []
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["passed"] is True and report["drill"] == name
    assert "<svg" in (tmp_path / "report" / "report.html").read_text()
    assert (tmp_path / "report" / "history.jsonl").stat().st_size > 0
    print(
        f"\nfigures {name}: duration {result.ended_s - result.started_s:.0f}s, "
        f"stall {report['summary']['longest_stall_s']}s, recovery "
        + ", ".join(str(f["recovery_s"]) for f in faults)
        + f"s, valid {verdict.valid}"
    )
    return result
