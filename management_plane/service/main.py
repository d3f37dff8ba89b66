"""`kaas serve`: open the database, make the admin key at first start, resume unfinished
operations, and serve the API with uvicorn."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import uvicorn

from management_plane.errors import KaasError
from management_plane.local.image import find_java, load_image
from management_plane.monitoring.pipeline import (
    plan_service_pipeline,
    port_clash,
    start_pipeline,
    stop_pipeline,
)
from management_plane.monitoring.wiring import build_alert_loop, build_heartbeat_loop
from management_plane.providers.local import LocalProvider
from management_plane.security.boot_tokens import BootTokens
from management_plane.security.renewal import RenewalSigner
from management_plane.service.adopt import adopt_local_cluster
from management_plane.service.api import create_app
from management_plane.service.auth import ADMIN_KEY_FILE, ensure_admin_key
from management_plane.service.aws_config import AwsServiceConfig, ServiceAwsProvider
from management_plane.service.broker_loss import DEFAULT_THRESHOLD_S, BrokerLossWatcher
from management_plane.service.cluster_io import zookeeper_hosts
from management_plane.service.db import Database
from management_plane.service.service import Service
from management_plane.service.steps import StepTimeouts
from management_plane.service.tenant_service import TENANT_KINDS, TenantService
from management_plane.service.tls import ensure_service_tls
from management_plane.tenants.kafka import KafkaTenants
from management_plane.tenants.quotas import UserQuotaTool
from planner.pki.client_settings import InternalClient
from planner.private_files import create_private_file, private_dir

log = structlog.get_logger("kaas.serve")

DEFAULT_LOCAL_ADDRESS_BASES = tuple(f"127.0.{n}" for n in range(2, 11))
DATABASE_FILE = "kaas.db"


@dataclass(frozen=True)
class ServeSettings:
    home: Path
    host: str = "127.0.0.1"
    port: int = 8080
    database_url: str | None = None
    """default: SQLite (WAL) at HOME/kaas.db"""
    local_address_bases: tuple[str, ...] = DEFAULT_LOCAL_ADDRESS_BASES
    poll_interval_s: float = 2.0
    run_engine: bool = True
    """False: accept and store operations without running them (API tests, maintenance)"""
    provider: str = "local"
    """local | aws"""
    aws: AwsServiceConfig | None = None
    """The aws provider's settings (kaas serve --provider aws)."""
    step_timeout_s: float | None = None
    """Cap every operation step's timeout at this (None: the per-step defaults)."""
    adopt_local_clusters: tuple[Path, ...] = ()
    """Folders of `kaas up` clusters the service manages beside its own (kaas up sets it)."""
    broker_loss_after_s: float = DEFAULT_THRESHOLD_S
    """A VM whose agent and broker are both gone this long is replaced; 0: never."""
    alert_rules_file: Path | None = None
    """The alert rules (default: management_plane/monitoring/default_rules.toml)."""
    alert_webhook_url: str | None = None
    """Where alerts go (a PagerDuty Events API v2-shaped webhook); None: recorded only."""
    alert_routing_key_file: Path | None = None
    """File holding the webhook's routing (integration) key; default: "kaas"."""
    heartbeat: bool = False
    """Run the synthetic heartbeat tenant of every running cluster with a monitoring pipeline."""


def kafka_tenants(internal: InternalClient, tenant_bootstrap: str) -> KafkaTenants:
    """The tenants adapter of one cluster; quotas go through ConfigCommand from the Kafka libs
    of the image on the service's host (docs/tenants.md)."""
    return KafkaTenants(
        internal=internal,
        tenant_bootstrap=tenant_bootstrap,
        quotas=UserQuotaTool(
            java=str(find_java()),
            kafka_libs=load_image(verify=False).kafka_libs(),
            kafka=internal,
        ),
    )


