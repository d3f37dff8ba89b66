"""The EC2 resources behind the aws provider: settings, lookups by tag, creation on first use,
attach, detach and waits. Every AWS failure becomes a ProviderError naming what was being
done and AWS's cause.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import structlog
from botocore.exceptions import BotoCoreError, ClientError

from management_plane.providers.base import ProviderError

TAG_CLUSTER = "kaas:cluster"
TAG_ROLE = "kaas:role"
TAG_BROKER_ID = "kaas:broker-id"
TAG_KAFKA_VERSION = "kaas:kafka-version"
ROLE_BROKER = "broker"
ROLE_ADDRESS = "broker-address"
"""kaas:role of a broker id's ENI."""
ROLE_DATA = "broker-data"
"""kaas:role of a broker id's EBS volume."""

log = structlog.get_logger("kaas.management_plane.aws")


@dataclass(frozen=True)
class AwsSettings:
    region: str = "eu-west-1"
    endpoint_url: str | None = None
    """Another EC2 endpoint (tests: moto's server); None: the region's own."""
    ami_id: str | None = None
    """Pin one image; None: the newest available image matching ami_name and ami_tags."""
    ami_name: str = "kaas-vm-*"
    """Name pattern of the Packer image (the template names it kaas-vm-<timestamp>)."""
    ami_tags: Mapping[str, str] = field(default_factory=lambda: {"kaas:role": "image"})
    """Tags the image must carry (the template tags it kaas:role=image)."""
    ami_owners: tuple[str, ...] = ("self",)
    subnet_tags: Mapping[str, str] = field(default_factory=lambda: {"kaas:role": "broker-subnet"})
    """A zone's broker subnet carries these tags; a subnet created here gets them."""
    subnet_ids: Mapping[str, str] = field(default_factory=dict)
    """zone -> broker subnet id, named outright (kaas serve --aws-subnet); other zones are
    looked up by subnet_tags."""
    vpc_id: str | None = None
    """VPC in which a zone without a tagged subnet gets one; also limits the subnet lookup."""
    vpc_tags: Mapping[str, str] = field(default_factory=dict)
    """Find that VPC by these tags instead (exactly one must match); empty: vpc_id only."""
    subnet_prefix_length: int = 24
    """Size of a created subnet: the first free block of this length in the VPC's CIDR."""
    security_group_ids: tuple[str, ...] = ()
    """Groups of the broker ENIs and the instances' primary interfaces besides the cluster's
    own (management_plane/providers/aws_network.py), which the provider makes and keeps."""
    tenant_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    """Networks the tenants connect from: the only sources of the tenant listener's rule."""
    instance_profile: str | None = None
    """IAM instance profile, by name or ARN; None: none."""
    key_name: str | None = None
    """EC2 key pair for SSH; None: none (the VMs are immutable)."""
    volume_size_gib: int = 100
    volume_type: str = "gp3"
    volume_encrypted: bool = True
    volume_device: str = "/dev/sdf"
    """Device name the data volume is attached as (NVMe instances name it by volume id)."""
    eni_device_index: int = 1
    """Device index of the broker ENI: a secondary interface, 0 is the instance's own."""
    kafka_heap: str = "-Xms2g -Xmx2g"
    """The agent's kafka_heap for the broker JVM; size it for the instance type."""
    wait_timeout_s: float = 300.0
    """Longest wait for an instance, ENI or volume to reach a state."""
    poll_interval_s: float = 2.0

    def __post_init__(self) -> None:
        problems = []
        if not self.region:
            problems.append("region is empty")
        if not self.ami_id and not self.ami_name:
            problems.append("neither ami_id nor ami_name is set")
        if self.volume_size_gib < 1:
            problems.append(f"volume_size_gib must be at least 1, got {self.volume_size_gib}")
        if self.eni_device_index < 1:
            problems.append(f"eni_device_index must be 1 or more, got {self.eni_device_index}")
        if not 16 <= self.subnet_prefix_length <= 28:
            problems.append(
                f"subnet_prefix_length must be 16-28 (EC2's limits), got {self.subnet_prefix_length}"
            )
        if self.wait_timeout_s <= 0 or self.poll_interval_s <= 0:
            problems.append("wait_timeout_s and poll_interval_s must be positive")
        if problems:
            raise ValueError("aws settings: " + "; ".join(problems))


