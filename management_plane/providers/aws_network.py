"""The broker VMs' security group: tenants reach the tenant listener and nothing else; every
other port a broker VM serves (the internal listener, the KRaft controller, ZooKeeper's
client, quorum and election ports, Jolokia) answers the VPC only.

`ingress_rules` and `rule_changes` are pure (table-tested); `ensure_cluster_group` finds the
cluster's group by its tags or creates it, then makes its ingress rules exactly the wanted
ones (a rule added by hand that opens a port wider is revoked).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from management_plane.providers.aws_ec2 import (
    TAG_CLUSTER,
    TAG_ROLE,
    aws_errors,
    tag_filters,
    tag_list,
)
from management_plane.providers.base import ProviderError

ROLE_FIREWALL = "broker-firewall"
"""kaas:role of a cluster's security group."""

log = structlog.get_logger("kaas.management_plane.aws")


@dataclass(frozen=True)
class BrokerPorts:
    """The ports a broker VM serves: the agent's defaults (agent/settings.py), which the
    aws user data leaves as they are; tests check the two agree."""

    tenant: int = 9094
    internal: int = 9092
    controller: int = 9093
    zookeeper_client: int = 2181
    zookeeper_peer: int = 2888
    zookeeper_election: int = 3888
    jolokia: int = 8778

    def internal_ports(self) -> dict[str, int]:
        return {
            "Kafka internal listener (mutual TLS)": self.internal,
            "KRaft controller listener": self.controller,
            "ZooKeeper client port (TLS)": self.zookeeper_client,
            "ZooKeeper quorum port": self.zookeeper_peer,
            "ZooKeeper election port": self.zookeeper_election,
            "Jolokia (HTTPS, client certificate)": self.jolokia,
        }


@dataclass(frozen=True, order=True)
class IngressRule:
    port: int
    cidr: str
    description: str = ""

    @property
    def key(self) -> tuple[int, str]:
        return (self.port, self.cidr)


def _network(cidr: str, what: str) -> str:
    try:
        return str(ipaddress.ip_network(cidr, strict=True))
    except ValueError as exc:
        raise ProviderError(f"{what}: {cidr!r} is not a network ({exc})") from None


def ingress_rules(
    vpc_cidrs: Iterable[str], tenant_cidrs: Iterable[str], ports: BrokerPorts = BrokerPorts()
) -> list[IngressRule]:
    """Every TCP rule of a cluster's group (pure): the tenant port from the tenants'
    networks, every other port from the VPC's own blocks."""
    vpc = sorted({_network(c, "VPC CIDR") for c in vpc_cidrs})
    tenants = sorted({_network(c, "tenant CIDR") for c in tenant_cidrs})
    if not vpc:
        raise ProviderError("the VPC has no CIDR block to limit the internal ports to")
    rules = [
        IngressRule(ports.tenant, cidr, "Kafka tenant listener (SASL_SSL)") for cidr in tenants
    ]
    for description, port in ports.internal_ports().items():
        rules.extend(IngressRule(port, cidr, f"{description}, VPC only") for cidr in vpc)
    return sorted(rules)


@dataclass(frozen=True)
class RuleChanges:
    authorize: tuple[IngressRule, ...]
    revoke: tuple[IngressRule, ...]


def rule_changes(wanted: Iterable[IngressRule], present: Iterable[IngressRule]) -> RuleChanges:
    """What makes `present` exactly `wanted` (pure; a rule is its port and source)."""
    wanted_keys = {rule.key: rule for rule in wanted}
    present_keys = {rule.key: rule for rule in present}
    return RuleChanges(
        authorize=tuple(sorted(r for k, r in wanted_keys.items() if k not in present_keys)),
        revoke=tuple(sorted(r for k, r in present_keys.items() if k not in wanted_keys)),
    )


def present_rules(group: dict[str, Any]) -> tuple[list[IngressRule], list[dict[str, Any]]]:
    """The group's single-port TCP IPv4 rules, and every other permission as EC2 gives it
    (port ranges, other protocols, group references: all revoked, none is wanted)."""
    rules: list[IngressRule] = []
    others: list[dict[str, Any]] = []
    for permission in group.get("IpPermissions", []):
        single_tcp = (
            permission.get("IpProtocol") == "tcp"
            and permission.get("FromPort") == permission.get("ToPort")
            and not permission.get("UserIdGroupPairs")
            and not permission.get("Ipv6Ranges")
            and not permission.get("PrefixListIds")
        )
        if not single_tcp:
            others.append(permission)
            continue
        rules.extend(
            IngressRule(int(permission["FromPort"]), r["CidrIp"], r.get("Description", ""))
            for r in permission.get("IpRanges", [])
        )
    return rules, others


