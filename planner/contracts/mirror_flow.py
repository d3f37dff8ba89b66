"""`/kaas/<target>/mirror/flows/<flow>`: a MirrorMaker 2 flow into the target cluster.

Written by the management plane when an operator creates or deletes a flow, read by the
target cluster's agents, which run one MirrorMaker 2 process per VM for every active flow
into their cluster (dedicated mode, distributed among the VMs). The value holds no secret:
the credentials for an outside source live in files the management plane delivers to the
VMs, named here only by the flow.

Topic and group filters are Java regular expressions (MirrorMaker's `topics` and `groups`);
the parser checks them with Python's engine, which accepts the common subset both share, so
a filter neither engine can read is refused before any VM sees it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from planner.contracts.fields import (
    ContractError,
    choice,
    dump,
    integer,
    load_object,
    schema_version,
    text,
)
from planner.contracts.paths import validate_cluster_name

MIRROR_FLOW_SCHEMA_VERSION = 2
# Schema 1 had no placement: such a flow runs on the first DEFAULT_WORKERS VMs.
_READABLE_SCHEMAS = (1, 2)
DEFAULT_WORKERS = 2
MAX_WORKERS = 16
_FLOW_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")
# host:port[,host:port...] with a host of letters, digits, dots, dashes or an IPv4 address.
_BOOTSTRAP = re.compile(r"[A-Za-z0-9.-]+:[0-9]{1,5}(?:,[A-Za-z0-9.-]+:[0-9]{1,5})*")
# Java and Python read these constructs differently or not at all.
_JAVA_ONLY = ("(?<", "\\p{", "\\P{", "(?>", "*+", "++", "?+", "\\Q", "\\E")
MAX_FILTER_LENGTH = 1000


# Where a flow's source credentials lie on each VM of the target, under the VM's state
# folder: the client identity (key and certificate, one PEM file) the source's CA signed,
# and that CA. The management plane delivers them; the agent reads them.
SOURCE_CREDENTIALS_DIR = ("mirror", "sources")
SOURCE_CLIENT_FILE = "client.pem"
SOURCE_CA_FILE = "ca.pem"


def source_credentials_dir(vm_state_dir: Path, flow: str) -> Path:
    return vm_state_dir.joinpath(*SOURCE_CREDENTIALS_DIR, validate_flow_name(flow))


class SourceKind(StrEnum):
    KAAS = "kaas"
    """Another KaaS cluster: its brokers and CA are known to the management plane."""
    EXTERNAL = "external"
    """A cluster given by bootstrap servers; its CA and credentials are files on the VMs."""


class FlowState(StrEnum):
    ACTIVE = "active"
    DELETING = "deleting"
    """The agents stop mirroring it; the management plane removes the znode afterwards."""


@dataclass(frozen=True)
class MirrorSource:
    kind: SourceKind
    alias: str
    """MirrorMaker's name for the source: the prefix of the mirrored topics on the target."""
    bootstrap_servers: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "alias": self.alias,
            "bootstrap_servers": self.bootstrap_servers,
        }


@dataclass(frozen=True)
class MirrorFlow:
    name: str
    source: MirrorSource
    target_cluster: str
    topics: str
    groups: str
    state: FlowState = FlowState.ACTIVE
    checkpoint_interval_s: int = 10
    """How often consumer group offsets are checkpointed and synced to the target: the
    bound on the messages a failed-over group sees again."""
    replication_factor: int = 3
    placement: tuple[int, ...] = ()
    """The broker ids of the VMs that run the flow; empty: the first `workers` VMs."""
    workers: int = DEFAULT_WORKERS
    """With no placement, how many VMs run the flow: those of the lowest broker ids among
    the cluster's live agents, so the flow moves when one of them is gone."""

    def __post_init__(self) -> None:
        validate_flow_name(self.name)
        validate_alias(self.source.alias, "source alias")
        validate_alias(self.target_cluster, "target cluster")
        if self.source.kind is SourceKind.KAAS and self.source.alias == self.target_cluster:
            raise ContractError(
                f"flow {self.name}: the source and the target are both cluster "
                f"{self.target_cluster}; a flow mirrors between two clusters"
            )
        validate_bootstrap(self.source.bootstrap_servers, "source.bootstrap_servers")
        validate_filter(self.topics, "topics")
        validate_filter(self.groups, "groups")
        if not 1 <= self.checkpoint_interval_s <= 3600:
            raise ContractError(
                f"checkpoint_interval_s must be 1 to 3600, got {self.checkpoint_interval_s}"
            )
        if not 1 <= self.replication_factor <= 5:
            raise ContractError(f"replication_factor must be 1 to 5, got {self.replication_factor}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ContractError(f"workers must be 1 to {MAX_WORKERS}, got {self.workers}")
        if len(self.placement) > MAX_WORKERS or any(
            not isinstance(b, int) or isinstance(b, bool) or b < 0 for b in self.placement
        ):
            raise ContractError(
                f"placement must be at most {MAX_WORKERS} broker ids (integers from 0), "
                f"got {list(self.placement)}"
            )
        if len(set(self.placement)) != len(self.placement):
            raise ContractError(f"placement names a broker twice: {list(self.placement)}")

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": MIRROR_FLOW_SCHEMA_VERSION,
            "name": self.name,
            "source": self.source.to_json(),
            "target_cluster": self.target_cluster,
            "topics": self.topics,
            "groups": self.groups,
            "state": self.state.value,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "replication_factor": self.replication_factor,
            "placement": list(self.placement),
            "workers": self.workers,
        }

    def encode(self) -> bytes:
        return dump(self.to_json())

    def deleting(self) -> MirrorFlow:
        return replace(self, state=FlowState.DELETING)

    def runs_on(self, broker_id: int, live_broker_ids: frozenset[int]) -> bool:
        """Whether the VM of `broker_id` runs this flow, given the broker ids of the
        cluster's live agents (this VM's included)."""
        if self.state is not FlowState.ACTIVE:
            return False
        if self.placement:
            return broker_id in self.placement
        return broker_id in sorted(live_broker_ids | {broker_id})[: self.workers]

    def mirrored_topic(self, topic: str) -> str:
        """The topic's name on the target under MirrorMaker's default replication policy."""
        return f"{self.source.alias}.{topic}"


