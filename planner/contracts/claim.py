"""The broker-id claim: the persistent znode /kaas/<cluster>/ids/<broker-id> that gives one
data volume (and the VM holding it) one broker id. ZooKeeper's atomic create decides who
gets an id; the value says whose it is, so the same volume keeps its id on a new VM."""

from __future__ import annotations

from dataclasses import dataclass

from planner.contracts.fields import dump, integer, load_object, schema_version, text

CLAIM_SCHEMA_VERSION = 1
WHAT = "broker-id claim"


@dataclass(frozen=True)
class BrokerIdClaim:
    broker_id: int  # the znode's name, not stored in the value
    vm_id: str
    volume_id: str
    claimed_at_ms: int = 0

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": CLAIM_SCHEMA_VERSION,
                "vm_id": self.vm_id,
                "volume_id": self.volume_id,
                "claimed_at": self.claimed_at_ms,
            }
        )


def parse_claim(broker_id: int, raw: bytes | str) -> BrokerIdClaim:
    value = load_object(raw, WHAT)
    schema_version(value, WHAT, (CLAIM_SCHEMA_VERSION,))
    return BrokerIdClaim(
        broker_id,
        text(value, "vm_id", WHAT),
        text(value, "volume_id", WHAT),
        integer(value, "claimed_at", WHAT, minimum=0),
    )
