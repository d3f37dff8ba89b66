"""Plugging the alert loop into `kaas serve`: the service database's running clusters, their
ZooKeeper through ClusterIO, the history table, the webhook."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from management_plane.errors import KaasError
from management_plane.monitoring.alert_loop import RESTARTING_STATES, AlertLoop
from management_plane.monitoring.heartbeat import Sample
from management_plane.monitoring.heartbeat_loop import Credential, HeartbeatLoop, Probe
from management_plane.monitoring.history import AlertHistory
from management_plane.monitoring.notify import WebhookNotifier
from management_plane.monitoring.rules import DEFAULT_RULES_FILE
from management_plane.providers.base import client_identity
from management_plane.service.cluster_io import ClusterIO
from management_plane.service.db import Database
from management_plane.service.tenant_service import TenantService
from planner.contracts.spec import ClusterSpec

if TYPE_CHECKING:
    from management_plane.service.main import ServeSettings

DEFAULT_ROUTING_KEY = "kaas"


class ClusterIOReader:
    """The alert loop's view of one cluster: its spec and which agents restart their broker."""

    def __init__(self, io: ClusterIO) -> None:
        self.io = io

    def read_spec(self) -> ClusterSpec | None:
        return self.io.read_spec()

    def restarting_brokers(self) -> set[int]:
        records = self.io.members().records
        return {b for b, record in records.items() if record.state in RESTARTING_STATES}


def build_alert_loop(db: Database, settings: ServeSettings, provider: object) -> AlertLoop:
    rules_file = settings.alert_rules_file or DEFAULT_RULES_FILE
    notifier = None
    if settings.alert_webhook_url is not None:
        if not settings.alert_webhook_url.startswith(("http://", "https://")):
            raise KaasError(
                f"--alert-webhook must be an http(s) URL, got {settings.alert_webhook_url!r}"
            )
        routing_key = DEFAULT_ROUTING_KEY
        if settings.alert_routing_key_file is not None:
            try:
                routing_key = settings.alert_routing_key_file.read_text().strip()
            except OSError as exc:
                raise KaasError(
                    f"--alert-routing-key-file {settings.alert_routing_key_file}: {exc.strerror}"
                ) from None
        notifier = WebhookNotifier(settings.alert_webhook_url, routing_key)

    def running_clusters() -> list[str]:
        return [c["name"] for c in db.list_clusters() if c["status"] == "running"]

    def reader_of(cluster: str) -> ClusterIOReader:
        addresses = [vm["address"] for vm in db.cluster_vms(cluster) if vm["state"] == "running"]
        return ClusterIOReader(ClusterIO(cluster, addresses, client_identity(provider, cluster)))

    return AlertLoop(running_clusters, reader_of, AlertHistory(db.engine), notifier, rules_file)


class HeartbeatTenants:
    """The tenant service as the heartbeat loop uses it."""

    def __init__(self, service: TenantService, db: Database) -> None:
        self.service = service
        self.db = db
        self.create = service.create
        self.create_topic = service.create_topic
        self.delete = service.delete
        self.list_topics = service.list_topics

    def exists(self, cluster: str, name: str) -> bool:
        row = self.db.tenant(name)
        return row is not None and row["cluster"] == cluster and row["status"] != "deleted"


class CurrentTrustProbe:
    """A heartbeat probe over the cluster's current trust bundle, made anew when the bundle
    changes: its clients read the CA once, as a customer's do."""

    def __init__(self, make: Callable[[str], Probe], bundle: Callable[[], str]) -> None:
        self.make = make
        self.bundle = bundle
        self.ca_pem = bundle()
        self.probe = make(self.ca_pem)

    def round(self) -> list[Sample]:
        current = self.bundle()
        if current != self.ca_pem:
            self.probe.close()
            self.ca_pem, self.probe = current, self.make(current)
        return self.probe.round()

    def close(self) -> None:
        self.probe.close()


def build_heartbeat_loop(
    db: Database, home: Path, provider: object, tenants: TenantService | None
) -> HeartbeatLoop:
    if tenants is None:
        raise KaasError("the heartbeat needs the tenant service")
    from statsd import StatsClient

    from management_plane.monitoring.heartbeat_probe import HeartbeatProbe

    clients: dict[tuple[str, int], StatsClient] = {}

    def gauges_of(host: str, port: int) -> StatsClient:
        if (host, port) not in clients:
            clients[(host, port)] = StatsClient(host, port, prefix="kaas")
        return clients[(host, port)]

    def running_clusters() -> list[str]:
        return [c["name"] for c in db.list_clusters() if c["status"] == "running"]

    def spec_of(cluster: str) -> ClusterSpec | None:
        addresses = [vm["address"] for vm in db.cluster_vms(cluster) if vm["state"] == "running"]
        return ClusterIO(cluster, addresses, client_identity(provider, cluster)).read_spec()

    def trust_bundle(cluster: str, stored: str) -> str:
        """The CAs the cluster's brokers chain to now (a CA rotation changes them after the
        heartbeat's credential was stored); the stored one when the provider keeps none."""
        identity = client_identity(provider, cluster)
        try:
            return identity.trust_bundle.read_text() if identity is not None else stored
        except OSError:
            return stored

    def probe_of(cluster: str, credential: Credential) -> Probe:
        def make(ca_pem: str) -> HeartbeatProbe:
            client = replace(credential.client, ca_pem=ca_pem)
            return HeartbeatProbe(cluster, client.librdkafka(), credential.topic, credential.group)

        return CurrentTrustProbe(make, lambda: trust_bundle(cluster, credential.client.ca_pem))

    return HeartbeatLoop(
        home, running_clusters, spec_of, HeartbeatTenants(tenants, db), probe_of, gauges_of
    )