def validate_flow_name(name: str) -> str:
    if not isinstance(name, str) or not _FLOW_NAME.fullmatch(name):
        raise ContractError(
            f"flow name {name!r} is invalid: use 1-40 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return name


def validate_alias(alias: str, what: str) -> str:
    # The alias prefixes mirrored topic names and MirrorMaker's `a->b` keys: a dot would
    # read as the replication policy's separator.
    try:
        validate_cluster_name(alias)
    except ValueError as exc:
        raise ContractError(f"{what}: {exc}") from None
    if not alias.isascii():
        raise ContractError(f"{what} {alias!r} must be ASCII")
    return alias


def validate_bootstrap(servers: str, what: str) -> str:
    if not isinstance(servers, str) or not _BOOTSTRAP.fullmatch(servers):
        raise ContractError(f"{what} must be host:port pairs separated by commas, got {servers!r}")
    for pair in servers.split(","):
        port = int(pair.rsplit(":", 1)[1])
        if not 1 <= port <= 65535:
            raise ContractError(f"{what}: port {port} is out of range in {pair!r}")
    return servers


def validate_filter(pattern: str, what: str) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise ContractError(f"{what} filter must be a non-empty regular expression")
    if len(pattern) > MAX_FILTER_LENGTH:
        raise ContractError(f"{what} filter is longer than {MAX_FILTER_LENGTH} characters")
    if any(ch in pattern for ch in "\n\r"):
        raise ContractError(f"{what} filter must be one line")
    for construct in _JAVA_ONLY:
        if construct in pattern:
            raise ContractError(
                f"{what} filter uses {construct!r}, which Java and Python read differently; "
                "use a simpler expression"
            )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ContractError(
            f"{what} filter {pattern!r} is not a regular expression ({exc})"
        ) from None
    return pattern


def filter_matches(pattern: str, name: str) -> bool:
    """MirrorMaker matches a whole name against the filter."""
    return re.fullmatch(pattern, name) is not None


def parse_mirror_flow(raw: bytes | str) -> MirrorFlow:
    what = "mirror_flow"
    value = load_object(raw, what)
    version = schema_version(value, what, _READABLE_SCHEMAS)
    source = value.get("source")
    if not isinstance(source, dict):
        raise ContractError(f"{what}.source must be an object")
    return MirrorFlow(
        name=text(value, "name", what),
        source=MirrorSource(
            kind=choice(source, "kind", f"{what}.source", SourceKind),
            alias=text(source, "alias", f"{what}.source"),
            bootstrap_servers=text(source, "bootstrap_servers", f"{what}.source"),
        ),
        target_cluster=text(value, "target_cluster", what),
        topics=text(value, "topics", what),
        groups=text(value, "groups", what),
        state=choice(value, "state", what, FlowState),
        checkpoint_interval_s=integer(value, "checkpoint_interval_s", what, minimum=1),
        replication_factor=integer(value, "replication_factor", what, minimum=1),
        **(_placement(value, what) if version >= 2 else {}),
    )


@dataclass(frozen=True)
class MirrorFlowReadings:
    """The flows of `/kaas/<target>/mirror/flows` by name, and the children this reader
    could not use, with the reason (a reader never acts on those)."""

    flows: dict[str, MirrorFlow] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


def parse_mirror_flows(values: Mapping[str, bytes]) -> MirrorFlowReadings:
    """Every child's value; a value under a child of another name is unreadable too."""
    readings = MirrorFlowReadings()
    for name, raw in sorted(values.items()):
        try:
            flow = parse_mirror_flow(raw)
        except ContractError as exc:
            readings.unreadable[name] = str(exc)
            continue
        if flow.name != name:
            readings.unreadable[name] = f"the value under {name} names flow {flow.name}"
            continue
        readings.flows[name] = flow
    return readings


def _placement(value: dict[str, Any], what: str) -> dict[str, Any]:
    placement = value.get("placement")
    if not isinstance(placement, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) for b in placement
    ):
        raise ContractError(f"{what}.placement must be a list of broker ids")
    return {
        "placement": tuple(placement),
        "workers": integer(value, "workers", what, minimum=1),
    }
