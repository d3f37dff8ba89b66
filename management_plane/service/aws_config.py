"""`kaas serve --provider aws`: the provider's settings from a TOML file and command-line
options (the options win), checked at startup so a bad setting stops the service with one
clear line instead of failing the first operation.

File format (every key optional except region, api_url and subnets):

    region = "eu-west-1"
    api_url = "https://10.0.0.5:8443"         # where the VMs reach this service (boot tickets)
    endpoint_url = "http://127.0.0.1:5000"     # another EC2 endpoint (moto's server)
    image = "ami-0123456789abcdef0"            # pin the Packer image; default: newest kaas-vm-*
    zookeeper_hosts = "10.0.0.10:2181,..."     # the ensemble the brokers' agents join
    instance_types = ["m6i.large"]
    kafka_versions = ["3.8.1", "3.9.2"]
    security_group_ids = ["sg-..."]
    vpc_id = "vpc-..."
    key_name = "ops"
    volume_size_gib = 100
    tenant_cidrs = ["0.0.0.0/0"]               # the only sources of the tenant listener's rule
    monitoring_address = "10.0.0.5"            # where the VMs send statsd (the pipeline binds
                                               # it); default: api_url's host (an IP address)
    monitoring_pipeline = true                 # false: run none; the agents send nowhere
    [subnets]                                  # one broker subnet per zone: the zones
    eu-west-1a = "subnet-..."
"""

from __future__ import annotations

import ipaddress
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from management_plane.errors import KaasError
from management_plane.providers.aws import AwsProvider, AwsSettings
from management_plane.providers.aws_boot import AwsClusterSecrets, BootIssuer, file_reader
from management_plane.security.boot_tokens import BootTokens
from management_plane.service.tls import api_trust_bundle

DEFAULT_INSTANCE_TYPES = ("m6i.large", "m6i.xlarge", "m6i.2xlarge")
DEFAULT_KAFKA_VERSIONS = ("3.8.1", "3.9.2")

_STRINGS = (
    "region",
    "endpoint_url",
    "image",
    "zookeeper_hosts",
    "vpc_id",
    "key_name",
    "api_url",
    "monitoring_address",
)
_STRING_LISTS = ("instance_types", "kafka_versions", "security_group_ids", "tenant_cidrs")
KNOWN_KEYS = frozenset(
    {*_STRINGS, *_STRING_LISTS, "subnets", "volume_size_gib", "monitoring_pipeline"}
)


@dataclass(frozen=True)
class AwsServiceConfig:
    region: str
    subnets: Mapping[str, str]
    api_url: str
    """https://HOST:PORT at which the VMs reach this service (their boot tickets name it)."""
    endpoint_url: str | None = None
    image: str | None = None
    zookeeper_hosts: str | None = None
    instance_types: tuple[str, ...] = DEFAULT_INSTANCE_TYPES
    kafka_versions: tuple[str, ...] = DEFAULT_KAFKA_VERSIONS
    security_group_ids: tuple[str, ...] = ()
    vpc_id: str | None = None
    key_name: str | None = None
    volume_size_gib: int = 100
    tenant_cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    monitoring_address: str | None = None
    """The service host's address the VMs send statsd to; the pipeline binds it. None:
    api_url's host."""
    monitoring_pipeline: bool = True
    """Run statsd, carbon and the render API beside the service and name them in the spec
    of every cluster it creates."""

    @property
    def zones(self) -> tuple[str, ...]:
        return tuple(self.subnets)

    @property
    def statsd_address(self) -> str:
        return self.monitoring_address or str(urlsplit(self.api_url).hostname)

    def aws_settings(self) -> AwsSettings:
        values: dict[str, Any] = {
            "region": self.region,
            "endpoint_url": self.endpoint_url,
            "ami_id": self.image,
            "subnet_ids": dict(self.subnets),
            "security_group_ids": self.security_group_ids,
            "vpc_id": self.vpc_id,
            "key_name": self.key_name,
            "volume_size_gib": self.volume_size_gib,
            "tenant_cidrs": self.tenant_cidrs,
        }
        try:
            return AwsSettings(**values)
        except ValueError as exc:
            raise KaasError(str(exc)) from None


