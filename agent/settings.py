"""The agent's settings: one JSON file, every field documented, defaults for the optional ones.

`kaas-agent --validate-config FILE` checks a file without starting anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agent.errors import AgentError
from planner.contracts.paths import validate_cluster_name
from planner.contracts.vm_config import SizingError, SizingProfile, sizing_profile
from planner.pki.authority import Role
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles


class SettingsError(AgentError, ValueError):
    """A settings file the agent refuses; the message names the field."""


@dataclass(frozen=True)
class AgentSettings:
    # -- required: who and where this VM is -------------------------------------------------
    cluster: str
    """Cluster name: the agent works under /kaas/<cluster> and Kafka under /kafka/<cluster>."""
    zookeeper_hosts: str
    """host:port list of the cluster's ZooKeeper ensemble, without a chroot."""
    vm_id: str
    """This VM's identity (EC2 instance id; local: the VM name)."""
    address: str
    """The address the broker listens on and advertises."""
    zone: str
    """Availability zone; becomes broker.rack."""
    data_dir: Path
    """The broker's log dir, on the VM's data volume."""
    config_dir: Path
    """Where the agent writes server.properties."""

    # -- optional ---------------------------------------------------------------------------
    kafka_port: int = 9092
    """The internal listener, mutual TLS (inter-broker, agents, management plane, tools)."""
    kafka_tenant_port: int = 9094
    """The tenants' SASL_SSL (SCRAM-SHA-512) listener."""
    jolokia_port: int = 8778
    supervisor: str = "local"
    """How the broker process is controlled: "systemd" (unit kaas-kafka) or "local" (a child JVM)."""
    image_root: Path = Path("/")
    """Root of the VM image (holds opt/kaas/image.json); "/" on a real VM."""
    java: str = "java"
    kafka_heap: str = "-Xms512m -Xmx512m"
    host_sizing: SizingProfile = SizingProfile.STANDARD
    """Threads, internal topics' partitions and retention in server.properties: "standard"
    (Kafka's own defaults, a host per broker) or "local" (the local provider's shared cores)."""
    tls_dir: Path = Path("/etc/kaas/tls")
    """This VM's identity (planner.pki.files: ca.pem, node.key, node.crt, node.pem): what the
    agent presents to ZooKeeper, Jolokia and the internal Kafka listener, and what the broker
    and the ZooKeeper server present."""
    identity_owner: str | None = None
    """The user the VM's Kafka and ZooKeeper run as when it is not the agent's (systemd units:
    kafka, the agent root): tls_dir and its files are handed to them after every write, so the
    JVMs can read their keys; None: the agent's own user (local VMs)."""
    boot_ticket: Path | None = None
    """A boot ticket file (planner.contracts.boot_ticket): at first start, with no identity in
    tls_dir yet, the agent redeems it at the management API for its certificate, then deletes
    it. None: the provider wrote the identity itself (local VMs)."""
    boot_timeout_s: float = 600.0
    """How long the first start keeps trying to reach the management API with the ticket."""
    logs_dir: Path = Path("/var/log/kaas")
    broker_log_config: Path | None = None
    """The ZooKeeper-mode broker's Log4j file, kept at the spec's log bounds (Kafka 4's Log4j 2
    file is config_dir's); None: the agent leaves it alone."""
    zookeeper_log_config: Path | None = None
    """The ZooKeeper server's logback file, kept at the spec's log bounds; None: left alone."""
    state_dir: Path | None = None
    """Where the agent keeps local state (the broker's pid file); default: the data dir's parent."""
    loop_interval_s: float = 5.0
    """Seconds between cycles when no ZooKeeper watch wakes the loop earlier."""
    spare_broker_ids: int = 2
    """Ids above spec.broker_count-1 a VM may claim while another VM is being replaced."""
    preferred_broker_id: int | None = None
    """The id to claim when the data volume records none, if it is free: the management plane
    sets it on the VM that replaces a lost one whose volume is gone, so the id is kept."""
    broker_unresponsive_s: float = 30.0
    """A live broker failing every metadata and JMX read this long is restarted."""
    broker_start_timeout_s: float = 180.0
    """After a start, how long the broker has to answer a metadata request before the start
    is reported as failed (and the restart lock released)."""
    broker_stop_timeout_s: float = 120.0
    """How long Kafka's controlled shutdown may take before the process is killed."""
    restart_lock_poll_s: float = 5.0
    """While another broker holds the restart lock, how often the holder is looked up again
    for the progress line."""
    isr_stable_checks: int = 3
    """Consecutive checks with 0 under-replicated partitions before the restart lock is released."""
    isr_check_interval_s: float = 2.0
    isr_complete_timeout_s: float = 300.0
    """After a start, how long the lock is kept while ISRs are incomplete; then the restart
    is reported as "broker up, ISR still incomplete" and the lock released."""
    reassignment_stall_s: float = 600.0
    """A reassignment with no progress this long triggers a controller re-election."""
    plan_interval_s: float = 10.0
    """How often the elected planner's agent looks at the plan while none runs."""
    reassignment_poll_s: float = 2.0
    """While a plan runs, how often its moves are looked at (a finished move's slot goes to
    the next one at that look)."""
    reassignment_concurrency: int = 10
    """Partition moves copying data at once, cluster-wide, at most; the executor backs off
    from it while a partition is at its min ISR or a request queue is long."""
    request_queue_busy: int = 50
    """A broker's request queue longer than this makes the executor back off."""
    replan_interval_s: float = 300.0
    """How often it plans again with nothing changed (a broker or spec change plans at once)."""
    measured_load_max_age_s: float = 3600.0
    """The measured load (`/kaas/<cluster>/load`) older than this is not used for the traffic
    goals: the planner falls back to sizes."""
    zookeeper_server_id: int | None = None
    """This VM's ZooKeeper server id (myid); None: the VM runs no ZooKeeper server."""
    zookeeper_peer_port: int = 2888
    zookeeper_election_port: int = 3888
    zookeeper_client_port: int = 2181
    """ZooKeeper's secure client port (TLS, the VM's certificate)."""
    zookeeper_gone_s: float = 60.0
    """A participant unreachable this long is removed from the ensemble by reconfig."""
    zookeeper_probe_interval_s: float = 10.0
    """How often the membership check looks again at a server it last saw serving (a TLS
    connection per server and look); one not serving is looked at every cycle."""
    controller_bootstrap: str | None = None
    """host:port list of the KRaft controllers (controller.quorum.bootstrap.servers). Set: the
    cluster runs Kafka 4.x in KRaft mode, and the agent reads brokers through the Admin API
    instead of Kafka's ZooKeeper paths (which a KRaft cluster has none of)."""
    controller_port: int | None = None
    """This VM's KRaft controller listener; None: the VM runs no controller."""
    controller_data_dir: Path | None = None
    """The controller's metadata log dir (formatted before its first start)."""
    controller_heap: str = "-Xms192m -Xmx192m"
    controller_jolokia_port: int = 8779
    """The controller's own Jolokia (HTTPS, the nodes' certificates), for the controller-only
    metrics the broker does not have."""
    quorum_check_interval_s: float = 10.0
    """How often the controller quorum is described (two short JVM runs of Kafka's tool) and
    at most one voter change made."""
    quorum_steady_check_interval_s: float = 45.0
    """The wait after a look that found every voter the spec wants caught up and nothing to
    change: the looks' JVMs cost a share of a small VM's cores."""
    controller_gone_s: float = 60.0
    """A voter not caught up this long is removed from the quorum, if a majority stays."""
    controller_caught_up_ms: int = 5000
    """An observer (or voter) caught up with the leader this recently counts as caught up."""
    certificate_renewal_days: float = 30.0
    """The agent asks for a new certificate this many days before its own expires."""
    statsd_host: str | None = None
    statsd_port: int = 8125
    metrics_topic: str = "_kaas_metrics"
    metrics_interval_s: float = 30.0
    logs_topic: str = "_kaas_logs"
    log_poll_s: float = 2.0
    """How often the VM's Kafka, controller and ZooKeeper log files are looked at for new
    entries of the error classes (to `logs_topic`)."""
    mirror_rest_port: int = 8083
    """MirrorMaker 2's internal REST server (mutual TLS), on the VM's address."""
    mirror_heap: str = "-Xms256m -Xmx512m"

    @property
    def kraft(self) -> bool:
        return self.controller_bootstrap is not None

    @property
    def runs_controller(self) -> bool:
        return self.kraft and self.controller_port is not None

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{self.kafka_port}"

    @property
    def identity(self) -> IdentityFiles:
        """The VM's identity: ZooKeeper's super user, so the agent may reconfigure, and a
        super user of the internal Kafka listener."""
        return IdentityFiles(self.tls_dir, Role.NODE, self.identity_owner)

    @property
    def kafka_client(self) -> InternalClient:
        """This VM's broker on the internal listener, as the VM's node identity."""
        return InternalClient(self.bootstrap, self.identity)

    @property
    def jolokia_url(self) -> str:
        return f"https://{self.address}:{self.jolokia_port}/jolokia/"

    @property
    def controller_jolokia_url(self) -> str | None:
        """The VM's KRaft controller's Jolokia; None when the VM runs no controller."""
        if not self.runs_controller:
            return None
        return f"https://{self.address}:{self.controller_jolokia_port}/jolokia/"

    @property
    def local_state_dir(self) -> Path:
        return self.state_dir or self.data_dir.parent


