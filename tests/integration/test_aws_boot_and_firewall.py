"""The aws provider under moto's EC2 server: what a VM boots with (a one-time, expiring boot
ticket, no key or password; user data is readable by anyone allowed
DescribeInstanceAttribute) and the cluster's security group (tenants reach the tenant
listener only; every other port of a broker VM answers the VPC only)."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import pytest

from management_plane.errors import ApiError
from management_plane.providers.aws_network import BrokerPorts, group_name
from management_plane.providers.aws_userdata import ticket_text
from management_plane.security.boot_tokens import BootTokenRefused, boot_certificate
from planner.contracts.boot_ticket import BootTicket, parse_boot_ticket
from planner.pki.authority import create_authority, issued_by, new_key_pem, public_key_pem
from planner.pki.rotation import certificate_hosts
from tests.integration.test_aws_provider import (  # noqa: F401 (fixtures)
    API_CA_PEM,
    API_URL,
    BOOT_TOKENS,
    VPC_CIDR,
    ZONES,
    Account,
    _cluster,
    _instance,
    _provider,
    _request,
    account,
    moto_endpoint,
)

pytestmark = pytest.mark.integration

CA = create_authority("aws clusters", dt.datetime.now(dt.UTC))
PUBLIC = public_key_pem(new_key_pem()).decode()


def _user_data(account: Account, vm_id: str) -> str:  # noqa: F811
    encoded = account.ec2.describe_instance_attribute(InstanceId=vm_id, Attribute="userData")
    return base64.b64decode(encoded["UserData"]["Value"]).decode()


def _redeem(
    ticket: BootTicket, hosts: tuple[str, ...], after_s: float = 0.0
) -> tuple[bytes, bytes]:
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=after_s)
    return boot_certificate(BOOT_TOKENS, lambda cluster: CA, ticket.token, PUBLIC, hosts, at)


def test_the_user_data_carries_a_single_use_ticket_and_no_secret(account: Account) -> None:  # noqa: F811
    provider = _provider(account)
    vm = provider.create_vm(_request(_cluster(), ZONES[0], 0))
    script = _user_data(account, vm.vm_id)

    assert "PRIVATE KEY" not in script and "password" not in script.lower()
    ticket = parse_boot_ticket(ticket_text(script))
    assert (ticket.api_url, ticket.api_ca_pem) == (API_URL, API_CA_PEM)
    # A request naming another VM's address is refused and leaves the token usable.
    with pytest.raises(ApiError, match="not the VM's address"):
        _redeem(ticket, ("10.20.9.9",))
    certificate, bundle = _redeem(ticket, (vm.address,))
    assert issued_by(certificate, CA.certificate_pem) and bundle == CA.certificate_pem
    assert certificate_hosts(certificate) == (vm.address,)
    with pytest.raises(BootTokenRefused):
        _redeem(ticket, (vm.address,))


def test_the_ticket_expires(account: Account) -> None:  # noqa: F811
    from tests.integration.test_aws_provider import boot_issuer

    provider = _provider(account)
    provider.boot = boot_issuer(ttl_s=60)
    vm = provider.create_vm(_request(_cluster(), ZONES[1], 0))
    ticket = parse_boot_ticket(ticket_text(_user_data(account, vm.vm_id)))
    with pytest.raises(BootTokenRefused):
        _redeem(ticket, (vm.address,), after_s=61)
    certificate, _ = _redeem(ticket, (vm.address,), after_s=30)  # refusing did not spend it
    assert certificate_hosts(certificate) == (vm.address,)


def test_a_vm_without_a_broker_eni_gets_a_ticket_for_its_launch_address(account: Account) -> None:  # noqa: F811
    provider = _provider(account)
    vm = provider.create_vm(_request(_cluster(), ZONES[2], None))
    primary = _instance(account, vm.vm_id)["PrivateIpAddress"]
    ticket = parse_boot_ticket(ticket_text(_user_data(account, vm.vm_id)))
    with pytest.raises(ApiError, match="not the VM's address"):
        _redeem(ticket, ("10.20.2.250",))
    certificate, _ = _redeem(ticket, (primary,))
    assert certificate_hosts(certificate) == (primary,)


def _group(account: Account, group_id: str) -> dict[str, Any]:  # noqa: F811
    return dict(account.ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0])


def _rules(group: dict[str, Any]) -> dict[int, set[str]]:
    """port -> sources; any rule other than one TCP port from IPv4 blocks fails the test."""
    by_port: dict[int, set[str]] = {}
    for permission in group["IpPermissions"]:
        assert permission["IpProtocol"] == "tcp", permission
        assert permission["FromPort"] == permission["ToPort"], permission
        assert not permission.get("UserIdGroupPairs"), permission
        by_port.setdefault(permission["FromPort"], set()).update(
            r["CidrIp"] for r in permission["IpRanges"]
        )
    return by_port


def _cluster_group_id(account: Account, vm_id: str, extra: str) -> str:  # noqa: F811
    [primary] = [
        n
        for n in _instance(account, vm_id)["NetworkInterfaces"]
        if n["Attachment"]["DeviceIndex"] == 0
    ]
    groups = {g["GroupId"] for g in primary["Groups"]}
    assert extra in groups and len(groups) == 2, groups
    return (groups - {extra}).pop()


def test_only_the_tenant_listener_is_open_beyond_the_vpc(account: Account) -> None:  # noqa: F811
    provider = _provider(account)
    cluster = _cluster()
    vm = provider.create_vm(_request(cluster, ZONES[0], 0))
    group_id = _cluster_group_id(account, vm.vm_id, account.security_group)
    group = _group(account, group_id)
    assert group["GroupName"] == group_name(cluster) and group["VpcId"] == account.vpc_id
    ports = BrokerPorts()
    internal = set(ports.internal_ports().values())
    assert _rules(group) == {ports.tenant: {"0.0.0.0/0"}, **{p: {VPC_CIDR} for p in internal}}
    # The broker's ENI (its stable address) is in the same groups.
    [secondary] = [
        n
        for n in _instance(account, vm.vm_id)["NetworkInterfaces"]
        if n["Attachment"]["DeviceIndex"] == 1
    ]
    assert {g["GroupId"] for g in secondary["Groups"]} == {group_id, account.security_group}

    # A rule added by hand that opens the internal listener (or SSH) to the world is revoked
    # at the cluster's next VM; the group is found again, not made twice.
    account.ec2.authorize_security_group_ingress(
        GroupId=group_id,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}
            for p in (ports.internal, 22)
        ],
    )
    second = provider.create_vm(_request(cluster, ZONES[1], 1))
    assert _cluster_group_id(account, second.vm_id, account.security_group) == group_id
    assert _rules(_group(account, group_id)) == {
        ports.tenant: {"0.0.0.0/0"},
        **{p: {VPC_CIDR} for p in internal},
    }


def test_tenant_networks_narrow_the_tenant_rule_and_an_old_eni_is_moved_in(
    account: Account,  # noqa: F811
) -> None:
    cluster = _cluster()
    # A broker ENI made by an older release, in the account's group only.
    old_eni = account.ec2.create_network_interface(
        SubnetId=account.subnets[ZONES[0]],
        Groups=[account.security_group],
        TagSpecifications=[
            {
                "ResourceType": "network-interface",
                "Tags": [
                    {"Key": "kaas:cluster", "Value": cluster},
                    {"Key": "kaas:broker-id", "Value": "0"},
                    {"Key": "kaas:role", "Value": "broker-address"},
                ],
            }
        ],
    )["NetworkInterface"]
    provider = _provider(account, tenant_cidrs=("203.0.113.0/24",))
    vm = provider.create_vm(_request(cluster, ZONES[0], 0))
    assert vm.address == old_eni["PrivateIpAddress"]
    group_id = _cluster_group_id(account, vm.vm_id, account.security_group)
    assert _rules(_group(account, group_id))[BrokerPorts().tenant] == {"203.0.113.0/24"}
    eni = account.ec2.describe_network_interfaces(
        NetworkInterfaceIds=[old_eni["NetworkInterfaceId"]]
    )["NetworkInterfaces"][0]
    assert {g["GroupId"] for g in eni["Groups"]} == {group_id, account.security_group}
