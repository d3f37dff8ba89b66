"""`kaas status`'s plan line: the batch count and, while a plan runs, the data movement
(bytes moved and to move, rate, time left), from the typed plan status."""

from __future__ import annotations

import pytest

from management_plane.cli import _plan_text
from planner.contracts.plan_status import PlanMovement, PlanState, PlanStatus

pytestmark = pytest.mark.unit

MIB = 1024**2


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (PlanStatus(PlanState.NONE), "none stored"),
        (
            PlanStatus(PlanState.DONE, 2, 3, 3, 10, 12, "", PlanMovement(5 * MIB, 5 * MIB, 0, 0)),
            "2 done, batch 3/3 done (10 partitions, 12 replicas to move)",
        ),
        (
            PlanStatus(
                PlanState.EXECUTING,
                3,
                1,
                4,
                10,
                12,
                "",
                PlanMovement(256 * MIB, 1024 * MIB, 50 * MIB, 15.4, 5, 10),
            ),
            "3 executing, batch 1/4 done (10 partitions, 12 replicas to move); 256 of 1024 MiB "
            "moved, 768 MiB to move at 50.0 MiB/s, about 15 s left",
        ),
        (
            PlanStatus(
                PlanState.EXECUTING, 3, 0, 4, 10, 12, "", PlanMovement(0, 1024 * MIB, 0, None)
            ),
            "3 executing, batch 0/4 done (10 partitions, 12 replicas to move); 0 of 1024 MiB "
            "moved, 1024 MiB to move at 0.0 MiB/s",
        ),
    ],
)
def test_plan_text(status: PlanStatus, expected: str) -> None:
    assert _plan_text(status.to_json()) == expected
