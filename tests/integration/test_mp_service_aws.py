"""`kaas serve --provider aws` against moto's EC2 server: a cluster created and deleted
through the API. moto's instances run nothing, so no agent ever joins: the test asserts what
the service observes on the provider side (instances per zone from the image, an ENI and an
EBS volume per broker id, all gone or freed after the delete) and that the creation fails
cleanly, by its step timeout, when the cluster's ZooKeeper never answers."""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from typing import Any

import pytest

from agent.boot_identity import BootIdentityError, ensure_identity
from management_plane.providers.aws_userdata import ticket_text
from planner.pki.authority import Role, issued_by
from planner.pki.files import IdentityFiles
from planner.pki.rotation import certificate_hosts
from tests import harness
from tests.integration.test_aws_provider import (  # noqa: F401 (fixtures)
    REGION,
    ZONES,
    Account,
    account,
    moto_endpoint,
)
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration


def write_config(
    path: Path,
    account: Account,  # noqa: F811
    api_url: str,
    monitoring: str = "monitoring_pipeline = false\n",
) -> Path:
    """`monitoring`: the pipeline's settings (default none: test_mp_service_aws_monitoring.py
    runs the pipeline beside the service)."""
    subnets = "\n".join(f'{zone} = "{account.subnets[zone]}"' for zone in ZONES)
    path.write_text(
        monitoring + f'region = "{REGION}"\n'
        f'api_url = "{api_url}"\n'
        f'endpoint_url = "{account.endpoint}"\n'
        f'image = "{account.image_id}"\n'
        f'security_group_ids = ["{account.security_group}"]\n'
        'zookeeper_hosts = "10.20.0.10:2181,10.20.1.10:2181,10.20.2.10:2181"\n'
        'instance_types = ["m6i.large"]\n'
        f"[subnets]\n{subnets}\n"
    )
    return path


def instances(account: Account, cluster: str) -> list[dict[str, Any]]:  # noqa: F811
    reservations = account.ec2.describe_instances(
        Filters=[{"Name": "tag:kaas:cluster", "Values": [cluster]}]
    )["Reservations"]
    return [i for r in reservations for i in r["Instances"]]