def free_subnet_cidr(vpc_cidr: str, taken: list[str], prefix_length: int) -> str | None:
    """The first block of prefix_length in the VPC's CIDR that overlaps no existing subnet (pure)."""
    network = ipaddress.ip_network(vpc_cidr)
    if prefix_length < network.prefixlen:
        return None
    used = [ipaddress.ip_network(cidr) for cidr in taken]
    for candidate in network.subnets(new_prefix=prefix_length):
        if not any(candidate.overlaps(other) for other in used):
            return str(candidate)
    return None


def tags_of(resource: Mapping[str, Any]) -> dict[str, str]:
    # ENIs carry theirs as TagSet, everything else as Tags.
    tags = resource.get("Tags") or resource.get("TagSet") or []
    return {tag["Key"]: tag["Value"] for tag in tags}


def tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]


def broker_tags(cluster: str, broker_id: int, role: str) -> dict[str, str]:
    return {
        "Name": f"{cluster}-broker-{broker_id}",
        TAG_CLUSTER: cluster,
        TAG_BROKER_ID: str(broker_id),
        TAG_ROLE: role,
    }


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """Any AWS failure inside becomes a ProviderError naming `what` and AWS's cause."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ProviderError(
            f"{what}: {error.get('Code', 'error')}: {error.get('Message', exc)}"
        ) from exc
    except BotoCoreError as exc:
        raise ProviderError(f"{what}: {exc}") from exc


def eni_holder(eni: Mapping[str, Any]) -> str | None:
    if eni.get("Status") == "available":
        return None
    holder = (eni.get("Attachment") or {}).get("InstanceId")
    return str(holder) if holder else None


def volume_holder(volume: Mapping[str, Any]) -> str | None:
    for attachment in volume.get("Attachments", []):
        if attachment.get("State") in ("attaching", "attached", "busy", "detaching"):
            return str(attachment["InstanceId"])
    return None


class Ec2:
    """One EC2 client and the provider's settings; `client` is boto3's, for the calls the
    provider makes itself."""

    def __init__(self, client: Any, settings: AwsSettings) -> None:
        self.client = client
        self.settings = settings

    def instance(self, vm_id: str) -> dict[str, Any] | None:
        try:
            reservations = self.client.describe_instances(InstanceIds=[vm_id])["Reservations"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return None
            with aws_errors(f"VM {vm_id}"):
                raise
        except BotoCoreError as exc:
            raise ProviderError(f"VM {vm_id}: {exc}") from exc
        instances = [i for r in reservations for i in r["Instances"]]
        return dict(instances[0]) if instances else None

    def instance_state(self, vm_id: str) -> str:
        """The EC2 state name; "terminated" for an instance EC2 no longer knows."""
        instance = self.instance(vm_id)
        return "terminated" if instance is None else str(instance["State"]["Name"])

    def wait_instance(self, vm_id: str, states: set[str]) -> None:
        self.wait(
            f"VM {vm_id}: reaching {' or '.join(sorted(states))}",
            lambda: self.instance_state(vm_id) in states,
        )

    def eni(self, eni_id: str) -> dict[str, Any]:
        with aws_errors(f"ENI {eni_id}"):
            found = self.client.describe_network_interfaces(NetworkInterfaceIds=[eni_id])
        return dict(found["NetworkInterfaces"][0])

    def volume(self, volume_id: str) -> dict[str, Any]:
        with aws_errors(f"volume {volume_id}"):
            return dict(self.client.describe_volumes(VolumeIds=[volume_id])["Volumes"][0])

    def wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.settings.wait_timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise ProviderError(f"{what}: not done after {self.settings.wait_timeout_s:.0f} s")
            time.sleep(self.settings.poll_interval_s)

    # -- image, network -----------------------------------------------------------------------

    def image(self, what: str) -> str:
        s = self.settings
        if s.ami_id:
            with aws_errors(f"{what}: image {s.ami_id}"):
                images = self.client.describe_images(ImageIds=[s.ami_id])["Images"]
            if not images:
                raise ProviderError(f"{what}: no AMI {s.ami_id} in {s.region}")
            return s.ami_id
        filters = [
            {"Name": "name", "Values": [s.ami_name]},
            {"Name": "state", "Values": ["available"]},
            *tag_filters(s.ami_tags),
        ]
        with aws_errors(f"{what}: looking up the image"):
            images = self.client.describe_images(Owners=list(s.ami_owners), Filters=filters)[
                "Images"
            ]
        if not images:
            tags = ", ".join(f"{k}={v}" for k, v in s.ami_tags.items()) or "none"
            raise ProviderError(
                f"{what}: no AMI named {s.ami_name!r} with tags {tags} owned by "
                f"{', '.join(s.ami_owners)} in {s.region}; build one with packer/kaas-vm.pkr.hcl"
            )
        newest = max(images, key=lambda image: (image.get("CreationDate", ""), image["ImageId"]))
        return str(newest["ImageId"])

    def vpc_id(self) -> str | None:
        s = self.settings
        if s.vpc_id:
            return s.vpc_id
        if not s.vpc_tags:
            return None
        with aws_errors("looking up the VPC"):
            vpcs = self.client.describe_vpcs(Filters=tag_filters(s.vpc_tags))["Vpcs"]
        if len(vpcs) != 1:
            tags = ", ".join(f"{k}={v}" for k, v in s.vpc_tags.items())
            found = ", ".join(v["VpcId"] for v in vpcs) or "none"
            raise ProviderError(f"VPC tagged {tags}: exactly one must exist, found {found}")
        return str(vpcs[0]["VpcId"])

    def subnet(self, zone: str) -> dict[str, Any]:
        """The zone's broker subnet, found by tags, else created in the configured VPC."""
        s = self.settings
        if zone in s.subnet_ids:
            with aws_errors(f"zone {zone}: subnet {s.subnet_ids[zone]}"):
                named = self.client.describe_subnets(SubnetIds=[s.subnet_ids[zone]])["Subnets"]
            if not named or named[0]["AvailabilityZone"] != zone:
                where = named[0]["AvailabilityZone"] if named else "nowhere"
                raise ProviderError(
                    f"zone {zone}: subnet {s.subnet_ids[zone]} is in {where}, not in {zone}"
                )
            return dict(named[0])
        vpc_id = self.vpc_id()
        filters = [{"Name": "availability-zone", "Values": [zone]}, *tag_filters(s.subnet_tags)]
        if vpc_id:
            filters.append({"Name": "vpc-id", "Values": [vpc_id]})
        with aws_errors(f"zone {zone}: looking up the broker subnet"):
            subnets = self.client.describe_subnets(Filters=filters)["Subnets"]
        if subnets:
            return dict(min(subnets, key=lambda subnet: subnet["SubnetId"]))
        tags = ", ".join(f"{k}={v}" for k, v in s.subnet_tags.items()) or "any tags"
        if vpc_id is None:
            raise ProviderError(
                f"zone {zone}: no subnet tagged {tags}, and no VPC configured to create one in "
                "(aws settings vpc_id or vpc_tags)"
            )
        return self.create_subnet(zone, vpc_id)

    def create_subnet(self, zone: str, vpc_id: str) -> dict[str, Any]:
        s = self.settings
        with aws_errors(f"zone {zone}: creating a broker subnet in {vpc_id}"):
            vpc = self.client.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
            taken = [
                subnet["CidrBlock"]
                for subnet in self.client.describe_subnets(
                    Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]
                )["Subnets"]
            ]
            cidr = free_subnet_cidr(vpc["CidrBlock"], taken, s.subnet_prefix_length)
            if cidr is None:
                raise ProviderError(
                    f"zone {zone}: VPC {vpc_id} ({vpc['CidrBlock']}) has no free "
                    f"/{s.subnet_prefix_length} for a broker subnet"
                )
            subnet = self.client.create_subnet(
                VpcId=vpc_id,
                CidrBlock=cidr,
                AvailabilityZone=zone,
                TagSpecifications=[
                    {
                        "ResourceType": "subnet",
                        "Tags": tag_list({"Name": f"kaas-brokers-{zone}", **s.subnet_tags}),
                    }
                ],
            )["Subnet"]
        log.info("aws_subnet_created", zone=zone, vpc=vpc_id, subnet=subnet["SubnetId"], cidr=cidr)
        return dict(subnet)

    def subnet_cidr(self, subnet_id: str, known: Mapping[str, Any]) -> str:
        if subnet_id == known["SubnetId"]:
            return str(known["CidrBlock"])
        with aws_errors(f"subnet {subnet_id}"):
            return str(
                self.client.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["CidrBlock"]
            )

    # -- per-broker resources -----------------------------------------------------------------

    def tagged_enis(self, cluster: str, broker_id: int) -> list[dict[str, Any]]:
        filters = tag_filters(
            {TAG_CLUSTER: cluster, TAG_BROKER_ID: str(broker_id), TAG_ROLE: ROLE_ADDRESS}
        )
        with aws_errors(f"broker {broker_id} of cluster {cluster}: looking up its ENI"):
            found = self.client.describe_network_interfaces(Filters=filters)["NetworkInterfaces"]
        return sorted(found, key=lambda eni: eni["NetworkInterfaceId"])

    def tagged_volumes(self, cluster: str, broker_id: int) -> list[dict[str, Any]]:
        filters = tag_filters(
            {TAG_CLUSTER: cluster, TAG_BROKER_ID: str(broker_id), TAG_ROLE: ROLE_DATA}
        )
        with aws_errors(f"broker {broker_id} of cluster {cluster}: looking up its volume"):
            found = self.client.describe_volumes(Filters=filters)["Volumes"]
        return sorted(found, key=lambda volume: volume["VolumeId"])

    def tagged_broker_ids(self, cluster: str) -> list[int]:
        """Every broker id an ENI or a volume of the cluster is tagged with."""
        ids: set[int] = set()
        with aws_errors(f"cluster {cluster}: looking up its ENIs and volumes"):
            found = [
                *self.client.describe_network_interfaces(
                    Filters=tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_ADDRESS})
                )["NetworkInterfaces"],
                *self.client.describe_volumes(
                    Filters=tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_DATA})
                )["Volumes"],
            ]
        for resource in found:
            value = tags_of(resource).get(TAG_BROKER_ID, "")
            if value.isascii() and value.isdigit():
                ids.add(int(value))
        return sorted(ids)

    def broker_eni(
        self, cluster: str, broker_id: int, subnet: Mapping[str, Any], groups: list[str]
    ) -> dict[str, Any]:
        """The broker id's ENI, in exactly `groups` (an ENI made before the cluster had its own
        group is moved into it)."""
        what = f"broker {broker_id} of cluster {cluster}"
        found = self.tagged_enis(cluster, broker_id)
        if len(found) > 1:
            ids = ", ".join(e["NetworkInterfaceId"] for e in found)
            raise ProviderError(f"{what}: more than one ENI carries its tags ({ids}); keep one")
        if found:
            eni = found[0]
            if eni["AvailabilityZone"] != subnet["AvailabilityZone"]:
                raise ProviderError(
                    f"{what}: its ENI {eni['NetworkInterfaceId']} is in zone "
                    f"{eni['AvailabilityZone']}, not {subnet['AvailabilityZone']}; a broker id "
                    "keeps its zone (or release its resources first)"
                )
            if sorted(g["GroupId"] for g in eni.get("Groups", [])) != sorted(groups):
                with aws_errors(f"{what}: setting the security groups of its ENI"):
                    self.client.modify_network_interface_attribute(
                        NetworkInterfaceId=eni["NetworkInterfaceId"], Groups=groups
                    )
            return eni
        params: dict[str, Any] = {
            "SubnetId": subnet["SubnetId"],
            "Description": f"KaaS {what}: its stable address",
            "TagSpecifications": [
                {
                    "ResourceType": "network-interface",
                    "Tags": tag_list(broker_tags(cluster, broker_id, ROLE_ADDRESS)),
                }
            ],
        }
        params["Groups"] = groups
        with aws_errors(f"{what}: creating its ENI in {subnet['SubnetId']}"):
            eni = self.client.create_network_interface(**params)["NetworkInterface"]
        log.info(
            "aws_broker_eni_created",
            cluster=cluster,
            broker_id=broker_id,
            eni=eni["NetworkInterfaceId"],
            address=eni["PrivateIpAddress"],
        )
        return dict(eni)

    def broker_volume(self, cluster: str, broker_id: int, zone: str) -> dict[str, Any]:
        what = f"broker {broker_id} of cluster {cluster}"
        found = self.tagged_volumes(cluster, broker_id)
        if len(found) > 1:
            ids = ", ".join(v["VolumeId"] for v in found)
            raise ProviderError(f"{what}: more than one volume carries its tags ({ids}); keep one")
        if found:
            volume = found[0]
            if volume["AvailabilityZone"] != zone:
                raise ProviderError(
                    f"{what}: its volume {volume['VolumeId']} is in zone "
                    f"{volume['AvailabilityZone']}, not {zone}; a broker id keeps its zone "
                    "(or release its resources first)"
                )
            return volume
        s = self.settings
        with aws_errors(f"{what}: creating its data volume in {zone}"):
            volume = self.client.create_volume(
                AvailabilityZone=zone,
                Size=s.volume_size_gib,
                VolumeType=s.volume_type,
                Encrypted=s.volume_encrypted,
                TagSpecifications=[
                    {
                        "ResourceType": "volume",
                        "Tags": tag_list(broker_tags(cluster, broker_id, ROLE_DATA)),
                    }
                ],
            )
        volume_id = volume["VolumeId"]
        self.wait(
            f"{what}: volume {volume_id} becoming available",
            lambda: self.volume(volume_id)["State"] == "available",
        )
        log.info(
            "aws_broker_volume_created", cluster=cluster, broker_id=broker_id, volume=volume_id
        )
        return self.volume(volume_id)

    def detach_eni(self, eni: Mapping[str, Any], what: str) -> None:
        eni_id = eni["NetworkInterfaceId"]
        attachment = eni.get("Attachment") or {}
        if eni["Status"] == "available" or not attachment.get("AttachmentId"):
            return
        with aws_errors(
            f"{what}: ENI {eni_id} is attached to {attachment.get('InstanceId')} and could not be detached"
        ):
            self.client.detach_network_interface(AttachmentId=attachment["AttachmentId"])
        self.wait(
            f"{what}: ENI {eni_id} detaching from {attachment.get('InstanceId')}",
            lambda: self.eni(eni_id)["Status"] == "available",
        )

    def detach_volume(self, volume: Mapping[str, Any], what: str) -> None:
        volume_id = volume["VolumeId"]
        holder = volume_holder(volume)
        if holder is None:
            return
        with aws_errors(
            f"{what}: volume {volume_id} is attached to {holder} and could not be detached"
        ):
            self.client.detach_volume(VolumeId=volume_id, InstanceId=holder)
        self.wait(
            f"{what}: volume {volume_id} detaching from {holder}",
            lambda: self.volume(volume_id)["State"] == "available",
        )

    def attach_volume(self, volume_id: str, instance_id: str, what: str) -> None:
        with aws_errors(f"{what}: attaching volume {volume_id} to {instance_id}"):
            self.client.attach_volume(
                VolumeId=volume_id, InstanceId=instance_id, Device=self.settings.volume_device
            )
        self.wait(
            f"{what}: volume {volume_id} attaching to {instance_id}",
            lambda: any(
                a["InstanceId"] == instance_id and a["State"] == "attached"
                for a in self.volume(volume_id).get("Attachments", [])
            ),
        )
