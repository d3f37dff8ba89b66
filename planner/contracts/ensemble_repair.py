"""The management plane's request to the agents to repair the ZooKeeper ensemble, kept at
/kaas/<cluster>/ensemble/repair. It states a fact (these VMs are recycled for good); the
agents' decider alone chooses what to change."""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.contracts.fields import ContractError

REPAIR_REQUEST_SCHEMA_VERSION = 1


class RepairRequestError(ContractError):
    """The repair request znode holds a value that is not a valid request."""


@dataclass(frozen=True)
class EnsembleRepairRequest:
    """The management plane's request to the agents: the VMs at these addresses are recycled
    for good, so their ZooKeeper servers will not come back. The agents' decider removes
    such a server as soon as it stops serving, without waiting out the gone threshold; it
    still decides what to change, when, and whether a quorum allows it."""

    recycled_addresses: frozenset[str]
    requested_by: str  # the operation that asks, for the journal

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "schema_version": REPAIR_REQUEST_SCHEMA_VERSION,
                "recycled_addresses": sorted(self.recycled_addresses),
                "requested_by": self.requested_by,
            }
        ).encode()


def parse_repair_request(raw: bytes) -> EnsembleRepairRequest:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RepairRequestError(f"ensemble repair request is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RepairRequestError("ensemble repair request must be a JSON object")
    version = value.get("schema_version")
    if version != REPAIR_REQUEST_SCHEMA_VERSION:
        raise RepairRequestError(
            f"ensemble repair request has schema_version {version!r}, "
            f"this reader knows {REPAIR_REQUEST_SCHEMA_VERSION}"
        )
    addresses = value.get("recycled_addresses")
    if not isinstance(addresses, list) or not all(isinstance(a, str) and a for a in addresses):
        raise RepairRequestError(
            "ensemble repair request: recycled_addresses must be a list of addresses"
        )
    requested_by = value.get("requested_by")
    if not isinstance(requested_by, str) or not requested_by:
        raise RepairRequestError("ensemble repair request: requested_by must be a non-empty string")
    return EnsembleRepairRequest(frozenset(addresses), requested_by)
