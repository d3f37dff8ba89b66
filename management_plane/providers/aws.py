"""The aws provider: broker VMs on EC2, launched from the Packer image (packer/kaas-vm.pkr.hcl).

Seed 003's scheme keeps a broker's address and data across VM replacements: one ENI and one
EBS volume per broker id, tagged with the cluster and the broker id, created on first use in
the broker's zone and never deleted with a VM. The ENI is the instance's secondary interface
(attached at launch), the volume its data disk (attached once the instance runs). A VM for
a broker id whose resources are still on an older VM stops that VM, so its broker shuts down
cleanly, detaches them and attaches them to the new one. Every lookup goes by tag before
anything is created, so a retry after a crash finds what the first attempt made.

docs/aws-provider.md describes the resources, tags, settings and the replacement sequence.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
import structlog
from botocore.exceptions import BotoCoreError, ClientError

from management_plane.providers.aws_userdata import BrokerInterface, VmBoot, render_user_data
from management_plane.providers.base import ProviderError, VmInfo, VmRequest
from planner.zkpaths import validate_cluster_name

TAG_CLUSTER = "kaas:cluster"
TAG_ROLE = "kaas:role"
TAG_BROKER_ID = "kaas:broker-id"
TAG_KAFKA_VERSION = "kaas:kafka-version"
ROLE_BROKER = "broker"
ROLE_ADDRESS = "broker-address"
"""kaas:role of a broker id's ENI."""
ROLE_DATA = "broker-data"
"""kaas:role of a broker id's EBS volume."""
RESERVED_TAG_PREFIXES = ("kaas:", "aws:")

# EC2 instance states onto the interface's VM_STATES.
_STATES = {
    "pending": "pending",
    "running": "running",
    "stopping": "stopped",
    "stopped": "stopped",
    "shutting-down": "terminated",
    "terminated": "terminated",
}
_NOT_TERMINATED = ["pending", "running", "stopping", "stopped"]

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
    vpc_id: str | None = None
    """VPC in which a zone without a tagged subnet gets one; also limits the subnet lookup."""
    vpc_tags: Mapping[str, str] = field(default_factory=dict)
    """Find that VPC by these tags instead (exactly one must match); empty: vpc_id only."""
    subnet_prefix_length: int = 24
    """Size of a created subnet: the first free block of this length in the VPC's CIDR."""
    security_group_ids: tuple[str, ...] = ()
    """Groups of the broker ENIs and the instances' primary interfaces; (): the VPC default."""
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


def check_zookeeper_hosts(cluster: str, hosts: str) -> str:
    """A host:port list without a chroot, as the agent's zookeeper_hosts wants it (pure)."""
    entries = [entry.strip() for entry in hosts.split(",")]
    for entry in entries:
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit() or "/" in entry:
            raise ProviderError(
                f"cluster {cluster}: ZooKeeper connect string {hosts!r} is not a host:port list"
            )
    return ",".join(entries)


def _check_request(request: VmRequest) -> None:
    try:
        validate_cluster_name(request.cluster)
    except ValueError as exc:
        raise ProviderError(str(exc)) from None
    for name in ("zone", "instance_type", "kafka_version"):
        if not getattr(request, name):
            raise ProviderError(f"VM for cluster {request.cluster}: {name} is empty")
    if request.reuse_broker_id is not None and request.reuse_broker_id < 0:
        raise ProviderError(
            f"VM for cluster {request.cluster}: broker id {request.reuse_broker_id} is negative"
        )
    reserved = sorted(k for k in request.tags if k.startswith(RESERVED_TAG_PREFIXES) or k == "Name")
    if reserved:
        raise ProviderError(
            f"VM for cluster {request.cluster}: tag(s) {', '.join(reserved)} are set by the provider"
        )


def _tags(resource: Mapping[str, Any]) -> dict[str, str]:
    # ENIs carry theirs as TagSet, everything else as Tags.
    tags = resource.get("Tags") or resource.get("TagSet") or []
    return {tag["Key"]: tag["Value"] for tag in tags}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def _tag_filters(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"Name": f"tag:{key}", "Values": [value]} for key, value in tags.items()]


def _broker_tags(cluster: str, broker_id: int, role: str) -> dict[str, str]:
    return {
        "Name": f"{cluster}-broker-{broker_id}",
        TAG_CLUSTER: cluster,
        TAG_BROKER_ID: str(broker_id),
        TAG_ROLE: role,
    }


@contextmanager
def _aws(what: str) -> Iterator[None]:
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


