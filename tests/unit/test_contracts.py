"""Every parser of the planes' contract: good values round-trip; each bad field is refused
with a message naming it; schema versions this reader does not know are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.contracts.claim import BrokerIdClaim, parse_claim
from planner.contracts.fields import ContractError
from planner.contracts.journal import JournalAction, JournalEntry, parse_journal_entry
from planner.contracts.kafka_state import broker_id_in_meta_properties, volume_broker_id
from planner.contracts.member import (
    MemberRecord,
    MemberRole,
    MemberState,
    parse_member,
    parse_members,
)
from planner.contracts.plan_status import PlanMovement, PlanState, PlanStatus, parse_plan_status
from planner.contracts.spec import SpecError

pytestmark = pytest.mark.unit

RECORD = MemberRecord(
    broker_id=2,
    vm_id="vm3",
    address="127.0.1.3",
    jolokia_url="http://127.0.1.3:8778/jolokia/",
    agent_version="0.1.0",
    state=MemberState.HEALTHY,
    sentence="broker 2: healthy, config at spec generation 4",
    registered=True,
    spec_generation=4,
    pending_restart=False,
    role=MemberRole.PLANNER,
    updated_at_ms=1_700_000_000_000,
    plan=PlanStatus(PlanState.EXECUTING, 7, 1, 3, 12, 20, "batch 2/3 running"),
)


def member_json(**changes: Any) -> bytes:
    value = json.loads(RECORD.to_bytes())
    for key, item in changes.items():
        if item is KeyError:
            del value[key]
        else:
            value[key] = item
    return json.dumps(value).encode()


def test_member_record_round_trips_every_field() -> None:
    assert parse_member(RECORD.to_bytes()) == RECORD
    without_plan = MemberRecord(**{**RECORD.__dict__, "plan": None, "role": MemberRole.MEMBER})
    assert parse_member(without_plan.to_bytes()) == without_plan


@pytest.mark.parametrize("state", list(MemberState))
def test_every_member_state_round_trips(state: MemberState) -> None:
    assert parse_member(member_json(state=state.value)).state == state


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (b"not json", "member is not valid JSON"),
        (b"[1, 2]", "member must be a JSON object"),
        (member_json(schema_version=KeyError), "member.schema_version must be an integer"),
        (member_json(schema_version=3), "member.schema_version is 3, newer than"),
        (member_json(schema_version=0), "member.schema_version is 0, older than"),
        (member_json(broker_id=KeyError), "member.broker_id is missing"),
        (member_json(broker_id=-1), "member.broker_id must be at least 0"),
        (member_json(broker_id="2"), "member.broker_id must be an integer"),
        (member_json(broker_id=True), "member.broker_id must be an integer"),
        (member_json(vm_id=""), "member.vm_id must not be empty"),
        (member_json(address=5), "member.address must be a string"),
        (member_json(jolokia_url=KeyError), "member.jolokia_url is missing"),
        (member_json(agent_version=None), "member.agent_version must be a string"),
        (member_json(state="happy"), "member.state must be one of"),
        (member_json(state=KeyError), "member.state is missing"),
        (member_json(sentence=KeyError), "member.sentence is missing"),
        (member_json(registered="yes"), "member.registered must be true or false"),
        (member_json(spec_generation=-2), "member.spec_generation must be at least -1"),
        (member_json(pending_restart=1), "member.pending_restart must be true or false"),
        (member_json(role="boss"), "member.role must be one of planner, member"),
        (member_json(updated_at_ms=1.5), "member.updated_at_ms must be an integer"),
        (member_json(plan=[]), "member.plan must be an object"),
        (member_json(plan={"state": "lost"}), "member.plan.state must be one of"),
        (
            member_json(plan={**RECORD.plan.to_json(), "completed_batches": -1}),  # type: ignore[union-attr]
            "member.plan.completed_batches must be at least 0",
        ),
    ],
)
def test_member_record_refuses_each_bad_field_by_name(raw: bytes, names: str) -> None:
    with pytest.raises(ContractError, match=None) as refused:
        parse_member(raw)
    assert names in str(refused.value)


def test_a_first_schema_record_parses_with_state_unknown() -> None:
    """What an agent from before the state field wrote: it still counts as alive, with its
    generation, but never as joined (its health is not known)."""
    old = {
        "schema_version": 1,
        "broker_id": 1,
        "vm_id": "vm2",
        "address": "127.0.1.2",
        "jolokia_url": "http://127.0.1.2:8778/jolokia/",
        "agent_version": "0.1.0",
        "sentence": "broker 1: healthy, config at spec generation 3",
        "pending_restart": False,
        "role": "member",
        "plan": None,
        "spec_generation": 3,
        "updated_at_ms": 1,
    }
    record = parse_member(json.dumps(old))
    assert (record.state, record.registered, record.spec_generation) == (
        MemberState.UNKNOWN,
        False,
        3,
    )
    assert record.schema_version == 1
    assert not record.has_joined(3)


@pytest.mark.parametrize(
    ("changes", "generation", "joined"),
    [
        ({}, 4, True),
        ({}, 3, True),
        ({}, 5, False),  # the spec moved on: not yet applied
        ({"state": MemberState.STARTING}, 4, False),
        ({"state": MemberState.JOINING}, 4, False),
        ({"state": MemberState.REFUSING}, 4, False),
        ({"registered": False}, 4, False),
    ],
)
def test_joined_means_healthy_registered_and_at_the_generation(
    changes: dict[str, Any], generation: int, joined: bool
) -> None:
    record = MemberRecord(**{**RECORD.__dict__, **changes})
    assert record.has_joined(generation) is joined


def test_member_readings_keep_unreadable_agents_alive() -> None:
    readings = parse_members(
        {
            "2": RECORD.to_bytes(),
            "5": member_json(schema_version=9),
            "7": RECORD.to_bytes(),  # a record naming another broker than its znode
            "lock": b"{}",  # not a broker id: not a member znode
        }
    )
    assert set(readings.records) == {2}
    assert set(readings.unreadable) == {5, 7}
    assert "member.schema_version is 9" in readings.unreadable[5]
    assert "member.broker_id is 2, but the znode is 7" in readings.unreadable[7]
    assert readings.alive == {2, 5, 7}


ENTRY = JournalEntry(1, "vm2", JournalAction.RESTART, "read-only config changed", "started", 5)


def entry_json(**changes: Any) -> bytes:
    value = json.loads(ENTRY.to_bytes())
    for key, item in changes.items():
        if item is KeyError:
            del value[key]
        else:
            value[key] = item
    return json.dumps(value).encode()


@pytest.mark.parametrize("action", list(JournalAction))
def test_journal_entry_round_trips_every_action(action: JournalAction) -> None:
    entry = JournalEntry(0, "vm1", action, "why", "what came of it", 1)
    assert parse_journal_entry(entry.to_bytes()) == entry


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (b"{", "journal entry is not valid JSON"),
        (entry_json(schema_version=2), "journal entry.schema_version is 2, newer than"),
        (entry_json(broker_id=-2), "journal entry.broker_id must be at least -1"),
        (entry_json(vm_id=KeyError), "journal entry.vm_id is missing"),
        (entry_json(action="reboot"), "journal entry.action must be one of"),
        (entry_json(reason=None), "journal entry.reason must be a string"),
        (entry_json(result=KeyError), "journal entry.result is missing"),
        (entry_json(at_ms="now"), "journal entry.at_ms must be an integer"),
    ],
)
def test_journal_entry_refuses_each_bad_field_by_name(raw: bytes, names: str) -> None:
    with pytest.raises(ContractError) as refused:
        parse_journal_entry(raw)
    assert names in str(refused.value)


def test_broker_id_claim_round_trips() -> None:
    claim = BrokerIdClaim(3, "vm4", "vol-abc", 12)
    assert parse_claim(3, claim.to_bytes()) == claim


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ({"vm_id": "vm1", "volume_id": "v", "claimed_at": 1}, "claim.schema_version"),
        (
            {"schema_version": 2, "vm_id": "vm1", "volume_id": "v", "claimed_at": 1},
            "claim.schema_version is 2",
        ),
        ({"schema_version": 1, "volume_id": "v", "claimed_at": 1}, "claim.vm_id is missing"),
        (
            {"schema_version": 1, "vm_id": "vm1", "volume_id": "", "claimed_at": 1},
            "claim.volume_id must not be empty",
        ),
        (
            {"schema_version": 1, "vm_id": "vm1", "volume_id": "v", "claimed_at": -5},
            "claim.claimed_at must be at least 0",
        ),
    ],
)
def test_broker_id_claim_refuses_each_bad_field_by_name(value: object, names: str) -> None:
    with pytest.raises(ContractError) as refused:
        parse_claim(0, json.dumps(value))
    assert names in str(refused.value)


MOVEMENT = PlanMovement(10, 100, 1.0, 90.0).to_json()


def test_movement_says_what_is_left() -> None:
    assert PlanMovement(10, 100, 1.0, 90.0).bytes_to_move == 90
    assert MOVEMENT["bytes_to_move"] == 90


@pytest.mark.parametrize(
    "status",
    [
        PlanStatus(PlanState.NONE),
        PlanStatus(PlanState.REFUSED, detail="plan/meta: not JSON"),
        PlanStatus(PlanState.DONE, 3, 2, 2, 8, None, ""),
        PlanStatus(
            PlanState.EXECUTING, 3, 1, 2, 8, 9, "", PlanMovement(512, 2048, 100.5, 15.3, 4, 8)
        ),
        PlanStatus(PlanState.EXECUTING, 3, 0, 2, 8, 9, "", PlanMovement(0, 2048, 0.0, None)),
    ],
)
def test_plan_status_round_trips(status: PlanStatus) -> None:
    assert parse_plan_status(status.to_json()) == status


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        ({"plan_id": -1}, "plan status.plan_id must be at least 0"),
        ({"batch_count": "2"}, "plan status.batch_count must be an integer"),
        ({"partitions": KeyError}, "plan status.partitions is missing"),
        ({"replicas_moved": -3}, "plan status.replicas_moved must be at least 0"),
        ({"detail": 4}, "plan status.detail must be a string"),
        ({"movement": []}, "plan status must be an object, got list"),
        (
            {"movement": {**MOVEMENT, "bytes_moved": -1}},
            "plan status.bytes_moved must be at least 0",
        ),
        ({"movement": {**MOVEMENT, "bytes_moved": 9000}}, "bytes_moved 9000 is more than"),
        (
            {"movement": {**MOVEMENT, "rate_bytes_per_s": "fast"}},
            "rate_bytes_per_s must be a number",
        ),
        ({"movement": {**MOVEMENT, "eta_s": -2}}, "plan status.eta_s must be a number >= 0"),
    ],
)
def test_plan_status_refuses_each_bad_field_by_name(changes: dict[str, Any], names: str) -> None:
    value = PlanStatus(PlanState.PENDING, 1, 0, 2, 4, 5, "").to_json()
    for key, item in changes.items():
        if item is KeyError:
            del value[key]
        else:
            value[key] = item
    with pytest.raises(ContractError) as refused:
        parse_plan_status(value)
    assert names in str(refused.value)


def test_a_bad_spec_is_a_contract_error() -> None:
    """One root for every refusal of a value crossing ZooKeeper."""
    assert issubclass(SpecError, ContractError)


@pytest.mark.parametrize(
    ("content", "broker_id"),
    [
        ("#Kafka\nversion=0\nbroker.id=2\ncluster.id=x\n", 2),
        ("broker.id = 11\n", 11),
        ("version=0\ncluster.id=x\n", None),
        ("broker.id=abc\n", None),
        ("", None),
    ],
)
def test_meta_properties_broker_id(content: str, broker_id: int | None) -> None:
    assert broker_id_in_meta_properties(content) == broker_id


def test_volume_broker_id_reads_the_log_dir(tmp_path: Path) -> None:
    assert volume_broker_id(tmp_path) is None  # no broker ever ran here
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=4\n")
    assert volume_broker_id(tmp_path) == 4