def build_service(settings: ServeSettings) -> tuple[Service, str | None]:
    home = private_dir(settings.home.resolve())
    if settings.database_url is None:
        url = f"sqlite:///{create_private_file(home / DATABASE_FILE)}"
    else:
        url = settings.database_url
    db = Database(url)
    provider: Any
    if settings.provider == "aws":
        if settings.aws is None:
            raise KaasError("--provider aws needs its settings (--aws-config or --aws-* options)")
        if settings.adopt_local_clusters:
            raise KaasError("--adopt-local-cluster works with the local provider only")
        provider = ServiceAwsProvider(
            settings.aws, _zookeeper_hosts_of(db, settings.aws), home, BootTokens(db.engine)
        )
    elif settings.provider == "local":
        provider = LocalProvider(home / "local", settings.local_address_bases)
        for cluster_home in settings.adopt_local_clusters:
            adopt_local_cluster(db, provider, cluster_home)
    else:
        raise KaasError(f"--provider must be local or aws, got {settings.provider!r}")
    service = Service(home, db, provider)
    if settings.aws is not None and settings.aws.monitoring_pipeline:
        service.pipeline = plan_service_pipeline(home, settings.aws.statsd_address)
        clash = port_clash(service.pipeline, settings.host, settings.port)
        if clash:
            raise KaasError(clash)
    if settings.step_timeout_s is not None:
        if settings.step_timeout_s <= 0:
            raise KaasError(f"--step-timeout must be positive, got {settings.step_timeout_s}")
        service.engine.timeouts = StepTimeouts.capped(settings.step_timeout_s)
    service.engine.poll_interval_s = settings.poll_interval_s
    service.tenants = TenantService(db, kafka_tenants, service.client_identity)
    service.engine.inline_kinds = TENANT_KINDS
    service.engine.resume_inline = service.tenants.resume
    if settings.broker_loss_after_s < 0:
        raise KaasError(
            f"--broker-loss-after must be 0 (off) or a number of seconds, got "
            f"{settings.broker_loss_after_s}"
        )
    if settings.broker_loss_after_s > 0:
        service.engine.watchers.append(
            BrokerLossWatcher(
                db, provider, settings.broker_loss_after_s, on_queued=service.engine.wake
            )
        )
    # The agents' own renewals before expiry, signed with no operator action.
    service.engine.watchers.append(RenewalSigner(db, provider))
    service.alerts = build_alert_loop(db, settings, provider)
    if settings.heartbeat:
        service.heartbeat = build_heartbeat_loop(db, home, provider, service.tenants)
    return service, ensure_admin_key(db, home)


def _zookeeper_hosts_of(db: Database, config: AwsServiceConfig) -> Callable[[str], str]:
    """The connect string a new aws VM's agent is given: the configured ensemble, else the
    cluster's running VMs (each of which would serve ZooKeeper on 2181)."""

    def hosts(cluster: str) -> str:
        if config.zookeeper_hosts:
            return config.zookeeper_hosts
        return zookeeper_hosts([vm["address"] for vm in db.cluster_vms(cluster)])

    return hosts


def admin_key_notice(home: Path) -> str:
    """What `kaas serve` prints at the first start: where the key is, never the key, since
    this output lands in logs and the journal."""
    return f"admin API key: made, in {home.resolve() / ADMIN_KEY_FILE} (mode 0600)"


def _exit_on_sigterm(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def serve(settings: ServeSettings) -> int:
    service, admin_key = build_service(settings)
    if admin_key is not None:
        print(admin_key_notice(settings.home), flush=True)
    unfinished = service.db.unfinished_operations()
    if unfinished:
        log.info("resuming_operations", ids=[op.op_id for op in unfinished])
    # Before the engine: an aws VM's boot ticket carries the API's CA certificate.
    identity = ensure_service_tls(settings.home.resolve(), settings.host)
    if service.pipeline is not None:
        # Before the engine too: the VMs it makes send to it from their first sample.
        targets = start_pipeline(service.pipeline)
        if threading.current_thread() is threading.main_thread():
            # uvicorn re-raises the SIGTERM it shut down on once it is done: with the default
            # action the process would die there, and the pipeline beside it outlive it.
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        print(
            f"monitoring: statsd {targets.statsd_host}:{targets.statsd_port}, "
            f"Graphite {targets.graphite_url}",
            flush=True,
        )
    if service.alerts is not None:
        service.alerts.start()
    if service.heartbeat is not None:
        service.heartbeat.start()
    if settings.run_engine:
        service.engine.start()
    else:
        log.warning("engine_paused", note="operations are stored, not run")
    print(
        f"kaas serve: listening on https://{settings.host}:{settings.port} "
        f"(certificate authority: {identity.trust_bundle})",
        flush=True,
    )
    try:
        uvicorn.run(
            create_app(service),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            ssl_certfile=str(identity.certificate),
            ssl_keyfile=str(identity.key),
        )
    finally:
        if service.pipeline is not None:
            stop_pipeline(service.pipeline)
        if service.alerts is not None:
            service.alerts.stop()
        if service.heartbeat is not None:
            service.heartbeat.stop()
        service.engine.stop()
        service.db.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(ServeSettings(home=Path(sys.argv[1]))))