class AwsProvider:
    name = "aws"

    def __init__(
        self,
        settings: AwsSettings,
        zookeeper_hosts: Callable[[str], str],
        session: boto3.session.Session | None = None,
    ) -> None:
        """`zookeeper_hosts(cluster)` is the cluster's ZooKeeper host:port list, which the
        VM's agent is told at boot; the management plane keeps it."""
        self.settings = settings
        self._zookeeper_hosts = zookeeper_hosts
        session = session or boto3.session.Session()
        self.ec2: Any = session.client(
            "ec2", region_name=settings.region, endpoint_url=settings.endpoint_url
        )

    # -- the Provider interface -------------------------------------------------------------

    def create_vm(self, request: VmRequest) -> VmInfo:
        _check_request(request)
        broker_id = request.reuse_broker_id
        what = f"VM for cluster {request.cluster} in {request.zone}" + (
            "" if broker_id is None else f" (broker {broker_id})"
        )
        zookeeper_hosts = check_zookeeper_hosts(
            request.cluster, self._zookeeper_hosts(request.cluster)
        )
        image_id = self._image(what)
        subnet = self._subnet(request.zone)
        eni: dict[str, Any] | None = None
        volume: dict[str, Any] | None = None
        interface: BrokerInterface | None = None
        if broker_id is not None:
            eni = self._broker_eni(request.cluster, broker_id, subnet)
            volume = self._broker_volume(request.cluster, broker_id, request.zone)
            self._take_from_holders(request.cluster, broker_id, eni, volume)
            interface = BrokerInterface(
                address=eni["PrivateIpAddress"],
                mac=eni["MacAddress"],
                subnet_cidr=self._subnet_cidr(eni["SubnetId"], subnet),
            )
        boot = VmBoot(
            cluster=request.cluster,
            zookeeper_hosts=zookeeper_hosts,
            zone=request.zone,
            kafka_heap=self.settings.kafka_heap,
            interface=interface,
            volume_id=volume["VolumeId"] if volume else None,
            volume_device=self.settings.volume_device,
        )
        instance_id = self._launch(request, image_id, subnet, eni, render_user_data(boot), what)
        try:
            self._wait_instance(instance_id, {"running"})
            if volume is not None:
                self._attach_volume(volume["VolumeId"], instance_id, f"broker {broker_id}")
        except ProviderError:
            self._terminate_after_failed_create(instance_id)
            raise
        info = self.describe_vm(instance_id)
        log.info(
            "aws_vm_created",
            vm=instance_id,
            cluster=request.cluster,
            zone=request.zone,
            broker_id=broker_id,
            address=info.address,
            eni=eni["NetworkInterfaceId"] if eni else None,
            volume=volume["VolumeId"] if volume else None,
        )
        return info

    def describe_vm(self, vm_id: str) -> VmInfo:
        instance = self._instance(vm_id)
        if instance is None:
            raise ProviderError(f"VM {vm_id}: no such EC2 instance")
        self._check_ours(instance)
        return self._vm_info(instance)

    def list_vms(self, cluster: str) -> list[VmInfo]:
        filters = [
            *_tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_BROKER}),
            {"Name": "instance-state-name", "Values": _NOT_TERMINATED},
        ]
        instances: list[dict[str, Any]] = []
        with _aws(f"listing the VMs of cluster {cluster}"):
            for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
                for reservation in page["Reservations"]:
                    instances.extend(reservation["Instances"])
        instances.sort(key=lambda i: (i["LaunchTime"], i["InstanceId"]))
        return [self._vm_info(instance) for instance in instances]

    def recycle_vm(self, vm_id: str) -> None:
        instance = self._instance(vm_id)
        if instance is None or instance["State"]["Name"] == "terminated":
            log.info("aws_vm_already_gone", vm=vm_id)
            return
        self._check_ours(instance)
        # An ENI or volume attached by id has DeleteOnTermination false: both stay.
        with _aws(f"VM {vm_id}: terminating"):
            self.ec2.terminate_instances(InstanceIds=[vm_id])
        self._wait_instance(vm_id, {"terminated"})
        log.info("aws_vm_recycled", vm=vm_id, cluster=_tags(instance).get(TAG_CLUSTER))

    def release_broker_resources(self, cluster: str, broker_id: int) -> None:
        what = f"broker {broker_id} of cluster {cluster}"
        enis = self._tagged_enis(cluster, broker_id)
        volumes = self._tagged_volumes(cluster, broker_id)
        # Refuse before deleting anything: a live VM still uses them.
        for kind, resource_id, holder in [
            *(("ENI", e["NetworkInterfaceId"], _eni_holder(e)) for e in enis),
            *(("volume", v["VolumeId"], _volume_holder(v)) for v in volumes),
        ]:
            if holder is None:
                continue
            instance = self._instance(holder)
            if instance is not None and instance["State"]["Name"] != "terminated":
                raise ProviderError(
                    f"{what}: {kind} {resource_id} is attached to {instance['State']['Name']} "
                    f"instance {holder}; recycle that VM first"
                )
        for eni in enis:
            self._detach_eni(eni, what)
            with _aws(f"{what}: deleting ENI {eni['NetworkInterfaceId']}"):
                self.ec2.delete_network_interface(NetworkInterfaceId=eni["NetworkInterfaceId"])
        for volume in volumes:
            self._detach_volume(volume, what)
            with _aws(f"{what}: deleting volume {volume['VolumeId']}"):
                self.ec2.delete_volume(VolumeId=volume["VolumeId"])
        log.info(
            "aws_broker_resources_released",
            cluster=cluster,
            broker_id=broker_id,
            enis=[e["NetworkInterfaceId"] for e in enis],
            volumes=[v["VolumeId"] for v in volumes],
        )

    # -- image, network -----------------------------------------------------------------------

    def _image(self, what: str) -> str:
        s = self.settings
        if s.ami_id:
            with _aws(f"{what}: image {s.ami_id}"):
                images = self.ec2.describe_images(ImageIds=[s.ami_id])["Images"]
            if not images:
                raise ProviderError(f"{what}: no AMI {s.ami_id} in {s.region}")
            return s.ami_id
        filters = [
            {"Name": "name", "Values": [s.ami_name]},
            {"Name": "state", "Values": ["available"]},
            *_tag_filters(s.ami_tags),
        ]
        with _aws(f"{what}: looking up the image"):
            images = self.ec2.describe_images(Owners=list(s.ami_owners), Filters=filters)["Images"]
        if not images:
            tags = ", ".join(f"{k}={v}" for k, v in s.ami_tags.items()) or "none"
            raise ProviderError(
                f"{what}: no AMI named {s.ami_name!r} with tags {tags} owned by "
                f"{', '.join(s.ami_owners)} in {s.region}; build one with packer/kaas-vm.pkr.hcl"
            )
        newest = max(images, key=lambda image: (image.get("CreationDate", ""), image["ImageId"]))
        return str(newest["ImageId"])

    def _vpc_id(self) -> str | None:
        s = self.settings
        if s.vpc_id:
            return s.vpc_id
        if not s.vpc_tags:
            return None
        with _aws("looking up the VPC"):
            vpcs = self.ec2.describe_vpcs(Filters=_tag_filters(s.vpc_tags))["Vpcs"]
        if len(vpcs) != 1:
            tags = ", ".join(f"{k}={v}" for k, v in s.vpc_tags.items())
            found = ", ".join(v["VpcId"] for v in vpcs) or "none"
            raise ProviderError(f"VPC tagged {tags}: exactly one must exist, found {found}")
        return str(vpcs[0]["VpcId"])

    def _subnet(self, zone: str) -> dict[str, Any]:
        """The zone's broker subnet, found by tags, else created in the configured VPC."""
        s = self.settings
        vpc_id = self._vpc_id()
        filters = [{"Name": "availability-zone", "Values": [zone]}, *_tag_filters(s.subnet_tags)]
        if vpc_id:
            filters.append({"Name": "vpc-id", "Values": [vpc_id]})
        with _aws(f"zone {zone}: looking up the broker subnet"):
            subnets = self.ec2.describe_subnets(Filters=filters)["Subnets"]
        if subnets:
            return dict(min(subnets, key=lambda subnet: subnet["SubnetId"]))
        tags = ", ".join(f"{k}={v}" for k, v in s.subnet_tags.items()) or "any tags"
        if vpc_id is None:
            raise ProviderError(
                f"zone {zone}: no subnet tagged {tags}, and no VPC configured to create one in "
                "(aws settings vpc_id or vpc_tags)"
            )
        return self._create_subnet(zone, vpc_id)

    def _create_subnet(self, zone: str, vpc_id: str) -> dict[str, Any]:
        s = self.settings
        with _aws(f"zone {zone}: creating a broker subnet in {vpc_id}"):
            vpc = self.ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
            taken = [
                subnet["CidrBlock"]
                for subnet in self.ec2.describe_subnets(
                    Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]
                )["Subnets"]
            ]
            cidr = free_subnet_cidr(vpc["CidrBlock"], taken, s.subnet_prefix_length)
            if cidr is None:
                raise ProviderError(
                    f"zone {zone}: VPC {vpc_id} ({vpc['CidrBlock']}) has no free "
                    f"/{s.subnet_prefix_length} for a broker subnet"
                )
            subnet = self.ec2.create_subnet(
                VpcId=vpc_id,
                CidrBlock=cidr,
                AvailabilityZone=zone,
                TagSpecifications=[
                    {
                        "ResourceType": "subnet",
                        "Tags": _tag_list({"Name": f"kaas-brokers-{zone}", **s.subnet_tags}),
                    }
                ],
            )["Subnet"]
        log.info("aws_subnet_created", zone=zone, vpc=vpc_id, subnet=subnet["SubnetId"], cidr=cidr)
        return dict(subnet)

    def _subnet_cidr(self, subnet_id: str, known: Mapping[str, Any]) -> str:
        if subnet_id == known["SubnetId"]:
            return str(known["CidrBlock"])
        with _aws(f"subnet {subnet_id}"):
            return str(self.ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["CidrBlock"])

    # -- per-broker resources -----------------------------------------------------------------

    def _tagged_enis(self, cluster: str, broker_id: int) -> list[dict[str, Any]]:
        filters = _tag_filters(
            {TAG_CLUSTER: cluster, TAG_BROKER_ID: str(broker_id), TAG_ROLE: ROLE_ADDRESS}
        )
        with _aws(f"broker {broker_id} of cluster {cluster}: looking up its ENI"):
            found = self.ec2.describe_network_interfaces(Filters=filters)["NetworkInterfaces"]
        return sorted(found, key=lambda eni: eni["NetworkInterfaceId"])

    def _tagged_volumes(self, cluster: str, broker_id: int) -> list[dict[str, Any]]:
        filters = _tag_filters(
            {TAG_CLUSTER: cluster, TAG_BROKER_ID: str(broker_id), TAG_ROLE: ROLE_DATA}
        )
        with _aws(f"broker {broker_id} of cluster {cluster}: looking up its volume"):
            found = self.ec2.describe_volumes(Filters=filters)["Volumes"]
        return sorted(found, key=lambda volume: volume["VolumeId"])

    def _broker_eni(
        self, cluster: str, broker_id: int, subnet: Mapping[str, Any]
    ) -> dict[str, Any]:
        what = f"broker {broker_id} of cluster {cluster}"
        found = self._tagged_enis(cluster, broker_id)
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
            return eni
        params: dict[str, Any] = {
            "SubnetId": subnet["SubnetId"],
            "Description": f"KaaS {what}: its stable address",
            "TagSpecifications": [
                {
                    "ResourceType": "network-interface",
                    "Tags": _tag_list(_broker_tags(cluster, broker_id, ROLE_ADDRESS)),
                }
            ],
        }
        if self.settings.security_group_ids:
            params["Groups"] = list(self.settings.security_group_ids)
        with _aws(f"{what}: creating its ENI in {subnet['SubnetId']}"):
            eni = self.ec2.create_network_interface(**params)["NetworkInterface"]
        log.info(
            "aws_broker_eni_created",
            cluster=cluster,
            broker_id=broker_id,
            eni=eni["NetworkInterfaceId"],
            address=eni["PrivateIpAddress"],
        )
        return dict(eni)

    def _broker_volume(self, cluster: str, broker_id: int, zone: str) -> dict[str, Any]:
        what = f"broker {broker_id} of cluster {cluster}"
        found = self._tagged_volumes(cluster, broker_id)
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
        with _aws(f"{what}: creating its data volume in {zone}"):
            volume = self.ec2.create_volume(
                AvailabilityZone=zone,
                Size=s.volume_size_gib,
                VolumeType=s.volume_type,
                Encrypted=s.volume_encrypted,
                TagSpecifications=[
                    {
                        "ResourceType": "volume",
                        "Tags": _tag_list(_broker_tags(cluster, broker_id, ROLE_DATA)),
                    }
                ],
            )
        volume_id = volume["VolumeId"]
        self._wait(
            f"{what}: volume {volume_id} becoming available",
            lambda: self._volume(volume_id)["State"] == "available",
        )
        log.info(
            "aws_broker_volume_created", cluster=cluster, broker_id=broker_id, volume=volume_id
        )
        return self._volume(volume_id)

    def _take_from_holders(
        self, cluster: str, broker_id: int, eni: Mapping[str, Any], volume: Mapping[str, Any]
    ) -> None:
        """Free the broker's ENI and volume for a new VM: an older VM of the cluster that still
        holds them is stopped first (its broker shuts down cleanly), then they are detached."""
        what = f"broker {broker_id} of cluster {cluster}"
        holders = {
            holder: kind
            for kind, holder in (
                (f"ENI {eni['NetworkInterfaceId']}", _eni_holder(eni)),
                (f"volume {volume['VolumeId']}", _volume_holder(volume)),
            )
            if holder is not None
        }
        for holder, kind in holders.items():
            instance = self._instance(holder)
            if instance is None or instance["State"]["Name"] == "terminated":
                continue
            tags = _tags(instance)
            if tags.get(TAG_CLUSTER) != cluster or tags.get(TAG_ROLE) != ROLE_BROKER:
                raise ProviderError(
                    f"{what}: {kind} is attached to instance {holder}, which is not a VM of "
                    "this cluster, and is not detached from it; detach it by hand"
                )
            if instance["State"]["Name"] in ("pending", "running"):
                log.info(
                    "aws_stopping_previous_holder", cluster=cluster, broker_id=broker_id, vm=holder
                )
                with _aws(f"{what}: stopping VM {holder}, which holds its {kind}"):
                    self.ec2.stop_instances(InstanceIds=[holder])
            self._wait_instance(holder, {"stopped", "terminated"})
        self._detach_eni(eni, what)
        self._detach_volume(volume, what)

    def _detach_eni(self, eni: Mapping[str, Any], what: str) -> None:
        eni_id = eni["NetworkInterfaceId"]
        attachment = eni.get("Attachment") or {}
        if eni["Status"] == "available" or not attachment.get("AttachmentId"):
            return
        with _aws(
            f"{what}: ENI {eni_id} is attached to {attachment.get('InstanceId')} and could not be detached"
        ):
            self.ec2.detach_network_interface(AttachmentId=attachment["AttachmentId"])
        self._wait(
            f"{what}: ENI {eni_id} detaching from {attachment.get('InstanceId')}",
            lambda: self._eni(eni_id)["Status"] == "available",
        )

    def _detach_volume(self, volume: Mapping[str, Any], what: str) -> None:
        volume_id = volume["VolumeId"]
        holder = _volume_holder(volume)
        if holder is None:
            return
        with _aws(f"{what}: volume {volume_id} is attached to {holder} and could not be detached"):
            self.ec2.detach_volume(VolumeId=volume_id, InstanceId=holder)
        self._wait(
            f"{what}: volume {volume_id} detaching from {holder}",
            lambda: self._volume(volume_id)["State"] == "available",
        )

    def _attach_volume(self, volume_id: str, instance_id: str, what: str) -> None:
        with _aws(f"{what}: attaching volume {volume_id} to {instance_id}"):
            self.ec2.attach_volume(
                VolumeId=volume_id, InstanceId=instance_id, Device=self.settings.volume_device
            )
        self._wait(
            f"{what}: volume {volume_id} attaching to {instance_id}",
            lambda: any(
                a["InstanceId"] == instance_id and a["State"] == "attached"
                for a in self._volume(volume_id).get("Attachments", [])
            ),
        )

    # -- instances ----------------------------------------------------------------------------

    def _launch(
        self,
        request: VmRequest,
        image_id: str,
        subnet: Mapping[str, Any],
        eni: Mapping[str, Any] | None,
        user_data: str,
        what: str,
    ) -> str:
        s = self.settings
        primary: dict[str, Any] = {
            "DeviceIndex": 0,
            "SubnetId": subnet["SubnetId"],
            "DeleteOnTermination": True,
        }
        if s.security_group_ids:
            primary["Groups"] = list(s.security_group_ids)
        interfaces = [primary]
        if eni is not None:
            interfaces.append(
                {
                    "DeviceIndex": s.eni_device_index,
                    "NetworkInterfaceId": eni["NetworkInterfaceId"],
                    "DeleteOnTermination": False,
                }
            )
        tags = {
            **request.tags,
            "Name": f"{request.cluster}-broker"
            + ("" if request.reuse_broker_id is None else f"-{request.reuse_broker_id}"),
            TAG_CLUSTER: request.cluster,
            TAG_ROLE: ROLE_BROKER,
            TAG_KAFKA_VERSION: request.kafka_version,
        }
        if request.reuse_broker_id is not None:
            tags[TAG_BROKER_ID] = str(request.reuse_broker_id)
        params: dict[str, Any] = {
            "ImageId": image_id,
            "InstanceType": request.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            "NetworkInterfaces": interfaces,
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            # Tagged at launch, atomically: a crash right after still leaves a findable VM.
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tag_list(tags)}],
        }
        if s.instance_profile:
            key = "Arn" if s.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: s.instance_profile}
        if s.key_name:
            params["KeyName"] = s.key_name
        with _aws(f"{what}: launching {request.instance_type} from {image_id}"):
            instance = self.ec2.run_instances(**params)["Instances"][0]
        return str(instance["InstanceId"])

    def _terminate_after_failed_create(self, instance_id: str) -> None:
        """A half-made VM is not left running; its ENI and volume stay (DeleteOnTermination false)."""
        try:
            with _aws(f"VM {instance_id}: terminating after a failed create"):
                self.ec2.terminate_instances(InstanceIds=[instance_id])
        except ProviderError as exc:
            log.warning("aws_cleanup_failed", vm=instance_id, error=str(exc))

    def _instance(self, vm_id: str) -> dict[str, Any] | None:
        try:
            reservations = self.ec2.describe_instances(InstanceIds=[vm_id])["Reservations"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
                return None
            with _aws(f"VM {vm_id}"):
                raise
        except BotoCoreError as exc:
            raise ProviderError(f"VM {vm_id}: {exc}") from exc
        instances = [i for r in reservations for i in r["Instances"]]
        return dict(instances[0]) if instances else None

    def _check_ours(self, instance: Mapping[str, Any]) -> None:
        tags = _tags(instance)
        if tags.get(TAG_ROLE) != ROLE_BROKER or not tags.get(TAG_CLUSTER):
            raise ProviderError(
                f"VM {instance['InstanceId']}: not a KaaS broker VM (no {TAG_ROLE}={ROLE_BROKER} "
                f"and {TAG_CLUSTER} tags); left alone"
            )

    def _vm_info(self, instance: Mapping[str, Any]) -> VmInfo:
        tags = _tags(instance)
        address = str(instance.get("PrivateIpAddress", ""))
        for interface in instance.get("NetworkInterfaces", []):
            if interface.get("Attachment", {}).get("DeviceIndex") == self.settings.eni_device_index:
                address = str(interface["PrivateIpAddress"])
        broker_id = tags.get(TAG_BROKER_ID)
        return VmInfo(
            vm_id=str(instance["InstanceId"]),
            cluster=tags.get(TAG_CLUSTER, ""),
            zone=str(instance["Placement"]["AvailabilityZone"]),
            address=address,
            state=_STATES.get(instance["State"]["Name"], "pending"),
            instance_type=str(instance["InstanceType"]),
            kafka_version=tags.get(TAG_KAFKA_VERSION, ""),
            broker_id=int(broker_id) if broker_id and broker_id.isdigit() else None,
        )

    def _wait_instance(self, vm_id: str, states: set[str]) -> None:
        def reached() -> bool:
            instance = self._instance(vm_id)
            if instance is None:
                return "terminated" in states
            return instance["State"]["Name"] in states

        self._wait(f"VM {vm_id}: reaching {' or '.join(sorted(states))}", reached)

    def _eni(self, eni_id: str) -> dict[str, Any]:
        with _aws(f"ENI {eni_id}"):
            found = self.ec2.describe_network_interfaces(NetworkInterfaceIds=[eni_id])
        return dict(found["NetworkInterfaces"][0])

    def _volume(self, volume_id: str) -> dict[str, Any]:
        with _aws(f"volume {volume_id}"):
            return dict(self.ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0])

    def _wait(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.settings.wait_timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise ProviderError(f"{what}: not done after {self.settings.wait_timeout_s:.0f} s")
            time.sleep(self.settings.poll_interval_s)


def _eni_holder(eni: Mapping[str, Any]) -> str | None:
    if eni.get("Status") == "available":
        return None
    holder = (eni.get("Attachment") or {}).get("InstanceId")
    return str(holder) if holder else None


def _volume_holder(volume: Mapping[str, Any]) -> str | None:
    for attachment in volume.get("Attachments", []):
        if attachment.get("State") in ("attaching", "attached", "busy", "detaching"):
            return str(attachment["InstanceId"])
    return None
