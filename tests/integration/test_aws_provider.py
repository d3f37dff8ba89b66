"""The aws provider end to end against moto's EC2 server, a real HTTP server on loopback
started for this session. The fixtures are what a real account holds before KaaS runs: a
VPC, one tagged broker subnet per zone, a security group and the Packer image."""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from sqlalchemy import create_engine
from sqlalchemy.pool import StaticPool

from agent.settings import parse_settings
from management_plane.providers.aws import (
    ROLE_ADDRESS,
    ROLE_DATA,
    TAG_BROKER_ID,
    TAG_CLUSTER,
    TAG_ROLE,
    AwsProvider,
    AwsSettings,
)
from management_plane.providers.aws_boot import BootIssuer
from management_plane.providers.aws_userdata import fill_placeholders, settings_template
from management_plane.providers.base import ProviderError, VmInfo, VmRequest
from management_plane.security.boot_tokens import BootTokens
from planner.pki.authority import create_authority

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
ZOOKEEPER = "10.20.0.10:2181,10.20.1.10:2181,10.20.2.10:2181"
VPC_CIDR = "10.20.0.0/16"


@dataclass(frozen=True)
class Account:
    endpoint: str
    session: boto3.session.Session
    ec2: Any
    vpc_id: str
    subnets: dict[str, str]
    security_group: str
    image_id: str


# The service's token store and API certificate, as `kaas serve` hands them to the provider
# (tests/integration/test_mp_service_aws.py runs the service itself).
BOOT_TOKENS = BootTokens(
    create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
)
API_CA_PEM = create_authority("management plane", dt.datetime.now(dt.UTC)).certificate_pem.decode()
API_URL = "https://10.20.0.5:8443"


def boot_issuer(ttl_s: float = 3600.0) -> BootIssuer:
    return BootIssuer(BOOT_TOKENS, API_URL, lambda: API_CA_PEM, ttl_s)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# moto keeps its accounts in the process, whichever server answers: the modules that import
# these fixtures share one server and one account, or a second VPC with the same subnet tags
# would be found by the first module's lookups.
_SHARED: dict[str, Any] = {}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    if "endpoint" in _SHARED:
        yield _SHARED["endpoint"]
        return
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    _SHARED["endpoint"] = f"http://127.0.0.1:{port}"
    try:
        yield _SHARED["endpoint"]
    finally:
        server.stop()
        _SHARED.clear()


@pytest.fixture(scope="session")
def account(moto_endpoint: str) -> Account:
    if "account" not in _SHARED:
        _SHARED["account"] = _make_account(moto_endpoint)
    return _SHARED["account"]


def _make_account(moto_endpoint: str) -> Account:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    ec2 = session.client("ec2", endpoint_url=moto_endpoint)
    vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    ec2.create_tags(Resources=[vpc_id], Tags=[{"Key": "Name", "Value": "kaas-test"}])
    subnets = {}
    for index, zone in enumerate(ZONES):
        subnets[zone] = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=f"10.20.{index}.0/24",
            AvailabilityZone=zone,
            TagSpecifications=[
                {"ResourceType": "subnet", "Tags": [{"Key": "kaas:role", "Value": "broker-subnet"}]}
            ],
        )["Subnet"]["SubnetId"]
    group = ec2.create_security_group(
        GroupName="kaas-brokers", Description="KaaS brokers", VpcId=vpc_id
    )["GroupId"]
    # What packer/kaas-vm.pkr.hcl leaves behind: an image named kaas-vm-<timestamp>, tagged.
    image_id = ec2.register_image(
        Name="kaas-vm-20261123070000",
        Architecture="x86_64",
        RootDeviceName="/dev/xvda",
        VirtualizationType="hvm",
    )["ImageId"]
    ec2.create_tags(
        Resources=[image_id],
        Tags=[{"Key": "Name", "Value": "kaas-vm"}, {"Key": "kaas:role", "Value": "image"}],
    )
    return Account(moto_endpoint, session, ec2, vpc_id, subnets, group, image_id)


