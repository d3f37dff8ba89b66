"""Acting at most once per interval from a loop that polls more often.

The engine's thread runs its watchers between operation steps, at every poll; each watcher
looks at the clusters only when its own interval has passed since its last look.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class IntervalGate:
    """`due()` is true at most once per `interval_s` of `clock`, and then starts the next
    interval. The first call is due once `interval_s` has passed since the clock's zero (at
    once for the wall clock); with an interval of 0 every call is due."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self._last = 0.0

    def due(self) -> bool:
        now = self.clock()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True
