"""The agent's own figures, counted by its cycle and sent with every metrics interval:
cycles, their time, the actions and restarts since the last interval, and the plan's
progress while this agent is the planner. Thread-safe: the cycle counts, the metrics
loop takes."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from agent.decide import ActionKind
from planner.contracts.plan_status import PlanStatus

RESTART_KINDS = frozenset({ActionKind.START, ActionKind.RESTART})


@dataclass
class _Interval:
    cycles: int = 0
    cycle_time_s_total: float = 0.0
    cycle_time_s_max: float = 0.0
    actions: int = 0
    restarts: int = 0


class AgentStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._interval = _Interval()
        self._plan: PlanStatus | None = None
        self._is_planner = False

    def record_cycle(self, seconds: float, action_kind: ActionKind) -> None:
        """One cycle took `seconds` and ran `action_kind` (NONE: nothing)."""
        with self._lock:
            i = self._interval
            i.cycles += 1
            i.cycle_time_s_total += seconds
            i.cycle_time_s_max = max(i.cycle_time_s_max, seconds)
            if action_kind is not ActionKind.NONE:
                i.actions += 1
                if action_kind in RESTART_KINDS:
                    i.restarts += 1

    def record_plan(self, is_planner: bool, plan: PlanStatus | None) -> None:
        with self._lock:
            self._is_planner = is_planner
            self._plan = plan if is_planner else None

    def take(self) -> dict[str, float]:
        """The gauges under <cluster>.brokers.<id>.agent. since the last take, and reset."""
        with self._lock:
            i, self._interval = self._interval, _Interval()
            plan, is_planner = self._plan, self._is_planner
        gauges = {
            "cycles": float(i.cycles),
            "actions": float(i.actions),
            "restarts": float(i.restarts),
            "is_planner": 1.0 if is_planner else 0.0,
        }
        if i.cycles:
            gauges["cycle_time_ms"] = 1000.0 * i.cycle_time_s_total / i.cycles
            gauges["cycle_time_ms_max"] = 1000.0 * i.cycle_time_s_max
        if plan is not None:
            gauges["plan_batches_done"] = float(plan.completed_batches)
            gauges["plan_batches"] = float(plan.batch_count)
            if plan.batch_count:
                gauges["plan_progress"] = plan.completed_batches / plan.batch_count
            if plan.movement is not None:
                gauges["plan_bytes_to_move"] = float(plan.movement.bytes_to_move)
        return gauges