_REQUIRED = ("cluster", "zookeeper_hosts", "vm_id", "address", "zone", "data_dir", "config_dir")


def parse_settings(value: object, source: str = "settings") -> AgentSettings:
    if not isinstance(value, dict):
        raise SettingsError(f"{source}: must be a JSON object")
    known = {f.name: f for f in fields(AgentSettings)}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise SettingsError(f"{source}: unknown setting(s) {', '.join(unknown)}")
    missing = [name for name in _REQUIRED if name not in value]
    if missing:
        raise SettingsError(f"{source}: missing required setting(s) {', '.join(missing)}")
    converted = {
        name: _convert(name, known[name].type, item, source) for name, item in value.items()
    }
    try:
        validate_cluster_name(converted["cluster"])
    except ValueError as exc:
        raise SettingsError(f"{source}: {exc}") from None
    if converted.get("supervisor", "local") not in ("local", "systemd"):
        raise SettingsError(
            f'{source}: supervisor must be "local" or "systemd", got {converted["supervisor"]!r}'
        )
    for port in (
        "kafka_port",
        "kafka_tenant_port",
        "jolokia_port",
        "controller_jolokia_port",
        "statsd_port",
        "controller_port",
    ):
        if converted.get(port) is not None and not 0 < converted[port] < 65536:
            raise SettingsError(f"{source}: {port} must be 1-65535, got {converted[port]}")
    if converted.get("controller_port") is not None and (
        converted.get("controller_bootstrap") is None
        or converted.get("controller_data_dir") is None
    ):
        raise SettingsError(
            f"{source}: controller_port needs controller_bootstrap and controller_data_dir"
        )
    return AgentSettings(**converted)


