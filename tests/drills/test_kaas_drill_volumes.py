"""The drills that destroy or fill a broker's log directory, each checked as every other
drill is (tests/drills/test_kaas_drill.py), on a cluster of their own so that the broker's
rebuild from its replicas holds up no other drill."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.drills import test_kaas_drill as drills
from tests.drills.test_kaas_drill import VOLUME_DRILLS, drill_cluster
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill

__all__ = ["drill_cluster"]  # the module-scoped cluster, one instance for this file


@pytest.mark.parametrize("name", VOLUME_DRILLS)
def test_volume_drill_is_valid_and_reports_its_recovery(
    drill_cluster: ClusterHandle, name: str, tmp_path: Path
) -> None:
    drills.run_and_check(drill_cluster, name, tmp_path)
