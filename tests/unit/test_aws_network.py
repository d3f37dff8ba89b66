"""The broker security group's rules (pure): tenants reach only the tenant listener, every
other port answers the VPC only; and the changes that make a group's rules exactly those."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from botocore.exceptions import ClientError

from agent.settings import AgentSettings
from management_plane.providers.aws_network import (
    BrokerPorts,
    IngressRule,
    delete_cluster_groups,
    ingress_rules,
    present_rules,
    rule_changes,
)
from management_plane.providers.base import ProviderError

pytestmark = pytest.mark.unit

VPC = "10.20.0.0/16"
INTERNAL = (9092, 9093, 2181, 2888, 3888, 8778)


def _sources(rules: list[IngressRule]) -> dict[int, set[str]]:
    by_port: dict[int, set[str]] = {}
    for rule in rules:
        by_port.setdefault(rule.port, set()).add(rule.cidr)
    return by_port


@pytest.mark.parametrize(
    ("vpc", "tenants", "expected"),
    [
        (
            [VPC],
            ["0.0.0.0/0"],
            {9094: {"0.0.0.0/0"}, **{p: {VPC} for p in INTERNAL}},
        ),
        (
            [VPC, "100.64.0.0/16"],
            ["203.0.113.0/24", "198.51.100.0/24"],
            {
                9094: {"203.0.113.0/24", "198.51.100.0/24"},
                **{p: {VPC, "100.64.0.0/16"} for p in INTERNAL},
            },
        ),
        # No tenant network: the tenant port is closed too, the internal ones stay VPC-only.
        ([VPC], [], {p: {VPC} for p in INTERNAL}),
    ],
)
def test_only_the_tenant_port_is_open_beyond_the_vpc(
    vpc: list[str], tenants: list[str], expected: dict[int, set[str]]
) -> None:
    assert _sources(ingress_rules(vpc, tenants)) == expected


@pytest.mark.parametrize(
    ("vpc", "tenants", "problem"),
    [
        ([], ["0.0.0.0/0"], "no CIDR block"),
        ([VPC], ["10.0.0.1/8"], "tenant CIDR: '10.0.0.1/8' is not a network"),
        (["10.20.0.0/33"], [], "VPC CIDR"),
    ],
)
def test_bad_networks_are_named(vpc: list[str], tenants: list[str], problem: str) -> None:
    with pytest.raises(ProviderError, match=problem):
        ingress_rules(vpc, tenants)


def test_the_ports_are_the_agents_defaults() -> None:
    defaults = {f.name: f.default for f in fields(AgentSettings)}
    ports = BrokerPorts()
    assert ports.tenant == defaults["kafka_tenant_port"]
    assert ports.internal == defaults["kafka_port"]
    assert ports.jolokia == defaults["jolokia_port"]
    assert ports.zookeeper_client == defaults["zookeeper_client_port"]
    assert ports.zookeeper_peer == defaults["zookeeper_peer_port"]
    assert ports.zookeeper_election == defaults["zookeeper_election_port"]


@pytest.mark.parametrize(
    ("present", "authorize", "revoke"),
    [
        ([], {(9094, "0.0.0.0/0"), (9092, VPC)}, set()),
        ([(9094, "0.0.0.0/0"), (9092, VPC)], set(), set()),
        # A hand-made rule opening the internal listener to the world is revoked.
        ([(9094, "0.0.0.0/0"), (9092, VPC), (9092, "0.0.0.0/0")], set(), {(9092, "0.0.0.0/0")}),
        ([(9094, "0.0.0.0/0")], {(9092, VPC)}, set()),
    ],
)
def test_rule_changes(
    present: list[tuple[int, str]], authorize: set[tuple[int, str]], revoke: set[tuple[int, str]]
) -> None:
    wanted = [IngressRule(9094, "0.0.0.0/0"), IngressRule(9092, VPC)]
    changes = rule_changes(wanted, [IngressRule(p, c, "by hand") for p, c in present])
    assert {r.key for r in changes.authorize} == authorize
    assert {r.key for r in changes.revoke} == revoke


def test_port_ranges_and_group_references_are_never_kept() -> None:
    group = {
        "IpPermissions": [
            {
                "IpProtocol": "tcp",
                "FromPort": 9094,
                "ToPort": 9094,
                "IpRanges": [{"CidrIp": "0.0.0.0/0"}],
            },
            {"IpProtocol": "tcp", "FromPort": 0, "ToPort": 65535, "IpRanges": [{"CidrIp": VPC}]},
            {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1"}]},
        ]
    }
    rules, others = present_rules(group)
    assert [r.key for r in rules] == [(9094, "0.0.0.0/0")]
    assert [o.get("FromPort") for o in others] == [0, None]


class GroupsStillReferenced:
    """An EC2 client whose group deletion is refused as EC2 refuses it for a while after the
    instances that used the group were terminated."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.deleted: list[str] = []

    def describe_security_groups(self, Filters: list[dict[str, Any]]) -> dict[str, Any]:
        assert {"Name": "tag:kaas:cluster", "Values": ["c1"]} in Filters
        return {"SecurityGroups": [{"GroupId": "sg-1"}]}

    def delete_security_group(self, GroupId: str) -> None:
        if self.refusals:
            self.refusals -= 1
            error = {"Code": "DependencyViolation", "Message": "resource has a dependent object"}
            raise ClientError({"Error": error}, "DeleteSecurityGroup")
        self.deleted.append(GroupId)


def test_a_group_still_referenced_is_deleted_once_ec2_lets_go() -> None:
    client = GroupsStillReferenced(refusals=2)
    pauses: list[float] = []
    assert delete_cluster_groups(client, "c1", sleep=pauses.append) == ["sg-1"]
    assert client.deleted == ["sg-1"] and pauses == [5.0, 5.0]


def test_a_group_that_stays_referenced_is_named_after_the_last_attempt() -> None:
    client = GroupsStillReferenced(refusals=99)
    with pytest.raises(ProviderError, match="cluster c1: security group sg-1: deleting it"):
        delete_cluster_groups(client, "c1", attempts=3, sleep=lambda _: None)
    assert client.deleted == []
