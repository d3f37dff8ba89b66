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

from collections.abc import Callable, Mapping
from typing import Any

import boto3
import structlog

from management_plane.providers.aws_boot import BootIssuer
from management_plane.providers.aws_ec2 import (
    ROLE_ADDRESS,
    ROLE_BROKER,
    ROLE_DATA,
    TAG_BROKER_ID,
    TAG_CLUSTER,
    TAG_KAFKA_VERSION,
    TAG_ROLE,
    AwsSettings,
    Ec2,
    aws_errors,
    eni_holder,
    tag_filters,
    tag_list,
    tags_of,
    volume_holder,
)
from management_plane.providers.aws_network import (
    BrokerPorts,
    delete_cluster_groups,
    ensure_cluster_group,
)
from management_plane.providers.aws_userdata import BrokerInterface, VmBoot, render_user_data
from management_plane.providers.base import ProviderError, VmInfo, VmRequest
from management_plane.security.boot_tokens import UNBOUND_ADDRESS
from planner.contracts.paths import validate_cluster_name

__all__ = [
    "ROLE_ADDRESS",
    "ROLE_BROKER",
    "ROLE_DATA",
    "TAG_BROKER_ID",
    "TAG_CLUSTER",
    "TAG_ROLE",
    "AwsProvider",
    "AwsSettings",
]

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