def _convert(name: str, annotation: object, item: object, source: str) -> Any:
    """Check one value against its field's annotation (a string: annotations are postponed)."""
    optional = str(annotation).endswith("| None")
    kind = str(annotation).removesuffix(" | None")
    if item is None and optional:
        return None
    if kind == "Path":
        if not isinstance(item, str) or not item:
            raise SettingsError(f"{source}: {name} must be a path string, got {item!r}")
        return Path(item)
    if kind == "SizingProfile":
        try:
            return sizing_profile(item if isinstance(item, str) else repr(item))
        except SizingError as exc:
            raise SettingsError(f"{source}: {name}: {exc}") from None
    if kind == "int":
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise SettingsError(f"{source}: {name} must be a non-negative integer, got {item!r}")
        return item
    if kind == "float":
        if not isinstance(item, (int, float)) or isinstance(item, bool) or item <= 0:
            raise SettingsError(f"{source}: {name} must be a positive number, got {item!r}")
        return float(item)
    if not isinstance(item, str) or not item:
        raise SettingsError(f"{source}: {name} must be a non-empty string, got {item!r}")
    return item


def load_settings(path: Path) -> AgentSettings:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SettingsError(f"{path}: not valid JSON ({exc})") from None
    return parse_settings(value, str(path))


def settings_to_json(settings: AgentSettings) -> dict[str, Any]:
    return {
        f.name: (
            str(getattr(settings, f.name))
            if isinstance(getattr(settings, f.name), Path)
            else getattr(settings, f.name)
        )
        for f in fields(AgentSettings)
    }
