"""Broker identity (seed 003): claim the lowest free broker id atomically in ZooKeeper, and
keep it when the VM comes back with the same data volume.

A claim is a persistent znode /kaas/<cluster>/ids/<id> holding the VM id and the volume id.
ZooKeeper's create is atomic, so two VMs starting together never get the same id: the
loser's create fails and it tries the next id.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from planner.contracts.paths import ClusterPaths

VOLUME_ID_FILE = "kaas-volume-id"
CLAIM_SCHEMA_VERSION = 1


class IdentityError(RuntimeError):
    pass


@dataclass(frozen=True)
class Claim:
    broker_id: int
    vm_id: str
    volume_id: str

    def encode(self) -> bytes:
        return json.dumps(
            {
                "schema_version": CLAIM_SCHEMA_VERSION,
                "vm_id": self.vm_id,
                "volume_id": self.volume_id,
                "claimed_at": int(time.time() * 1000),
            }
        ).encode()

    @staticmethod
    def decode(broker_id: int, raw: bytes) -> Claim | None:
        try:
            value = json.loads(raw)
            if value.get("schema_version") != CLAIM_SCHEMA_VERSION:
                return None
            return Claim(broker_id, str(value["vm_id"]), str(value["volume_id"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


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


def volume_broker_id(data_dir: Path) -> int | None:
    """The broker id Kafka recorded on this volume (meta.properties), if it ever ran here."""
    try:
        lines = (data_dir / "meta.properties").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "broker.id" and value.strip().isdigit():
            return int(value.strip())
    return None


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
    """The id this volume already holds, else the id Kafka recorded on the volume if it is
    free, else the lowest free one in 0..limit-1."""
    client.ensure_path(paths.ids)
    claims: dict[int, Claim | None] = {}
    for child in client.get_children(paths.ids):
        if not child.isdigit():
            continue
        try:
            raw, _ = client.get(paths.broker_id_claim(int(child)))
        except NoNodeError:
            continue
        claims[int(child)] = Claim.decode(int(child), raw)
    for broker_id, claim in sorted(claims.items()):
        if claim is not None and claim.volume_id == volume:
            if (
                claim.vm_id != vm_id
            ):  # the volume moved to a new VM (replacement): keep the id, record the VM
                client.set(
                    paths.broker_id_claim(broker_id), Claim(broker_id, vm_id, volume).encode()
                )
            return broker_id
    for broker_id in candidate_ids(claims, limit, volume_broker):
        try:
            client.create(
                paths.broker_id_claim(broker_id), Claim(broker_id, vm_id, volume).encode()
            )
        except NodeExistsError:
            continue  # another VM won this id a moment ago
        return broker_id
    raise IdentityError(
        f"no free broker id in 0..{limit - 1}: every id is claimed ({sorted(claims)})"
    )
