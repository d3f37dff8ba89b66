"""The journal entry: what an agent did, why and with what result, one persistent
sequential znode /kaas/<cluster>/journal/entry-<seq> per entry, in order."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from planner.contracts.fields import choice, dump, integer, load_object, schema_version, text

JOURNAL_SCHEMA_VERSION = 1
WHAT = "journal entry"


class JournalAction(StrEnum):
    # the broker's cycle
    START = "start"
    RESTART = "restart"
    APPLY_DYNAMIC = "apply_dynamic"
    ZK_RECONFIG = "zk_reconfig"
    START_CONTROLLER = "start_controller"
    RESTART_CONTROLLER = "restart_controller"
    STOP_CONTROLLER = "stop_controller"  # a migration's controller, on its rollback
    KAFKA_CLEANUP = "kafka_cleanup"  # Kafka's znodes a migration's phase deletes
    RESTART_ZOOKEEPER = (
        "restart_zookeeper"  # onto a renewed certificate (agent/zk_server_restart.py)
    )
    # the KRaft controller quorum (agent/kraft_keeper.py)
    ADD_CONTROLLER = "add_controller"
    REMOVE_CONTROLLER = "remove_controller"
    UNREGISTER_BROKER = "unregister_broker"
    # the elected planner's executor
    PLAN_STORED = "plan_stored"
    PLAN_DONE = "plan_done"
    PLAN_SUPERSEDED = "plan_superseded"
    PLAN_REFUSED = "plan_refused"
    PLAN_INFEASIBLE = "plan_infeasible"
    REASSIGN = "reassign"
    CONTROLLER_REELECTION = "controller_reelection"
    # certificate renewal (agent/cert_keeper.py)
    CERTIFICATE = "certificate"
    # the VM's MirrorMaker 2 process (agent/mirror_keeper.py)
    MIRROR_MAKER = "mirror_maker"


@dataclass(frozen=True)
class JournalEntry:
    broker_id: int
    vm_id: str
    action: JournalAction
    reason: str
    result: str
    at_ms: int

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": JOURNAL_SCHEMA_VERSION,
                "broker_id": self.broker_id,
                "vm_id": self.vm_id,
                "action": self.action.value,
                "reason": self.reason,
                "result": self.result,
                "at_ms": self.at_ms,
            }
        )


def parse_journal_entry(raw: bytes | str) -> JournalEntry:
    value = load_object(raw, WHAT)
    schema_version(value, WHAT, (JOURNAL_SCHEMA_VERSION,))
    return JournalEntry(
        # -1: an agent journals before its broker id is claimed only if claiming failed
        broker_id=integer(value, "broker_id", WHAT, minimum=-1),
        vm_id=text(value, "vm_id", WHAT),
        action=choice(value, "action", WHAT, JournalAction),
        reason=text(value, "reason", WHAT, allow_empty=True),
        result=text(value, "result", WHAT, allow_empty=True),
        at_ms=integer(value, "at_ms", WHAT, minimum=0),
    )