def tagged(account: Account, cluster: str, kind: str) -> list[dict[str, Any]]:  # noqa: F811
    filters = [{"Name": "tag:kaas:cluster", "Values": [cluster]}]
    if kind == "eni":
        return list(account.ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"])
    return list(account.ec2.describe_volumes(Filters=filters)["Volumes"])


def test_the_service_creates_and_deletes_a_cluster_on_moto(
    tmp_path: Path,
    account: Account,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    port = free_port()
    config = write_config(tmp_path / "aws.toml", account, f"https://127.0.0.1:{port}")
    service = ServiceHandle(
        tmp_path / "service",
        port,
        harness.SCRATCH_BASE,
        extra_args=(
            "--provider",
            "aws",
            "--aws-config",
            str(config),
            "--step-timeout",
            "40",
            "--broker-loss-after",
            "0",
        ),
    )
    service.start()
    try:
        status, op = service.call("POST", "/v1/clusters", {"name": "awsc", "broker_count": 3})
        assert status == 202, op
        # Zones and instance types are the configured ones: others are refused.
        status, bad = service.call(
            "POST", "/v1/clusters", {"name": "awsd", "broker_count": 3, "zones": ["us-east-1a"]}
        )
        assert status == 400 and "us-east-1a" in bad["message"], bad
        harness.wait_until(
            lambda: len(service.call("GET", "/v1/clusters/awsc")[1]["vms"]) == 3,
            90,
            "the service to record three VMs",
        )
        status, cluster = service.call("GET", "/v1/clusters/awsc")
        assert cluster["provider"] == "aws" and cluster["instance_type"] == "m6i.large"
        launched = instances(account, "awsc")
        assert sorted(i["InstanceId"] for i in launched) == sorted(
            vm["vm_id"] for vm in cluster["vms"]
        )
        assert {i["ImageId"] for i in launched} == {account.image_id}
        assert sorted(i["SubnetId"] for i in launched) == sorted(account.subnets.values())
        assert {i["State"]["Name"] for i in launched} == {"running"}
        enis = tagged(account, "awsc", "eni")
        volumes = tagged(account, "awsc", "volume")
        broker_ids = lambda items: sorted(  # noqa: E731
            {t["Key"]: t["Value"] for t in i.get("Tags") or i.get("TagSet") or []}["kaas:broker-id"]
            for i in items
        )
        assert broker_ids(enis) == broker_ids(volumes) == ["0", "1", "2"]
        assert {v["State"] for v in volumes} == {"in-use"}
        _a_vm_redeems_its_boot_ticket_at_the_service(tmp_path, account, service, launched[0])

        # No agent ever answers from moto's instances: the creation fails at its timeout,
        # saying why, and the cluster is marked failed (not left "creating" forever).
        final = service.operation(op["op_id"])
        harness.wait_until(
            lambda: service.operation(op["op_id"])["status"] == "failed", 150, "create to fail"
        )
        final = service.operation(op["op_id"])
        assert final["step"] == "write_spec" and "not reachable" in final["message"], final
        assert service.call("GET", "/v1/clusters/awsc")[1]["status"] == "failed"

        status, op = service.call("DELETE", "/v1/clusters/awsc")
        assert status == 202, op
        service.wait_operation(op["op_id"], 180)
        assert service.call("GET", "/v1/clusters/awsc")[0] == 404
        assert {i["State"]["Name"] for i in instances(account, "awsc")} <= {
            "terminated",
            "shutting-down",
        }
        assert tagged(account, "awsc", "eni") == [] and tagged(account, "awsc", "volume") == []
        # Its security group and its CA went with it.
        groups = account.ec2.describe_security_groups(
            Filters=[{"Name": "tag:kaas:cluster", "Values": ["awsc"]}]
        )["SecurityGroups"]
        assert groups == [], groups
        assert not (service.home / "aws" / "awsc").exists()
    finally:
        service.stop()


def _a_vm_redeems_its_boot_ticket_at_the_service(
    tmp_path: Path,
    account: Account,  # noqa: F811
    service: ServiceHandle,
    instance: dict[str, Any],
) -> None:
    """The agent's first start, with the ticket the VM's user data carries, against this
    `kaas serve` over HTTPS: the identity comes from the cluster's CA, for the VM's address."""
    encoded = account.ec2.describe_instance_attribute(
        InstanceId=instance["InstanceId"], Attribute="userData"
    )
    script = base64.b64decode(encoded["UserData"]["Value"]).decode()
    assert "PRIVATE KEY" not in script
    ticket_file = tmp_path / "vm" / "boot-ticket.json"
    ticket_file.parent.mkdir()
    ticket_file.write_text(ticket_text(script))
    spare = ticket_file.with_name("copy.json")
    spare.write_text(ticket_text(script))
    [eni] = [n for n in instance["NetworkInterfaces"] if n["Attachment"]["DeviceIndex"] == 1]
    address = eni["PrivateIpAddress"]
    files = IdentityFiles(tmp_path / "vm" / "tls", Role.NODE)

    assert ensure_identity(ticket_file, files, (address,), timeout_s=30) is True
    assert not ticket_file.exists()
    for path in (files.key, files.keystore, files.certificate, files.trust_bundle):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    cluster_ca = (service.home / "aws" / "awsc" / "secrets" / "ca" / "ca.crt").read_bytes()
    certificate = files.certificate.read_bytes()
    assert issued_by(certificate, cluster_ca) and files.trust_bundle.read_bytes() == cluster_ca
    assert certificate_hosts(certificate) == (address,)
    # The same token again (a copy of the user data) buys nothing.
    with pytest.raises(BootIdentityError, match="HTTP 403, boot_token_refused"):
        ensure_identity(spare, IdentityFiles(tmp_path / "vm" / "again", Role.NODE), (address,), 30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--aws-region", "eu-west-1"), "subnets must map each zone to its broker subnet id"),
        (("--aws-subnet", "eu-west-1a"), "--aws-subnet 'eu-west-1a': expected ZONE=SUBNET_ID"),
        (
            (
                "--aws-region",
                "eu-west-1",
                "--aws-subnet",
                "eu-west-1a=subnet-1",
                "--aws-image",
                "x",
            ),
            "image must be an AMI id",
        ),
    ],
)
def test_bad_aws_settings_stop_the_service_at_start(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = harness.kaas_cli(
        "serve", "--service-home", str(tmp_path), "--port", str(free_port()), "--provider", "aws",
        *args, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("kaas: error: ")
    assert message in result.stderr


def test_an_unknown_key_in_the_aws_config_file_is_named(tmp_path: Path) -> None:
    config = tmp_path / "aws.toml"
    config.write_text('region = "eu-west-1"\nsubnet = "subnet-1"\n')
    result = harness.kaas_cli(
        "serve", "--service-home", str(tmp_path), "--provider", "aws", "--aws-config", str(config)
    )
    assert result.returncode == 1
    assert "unknown key 'subnet'" in result.stderr, result.stderr