def _provider(account: Account, **overrides: Any) -> AwsProvider:
    settings: dict[str, Any] = {
        "region": REGION,
        "endpoint_url": account.endpoint,
        "security_group_ids": (account.security_group,),
        "wait_timeout_s": 20.0,
        "poll_interval_s": 0.05,
        **overrides,
    }
    return AwsProvider(
        AwsSettings(**settings), lambda cluster: ZOOKEEPER, boot_issuer(), account.session
    )


def _cluster() -> str:
    return f"aws-{uuid.uuid4().hex[:8]}"


def _request(cluster: str, zone: str, broker_id: int | None) -> VmRequest:
    return VmRequest(
        cluster=cluster,
        zone=zone,
        instance_type="m6i.large",
        kafka_version="3.9.2",
        reuse_broker_id=broker_id,
        tags={"team": "streaming"},
    )


def _instance(account: Account, vm_id: str) -> dict[str, Any]:
    reservations = account.ec2.describe_instances(InstanceIds=[vm_id])["Reservations"]
    return dict(reservations[0]["Instances"][0])


def _tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags") or resource.get("TagSet") or []}


def _broker_resources(account: Account, cluster: str, role: str) -> list[dict[str, Any]]:
    filters = [
        {"Name": "tag:kaas:cluster", "Values": [cluster]},
        {"Name": "tag:kaas:role", "Values": [role]},
    ]
    if role == ROLE_ADDRESS:
        return list(account.ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"])
    return list(account.ec2.describe_volumes(Filters=filters)["Volumes"])


def _eni_of(account: Account, cluster: str, broker_id: int) -> dict[str, Any]:
    [eni] = [
        e
        for e in _broker_resources(account, cluster, ROLE_ADDRESS)
        if _tags(e)[TAG_BROKER_ID] == str(broker_id)
    ]
    return eni


def _volume_of(account: Account, cluster: str, broker_id: int) -> dict[str, Any]:
    [volume] = [
        v
        for v in _broker_resources(account, cluster, ROLE_DATA)
        if _tags(v)[TAG_BROKER_ID] == str(broker_id)
    ]
    return volume


def _create_three(provider: AwsProvider, cluster: str) -> list[VmInfo]:
    return [
        provider.create_vm(_request(cluster, zone, broker_id))
        for broker_id, zone in enumerate(ZONES)
    ]


def _assert_holds_broker_resources(account: Account, vm: VmInfo, broker_id: int) -> None:
    eni = _eni_of(account, vm.cluster, broker_id)
    volume = _volume_of(account, vm.cluster, broker_id)
    instance = _instance(account, vm.vm_id)
    [secondary] = [n for n in instance["NetworkInterfaces"] if n["Attachment"]["DeviceIndex"] == 1]
    assert secondary["NetworkInterfaceId"] == eni["NetworkInterfaceId"]
    assert vm.address == eni["PrivateIpAddress"]
    assert [a["InstanceId"] for a in volume["Attachments"]] == [vm.vm_id]
    assert volume["Attachments"][0]["Device"] == "/dev/sdf"
    assert eni["AvailabilityZone"] == volume["AvailabilityZone"] == vm.zone


def test_creates_vms_with_an_eni_and_a_volume_per_broker_id(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vms = _create_three(provider, cluster)

    assert [(vm.zone, vm.broker_id, vm.state) for vm in vms] == [
        (zone, i, "running") for i, zone in enumerate(ZONES)
    ]
    for broker_id, vm in enumerate(vms):
        _assert_holds_broker_resources(account, vm, broker_id)
        instance = _instance(account, vm.vm_id)
        assert instance["ImageId"] == account.image_id
        assert instance["SubnetId"] == account.subnets[vm.zone]
        assert _tags(instance) == {
            "Name": f"{cluster}-broker-{broker_id}",
            "kaas:cluster": cluster,
            "kaas:role": "broker",
            "kaas:broker-id": str(broker_id),
            "kaas:kafka-version": "3.9.2",
            "team": "streaming",
        }
        for role in (ROLE_ADDRESS, ROLE_DATA):
            resource = (_eni_of if role == ROLE_ADDRESS else _volume_of)(
                account, cluster, broker_id
            )
            assert _tags(resource) == {
                "Name": f"{cluster}-broker-{broker_id}",
                TAG_CLUSTER: cluster,
                TAG_BROKER_ID: str(broker_id),
                TAG_ROLE: role,
            }
    volume = _volume_of(account, cluster, 0)
    assert (volume["Size"], volume["VolumeType"], volume["Encrypted"]) == (100, "gp3", True)
    assert len(_broker_resources(account, cluster, ROLE_ADDRESS)) == 3
    assert len(_broker_resources(account, cluster, ROLE_DATA)) == 3
    assert {vm.vm_id for vm in provider.list_vms(cluster)} == {vm.vm_id for vm in vms}
    assert provider.describe_vm(vms[1].vm_id) == vms[1]


def test_user_data_tells_the_agent_its_cluster_zookeeper_and_address(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vm = provider.create_vm(_request(cluster, ZONES[1], 4))
    encoded = account.ec2.describe_instance_attribute(InstanceId=vm.vm_id, Attribute="userData")
    script = base64.b64decode(encoded["UserData"]["Value"]).decode()

    text = fill_placeholders(settings_template(script), vm.vm_id, "10.20.1.99")
    settings = parse_settings(json.loads(text), "user-data")
    assert (settings.cluster, settings.zookeeper_hosts, settings.zone) == (
        cluster,
        ZOOKEEPER,
        ZONES[1],
    )
    assert settings.address == vm.address == _eni_of(account, cluster, 4)["PrivateIpAddress"]
    assert settings.vm_id == vm.vm_id
    assert _volume_of(account, cluster, 4)["VolumeId"] in script
    checked = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert checked.returncode == 0, checked.stderr


def test_replacement_moves_the_eni_and_volume_to_the_new_vm(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    old = _create_three(provider, cluster)[1]

    new = provider.create_vm(_request(cluster, ZONES[1], 1))
    # The old VM was stopped before its disk was taken; the new one has its address and data.
    assert provider.describe_vm(old.vm_id).state == "stopped"
    assert new.vm_id != old.vm_id
    assert new.address == old.address
    assert new.broker_id == 1
    _assert_holds_broker_resources(account, new, 1)
    assert all(
        n["Attachment"]["DeviceIndex"] == 0
        for n in _instance(account, old.vm_id)["NetworkInterfaces"]
    )

    provider.recycle_vm(old.vm_id)
    assert provider.describe_vm(old.vm_id).state == "terminated"
    _assert_holds_broker_resources(account, new, 1)
    assert len(_broker_resources(account, cluster, ROLE_ADDRESS)) == 3
    assert len(_broker_resources(account, cluster, ROLE_DATA)) == 3
    assert old.vm_id not in {vm.vm_id for vm in provider.list_vms(cluster)}
    assert len(provider.list_vms(cluster)) == 3
    provider.recycle_vm(old.vm_id)  # already gone: not an error


def test_a_lost_vms_replacement_gets_its_address_and_data(account: Account) -> None:
    """Broker loss: the old VM is already gone when its replacement is created."""
    provider = _provider(account)
    cluster = _cluster()
    lost = provider.create_vm(_request(cluster, ZONES[2], 2))
    provider.recycle_vm(lost.vm_id)
    assert provider.list_vms(cluster) == []

    replacement = provider.create_vm(_request(cluster, ZONES[2], 2))
    assert replacement.address == lost.address
    _assert_holds_broker_resources(account, replacement, 2)
    assert [vm.vm_id for vm in provider.list_vms(cluster)] == [replacement.vm_id]


def test_deleting_the_cluster_terminates_vms_and_releases_resources(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vms = _create_three(provider, cluster)

    for vm in provider.list_vms(cluster):
        provider.recycle_vm(vm.vm_id)
    # Recycling keeps the per-broker resources for a later replacement.
    assert len(_broker_resources(account, cluster, ROLE_DATA)) == 3
    for broker_id in range(3):
        provider.release_broker_resources(cluster, broker_id)
    provider.release_broker_resources(cluster, 0)  # again: nothing left, not an error

    assert provider.list_vms(cluster) == []
    assert {provider.describe_vm(vm.vm_id).state for vm in vms} == {"terminated"}
    assert _broker_resources(account, cluster, ROLE_ADDRESS) == []
    assert _broker_resources(account, cluster, ROLE_DATA) == []


def test_a_retry_after_a_failed_launch_finds_the_resources_the_first_attempt_made(
    account: Account,
) -> None:
    cluster = _cluster()
    failing = _provider(account, instance_profile="no-such-profile")
    with pytest.raises(
        ProviderError, match=r"launching m6i\.large from ami-\w+: NoSuchEntity: .*no-such-profile"
    ):
        failing.create_vm(_request(cluster, ZONES[0], 0))
    made_eni = _eni_of(account, cluster, 0)
    made_volume = _volume_of(account, cluster, 0)
    assert made_eni["Status"] == "available" and made_volume["State"] == "available"
    assert _provider(account).list_vms(cluster) == []

    iam = account.session.client("iam", endpoint_url=account.endpoint)
    iam.create_instance_profile(InstanceProfileName=f"{cluster}-brokers")
    vm = _provider(account, instance_profile=f"{cluster}-brokers").create_vm(
        _request(cluster, ZONES[0], 0)
    )
    _assert_holds_broker_resources(account, vm, 0)
    assert _eni_of(account, cluster, 0)["NetworkInterfaceId"] == made_eni["NetworkInterfaceId"]
    assert _volume_of(account, cluster, 0)["VolumeId"] == made_volume["VolumeId"]
    assert "IamInstanceProfile" in _instance(account, vm.vm_id)


def test_a_vm_without_a_broker_id_gets_no_per_broker_resources(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vm = provider.create_vm(_request(cluster, ZONES[2], None))
    instance = _instance(account, vm.vm_id)
    assert vm.broker_id is None and vm.address == instance["PrivateIpAddress"]
    assert "kaas:broker-id" not in _tags(instance)
    assert _broker_resources(account, cluster, ROLE_ADDRESS) == []
    assert _broker_resources(account, cluster, ROLE_DATA) == []


def test_a_zone_without_a_subnet_gets_one_in_the_configured_vpc(account: Account) -> None:
    marker = uuid.uuid4().hex[:8]
    provider = _provider(account, vpc_id=account.vpc_id, subnet_tags={"kaas:subnet-set": marker})
    cluster = _cluster()
    first = provider.create_vm(_request(cluster, ZONES[2], 0))
    second = provider.create_vm(_request(cluster, ZONES[2], 1))
    created = account.ec2.describe_subnets(
        Filters=[{"Name": "tag:kaas:subnet-set", "Values": [marker]}]
    )["Subnets"]
    assert len(created) == 1
    assert created[0]["AvailabilityZone"] == ZONES[2] and created[0]["VpcId"] == account.vpc_id
    existing = {
        s["CidrBlock"]
        for s in account.ec2.describe_subnets()["Subnets"]
        if s["SubnetId"] != created[0]["SubnetId"]
    }
    assert created[0]["CidrBlock"] not in existing
    assert _instance(account, first.vm_id)["SubnetId"] == created[0]["SubnetId"]
    assert _instance(account, second.vm_id)["SubnetId"] == created[0]["SubnetId"]


# -- errors -------------------------------------------------------------------------------------


def test_no_image_found_is_an_error_naming_the_image(account: Account) -> None:
    with pytest.raises(ProviderError, match=r"no AMI named 'kaas-nope-\*'.*packer"):
        _provider(account, ami_name="kaas-nope-*").create_vm(_request(_cluster(), ZONES[0], 0))
    with pytest.raises(ProviderError, match=r"image ami-12345678.*InvalidAMIID"):
        _provider(account, ami_id="ami-12345678").create_vm(_request(_cluster(), ZONES[0], 0))


def test_a_zone_with_no_subnet_is_an_error_naming_the_zone(account: Account) -> None:
    provider = _provider(account, subnet_tags={"kaas:role": "no-such-subnet"})
    with pytest.raises(
        ProviderError, match=r"zone eu-west-1b: no subnet tagged kaas:role=no-such-subnet"
    ):
        provider.create_vm(_request(_cluster(), ZONES[1], 0))


def test_a_volume_attached_to_a_foreign_instance_is_not_taken(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vm = provider.create_vm(_request(cluster, ZONES[0], 0))
    provider.recycle_vm(vm.vm_id)
    volume_id = _volume_of(account, cluster, 0)["VolumeId"]
    foreign = account.ec2.run_instances(
        ImageId=account.image_id, MinCount=1, MaxCount=1, SubnetId=account.subnets[ZONES[0]]
    )["Instances"][0]["InstanceId"]
    account.ec2.attach_volume(VolumeId=volume_id, InstanceId=foreign, Device="/dev/sdg")

    with pytest.raises(
        ProviderError,
        match=rf"broker 0 of cluster {cluster}: volume {volume_id} is attached to instance {foreign}, which is not a VM of this cluster",
    ):
        provider.create_vm(_request(cluster, ZONES[0], 0))
    assert _instance(account, foreign)["State"]["Name"] == "running"
    assert [a["InstanceId"] for a in _volume_of(account, cluster, 0)["Attachments"]] == [foreign]
    with pytest.raises(ProviderError, match=rf"VM {foreign}: not a KaaS broker VM"):
        provider.recycle_vm(foreign)
    with pytest.raises(ProviderError, match=rf"VM {foreign}: not a KaaS broker VM"):
        provider.describe_vm(foreign)


def test_releasing_resources_a_running_vm_holds_is_refused(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    vm = provider.create_vm(_request(cluster, ZONES[0], 2))
    with pytest.raises(
        ProviderError,
        match=rf"broker 2 of cluster {cluster}: ENI eni-\w+ is attached to running instance {vm.vm_id}; recycle that VM first",
    ):
        provider.release_broker_resources(cluster, 2)
    _assert_holds_broker_resources(account, vm, 2)


def test_a_broker_id_keeps_its_zone(account: Account) -> None:
    provider = _provider(account)
    cluster = _cluster()
    provider.create_vm(_request(cluster, ZONES[0], 0))
    with pytest.raises(ProviderError, match=r"broker 0 .* is in zone eu-west-1a, not eu-west-1c"):
        provider.create_vm(_request(cluster, ZONES[2], 0))


def test_unknown_vm_and_bad_requests(account: Account) -> None:
    provider = _provider(account)
    with pytest.raises(ProviderError, match=r"VM i-0123456789abcdef0: no such EC2 instance"):
        provider.describe_vm("i-0123456789abcdef0")
    provider.recycle_vm("i-0123456789abcdef0")  # gone already: not an error
    with pytest.raises(ProviderError, match=r"tag\(s\) kaas:role are set by the provider"):
        provider.create_vm(
            VmRequest("c1", ZONES[0], "m6i.large", "3.9.2", 0, tags={"kaas:role": "x"})
        )
    with pytest.raises(ProviderError, match=r"cluster name 'bad name' is invalid"):
        provider.create_vm(_request("bad name", ZONES[0], 0))
    bad_zookeeper = AwsProvider(
        provider.settings, lambda cluster: "zk1,zk2", boot_issuer(), account.session
    )
    with pytest.raises(
        ProviderError, match=r"ZooKeeper connect string 'zk1,zk2' is not a host:port list"
    ):
        bad_zookeeper.create_vm(_request(_cluster(), ZONES[0], 0))
