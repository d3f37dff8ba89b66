"""The local monitoring pipeline: Etsy statsd -> carbon (whisper) -> graphite-web's render API.

`kaas up` starts it beside a cluster with agents, before the agents, so their first samples
land; `kaas down` stops it. It listens on its own loopback address of the cluster's range
(`<base>.253`, above every VM index), each daemon on its standard port, as a monitoring
host would. `kaas serve --provider aws` runs the same daemons beside the service, on the
service host's address the VMs reach (`plan_service_pipeline`), for every cluster it makes. Its processes are known by (pid, start time), recorded in
`<home>/monitoring/pipeline.json`, never by name.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import structlog

from management_plane.errors import KaasError
from management_plane.local.image import REPO_ROOT
from management_plane.local.probes import port_bindable
from management_plane.local.processes import (
    ProcessRecord,
    is_alive,
    resident_bytes,
    start_process,
    stop_session,
)
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.vm_config.monitoring import (
    MonitoringHost,
    render_carbon_conf,
    render_graphite_web_settings,
    render_statsd_config,
    render_storage_aggregation,
    render_storage_schemas,
)
from planner.private_files import write_private

log = structlog.get_logger("kaas.monitoring")

MONITORING_DIR = "monitoring"
STATE_FILE = "pipeline.json"
HOST_INDEX = 253  # the monitoring host's last octet: VMs use 1..250
SETTINGS_MODULE = "kaas_graphite_settings"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
DEFAULT_STATSD_DIR = REPO_ROOT / "build" / "monitoring" / "statsd" / "node_modules" / "statsd"
# Debian's graphite-carbon, graphite-web and gunicorn run on Debian's own Python.
SYSTEM_PYTHON = "/usr/bin/python3"
CARBON_CACHE = "/usr/bin/carbon-cache"
GUNICORN = "/usr/bin/gunicorn"


class Daemon(Enum):
    STATSD = "statsd"
    CARBON = "carbon"
    RENDER = "render"


@dataclass(frozen=True)
class PipelineLayout:
    home: Path  # <cluster home>/monitoring
    host: MonitoringHost

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf"

    @property
    def graphite_url(self) -> str:
        return f"http://{self.host.address}:{self.host.render_port}"

    def targets(self) -> MonitoringTargets:
        return MonitoringTargets(self.host.address, self.host.statsd_port, self.graphite_url)


def plan_pipeline(cluster_home: Path, address_base: str) -> PipelineLayout:
    return _layout(cluster_home.resolve() / MONITORING_DIR, f"{address_base}.{HOST_INDEX}")


def plan_service_pipeline(service_home: Path, address: str) -> PipelineLayout:
    """The pipeline beside `kaas serve` (the aws provider's VMs send to `address`)."""
    return _layout(service_home.resolve() / MONITORING_DIR, address)


def port_clash(layout: PipelineLayout, host: str, port: int) -> str | None:
    """Why a server on host:port (the service's API) would take a port the pipeline needs on
    its address, or None. Pure."""
    ports = _ports(layout)  # TCP; statsd's own port is UDP
    if host not in ("0.0.0.0", "::", layout.host.address):
        return None
    for role, used in ports.items():
        if used == port:
            return (
                f"the API's {host}:{port} would take the monitoring {role} port on "
                f"{layout.host.address}: serve the API on another port"
            )
    return None


def _layout(home: Path, address: str) -> PipelineLayout:
    host = MonitoringHost(
        address=address,
        statsd_port=8125,
        statsd_admin_port=8126,
        carbon_line_port=2003,
        carbon_pickle_port=2004,
        carbon_query_port=7002,
        render_port=8080,
        storage_dir=str(home / "storage"),
        log_dir=str(home / "logs"),
    )
    return PipelineLayout(home, host)


def statsd_dir() -> Path:
    return Path(os.environ.get("KAAS_STATSD_DIR", str(DEFAULT_STATSD_DIR)))


def missing_tools() -> list[str]:
    """What `make setup` should have installed and did not."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node (Node.js)")
    if not (statsd_dir() / "stats.js").is_file():
        missing.append(f"Etsy statsd at {statsd_dir()}")
    for tool in (CARBON_CACHE, GUNICORN, SYSTEM_PYTHON):
        if not Path(tool).is_file():
            missing.append(tool)
    return missing


def _ports(layout: PipelineLayout) -> dict[str, int]:
    h = layout.host
    return {
        "statsd_admin": h.statsd_admin_port,
        "carbon_line": h.carbon_line_port,
        "carbon_pickle": h.carbon_pickle_port,
        "carbon_query": h.carbon_query_port,
        "render": h.render_port,
    }


def _write_files(layout: PipelineLayout) -> None:
    for folder in (layout.conf_dir, Path(layout.host.storage_dir) / "conf", layout.host.log_dir):
        Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(layout.host.storage_dir) / "whisper").mkdir(parents=True, exist_ok=True)
    carbon_conf_dir = Path(layout.host.storage_dir) / "conf"
    (layout.conf_dir / "statsd.json").write_text(render_statsd_config(layout.host))
    (layout.conf_dir / "carbon.conf").write_text(render_carbon_conf(layout.host))
    (carbon_conf_dir / "storage-schemas.conf").write_text(render_storage_schemas())
    (carbon_conf_dir / "storage-aggregation.conf").write_text(render_storage_aggregation())
    settings = layout.conf_dir / f"{SETTINGS_MODULE}.py"
    # The Django secret key: 0600 from creation, made once.
    key_file = layout.conf_dir / "graphite-secret-key"
    if not key_file.exists():
        write_private(key_file, secrets.token_urlsafe(32))
    write_private(settings, render_graphite_web_settings(layout.host, key_file.read_text().strip()))


def _graphite_env(layout: PipelineLayout) -> list[str]:
    return [
        "/usr/bin/env",
        f"PYTHONPATH={layout.conf_dir}",
        f"GRAPHITE_SETTINGS_MODULE={SETTINGS_MODULE}",
        "DJANGO_SETTINGS_MODULE=graphite.settings",
        # Twisted's deprecation warnings and Django's checks go to the log file only.
        "PYTHONWARNINGS=ignore",
    ]


def commands(layout: PipelineLayout) -> dict[Daemon, list[str]]:
    node = shutil.which("node") or "node"
    h = layout.host
    return {
        Daemon.STATSD: [
            node,
            str(statsd_dir() / "stats.js"),
            str(layout.conf_dir / "statsd.json"),
        ],
        Daemon.CARBON: [
            *_graphite_env(layout),
            SYSTEM_PYTHON,
            CARBON_CACHE,
            f"--config={layout.conf_dir / 'carbon.conf'}",
            "--nodaemon",
            "start",
        ],
        Daemon.RENDER: [
            *_graphite_env(layout),
            SYSTEM_PYTHON,
            GUNICORN,
            "--bind",
            f"{h.address}:{h.render_port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "graphite.wsgi:application",
        ],
    }


def pipeline_records(layout: PipelineLayout) -> dict[Daemon, ProcessRecord]:
    try:
        value = json.loads((layout.home / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    records = {}
    for daemon in Daemon:
        item = value.get(daemon.value)
        if isinstance(item, dict):
            records[daemon] = ProcessRecord.from_json(item)
    return records


def _write_records(layout: PipelineLayout, records: dict[Daemon, ProcessRecord]) -> None:
    layout.home.mkdir(parents=True, exist_ok=True)
    path = layout.home / STATE_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({d.value: r.to_json() for d, r in records.items()}) + "\n")
    os.replace(temporary, path)


def _render_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(
            f"{url}/render?target=kaas&format=json&from=-1min", timeout=2.0
        ) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _statsd_healthy(layout: PipelineLayout) -> bool:
    import socket

    try:
        with socket.create_connection(
            (layout.host.address, layout.host.statsd_admin_port), timeout=2.0
        ) as admin:
            admin.sendall(b"health\n")
            return b"up" in admin.recv(64)
    except OSError:
        return False


def _carbon_listens(layout: PipelineLayout) -> bool:
    return not port_bindable(layout.host.address, layout.host.carbon_line_port)


def _wait(what: str, check: Callable[[], bool], alive: Callable[[], bool], log_file: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if check():
            return
        if not alive():
            raise KaasError(f"the monitoring {what} exited during start-up: see {log_file}")
        time.sleep(0.3)
    raise KaasError(f"timed out after {READY_TIMEOUT_S:.0f}s waiting for {what}: see {log_file}")


def start_pipeline(layout: PipelineLayout) -> MonitoringTargets:
    """Start whatever of the three daemons is not running; returns where the agents send and
    where the render API answers. Everything it started is stopped again on a failure."""
    missing = missing_tools()
    if missing:
        raise KaasError(f"the monitoring pipeline needs {', '.join(missing)}: run `make setup`")
    records = pipeline_records(layout)
    running = {d for d, r in records.items() if is_alive(r)}
    if running == set(Daemon):
        return layout.targets()
    stop_pipeline(layout)
    for role, port in _ports(layout).items():
        if not port_bindable(layout.host.address, port):
            raise KaasError(
                f"address {layout.host.address}:{port} (monitoring {role}) is already in use"
            )
    _write_files(layout)
    logs = Path(layout.host.log_dir)
    started: dict[Daemon, ProcessRecord] = {}
    cmd = commands(layout)
    try:
        migrate = subprocess.run(
            [*_graphite_env(layout), SYSTEM_PYTHON, "-m", "django", "migrate", "-v0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if migrate.returncode != 0:
            (logs / "graphite-migrate.log").write_text(migrate.stdout + migrate.stderr)
            raise KaasError(
                f"graphite-web's database could not be made: see {logs / 'graphite-migrate.log'}"
            )
        for daemon, check in (
            (Daemon.CARBON, lambda: _carbon_listens(layout)),
            (Daemon.STATSD, lambda: _statsd_healthy(layout)),
            (Daemon.RENDER, lambda: _render_answers(layout.graphite_url)),
        ):
            log_file = logs / f"{daemon.value}.log"
            cwd = statsd_dir() if daemon is Daemon.STATSD else layout.home
            record = start_process(cmd[daemon], log_file, cwd)
            started[daemon] = record
            _write_records(layout, started)
            _wait(daemon.value, check, lambda r=record: is_alive(r), log_file)  # type: ignore[misc]
    except BaseException:
        stop_pipeline(layout)
        raise
    log.info("monitoring_started", statsd=layout.host.statsd_port, graphite=layout.graphite_url)
    return layout.targets()


def stop_pipeline(layout: PipelineLayout) -> None:
    records = pipeline_records(layout)
    # statsd first (its last flush reaches carbon), then carbon (writes its cache), then the
    # render API.
    for daemon in (Daemon.STATSD, Daemon.CARBON, Daemon.RENDER):
        # The whole session: a render API whose master was killed leaves its worker behind.
        stop_session(records.get(daemon), STOP_TIMEOUT_S)
    if records:
        _write_records(layout, {})


def pipeline_status(layout: PipelineLayout) -> dict[str, object]:
    records = pipeline_records(layout)
    return {
        "graphite_url": layout.graphite_url,
        "statsd": f"{layout.host.address}:{layout.host.statsd_port}",
        "processes": {
            d.value: {
                "running": is_alive(records.get(d)),
                "rss_bytes": resident_bytes(records.get(d)),
            }
            for d in Daemon
        },
    }
