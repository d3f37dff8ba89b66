"""The local cluster's KRaft reads for the drills (mixed into `local_cluster.LocalFaultCluster`):
the controller quorum as Kafka's own quorum tool describes it (the Python client has no
quorum call, and a KRaft broker answers clients with a random broker as "the controller"),
and when a controller took the lead, from the controllers' own logs (to the millisecond;
the tool, a JVM per look, is far coarser)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from management_plane.drills.errors import DrillError
from management_plane.errors import KaasError
from management_plane.local import kraft
from management_plane.local.cluster import LocalCluster
from management_plane.local.image import find_java
from management_plane.local.kraft_probe import quorum_replicas
from management_plane.local.processes import is_alive
from management_plane.local.state import ClusterState
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from planner.contracts.vm_config.kraft import KRAFT_CONTROLLER_LOG

# A voter counts as caught up when it matched the leader's log this recently.
CAUGHT_UP_WITHIN_MS = 5000
QUORUM_READ_ATTEMPTS = 3
_LEADER_LINE = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] .*Completed transition to Leader\("
    r"(?:.*?\bepoch=(\d+))?"
)


def leader_transitions(lines: Iterable[str]) -> list[tuple[float, int | None]]:
    """When a controller's log says it became the quorum's leader (its "Completed transition",
    not the "Attempting durable transition" a few milliseconds before), in epoch seconds (Log4j's
    default date in this machine's time zone), with the epoch when the line names it. Pure."""
    found = []
    for line in lines:
        match = _LEADER_LINE.match(line)
        if match:
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append((at, int(match.group(2)) if match.group(2) else None))
    return found


def quorum_gap(
    replicas: tuple[QuorumReplica, ...], voters: int, caught_up_within_ms: int = CAUGHT_UP_WITHIN_MS
) -> str | None:
    """What keeps the quorum from whole: no leader, fewer voters than controllers, a voter
    not caught up lately; None when nothing does. Pure."""
    if not any(r.role is QuorumRole.LEADER for r in replicas):
        return "no leader"
    voting = [r for r in replicas if r.role is not QuorumRole.OBSERVER]
    if len(voting) < voters:
        return f"{len(voting)} of {voters} controllers vote"
    behind = sorted(
        r.node_id
        for r in voting
        if r.role is QuorumRole.FOLLOWER
        and (r.caught_up_ago_ms is None or r.caught_up_ago_ms > caught_up_within_ms)
    )
    if behind:
        return f"controller(s) {', '.join(map(str, behind))} not caught up"
    return None


class LocalKraftReads:
    """Mixed into `local_cluster.LocalFaultCluster`, which gives `_state` and `local`."""

    local: LocalCluster

    def _state(self) -> ClusterState:
        raise NotImplementedError

    def runs_kraft(self) -> bool:
        return self._state().kraft

    def controller_vms(self) -> tuple[str, ...]:
        state = self._state()
        return tuple(vm.name for vm in kraft.controller_vms(state.layout)) if state.kraft else ()

    def _replicas(self, attempts: int = QUORUM_READ_ATTEMPTS) -> tuple[QuorumReplica, ...]:
        """The quorum as Kafka's tool describes it, asked again when a look fails: on a
        loaded machine one JVM's look can outlast its timeout."""
        state = self._state()
        libs = str(self.local.image().kafka_libs(state.kafka_version))
        for attempt in range(1, attempts + 1):
            try:
                return quorum_replicas(state.layout, str(find_java()), libs)
            except KaasError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def quorum_leader(self) -> str | None:
        state = self._state()
        if not state.kraft:
            return None
        try:
            roles = kraft.controller_roles(state.layout, self._replicas())
        except KaasError as exc:
            raise DrillError(f"the KRaft controller quorum unreadable: {exc}") from None
        leaders = [vm for vm, role in roles.items() if role == "leader"]
        return leaders[0] if leaders else None

    def quorum_whole(self) -> str | None:
        state = self._state()
        if not state.kraft:
            return None
        try:
            replicas = self._replicas(attempts=1)  # polled: the next poll looks again
        except KaasError as exc:  # while the quorum elects, the tool's request may time out
            return str(exc)
        return quorum_gap(replicas, len(kraft.controller_vms(state.layout)))

    def controller_pid(self, vm: str) -> int | None:
        record = self._state().record(vm, "controller")
        return record.pid if record is not None and is_alive(record) else None

    def leader_elected_since(self, since_s: float) -> tuple[str, float] | None:
        state = self._state()
        first: tuple[str, float] | None = None
        for vm in kraft.controller_vms(state.layout) if state.kraft else ():
            log_file = vm.logs_dir / KRAFT_CONTROLLER_LOG
            try:
                text = log_file.read_text(errors="replace")
            except OSError:
                continue
            for at, _ in leader_transitions(text.splitlines()):
                if at > since_s and (first is None or at < first[1]):
                    first = (vm.name, at)
        return first
