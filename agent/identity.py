"""Broker identity: claim the lowest free broker id atomically in ZooKeeper, and
keep it when the VM comes back with the same data volume.

A claim is a persistent znode /kaas/<cluster>/ids/<id> holding the VM id and the volume id.
ZooKeeper's create is atomic, so two VMs starting together never get the same id: the
loser's create fails and it tries the next id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from agent.errors import AgentError
from planner.contracts.claim import BrokerIdClaim, parse_claim
from planner.contracts.fields import ContractError
from planner.contracts.paths import ClusterPaths

VOLUME_ID_FILE = "kaas-volume-id"


class IdentityError(AgentError, RuntimeError):
    pass


def volume_id(data_dir: Path) -> str:
    """The data volume's identity: a random id written once onto the volume itself."""
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / VOLUME_ID_FILE
    if marker.exists():
        return marker.read_text().strip()
    value = f"vol-{uuid.uuid4().hex}"
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(value + "\n")
    tmp.rename(marker)
    return value


def candidate_ids(taken: Iterable[int], limit: int, preferred: int | None = None) -> list[int]:
    """Free ids in 0..limit-1, lowest first; a free `preferred` id (the volume's own) goes first (pure)."""
    used = set(taken)
    free = [i for i in range(limit) if i not in used]
    if preferred is not None and preferred not in used:
        return [preferred] + [i for i in free if i != preferred]
    return free


def claim_broker_id(
    client: KazooClient,
    paths: ClusterPaths,
    vm_id: str,
    volume: str,
    limit: int,
    volume_broker: int | None = None,
) -> int:
    """The id this volume already holds, else the id this VM holds (its volume was replaced),
    else the id Kafka recorded on the volume if it is free, else the lowest free one in
    0..limit-1."""
    client.ensure_path(paths.ids)
    claims: dict[int, BrokerIdClaim | None] = {}
    for child in client.get_children(paths.ids):
        if not child.isdigit():
            continue
        try:
            raw, _ = client.get(paths.broker_id_claim(int(child)))
        except NoNodeError:
            continue
        try:
            claims[int(child)] = parse_claim(int(child), raw)
        except ContractError:
            claims[int(child)] = None  # unreadable: the id stays taken, by nobody we know
    for broker_id, claim in sorted(claims.items()):
        if claim is not None and claim.volume_id == volume:
            if (
                claim.vm_id != vm_id
            ):  # the volume moved to a new VM (replacement): keep the id, record the VM
                client.set(paths.broker_id_claim(broker_id), _claim(broker_id, vm_id, volume))
            return broker_id
    for broker_id, claim in sorted(claims.items()):
        # The same VM on a new volume (its old one destroyed): it keeps its id, which Kafka
        # may have written onto the new volume already, and the claim names the new volume.
        if claim is not None and claim.vm_id == vm_id:
            client.set(paths.broker_id_claim(broker_id), _claim(broker_id, vm_id, volume))
            return broker_id
    for broker_id in candidate_ids(claims, limit, volume_broker):
        try:
            client.create(paths.broker_id_claim(broker_id), _claim(broker_id, vm_id, volume))
        except NodeExistsError:
            continue  # another VM won this id a moment ago
        return broker_id
    raise IdentityError(
        f"no free broker id in 0..{limit - 1}: every id is claimed ({sorted(claims)})"
    )


def _claim(broker_id: int, vm_id: str, volume: str) -> bytes:
    return BrokerIdClaim(broker_id, vm_id, volume, int(time.time() * 1000)).to_bytes()
