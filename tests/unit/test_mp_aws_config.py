"""`kaas serve --provider aws` settings: checked at startup, every problem named (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from management_plane.errors import KaasError
from management_plane.service.aws_config import (
    load_aws_config,
    parse_aws_config,
    parse_subnet_options,
)

pytestmark = pytest.mark.unit

GOOD = {
    "region": "eu-west-1",
    "subnets": {"eu-west-1a": "subnet-a", "eu-west-1b": "subnet-b"},
    "image": "ami-0123",
    "endpoint_url": "http://127.0.0.1:5000",
    "api_url": "https://10.20.0.5:8443",
}


def test_a_good_config_gives_zones_from_its_subnets() -> None:
    config = parse_aws_config(GOOD, "test")
    assert config.zones == ("eu-west-1a", "eu-west-1b")
    settings = config.aws_settings()
    assert settings.subnet_ids == GOOD["subnets"] and settings.ami_id == "ami-0123"
    assert settings.endpoint_url == "http://127.0.0.1:5000"
    assert config.api_url == "https://10.20.0.5:8443"
    assert settings.tenant_cidrs == ("0.0.0.0/0",)
    narrowed = parse_aws_config({**GOOD, "tenant_cidrs": ["203.0.113.0/24"]}, "test")
    assert narrowed.aws_settings().tenant_cidrs == ("203.0.113.0/24",)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"region": None}, "region is required"),
        ({"subnets": {}}, "subnets must map each zone"),
        ({"subnets": {"eu-west-1a": "sn-1"}}, "not subnet ids"),
        ({"image": "kaas-vm"}, "image must be an AMI id"),
        ({"endpoint_url": "localhost:5000"}, "endpoint_url must be an http(s) URL"),
        ({"instance_types": []}, "instance_types must name at least one"),
        ({"volume_size_gib": 0}, "volume_size_gib must be a whole number"),
        ({"regoin": "x"}, "unknown key 'regoin'"),
        ({"api_url": None}, "api_url is required"),
        ({"api_url": "http://10.20.0.5:8443"}, "api_url must be https://HOST:PORT"),
        ({"tenant_cidrs": ["10.0.0.0/33"]}, "tenant_cidrs: '10.0.0.0/33' is not a network"),
        (
            {"monitoring_address": "kaas.internal"},
            "monitoring_address must be an IP address of this host, got 'kaas.internal'",
        ),
        (
            {"api_url": "https://kaas.internal:8443"},
            "monitoring_address is needed: api_url names 'kaas.internal', not an IP address",
        ),
        ({"monitoring_pipeline": "yes"}, "monitoring_pipeline must be true or false, got 'yes'"),
    ],
)
def test_bad_settings_are_named(changes: dict[str, object], message: str) -> None:
    raw = {k: v for k, v in {**GOOD, **changes}.items() if v is not None}
    with pytest.raises(KaasError, match="aws provider settings") as error:
        parse_aws_config(raw, "test")
    assert message in str(error.value)


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "aws.toml"
    path.write_text('region = "eu-west-1"\n[subnets]\neu-west-1a = "subnet-a"\n')
    config = load_aws_config(
        path,
        {
            "region": "us-east-1",
            "subnets": parse_subnet_options(["us-east-1a=subnet-x"]),
            "api_url": "https://10.0.0.5:8443",
        },
    )
    assert config.region == "us-east-1"
    assert dict(config.subnets) == {"eu-west-1a": "subnet-a", "us-east-1a": "subnet-x"}


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "aws.toml"
    path.write_text("region = \n")
    with pytest.raises(KaasError, match="not valid TOML"):
        load_aws_config(path, {})
    with pytest.raises(KaasError, match="cannot read it"):
        load_aws_config(tmp_path / "missing.toml", {})


@pytest.mark.parametrize(
    ("changes", "pipeline", "address"),
    [
        ({}, True, "10.20.0.5"),  # api_url's host: the address the VMs already reach
        ({"monitoring_address": "10.20.0.6"}, True, "10.20.0.6"),
        ({"api_url": "https://kaas.internal:8443", "monitoring_address": "10.20.0.6"}, True, "10.20.0.6"),
        # No pipeline: a hostname api_url is fine, nothing binds
        ({"api_url": "https://kaas.internal:8443", "monitoring_pipeline": False}, False, "kaas.internal"),
    ],
)  # fmt: skip
def test_the_monitoring_address_defaults_to_the_api_urls_host(
    changes: dict[str, object], pipeline: bool, address: str
) -> None:
    config = parse_aws_config({**GOOD, **changes}, "test")
    assert (config.monitoring_pipeline, config.statsd_address) == (pipeline, address)
