"""The member record: what an agent reports about itself in its ephemeral znode
/kaas/<cluster>/members/<broker-id> at the end of every cycle, and the only way any plane
reads it.

The management plane decides from `state` and `spec_generation` (has a new VM joined, has
every agent applied a spec); `sentence` is for people and is never parsed. A record from an
agent of an older schema parses with the fields that schema had and the state UNKNOWN; a
record no reader understands is reported as unreadable, never dropped silently, because the
znode's presence alone still says the agent is alive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from planner.contracts.fields import (
    ContractError,
    boolean,
    choice,
    dump,
    integer,
    load_object,
    schema_version,
    text,
)
from planner.contracts.plan_status import PlanStatus, parse_plan_status

MEMBER_SCHEMA_VERSION = 2
FIRST_MEMBER_SCHEMA_VERSION = 1
"""Written by agents before the record carried a state: still read during a rolling upgrade."""
NO_GENERATION = -1
WHAT = "member"


class MemberState(StrEnum):
    """What the agent's cycle found and did, one value per outcome of its decision."""

    WAITING_FOR_SPEC = "waiting_for_spec"  # no valid cluster spec yet: nothing started
    STARTING = "starting"  # the broker process is being started
    JOINING = "joining"  # the broker answers but is not registered with the cluster yet
    UNRESPONSIVE = "unresponsive"  # the broker process lives but does not answer (yet)
    HEALTHY = "healthy"  # registered, answering, running the spec's config
    APPLYING_CONFIG = "applying_config"  # dynamic config keys being applied
    AWAITING_RESTART = "awaiting_restart"  # needs a restart, waits for others first
    RESTARTING = "restarting"
    RECONFIGURING_ZOOKEEPER = "reconfiguring_zookeeper"
    REFUSING = "refusing"  # refuses a config it cannot apply; changes nothing
    UNKNOWN = "unknown"  # an agent of the first schema, which reported no state


class MemberRole(StrEnum):
    PLANNER = "planner"  # the elected agent that plans and executes reassignments
    MEMBER = "member"


@dataclass(frozen=True)
class MemberRecord:
    broker_id: int
    vm_id: str
    address: str
    jolokia_url: str
    agent_version: str
    state: MemberState
    sentence: str
    registered: bool  # the broker's znode is under Kafka's /brokers/ids
    spec_generation: int  # the generation of the last spec the agent read; -1 before any
    pending_restart: bool  # read-only config changed: the broker runs an older config
    role: MemberRole
    updated_at_ms: int
    plan: PlanStatus | None = None  # the planner's view of the stored plan
    controller_pending_restart: bool = False
    """KRaft: this VM's controller runs an older controller.properties (written when true
    only, so a record without a controller keeps its bytes)."""
    schema_version: int = field(default=MEMBER_SCHEMA_VERSION, compare=False)

    def has_joined(self, spec_generation: int) -> bool:
        """Serving as a broker of the cluster at the given spec generation or later."""
        return (
            self.state == MemberState.HEALTHY
            and self.registered
            and self.spec_generation >= spec_generation
        )

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": MEMBER_SCHEMA_VERSION,
                "broker_id": self.broker_id,
                "vm_id": self.vm_id,
                "address": self.address,
                "jolokia_url": self.jolokia_url,
                "agent_version": self.agent_version,
                "state": self.state.value,
                "sentence": self.sentence,
                "registered": self.registered,
                "spec_generation": self.spec_generation,
                "pending_restart": self.pending_restart,
                "role": self.role.value,
                "plan": None if self.plan is None else self.plan.to_json(),
                "updated_at_ms": self.updated_at_ms,
                **({"controller_pending_restart": True} if self.controller_pending_restart else {}),
            }
        )


def parse_member(raw: bytes | str) -> MemberRecord:
    value = load_object(raw, WHAT)
    version = schema_version(value, WHAT, (FIRST_MEMBER_SCHEMA_VERSION, MEMBER_SCHEMA_VERSION))
    current = version == MEMBER_SCHEMA_VERSION
    plan = value.get("plan")
    return MemberRecord(
        broker_id=integer(value, "broker_id", WHAT, minimum=0),
        vm_id=text(value, "vm_id", WHAT),
        address=text(value, "address", WHAT),
        jolokia_url=text(value, "jolokia_url", WHAT),
        agent_version=text(value, "agent_version", WHAT),
        state=choice(value, "state", WHAT, MemberState) if current else MemberState.UNKNOWN,
        sentence=text(value, "sentence", WHAT, allow_empty=True),
        registered=boolean(value, "registered", WHAT) if current else False,
        spec_generation=integer(value, "spec_generation", WHAT, minimum=NO_GENERATION),
        pending_restart=boolean(value, "pending_restart", WHAT),
        role=choice(value, "role", WHAT, MemberRole),
        updated_at_ms=integer(value, "updated_at_ms", WHAT, minimum=0),
        plan=None if plan is None else parse_plan_status(plan, f"{WHAT}.plan"),
        controller_pending_restart=(
            boolean(value, "controller_pending_restart", WHAT)
            if "controller_pending_restart" in value
            else False
        ),
        schema_version=version,
    )


@dataclass(frozen=True)
class MemberReadings:
    """Every member znode read at one moment: the records, and the agents whose record this
    reader cannot use (alive, since their ephemeral znode exists, but not understood)."""

    records: dict[int, MemberRecord] = field(default_factory=dict)
    unreadable: dict[int, str] = field(default_factory=dict)  # broker id -> why

    @property
    def alive(self) -> set[int]:
        """Broker ids whose agent holds a member znode, readable or not."""
        return set(self.records) | set(self.unreadable)


def parse_members(raw_by_child: Mapping[str, bytes]) -> MemberReadings:
    """The member znodes' values by child name (the broker id) into records; a child whose
    value is refused, or whose record names another broker id, is listed as unreadable."""
    records: dict[int, MemberRecord] = {}
    unreadable: dict[int, str] = {}
    for child, raw in raw_by_child.items():
        if not child.isdigit():
            continue  # not a member znode: the layout has only broker ids here
        broker_id = int(child)
        try:
            record = parse_member(raw)
        except ContractError as exc:
            unreadable[broker_id] = str(exc)
            continue
        if record.broker_id != broker_id:
            unreadable[broker_id] = (
                f"member.broker_id is {record.broker_id}, but the znode is {child}"
            )
            continue
        records[broker_id] = record
    return MemberReadings(records, unreadable)