def parse_aws_config(raw: Mapping[str, Any], source: str) -> AwsServiceConfig:
    """Check every key and value (pure); KaasError names the first problems found."""
    problems = [f"unknown key {k!r}" for k in sorted(set(raw) - KNOWN_KEYS)]
    values: dict[str, Any] = {}
    for key in _STRINGS:
        if key in raw and raw[key] is not None:
            if not isinstance(raw[key], str) or not raw[key].strip():
                problems.append(f"{key} must be a non-empty string, got {raw[key]!r}")
            else:
                values[key] = raw[key].strip()
    for key in _STRING_LISTS:
        if key in raw:
            items = raw[key]
            if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
                problems.append(f"{key} must be a list of non-empty strings, got {items!r}")
            elif key != "security_group_ids" and not items:
                problems.append(f"{key} must name at least one")
            else:
                values[key] = tuple(items)
    if "volume_size_gib" in raw:
        size = raw["volume_size_gib"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            problems.append(f"volume_size_gib must be a whole number of GiB >= 1, got {size!r}")
        else:
            values["volume_size_gib"] = size
    subnets = raw.get("subnets")
    if not isinstance(subnets, Mapping) or not subnets:
        problems.append("subnets must map each zone to its broker subnet id (at least one zone)")
    else:
        bad = {
            z: s
            for z, s in subnets.items()
            if not isinstance(s, str) or not s.startswith("subnet-")
        }
        if bad:
            problems.append(f"subnets: not subnet ids: {bad}")
        values["subnets"] = dict(subnets)
    if "region" not in values:
        problems.append("region is required")
    if "endpoint_url" in values and not values["endpoint_url"].startswith(("http://", "https://")):
        problems.append(f"endpoint_url must be an http(s) URL, got {values['endpoint_url']!r}")
    if "api_url" not in values:
        problems.append(
            "api_url is required: https://HOST:PORT at which the VMs reach this service"
        )
    elif urlsplit(values["api_url"]).scheme != "https" or not urlsplit(values["api_url"]).hostname:
        problems.append(f"api_url must be https://HOST:PORT, got {values['api_url']!r}")
    for cidr in values.get("tenant_cidrs", ()):
        try:
            ipaddress.ip_network(cidr)
        except ValueError:
            problems.append(f"tenant_cidrs: {cidr!r} is not a network (e.g. 203.0.113.0/24)")
    if "monitoring_pipeline" in raw:
        if not isinstance(raw["monitoring_pipeline"], bool):
            problems.append(
                f"monitoring_pipeline must be true or false, got {raw['monitoring_pipeline']!r}"
            )
        else:
            values["monitoring_pipeline"] = raw["monitoring_pipeline"]
    if values.get("monitoring_pipeline", True):
        problems += _monitoring_address_problems(values)
    if "image" in values and not values["image"].startswith("ami-"):
        problems.append(f"image must be an AMI id (ami-...), got {values['image']!r}")
    if problems:
        raise KaasError(f"aws provider settings ({source}): " + "; ".join(problems))
    return AwsServiceConfig(**values)


def _monitoring_address_problems(values: Mapping[str, Any]) -> list[str]:
    """The pipeline binds its address, so it must be an IP address (the VMs send there)."""
    given = values.get("monitoring_address")
    address = given or urlsplit(values.get("api_url", "")).hostname
    if address is None:
        return []  # api_url's own problem is named already
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if given:
            return [f"monitoring_address must be an IP address of this host, got {given!r}"]
        return [
            f"monitoring_address is needed: api_url names {address!r}, not an IP address, and "
            "the monitoring pipeline binds one (or monitoring_pipeline = false)"
        ]
    return []


def load_aws_config(path: Path | None, overrides: Mapping[str, Any]) -> AwsServiceConfig:
    """The file's settings (if any) with the command line's on top."""
    raw: dict[str, Any] = {}
    source = "command line"
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text())
        except OSError as exc:
            raise KaasError(f"--aws-config {path}: cannot read it ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise KaasError(f"--aws-config {path}: not valid TOML ({exc})") from None
        source = f"{path} and the command line"
    merged = {**raw, **{k: v for k, v in overrides.items() if v is not None and k != "subnets"}}
    if overrides.get("subnets"):
        file_subnets = raw.get("subnets")
        merged["subnets"] = {
            **(file_subnets if isinstance(file_subnets, dict) else {}),
            **overrides["subnets"],
        }
    return parse_aws_config(merged, source)


def parse_subnet_options(options: list[str]) -> dict[str, str]:
    """`--aws-subnet ZONE=SUBNET_ID` options (pure)."""
    subnets = {}
    for option in options:
        zone, sep, subnet = option.partition("=")
        if not sep or not zone.strip() or not subnet.strip():
            raise KaasError(f"--aws-subnet {option!r}: expected ZONE=SUBNET_ID")
        subnets[zone.strip()] = subnet.strip()
    return subnets


class ServiceAwsProvider(AwsProvider, AwsClusterSecrets):
    """The aws provider with what the service asks of every provider: zones, instance types,
    the Kafka versions of the image; and each cluster's CA, kept in the service's home, which
    signs the certificates the VMs fetch with their boot tickets."""

    def __init__(
        self, config: AwsServiceConfig, zookeeper_hosts: Any, home: Path, tokens: BootTokens
    ) -> None:
        boot = BootIssuer(tokens, config.api_url, file_reader(api_trust_bundle(home)))
        AwsProvider.__init__(self, config.aws_settings(), zookeeper_hosts, boot)
        AwsClusterSecrets.__init__(self, home)
        self.config = config
        self.zones = config.zones
        self.instance_types = config.instance_types

    def kafka_versions(self) -> tuple[str, ...]:
        return self.config.kafka_versions

    def delete_cluster(self, cluster: str) -> None:
        """The cluster's EC2 resources, then its CA and identities in the service's home (a
        later cluster of the same name gets a CA of its own)."""
        AwsProvider.delete_cluster(self, cluster)
        shutil.rmtree(self.cluster_home(cluster), ignore_errors=False)
