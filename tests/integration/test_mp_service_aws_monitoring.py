"""`kaas serve --provider aws` runs the monitoring pipeline beside itself (real Etsy statsd,
carbon and graphite-web, as `kaas up` does locally) on the address the VMs reach, and every
cluster it creates on moto's EC2 names that statsd and render API in its spec. A gauge sent to
the service host's statsd is stored by carbon and read back through the render API. The VMs'
user data carries none of the service host's secrets."""

from __future__ import annotations

import base64
import json
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from management_plane.local.processes import is_alive
from management_plane.monitoring.pipeline import (
    Daemon,
    pipeline_records,
    pipeline_status,
    plan_service_pipeline,
)
from tests import harness
from tests.integration.test_aws_provider import (  # noqa: F401 (fixtures)
    Account,
    account,
    moto_endpoint,
)
from tests.integration.test_mp_service_aws import instances, write_config
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration

# A loopback address of this session's scratch range no local cluster's pipeline takes
# (theirs is <base>.253): it stands for the service host's VPC address.
MONITORING_ADDRESS = f"{harness.SCRATCH_BASE}.252"


def _statsd_health(address: str) -> bytes:
    with socket.create_connection((address, 8126), timeout=5) as admin:
        admin.sendall(b"health\n")
        return admin.recv(64)


def _render(graphite_url: str, target: str) -> list[float]:
    query = urllib.parse.urlencode({"target": target, "format": "json", "from": "-5min"})
    with urllib.request.urlopen(f"{graphite_url}/render?{query}", timeout=10) as answer:
        series = json.load(answer)
    return [p[0] for s in series for p in s["datapoints"] if p[0] is not None]


def test_the_aws_service_runs_the_pipeline_and_names_it_in_new_clusters_specs(
    tmp_path: Path,
    account: Account,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    port = free_port()
    config = write_config(
        tmp_path / "aws.toml",
        account,
        f"https://127.0.0.1:{port}",
        monitoring=f'monitoring_address = "{MONITORING_ADDRESS}"\n',
    )
    service = ServiceHandle(
        tmp_path / "service",
        port,
        harness.SCRATCH_BASE,
        extra_args=("--provider", "aws", "--aws-config", str(config), "--broker-loss-after", "0"),
    )
    layout = plan_service_pipeline(service.home, MONITORING_ADDRESS)
    started = time.monotonic()
    service.start()
    print(f"kaas serve with its pipeline answering: {time.monotonic() - started:.1f}s")
    try:
        records = pipeline_records(layout)
        assert set(records) == set(Daemon) and all(is_alive(r) for r in records.values())
        assert b"up" in _statsd_health(MONITORING_ADDRESS)

        status, op = service.call("POST", "/v1/clusters", {"name": "awsmon", "broker_count": 3})
        assert status == 202, op
        status, cluster = service.call("GET", "/v1/clusters/awsmon")
        assert status == 200 and cluster["provider"] == "aws"
        assert cluster["spec"]["monitoring"] == {
            "statsd": f"{MONITORING_ADDRESS}:8125",
            "graphite_url": f"http://{MONITORING_ADDRESS}:8080",
        }

        # An agent's gauge, as the agents send it (statsd's line format over UDP), reaches
        # carbon's whisper files and the render API.
        sent = time.monotonic()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            gauge = b"kaas.awsmon.brokers.0.under_replicated_partitions:42|g"
            udp.sendto(gauge, (MONITORING_ADDRESS, 8125))
            target = "kaas.awsmon.brokers.0.under_replicated_partitions"
            graphite = cluster["spec"]["monitoring"]["graphite_url"]
            harness.wait_until(
                lambda: 42.0 in _render(graphite, target), 60, "the gauge in Graphite", 0.5
            )
        print(f"metric delay (statsd to render API): {time.monotonic() - sent:.1f}s")
        whisper = Path(layout.host.storage_dir) / "whisper" / "kaas" / "awsmon" / "brokers"
        assert (whisper / "0" / "under_replicated_partitions.wsp").is_file()
        processes = pipeline_status(layout)["processes"]
        assert isinstance(processes, dict)
        rss = {d: p["rss_bytes"] / 2**20 for d, p in processes.items()}
        print(
            "pipeline resident memory (MiB): " + ", ".join(f"{d} {m:.0f}" for d, m in rss.items())
        )

        # The VMs' user data: the boot ticket (one-time token, API address and CA) and the
        # agent's settings, none of the service host's secrets.
        harness.wait_until(lambda: bool(instances(account, "awsmon")), 90, "a VM of awsmon")
        encoded = account.ec2.describe_instance_attribute(
            InstanceId=instances(account, "awsmon")[0]["InstanceId"], Attribute="userData"
        )
        script = base64.b64decode(encoded["UserData"]["Value"]).decode()
        secrets = {
            "the admin key": service.key,
            "graphite-web's secret key": (layout.conf_dir / "graphite-secret-key").read_text(),
        }
        for what, secret in secrets.items():
            assert secret.strip() and secret.strip() not in script, what
        assert "PRIVATE KEY" not in script and "BEGIN CERTIFICATE" in script  # the CA only
    finally:
        service.stop()
    # The pipeline stops with the service.
    assert not any(is_alive(r) for r in records.values())