def _permissions(rules: Iterable[IngressRule]) -> list[dict[str, Any]]:
    return [
        {
            "IpProtocol": "tcp",
            "FromPort": rule.port,
            "ToPort": rule.port,
            "IpRanges": [{"CidrIp": rule.cidr, "Description": rule.description}],
        }
        for rule in rules
    ]


def group_name(cluster: str) -> str:
    return f"kaas-{cluster}-brokers"


def ensure_cluster_group(
    client: Any, cluster: str, vpc_id: str, tenant_cidrs: Iterable[str], ports: BrokerPorts
) -> str:
    """The cluster's security group in `vpc_id`, with exactly the wanted ingress rules."""
    what = f"cluster {cluster}: security group"
    filters = [
        *tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_FIREWALL}),
        {"Name": "vpc-id", "Values": [vpc_id]},
    ]
    with aws_errors(f"{what}: looking it up in {vpc_id}"):
        groups = client.describe_security_groups(Filters=filters)["SecurityGroups"]
        vpc = client.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]
    if len(groups) > 1:
        ids = ", ".join(g["GroupId"] for g in groups)
        raise ProviderError(f"{what}: more than one group carries its tags ({ids}); keep one")
    if groups:
        group = groups[0]
    else:
        with aws_errors(f"{what}: creating it in {vpc_id}"):
            group_id = client.create_security_group(
                GroupName=group_name(cluster),
                Description=f"KaaS cluster {cluster}: tenants reach only the tenant listener",
                VpcId=vpc_id,
                TagSpecifications=[
                    {
                        "ResourceType": "security-group",
                        "Tags": tag_list(
                            {
                                "Name": group_name(cluster),
                                TAG_CLUSTER: cluster,
                                TAG_ROLE: ROLE_FIREWALL,
                            }
                        ),
                    }
                ],
            )["GroupId"]
            group = client.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
        log.info("aws_security_group_created", cluster=cluster, group=group_id, vpc=vpc_id)
    group_id = str(group["GroupId"])
    vpc_cidrs = [a["CidrBlock"] for a in vpc.get("CidrBlockAssociationSet", [])] or [
        vpc["CidrBlock"]
    ]
    wanted = ingress_rules(vpc_cidrs, tenant_cidrs, ports)
    present, others = present_rules(group)
    changes = rule_changes(wanted, present)
    with aws_errors(f"{what} {group_id}: setting its rules"):
        if changes.revoke or others:
            client.revoke_security_group_ingress(
                GroupId=group_id, IpPermissions=[*_permissions(changes.revoke), *others]
            )
        if changes.authorize:
            client.authorize_security_group_ingress(
                GroupId=group_id, IpPermissions=_permissions(changes.authorize)
            )
    if changes.authorize or changes.revoke or others:
        log.info(
            "aws_security_group_rules_set",
            cluster=cluster,
            group=group_id,
            authorized=len(changes.authorize),
            revoked=len(changes.revoke) + len(others),
        )
    return group_id


def delete_cluster_groups(
    client: Any,
    cluster: str,
    attempts: int = 30,
    pause_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Delete the cluster's security groups (found by tags, in any VPC); the ids deleted.
    EC2 refuses a group while a terminated instance's interfaces still reference it
    (DependencyViolation), for a while after the termination: asked again until it goes."""
    what = f"cluster {cluster}: security group"
    with aws_errors(f"{what}: looking it up"):
        groups = client.describe_security_groups(
            Filters=tag_filters({TAG_CLUSTER: cluster, TAG_ROLE: ROLE_FIREWALL})
        )["SecurityGroups"]
    deleted: list[str] = []
    for group in groups:
        group_id = str(group["GroupId"])
        for attempt in range(1, attempts + 1):
            try:
                with aws_errors(f"{what} {group_id}: deleting it"):
                    client.delete_security_group(GroupId=group_id)
                break
            except ProviderError as exc:
                if "DependencyViolation" not in str(exc) or attempt == attempts:
                    raise
                sleep(pause_s)
        deleted.append(group_id)
        log.info("aws_security_group_deleted", cluster=cluster, group=group_id)
    return deleted
