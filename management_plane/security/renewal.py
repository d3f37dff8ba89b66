"""Signing the agents' own renewals: an agent whose certificate comes within its renewal
window of expiring writes a request (reason `expiry`); the service's engine thread looks now
and then and signs it with the cluster's CA, with no operator action. The agent then installs
the certificate and restarts its broker under the restart lock, as in a rotation.

A cluster running an operation is left alone (a rotation signs its own rounds), and a request
is signed only for a running VM's broker, naming that VM's address (planner/pki/rotation.py).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping

import structlog

from management_plane.errors import KaasError
from management_plane.providers.base import Provider, client_identity
from management_plane.security.rotation_store import (
    CertificateStoreFactory,
    HoldsClusterAuthority,
    ZooKeeperCertificates,
)
from management_plane.service.db import Database
from management_plane.service.interval_gate import IntervalGate
from planner.contracts.certificates import LeafRequest, RequestReason, SignedLeaf
from planner.pki.authority import PkiError
from planner.pki.rotation import certificate_public_key_pem, sign_request

log = structlog.get_logger("kaas.renewal")

CHECK_INTERVAL_S = 10.0


def unanswered_renewals(
    requests: Mapping[int, LeafRequest],
    signed: Mapping[int, SignedLeaf],
    brokers: Mapping[int, str],
) -> list[int]:
    """The brokers (of running VMs) whose expiry request has no answer for its key yet."""
    pending = []
    for broker_id, request in sorted(requests.items()):
        if request.reason is not RequestReason.EXPIRY or broker_id not in brokers:
            continue
        answer = signed.get(broker_id)
        if (
            answer is not None
            and answer.round_id == request.round_id
            and certificate_public_key_pem(answer.certificate_pem.encode()).decode()
            == request.public_key_pem
        ):
            continue
        pending.append(broker_id)
    return pending


class RenewalSigner:
    """An engine watcher (`check_if_due` between operation steps)."""

    def __init__(
        self,
        db: Database,
        provider: Provider,
        certificates: CertificateStoreFactory = ZooKeeperCertificates,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.provider = provider
        self.certificates = certificates
        self._gate = IntervalGate(interval_s, clock)

    def check_if_due(self) -> None:
        if not self._gate.due():
            return
        for cluster in self.db.list_clusters():
            if cluster["status"] != "running":
                continue
            if any(op.unfinished for op in self.db.list_operations(cluster["name"], 20)):
                continue
            try:
                self.sign_cluster(cluster["name"])
            except KaasError as exc:
                log.warning("renewal_check_failed", cluster=cluster["name"], error=str(exc))

    def sign_cluster(self, cluster: str) -> list[int]:
        """Sign every unanswered expiry request of the cluster; the brokers signed for."""
        if not isinstance(self.provider, HoldsClusterAuthority):
            return []
        vms = [vm for vm in self.db.cluster_vms(cluster) if vm["state"] == "running"]
        brokers = {int(vm["broker_id"]): vm["address"] for vm in vms if vm["broker_id"] is not None}
        store = self.certificates(
            cluster, [vm["address"] for vm in vms], client_identity(self.provider, cluster)
        )
        requests = store.requests()
        pending = unanswered_renewals(requests, store.signed(), brokers)
        if not pending:
            return []
        authority = self.provider.cluster_authority(cluster)
        signed = []
        for broker_id in pending:
            request = requests[broker_id]
            try:
                certificate = sign_request(
                    authority,
                    request.public_key_pem.encode(),
                    request.hosts,
                    brokers[broker_id],
                    dt.datetime.now(dt.UTC),
                )
            except PkiError as exc:
                log.warning("renewal_refused", cluster=cluster, broker_id=broker_id, error=str(exc))
                continue
            store.write_signed(
                broker_id,
                SignedLeaf(
                    request.round_id, certificate.decode(), authority.certificate_pem.decode()
                ),
            )
            log.info("renewal_signed", cluster=cluster, broker_id=broker_id, round=request.round_id)
            signed.append(broker_id)
        return signed
