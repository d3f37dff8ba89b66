"""What the API's handlers ask of the service: validate, then queue one operation.

Nothing here touches a cluster: the engine runs the operation's steps. One unfinished
operation per cluster at a time (a second write gets 409), so operations never interleave.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from management_plane.drills.operation import DrillAsk, check_drill_request
from management_plane.errors import ApiError
from management_plane.providers.base import AdoptsClusters, ServiceProvider, client_identity
from management_plane.security.boot_tokens import BootTokens, boot_certificate
from management_plane.security.rotation_store import HoldsClusterAuthority
from management_plane.service.cluster_io import ClusterIO, bootstrap_servers
from management_plane.service.controller import Controller
from management_plane.service.db import ClusterBusy, Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    OperationKind,
    batches,
    conversion_steps,
    expand_steps,
    migration_start,
    migration_steps,
    rollback_start,
    rollback_steps,
)
from management_plane.service.validation import (
    ClusterRequest,
    ValidationError,
    check_scale_down,
    default_kafka_version,
    mode_change_refusal,
    validate_batch_size,
    validate_broker_config,
    validate_broker_count,
    validate_cluster_request,
    validate_instance_type,
    validate_kafka_version,
    validate_name,
    validated_log_limits,
    zookeeper_participants,
)
from planner.contracts.kafka_release import DEFAULT_KRAFT_QUORUM_SIZE, KafkaMode
from planner.contracts.kraft_migration import (
    MigrationPhase,
    migration_refusal,
    rollback_refusal,
)
from planner.contracts.spec import ClusterSpec, parse_spec
from planner.contracts.transport_security import conversion_refusal, conversion_start
from planner.pki.authority import Authority, PkiError
from planner.pki.client_settings import client_files
from planner.pki.files import IdentityFiles

if TYPE_CHECKING:
    from management_plane.monitoring.alert_loop import AlertLoop
    from management_plane.monitoring.heartbeat_loop import HeartbeatLoop
    from management_plane.monitoring.pipeline import PipelineLayout
    from management_plane.service.tenant_service import TenantService


class Service:
    def __init__(
        self, home: Path, db: Database, provider: ServiceProvider, engine: Engine | None = None
    ) -> None:
        self.home = home
        self.db = db
        self.provider = provider
        self.engine = engine or Engine(db, Controller(db, provider))
        self.tenants: TenantService | None = None  # set by build_service
        self.alerts: AlertLoop | None = None  # set by build_service
        self.heartbeat: HeartbeatLoop | None = None  # set by build_service (--heartbeat)
        self.pipeline: PipelineLayout | None = None
        """The monitoring pipeline `kaas serve` runs beside itself (the aws provider's): every
        cluster created names it in its spec."""
        self.boot_tokens = BootTokens(db.engine)

    # -- helpers --------------------------------------------------------------------------

    def _cluster(self, name: str) -> dict[str, Any]:
        validate_name(name)
        row = self.db.cluster(name)
        if row is None or row["status"] == "deleted":
            raise ApiError(404, "not_found", f"no cluster named {name}")
        return row

    def _idle(self, name: str) -> None:
        """Refuse early, before anything is validated against the cluster's state. The
        database's own check at the insert (ClusterBusy) is what makes it hold under
        concurrent requests."""
        busy = [op for op in self.db.list_operations(name, 20) if op.unfinished]
        if busy:
            raise ClusterBusy(name, busy[-1])

    def _queue(
        self,
        cluster: str,
        kind: str,
        params: dict[str, Any],
        caller: str,
        batch_count: int = 0,
        context: dict[str, Any] | None = None,
    ) -> OperationRow:
        op = self.db.add_operation(
            cluster, kind, params, expand_steps(kind, batch_count), caller, context
        )
        self.engine.wake()
        return op

    def client_identity(self, cluster: str) -> IdentityFiles | None:
        return client_identity(self.provider, cluster)

    def _client_files(self, cluster: str) -> dict[str, str] | None:
        identity = self.client_identity(cluster)
        return None if identity is None else client_files(identity)

    def cluster_view(self, name: str) -> dict[str, Any]:
        row = self._cluster(name)
        vms = self.db.cluster_vms(name)
        return {
            "name": row["name"],
            "status": row["status"],
            "provider": row["provider"],
            "instance_type": row["instance_type"],
            "spec": json.loads(row["spec"]),
            "bootstrap_servers": bootstrap_servers([v["address"] for v in vms]),
            "client": self._client_files(name),
            "vms": [
                {
                    k: v[k]
                    for k in (
                        "vm_id",
                        "zone",
                        "address",
                        "instance_type",
                        "kafka_version",
                        "broker_id",
                        "state",
                    )
                }
                for v in vms
            ],
        }

    def plan_status(self, name: str) -> dict[str, Any]:
        """The cluster's stored plan and, while it runs, its data movement (bytes moved and
        to move, rate, time left), read from its ZooKeeper."""
        self._cluster(name)
        addresses = [v["address"] for v in self.db.cluster_vms(name)]
        return (
            ClusterIO(name, addresses, client_identity(self.provider, name)).plan_status().to_json()
        )

    def _resolve_vm(self, cluster: str, vm_id: str) -> dict[str, Any]:
        for vm in self.db.cluster_vms(cluster):
            if vm["vm_id"] == vm_id or vm["vm_id"].rsplit("/", 1)[-1] == vm_id:
                return vm
        raise ApiError(404, "not_found", f"cluster {cluster} has no running VM {vm_id!r}")

    # -- operations -----------------------------------------------------------------------

    def create_cluster(self, body: dict[str, Any], caller: str) -> OperationRow:
        versions = self.provider.kafka_versions()
        request = validate_cluster_request(
            ClusterRequest(
                name=body["name"],
                broker_count=body["broker_count"],
                zones=tuple(body["zones"] or self.provider.zones),
                instance_type=body["instance_type"] or self.provider.instance_types[0],
                kafka_version=body["kafka_version"] or default_kafka_version(versions),
                broker_config=body["broker_config"],
                kraft_controllers=body.get("kraft_controllers"),
            ),
            versions,
            tuple(self.provider.zones),
            tuple(self.provider.instance_types),
        )
        validate_batch_size(body["batch_size"])
        given = {k: v for k, v in (body.get("logs") or {}).items() if v is not None}
        logs = validated_log_limits(given) if given else None
        existing = self.db.cluster(request.name)
        if existing is not None and existing["status"] != "deleted":
            raise ApiError(409, "exists", f"cluster {request.name} exists already")
        if existing is not None:
            raise ApiError(
                409,
                "exists",
                f"the name {request.name} belonged to a deleted cluster; pick another",
            )
        spec = ClusterSpec(
            cluster=request.name,
            kafka_version=request.kafka_version,
            broker_count=request.broker_count,
            zones=request.zones,
            zookeeper_participants=zookeeper_participants(request.broker_count),
            broker_config=request.broker_config,
            logs=logs,
            # Stored for KRaft versions only (ZooKeeper mode's spec has no "kraft" value).
            kraft_controllers=request.kraft_controllers or DEFAULT_KRAFT_QUORUM_SIZE,
            monitoring=self.pipeline.targets() if self.pipeline is not None else None,
        )
        try:
            self.db.add_cluster(
                request.name,
                self.provider.name,
                request.instance_type,
                json.dumps(spec.to_json(), sort_keys=True),
            )
        except IntegrityError:  # another request made it between the check and here
            raise ApiError(409, "exists", f"cluster {request.name} exists already") from None
        params = {
            "name": request.name,
            "broker_count": request.broker_count,
            "zones": list(request.zones),
            "instance_type": request.instance_type,
            "kafka_version": request.kafka_version,
            "broker_config": request.broker_config,
            "kraft_controllers": request.kraft_controllers,
        }
        return self._queue(request.name, "create_cluster", params, caller)

    def replace_vm(self, name: str, vm_id: str, caller: str) -> OperationRow:
        self._cluster(name)
        vm = self._resolve_vm(name, vm_id)
        self._idle(name)
        if vm["broker_id"] is None:
            raise ApiError(
                409, "not_ready", f"{vm['vm_id']} has no broker yet; wait for it to join"
            )
        return self._queue(
            name,
            "replace_vm",
            {"vm_id": vm["vm_id"]},
            caller,
            batch_count=1,
            context={"batches": [[vm["vm_id"]]]},
        )

    def replace_all(
        self, name: str, kind: str, change: dict[str, str], batch_size: int, caller: str
    ) -> OperationRow:
        row = self._cluster(name)
        validate_batch_size(batch_size)
        spec = parse_spec(row["spec"])
        if kind == "upgrade":
            version = validate_kafka_version(
                change["kafka_version"], self.provider.kafka_versions()
            )
            refusal = mode_change_refusal(spec, version)
            if refusal:
                raise ApiError(409, "mode_change", f"cluster {name}: {refusal}")
            stale = [v["vm_id"] for v in self.db.cluster_vms(name) if v["kafka_version"] != version]
            spec_changes: dict[str, Any] = {"kafka_version": version}
            if spec.migration is not None and spec.kafka_mode is KafkaMode.KRAFT:
                # A finalised migration on 4.x is a KRaft cluster like any other: the quorum
                # keeps its size, the migration's record goes (4.x has no migration mode).
                spec_changes["migration"] = None
                spec_changes["kraft_controllers"] = len(spec.migration.voters)
            if spec.kafka_version == version and not stale:
                raise ApiError(409, "no_change", f"cluster {name} runs Kafka {version} already")
        else:
            wanted = validate_instance_type(
                change["instance_type"], tuple(self.provider.instance_types)
            )
            stale = [v["vm_id"] for v in self.db.cluster_vms(name) if v["instance_type"] != wanted]
            spec_changes = {}
            if not stale:
                raise ApiError(409, "no_change", f"every VM of {name} is {wanted} already")
        self._idle(name)
        groups = batches(stale, batch_size)
        return self._queue(
            name,
            kind,
            {**change, "spec_changes": spec_changes, "batch_size": batch_size},
            caller,
            batch_count=len(groups),
            context={"batches": groups},
        )

    def scale(self, name: str, broker_count: int, batch_size: int, caller: str) -> OperationRow:
        row = self._cluster(name)
        validate_broker_count(broker_count)
        validate_batch_size(batch_size)
        spec = parse_spec(row["spec"])
        vms = self.db.cluster_vms(name)
        current = len(vms)
        if broker_count == current:
            raise ApiError(409, "no_change", f"cluster {name} has {current} brokers already")
        if spec.kafka_mode is KafkaMode.KRAFT and broker_count < spec.kraft_controllers:
            raise ValidationError(
                f"broker_count {broker_count} is below the controller quorum's size "
                f"{spec.kraft_controllers}: every controller runs on a VM of its own"
            )
        changes = {
            "broker_count": broker_count,
            "zookeeper_participants": zookeeper_participants(broker_count),
        }
        if broker_count > current:
            self._idle(name)
            return self._queue(
                name,
                "scale_up",
                {"add": broker_count - current, "spec_changes": changes},
                caller,
                context={"batches": [[]]},
            )
        check_scale_down(current, broker_count, spec.broker_config)
        # The newest VMs go first; the broker set the planner balances shrinks from the top.
        leaving = [v["vm_id"] for v in sorted(vms, key=lambda v: -(v["broker_id"] or 0))][
            : current - broker_count
        ]
        self._idle(name)
        groups = batches(leaving, batch_size)
        return self._queue(
            name,
            "scale_down",
            {"remove": leaving, "spec_changes": changes, "batch_size": batch_size},
            caller,
            batch_count=len(groups),
            context={"batches": groups},
        )

    def change_logs(self, name: str, logs: dict[str, Any], caller: str) -> OperationRow:
        """Queue new log file bounds (spec.logs; a bound not given keeps its value): the agents'
        own logs take them at once, Kafka's and ZooKeeper's on VMs made after the change.
        Refused, nothing queued, when a bound is out of range."""
        current = parse_spec(self._cluster(name)["spec"]).log_limits
        if not logs:
            raise ValidationError("logs must name max_file_mb, files or both")
        limits = validated_log_limits(logs, current)
        self._idle(name)
        return self._queue(
            name, "change_config", {"spec_changes": {"logs": limits.to_json()}}, caller
        )

    def change_config(self, name: str, config: dict[str, str | None], caller: str) -> OperationRow:
        row = self._cluster(name)
        spec = parse_spec(row["spec"])
        if not config:
            raise ValidationError("broker_config must name at least one config")
        merged = dict(spec.broker_config)
        for key, value in config.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        clean = validate_broker_config(merged, spec.broker_count)
        self._idle(name)
        return self._queue(
            name, "change_config", {"spec_changes": {"broker_config": clean}}, caller
        )

    def migrate_to_kraft(
        self, name: str, caller: str, rollback: bool = False, finalize: bool = True
    ) -> OperationRow:
        """Queue the migration of a 3.9 ZooKeeper-mode cluster to KRaft, or the rollback of
        an unfinalised one; refused (nothing stored) when the cluster's spec cannot take it."""
        spec = parse_spec(self._cluster(name)["spec"])
        if rollback:
            refusal = rollback_refusal(spec.migration)
            if refusal:
                raise ApiError(409, "not_migrating", f"cluster {name}: {refusal}")
            assert spec.migration is not None
            first = rollback_start(spec.migration.phase)
            kind, steps = OperationKind.ROLLBACK_KRAFT_MIGRATION, rollback_steps(first)
        else:
            refusal = migration_refusal(spec.kafka_version, spec.migration)
            if refusal:
                raise ApiError(409, "not_migratable", f"cluster {name}: {refusal}")
            phase = spec.migration.phase if spec.migration else None
            if phase is MigrationPhase.BROKERS_KRAFT and not finalize:
                raise ApiError(
                    409, "no_change", f"cluster {name} is migrated up to its finalisation already"
                )
            kind = OperationKind.MIGRATE_TO_KRAFT
            steps = migration_steps(migration_start(phase), finalize)
        self._idle(name)
        op = self.db.add_operation(name, kind, {"finalize": finalize}, steps, caller)
        self.engine.wake()
        return op

    def secure_cluster(self, name: str, caller: str) -> OperationRow:
        """Queue the rolling conversion of a pre-TLS cluster to TLS on every channel; a
        conversion stopped in a phase resumes there. Refused (nothing stored) for a cluster
        that runs TLS already, and while another operation runs (a conversion among them)."""
        spec = parse_spec(self._cluster(name)["spec"])
        refusal = conversion_refusal(spec.transport_security)
        if refusal:
            raise ApiError(409, "already_secure", f"cluster {name}: {refusal}")
        self._idle(name)
        steps = conversion_steps(conversion_start(spec.transport_security))
        op = self.db.add_operation(
            name,
            OperationKind.SECURE_CLUSTER,
            {"from": spec.transport_security.value},
            steps,
            caller,
        )
        self.engine.wake()
        return op

    def rotate_certs(self, name: str, ca: bool, caller: str) -> OperationRow:
        self._cluster(name)
        if not isinstance(self.provider, HoldsClusterAuthority):
            raise ApiError(
                409, "no_authority", f"the {self.provider.name} provider keeps no CA to rotate"
            )
        self._idle(name)
        kind = OperationKind.ROTATE_CA if ca else OperationKind.ROTATE_CERTS
        return self._queue(name, kind, {"ca": ca}, caller)

    def boot_identity(self, token: str, public_key_pem: str, hosts: list[str]) -> tuple[str, str]:
        """Redeem a VM's boot token for a certificate of its public key (PEM)."""

        def authority_of(cluster: str) -> Authority | None:
            if not isinstance(self.provider, HoldsClusterAuthority):
                return None
            try:
                return self.provider.cluster_authority(cluster)
            except PkiError:
                return None

        certificate, bundle = boot_certificate(
            self.boot_tokens,
            authority_of,
            token,
            public_key_pem,
            tuple(hosts),
            dt.datetime.now(dt.UTC),
        )
        return certificate.decode(), bundle.decode()

    def delete_cluster(self, name: str, caller: str) -> OperationRow:
        self._cluster(name)
        if isinstance(self.provider, AdoptsClusters) and name in self.provider.adopted:
            raise ApiError(
                409,
                "adopted",
                f"cluster {name} was started by `kaas up`; stop it with `kaas down`",
            )
        self._idle(name)
        op = self.db.add_operation(
            name, OperationKind.DELETE_CLUSTER, {}, expand_steps("delete_cluster"), caller
        )
        # Marked only once the operation is in (a refused request changes nothing), and
        # before the engine is woken (its last step marks the cluster deleted).
        self.db.update_cluster(name, status="deleting")
        self.engine.wake()
        return op

    def run_drill(self, name: str, ask: DrillAsk, caller: str) -> OperationRow:
        """A chaos drill against the cluster under load, as an operation; refused before
        anything is touched when it cannot run (management_plane/drills/operation.py)."""
        self._cluster(name)
        self._idle(name)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        report_dir = self.home / "drills" / name / f"{stamp}-{ask.drill}"
        request = check_drill_request(ask, name, self.provider, report_dir)
        return self._queue(name, OperationKind.RUN_DRILL, request.to_params(), caller)