class AwsProvider:
    name = "aws"

    def __init__(
        self,
        settings: AwsSettings,
        zookeeper_hosts: Callable[[str], str],
        boot: BootIssuer,
        session: boto3.session.Session | None = None,
    ) -> None:
        """`zookeeper_hosts(cluster)` is the cluster's ZooKeeper host:port list, which the
        VM's agent is told at boot; the management plane keeps it. `boot` mints the VM's
        boot ticket, its only way to its certificate."""
        self.settings = settings
        self._zookeeper_hosts = zookeeper_hosts
        self.boot = boot
        self.ports = BrokerPorts()
        session = session or boto3.session.Session()
        client = session.client(
            "ec2", region_name=settings.region, endpoint_url=settings.endpoint_url
        )
        self.ec2 = Ec2(client, settings)

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
        image_id = self.ec2.image(what)
        subnet = self.ec2.subnet(request.zone)
        groups = [
            ensure_cluster_group(
                self.ec2.client,
                request.cluster,
                subnet["VpcId"],
                self.settings.tenant_cidrs,
                self.ports,
            ),
            *self.settings.security_group_ids,
        ]
        eni: dict[str, Any] | None = None
        volume: dict[str, Any] | None = None
        interface: BrokerInterface | None = None
        if broker_id is not None:
            eni = self.ec2.broker_eni(request.cluster, broker_id, subnet, groups)
            volume = self.ec2.broker_volume(request.cluster, broker_id, request.zone)
            self._take_from_holders(request.cluster, broker_id, eni, volume)
            interface = BrokerInterface(
                address=eni["PrivateIpAddress"],
                mac=eni["MacAddress"],
                subnet_cidr=self.ec2.subnet_cidr(eni["SubnetId"], subnet),
            )
        # Without a broker ENI the VM's address is known only at launch: the token is bound
        # to it then, and grants nothing before.
        ticket = self.boot.ticket(
            request.cluster, interface.address if interface else UNBOUND_ADDRESS
        )
        boot = VmBoot(
            cluster=request.cluster,
            zookeeper_hosts=zookeeper_hosts,
            zone=request.zone,
            kafka_heap=self.settings.kafka_heap,
            ticket=ticket,
            interface=interface,
            volume_id=volume["VolumeId"] if volume else None,
            volume_device=self.settings.volume_device,
        )
        instance_id, primary_address = self._launch(
            request, image_id, subnet, eni, groups, render_user_data(boot), what
        )
        try:
            if interface is None:
                self.boot.bind(ticket, primary_address)
            self.ec2.wait_instance(instance_id, {"running", "shutting-down", "terminated"})
            if self.ec2.instance_state(instance_id) != "running":
                reason = (self.ec2.instance(instance_id) or {}).get("StateReason", {})
                raise ProviderError(
                    f"{what}: VM {instance_id} ended while starting "
                    f"({reason.get('Message', 'no reason given')})"
                )
            if volume is not None:
                self.ec2.attach_volume(volume["VolumeId"], instance_id, f"broker {broker_id}")
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
        instance = self.ec2.instance(vm_id)
        if instance is None:
            raise ProviderError(f"VM {vm_id}: no such EC2 instance")
        self._check_ours(instance)
        return self._vm_info(instance)

    def list_vms(self, cluster: str) -> list[VmInfo]:
        filters = [
            *tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_BROKER}),
            {"Name": "instance-state-name", "Values": _NOT_TERMINATED},
        ]
        instances: list[dict[str, Any]] = []
        with aws_errors(f"listing the VMs of cluster {cluster}"):
            for page in self.ec2.client.get_paginator("describe_instances").paginate(
                Filters=filters
            ):
                for reservation in page["Reservations"]:
                    instances.extend(reservation["Instances"])
        instances.sort(key=lambda i: (i["LaunchTime"], i["InstanceId"]))
        return [self._vm_info(instance) for instance in instances]

    def recycle_vm(self, vm_id: str) -> None:
        instance = self.ec2.instance(vm_id)
        if instance is None or instance["State"]["Name"] == "terminated":
            log.info("aws_vm_already_gone", vm=vm_id)
            return
        self._check_ours(instance)
        # An ENI or volume attached by id has DeleteOnTermination false: both stay.
        with aws_errors(f"VM {vm_id}: terminating"):
            self.ec2.client.terminate_instances(InstanceIds=[vm_id])
        self.ec2.wait_instance(vm_id, {"terminated"})
        log.info("aws_vm_recycled", vm=vm_id, cluster=tags_of(instance).get(TAG_CLUSTER))

    def release_broker_resources(self, cluster: str, broker_id: int) -> None:
        what = f"broker {broker_id} of cluster {cluster}"
        enis = self.ec2.tagged_enis(cluster, broker_id)
        volumes = self.ec2.tagged_volumes(cluster, broker_id)
        # Refuse before deleting anything: a live VM still uses them.
        for kind, resource_id, holder in [
            *(("ENI", e["NetworkInterfaceId"], eni_holder(e)) for e in enis),
            *(("volume", v["VolumeId"], volume_holder(v)) for v in volumes),
        ]:
            if holder is None:
                continue
            instance = self.ec2.instance(holder)
            if instance is not None and instance["State"]["Name"] != "terminated":
                raise ProviderError(
                    f"{what}: {kind} {resource_id} is attached to {instance['State']['Name']} "
                    f"instance {holder}; recycle that VM first"
                )
        for eni in enis:
            self.ec2.detach_eni(eni, what)
            with aws_errors(f"{what}: deleting ENI {eni['NetworkInterfaceId']}"):
                self.ec2.client.delete_network_interface(
                    NetworkInterfaceId=eni["NetworkInterfaceId"]
                )
        for volume in volumes:
            self.ec2.detach_volume(volume, what)
            with aws_errors(f"{what}: deleting volume {volume['VolumeId']}"):
                self.ec2.client.delete_volume(VolumeId=volume["VolumeId"])
        log.info(
            "aws_broker_resources_released",
            cluster=cluster,
            broker_id=broker_id,
            enis=[e["NetworkInterfaceId"] for e in enis],
            volumes=[v["VolumeId"] for v in volumes],
        )

    def delete_cluster(self, cluster: str) -> None:
        """Terminate every VM of the cluster, then delete its brokers' ENIs and volumes and
        its security group: nothing tagged with the cluster is left behind."""
        for info in self.list_vms(cluster):
            self.recycle_vm(info.vm_id)
        for broker_id in self.ec2.tagged_broker_ids(cluster):
            self.release_broker_resources(cluster, broker_id)
        delete_cluster_groups(self.ec2.client, cluster)

    def _take_from_holders(
        self, cluster: str, broker_id: int, eni: Mapping[str, Any], volume: Mapping[str, Any]
    ) -> None:
        """Free the broker's ENI and volume for a new VM: an older VM of the cluster that still
        holds them is stopped first (its broker shuts down cleanly), then they are detached."""
        what = f"broker {broker_id} of cluster {cluster}"
        holders = {
            holder: kind
            for kind, holder in (
                (f"ENI {eni['NetworkInterfaceId']}", eni_holder(eni)),
                (f"volume {volume['VolumeId']}", volume_holder(volume)),
            )
            if holder is not None
        }
        for holder, kind in holders.items():
            instance = self.ec2.instance(holder)
            if instance is None or instance["State"]["Name"] == "terminated":
                continue
            tags = tags_of(instance)
            if tags.get(TAG_CLUSTER) != cluster or tags.get(TAG_ROLE) != ROLE_BROKER:
                raise ProviderError(
                    f"{what}: {kind} is attached to instance {holder}, which is not a VM of "
                    "this cluster, and is not detached from it; detach it by hand"
                )
            state = instance["State"]["Name"]
            if state == "pending":  # EC2 stops only a running instance
                self.ec2.wait_instance(holder, {"running", "stopping", "stopped", "terminated"})
                state = self.ec2.instance_state(holder)
            if state == "running":
                log.info(
                    "aws_stopping_previous_holder", cluster=cluster, broker_id=broker_id, vm=holder
                )
                with aws_errors(f"{what}: stopping VM {holder}, which holds its {kind}"):
                    self.ec2.client.stop_instances(InstanceIds=[holder])
            self.ec2.wait_instance(holder, {"stopped", "terminated"})
        self.ec2.detach_eni(eni, what)
        self.ec2.detach_volume(volume, what)

    # -- instances ----------------------------------------------------------------------------

    def _launch(
        self,
        request: VmRequest,
        image_id: str,
        subnet: Mapping[str, Any],
        eni: Mapping[str, Any] | None,
        groups: list[str],
        user_data: str,
        what: str,
    ) -> tuple[str, str]:
        """The new instance's id and its primary address."""
        s = self.settings
        primary: dict[str, Any] = {
            "DeviceIndex": 0,
            "SubnetId": subnet["SubnetId"],
            "DeleteOnTermination": True,
            "Groups": groups,
        }
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
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tag_list(tags)}],
        }
        if s.instance_profile:
            key = "Arn" if s.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: s.instance_profile}
        if s.key_name:
            params["KeyName"] = s.key_name
        with aws_errors(f"{what}: launching {request.instance_type} from {image_id}"):
            instance = self.ec2.client.run_instances(**params)["Instances"][0]
        return str(instance["InstanceId"]), str(instance.get("PrivateIpAddress", ""))

    def _terminate_after_failed_create(self, instance_id: str) -> None:
        """A half-made VM is not left running; its ENI and volume stay (DeleteOnTermination false)."""
        try:
            with aws_errors(f"VM {instance_id}: terminating after a failed create"):
                self.ec2.client.terminate_instances(InstanceIds=[instance_id])
        except ProviderError as exc:
            log.warning("aws_cleanup_failed", vm=instance_id, error=str(exc))

    def _check_ours(self, instance: Mapping[str, Any]) -> None:
        tags = tags_of(instance)
        if tags.get(TAG_ROLE) != ROLE_BROKER or not tags.get(TAG_CLUSTER):
            raise ProviderError(
                f"VM {instance['InstanceId']}: not a KaaS broker VM (no {TAG_ROLE}={ROLE_BROKER} "
                f"and {TAG_CLUSTER} tags); left alone"
            )

    def _vm_info(self, instance: Mapping[str, Any]) -> VmInfo:
        tags = tags_of(instance)
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
