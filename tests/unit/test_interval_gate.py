"""The engine watchers' interval gate: due at most once per interval of its clock."""

from __future__ import annotations

import pytest

from management_plane.service.interval_gate import IntervalGate

pytestmark = pytest.mark.unit


class StepClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("interval_s", "times", "due"),
    [
        # The wall clock is far past its zero: the first look is due at once.
        (10.0, [1_700_000_000.0], [True]),
        # A clock near its zero: the first look waits for one interval.
        (5.0, [0.0, 4.9, 5.0], [False, False, True]),
        # Due once per interval, counted from the look that was due, not from each call.
        (10.0, [100.0, 105.0, 109.9, 110.0, 115.0, 120.0], [True, False, False, True, False, True]),
        # A late look starts the next interval from itself.
        (10.0, [100.0, 135.0, 140.0, 145.0], [True, True, False, True]),
        # Interval 0: every call is due, also at the same instant.
        (0.0, [0.0, 0.0, 3.0], [True, True, True]),
    ],
)
def test_due_at_most_once_per_interval(
    interval_s: float, times: list[float], due: list[bool]
) -> None:
    clock = StepClock(times[0])
    gate = IntervalGate(interval_s, clock)
    answers = []
    for now in times:
        clock.now = now
        answers.append(gate.due())
    assert answers == due


def test_a_watcher_looks_again_only_after_its_interval() -> None:
    clock = StepClock(1_000.0)
    gate = IntervalGate(5.0, clock)
    looks = 0
    for _ in range(30):  # an engine polling every half second for 15 s
        if gate.due():
            looks += 1
        clock.now += 0.5
    assert looks == 3
