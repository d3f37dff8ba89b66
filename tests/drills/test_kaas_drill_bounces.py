"""The drills that bounce brokers (the partition leader and the controller, cleanly and
hard, each a few times) and the game day, checked as every other drill is
(tests/drills/test_kaas_drill.py), on a cluster of their own: their minutes of restarts run
beside that file's drills on the other worker.

`make test` runs two of them: a clean bounce of the partition leader and a hard one of the
controller, the two the game day uses (each bounce path and target once). The other two
bounces and the ZooKeeper-mode game day run under `make drills` (long_drill): they repeat
the same fault code on other targets, the bounce choices are unit-tested against fakes, and
the KRaft test file's short game day runs the game-day sequencing in `make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.drills.drill_runs import run_and_check
from tests.drills.test_kaas_drill import BOUNCE_DRILLS, drill_cluster
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill

__all__ = ["drill_cluster"]  # the module-scoped cluster, one instance for this file


CI_BOUNCE_DRILLS = ("leader-clean-bounce", "controller-hard-bounce")


@pytest.mark.parametrize(
    "name",
    [
        name if name in CI_BOUNCE_DRILLS else pytest.param(name, marks=pytest.mark.long_drill)
        for name in BOUNCE_DRILLS
    ],
)
def test_bounce_drill_is_valid_and_reports_its_recovery(
    drill_cluster: ClusterHandle, name: str, tmp_path: Path
) -> None:
    run_and_check(drill_cluster, name, tmp_path)
