"""A flow request checked at the boundary (pure): every problem is named with its field and
nothing is queued while there is one.

What the checks need of the world comes in as values: the clusters the service knows
(`ClusterFacts`), and the flows already in the target's ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from management_plane.errors import Refusal, RequestRefused
from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import (
    DEFAULT_WORKERS,
    MirrorFlow,
    MirrorSource,
    SourceKind,
    validate_alias,
    validate_bootstrap,
    validate_filter,
    validate_flow_name,
)

DEFAULT_GROUPS = ".*"
MAX_REPLICATION_FACTOR = 3


@dataclass(frozen=True)
class ClusterFacts:
    """What the service's database says of one cluster."""

    status: str
    bootstrap_servers: str
    broker_ids: frozenset[int]


@dataclass(frozen=True)
class FlowRequest:
    """The API's request body. A KaaS source is named by `source_cluster`; an outside one by
    `source_bootstrap` and `source_alias`."""

    name: str
    topics: str
    source_cluster: str | None = None
    source_bootstrap: str | None = None
    source_alias: str | None = None
    groups: str = DEFAULT_GROUPS
    checkpoint_interval_s: int = 10
    replication_factor: int | None = None
    placement: tuple[int, ...] = ()
    workers: int = DEFAULT_WORKERS


def _invalid(problems: list[str]) -> RequestRefused:
    return RequestRefused(Refusal.INVALID, "; ".join(problems))


def _check(problems: list[str], where: str, check: Callable[..., object], *args: str) -> None:
    try:
        check(*args)
    except ContractError as exc:
        message = str(exc)
        problems.append(message if message.startswith(where) else f"{where}: {message}")


def _source(
    request: FlowRequest, target: str, clusters: Mapping[str, ClusterFacts], problems: list[str]
) -> MirrorSource | None:
    if (request.source_cluster is None) == (request.source_bootstrap is None):
        problems.append(
            "source: give either source_cluster (a cluster of this service) or "
            "source_bootstrap with source_alias (a cluster outside it)"
        )
        return None
    if request.source_cluster is not None:
        name = request.source_cluster
        if request.source_alias is not None:
            problems.append("source_alias: a KaaS source is known by its cluster name")
        if name == target:
            problems.append(
                f"source_cluster: {name} is the target cluster; a flow mirrors between two clusters"
            )
            return None
        facts = clusters.get(name)
        if facts is None or facts.status == "deleted":
            problems.append(f"source_cluster: no cluster named {name!r}")
            return None
        if facts.status not in ("running", "updating"):
            problems.append(f"source_cluster: cluster {name} is {facts.status}, not running")
            return None
        before = len(problems)
        _check(problems, "source_cluster", validate_alias, name, "source_cluster")
        if len(problems) > before:
            return None
        return MirrorSource(SourceKind.KAAS, name, facts.bootstrap_servers)
    alias = request.source_alias
    if alias is None:
        problems.append(
            "source_alias: an outside source needs an alias (the mirrored topics' prefix)"
        )
        return None
    before = len(problems)
    _check(problems, "source_alias", validate_alias, alias, "source_alias")
    assert request.source_bootstrap is not None
    _check(
        problems,
        "source_bootstrap",
        validate_bootstrap,
        request.source_bootstrap,
        "source_bootstrap",
    )
    if alias == target or alias in clusters:
        problems.append(
            f"source_alias: {alias} names a cluster of this service; use source_cluster"
        )
    if len(problems) > before:
        return None
    return MirrorSource(SourceKind.EXTERNAL, alias, request.source_bootstrap)


def check_flow_request(
    request: FlowRequest, target: str, clusters: Mapping[str, ClusterFacts]
) -> MirrorFlow:
    """The flow to write into `target`, or RequestRefused naming every problem (400), or the
    target's absence (404) or state (409)."""
    facts = clusters.get(target)
    if facts is None or facts.status == "deleted":
        raise RequestRefused(Refusal.NOT_FOUND, f"no cluster named {target}")
    problems: list[str] = []
    _check(problems, "name", validate_flow_name, request.name)
    _check(problems, "topics", validate_filter, request.topics, "topics")
    _check(problems, "groups", validate_filter, request.groups, "groups")
    _check(problems, "target cluster", validate_alias, target, "target cluster")
    source = _source(request, target, clusters, problems)
    unknown = sorted(set(request.placement) - facts.broker_ids)
    if unknown:
        problems.append(
            f"placement: cluster {target} has no broker {', '.join(map(str, unknown))} "
            f"(its brokers: {', '.join(map(str, sorted(facts.broker_ids))) or 'none'})"
        )
    replication = request.replication_factor
    if replication is None:
        replication = max(1, min(MAX_REPLICATION_FACTOR, len(facts.broker_ids)))
    elif replication > max(1, len(facts.broker_ids)):
        problems.append(
            f"replication_factor: {replication} is more than cluster {target}'s "
            f"{len(facts.broker_ids)} brokers"
        )
    if problems or source is None:
        raise _invalid(problems)
    try:
        flow = MirrorFlow(
            name=request.name,
            source=source,
            target_cluster=target,
            topics=request.topics,
            groups=request.groups,
            checkpoint_interval_s=request.checkpoint_interval_s,
            replication_factor=replication,
            placement=tuple(request.placement),
            workers=request.workers,
        )
    except ContractError as exc:
        raise _invalid([str(exc)]) from None
    if facts.status not in ("running", "updating"):
        raise RequestRefused(
            Refusal.CONFLICT, f"cluster {target} is {facts.status}; a flow needs it running"
        )
    return flow


def check_against_existing(flow: MirrorFlow, existing: Mapping[str, MirrorFlow]) -> None:
    """Refuse (409) a flow whose name is taken, or a second flow from the same source (one
    MirrorMaker process per VM runs a pair of clusters once)."""
    if flow.name in existing:
        raise RequestRefused(
            Refusal.CONFLICT,
            f"name: cluster {flow.target_cluster} has a flow named {flow.name} already",
        )
    for other in existing.values():
        if other.source.alias == flow.source.alias:
            raise RequestRefused(
                Refusal.CONFLICT,
                f"source: flow {other.name} already mirrors {flow.source.alias} into "
                f"{flow.target_cluster}; widen its topics instead",
            )
