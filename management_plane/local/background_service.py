"""The management plane beside a `kaas up` cluster: `kaas serve` in the background, with its
home (database, admin key, log, pid file) under the cluster's folder, `<home>/service/`.

It adopts the local cluster (`kaas serve --adopt-local-cluster HOME`), so the API lists it
and the broker-loss watcher guards it. Known by (pid, start time) like every local process:
a second `kaas up` finds it alive and starts no other; `kaas down` stops it first, so it never
takes the VMs going away for a broker loss.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from management_plane.errors import KaasError
from management_plane.local.processes import (
    ProcessRecord,
    is_alive,
    start_process,
    stop_process,
)
from management_plane.service.tls import api_client_context, api_trust_bundle
from planner.private_files import private_dir

SERVICE_DIR = "service"
PID_FILE = "serve.json"
LOG_FILE = "serve.log"
ADMIN_KEY_FILE = "admin-key"  # management_plane.service.auth writes it at first start
DEFAULT_PORT = 8080
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class BackgroundService:
    url: str
    record: ProcessRecord
    home: Path
    already_running: bool

    @property
    def log_file(self) -> Path:
        return self.home / LOG_FILE

    @property
    def admin_key_file(self) -> Path:
        return self.home / ADMIN_KEY_FILE

    @property
    def trust_bundle(self) -> Path:
        """The service's CA certificate: what its API is verified with."""
        return api_trust_bundle(self.home)


def service_home(cluster_home: Path) -> Path:
    return cluster_home.resolve() / SERVICE_DIR


def _read(cluster_home: Path) -> tuple[ProcessRecord, str] | None:
    try:
        value = json.loads((service_home(cluster_home) / PID_FILE).read_text())
        return ProcessRecord.from_json(value), str(value["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def running_service(cluster_home: Path) -> BackgroundService | None:
    found = _read(cluster_home)
    if found is None or not is_alive(found[0]):
        return None
    return BackgroundService(found[1], found[0], service_home(cluster_home), True)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(host: str, wanted: int | None) -> int:
    """`wanted` if given (it must be free), else 8080 if free, else any free port."""
    if wanted is not None:
        if not 0 < wanted < 65536:
            raise KaasError(f"--service-port must be 1-65535, got {wanted}")
        if not _port_free(host, wanted):
            raise KaasError(f"--service-port {wanted}: {host}:{wanted} is already in use")
        return wanted
    if _port_free(host, DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _healthy(url: str, home: Path) -> bool:
    if not api_trust_bundle(home).exists():
        return False  # the service has not made its certificate yet
    try:
        context = api_client_context(api_trust_bundle(home))
        with urllib.request.urlopen(f"{url}/v1/health", timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def serve_command(
    service_home: Path, port: int, *options: str, host: str | None = None
) -> list[str]:
    """The command line that runs `kaas serve` with this Python, on `port`, keeping its
    state in `service_home`; `options` are more `kaas serve` options."""
    command = [
        sys.executable,
        "-m",
        "management_plane.cli",
        "serve",
        "--service-home",
        str(service_home),
        "--port",
        str(port),
    ]
    if host is not None:
        command += ["--host", host]
    return [*command, *options]


def start_background_service(
    cluster_home: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    extra_args: tuple[str, ...] = (),
    timeout_s: float = 90.0,
) -> BackgroundService:
    """Start `kaas serve` for the cluster at `cluster_home` unless it runs already; returns
    once it answers its health check."""
    running = running_service(cluster_home)
    if running is not None:
        return running
    home = private_dir(service_home(cluster_home))
    chosen = pick_port(host, port)
    url = f"https://{host}:{chosen}"
    command = serve_command(
        home, chosen, "--adopt-local-cluster", str(cluster_home.resolve()), *extra_args, host=host
    )
    return _start(home, command, url, timeout_s)


def _start(home: Path, command: list[str], url: str, timeout_s: float) -> BackgroundService:
    """Start `command` and wait until it answers on `url`; serve.json keeps the command line,
    so that a service killed outright is started again as it was (`restart_background_service`)."""
    record = start_process(command, home / LOG_FILE, home)
    pid_file = home / PID_FILE
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({**record.to_json(), "url": url, "command": command}) + "\n")
    tmp.rename(pid_file)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(record):
            tail = (home / LOG_FILE).read_text(errors="replace").strip().splitlines()[-5:]
            raise KaasError(f"kaas serve exited at start; its log ({home / LOG_FILE}) ends: {tail}")
        if _healthy(url, home):
            return BackgroundService(url, record, home, False)
        time.sleep(0.5)
    stop_process(record, STOP_TIMEOUT_S)
    raise KaasError(
        f"kaas serve did not answer on {url} within {timeout_s:.0f}s: see {home / LOG_FILE}"
    )


def stop_background_service(cluster_home: Path) -> bool:
    """Stop the cluster's background service; False if none ran."""
    found = _read(cluster_home)
    if found is None:
        return False
    alive = is_alive(found[0])
    stop_process(found[0], STOP_TIMEOUT_S)
    (service_home(cluster_home) / PID_FILE).unlink(missing_ok=True)
    return alive


def restart_background_service(cluster_home: Path, timeout_s: float = 90.0) -> BackgroundService:
    """Start the cluster's background service again with the command line and address it had
    (after it was killed, as a host's supervisor would); the running one if it runs."""
    running = running_service(cluster_home)
    if running is not None:
        return running
    home = service_home(cluster_home)
    try:
        value = json.loads((home / PID_FILE).read_text())
        command = [str(part) for part in value["command"]]
        url = str(value["url"])
    except (OSError, ValueError, KeyError, TypeError):
        raise KaasError(
            f"no record of the management plane's command line in {home / PID_FILE}: "
            "start it with `kaas up`"
        ) from None
    return _start(home, command, url, timeout_s)
