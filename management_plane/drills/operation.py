"""A drill as a management-plane operation (`POST /v1/clusters/{name}/drills`): the request
is checked before anything is queued (`check_drill_request`: an unknown drill, bad options, a
provider that cannot reach the cluster's processes, an unhealthy cluster, a fault that cannot
run here), then the one runner runs the operation's registered steps: `start_drill` starts
`kaas drill run` as a process of its own (`process.py`), `wait_drill` follows it to its
report, `finish` is every cluster operation's last step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from management_plane.drills.catalog import choose_drill
from management_plane.drills.errors import DrillRefused
from management_plane.drills.local_cluster import LocalFaultCluster
from management_plane.drills.network import NftablesRules
from management_plane.drills.process import (
    DrillRequest,
    DrillState,
    drill_progress,
    start_drill,
    started_process,
)
from management_plane.drills.runner import DrillOptions, preflight, refusal_message
from management_plane.errors import KaasError, Refusal, RequestRefused
from management_plane.providers.base import RunsDrills
from management_plane.service.controller import Controller, done, step, wait
from management_plane.service.db import OperationRow
from management_plane.service.operations import FAIL, OperationKind, Outcome, StepName
from management_plane.service.steps import Patience, RetryPolicy

RUN_DRILL = {OperationKind.RUN_DRILL}


@dataclass(frozen=True)
class DrillAsk:
    """The API's request body, as the service hands it over."""

    drill: str
    duration_s: float | None = None
    rate_per_s: float = 200.0
    bounces: int = 3
    game_day_drills: tuple[str, ...] | None = None


def check_drill_request(
    ask: DrillAsk, cluster: str, provider: object, report_dir: Path
) -> DrillRequest:
    """The drill to queue, or RequestRefused naming every problem; touches nothing."""
    try:
        drill = choose_drill(ask.drill, ask.game_day_drills)
    except DrillRefused as exc:
        raise RequestRefused(Refusal.INVALID, str(exc)) from None
    if drill.faults_the_plane:
        raise RequestRefused(
            Refusal.CONFLICT,
            f"drill {drill.name} refused: it faults the management plane itself, so it cannot "
            "run as one of its operations; run `kaas drill run` beside the cluster",
        )
    options = DrillOptions(
        duration_s=ask.duration_s, rate_per_s=ask.rate_per_s, bounces=ask.bounces
    )
    problems = options.problems()
    if problems:
        raise RequestRefused(Refusal.INVALID, refusal_message(drill, problems))
    if not isinstance(provider, RunsDrills):
        raise RequestRefused(
            Refusal.CONFLICT,
            f"drill {drill.name} refused: the {getattr(provider, 'name', '?')} provider cannot "
            "reach a cluster's processes from the service; run `kaas drill run` on its hosts",
        )
    home = provider.drill_home(cluster)
    try:
        problems = preflight(drill, LocalFaultCluster(home), options, NftablesRules())
    except KaasError as exc:  # no cluster there, or it does not answer
        problems = [str(exc)]
    if problems:
        raise RequestRefused(Refusal.CONFLICT, refusal_message(drill, problems))
    return DrillRequest(
        drill=drill.name,
        home=home,
        report_dir=report_dir,
        duration_s=ask.duration_s,
        rate_per_s=ask.rate_per_s,
        bounces=ask.bounces,
        game_day_drills=ask.game_day_drills,
    )


# Started once: a drill run twice would break the cluster twice.
@step(StepName.START_DRILL, RUN_DRILL, retry=RetryPolicy.NEVER)
def start(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    request = DrillRequest.from_params(op.params)
    record = start_drill(request, controller.drill_processes)
    return done(
        f"drill {request.drill} started (pid {record.pid}); report in {request.report_dir}",
        drill_pid=record.pid,
    )


@step(StepName.WAIT_DRILL, RUN_DRILL, patience=Patience.DRILL)
def follow(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    request = DrillRequest.from_params(op.params)
    record = started_process(request.report_dir)
    alive = record is not None and controller.drill_processes.alive(record)
    progress = drill_progress(request.report_dir, alive)
    if progress.state is DrillState.RUNNING:
        return wait(f"drill {request.drill}: {progress.message}")
    if progress.state is DrillState.PASSED:
        return done(progress.message)
    return Outcome(FAIL, progress.message)
