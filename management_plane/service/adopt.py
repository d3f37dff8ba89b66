"""Adopting a local cluster that `kaas up` started: the service records it (its spec from
ZooKeeper, its VMs with the broker ids their agents claimed) as a running cluster, so the API
lists it and the broker-loss watcher guards it. Done at every start; a cluster already in the
database is left as it is."""

from __future__ import annotations

import json
from pathlib import Path

import structlog

from management_plane.errors import KaasError
from management_plane.local.state import read_state
from management_plane.providers.base import client_identity
from management_plane.providers.local import LocalProvider
from management_plane.service.cluster_io import ClusterIO, ClusterUnreachable
from management_plane.service.db import Database

log = structlog.get_logger("kaas.adopt")


def adopt_local_cluster(db: Database, provider: LocalProvider, home: Path) -> str:
    """The adopted cluster's name; KaasError when there is nothing there to adopt."""
    state = read_state(home)
    if state is None:
        raise KaasError(f"--adopt-local-cluster {home}: no local cluster there (kaas up first)")
    if not state.agents:
        raise KaasError(
            f"--adopt-local-cluster {home}: cluster {state.layout.name} runs without agents "
            "(kaas up --no-agents); the management plane needs kaas-agent on every VM"
        )
    name = state.layout.name
    provider.adopt(name, home)
    row = db.cluster(name)
    if row is not None and row["status"] != "deleted":
        return name
    if row is not None:
        raise KaasError(
            f"--adopt-local-cluster {home}: the name {name} belongs to a deleted cluster of "
            "this service"
        )
    addresses = [vm.address for vm in state.layout.vms]
    try:
        io = ClusterIO(name, addresses, client_identity(provider, name))
        spec = io.read_spec()
        members = io.members()
    except ClusterUnreachable as exc:
        raise KaasError(f"--adopt-local-cluster {home}: {exc}") from None
    if spec is None:
        raise KaasError(f"--adopt-local-cluster {home}: cluster {name} has no spec in ZooKeeper")
    by_address = {m.address: broker for broker, m in members.records.items()}
    db.add_cluster(name, provider.name, "local", json.dumps(spec.to_json(), sort_keys=True))
    for info in provider.list_vms(name):
        broker = by_address.get(info.address, info.broker_id)
        db.upsert_vm(
            info.vm_id,
            name,
            info.zone,
            info.address,
            info.instance_type,
            info.kafka_version,
            "running",
            broker,
        )
    db.update_cluster(name, status="running")
    log.info("cluster_adopted", cluster=name, home=str(home), vms=len(state.layout.vms))
    return name
