"""The pure parts of the aws provider: the settings file the user-data writes (checked with the
agent's own loader), subnet blocks, ZooKeeper connect strings and settings validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.identity import VOLUME_ID_FILE
from agent.settings import parse_settings
from management_plane.providers.aws import check_zookeeper_hosts
from management_plane.providers.aws_ec2 import AwsSettings, free_subnet_cidr
from management_plane.providers.aws_userdata import (
    AGENT_SETTINGS_PATH,
    BOOT_TICKET_PATH,
    KAFKA_CONFIG_DIR,
    PRIMARY_ADDRESS_PLACEHOLDER,
    VM_ID_PLACEHOLDER,
    BrokerInterface,
    VmBoot,
    fill_placeholders,
    render_user_data,
    settings_template,
    ticket_text,
)
from management_plane.providers.base import ProviderError
from planner.contracts.boot_ticket import BootTicket, parse_boot_ticket
from planner.contracts.vm_config import SizingProfile

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
TICKET = BootTicket(
    token="one-time-token-0123456789",
    api_url="https://10.20.0.5:8443",
    api_ca_pem="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
)
ENI = BrokerInterface(address="10.20.1.37", mac="02:AB:CD:EF:01:23", subnet_cidr="10.20.1.0/24")


def _boot(**overrides: object) -> VmBoot:
    values: dict[str, object] = {
        "cluster": "orders-prod",
        "zookeeper_hosts": "10.20.0.5:2181,10.20.1.5:2181,10.20.2.5:2181",
        "zone": "eu-west-1b",
        "kafka_heap": "-Xms2g -Xmx2g",
        "interface": ENI,
        "volume_id": "vol-0123456789abcdef0",
        "ticket": TICKET,
        **overrides,
    }
    return VmBoot(**values)  # type: ignore[arg-type]


def test_user_data_writes_settings_the_agent_accepts() -> None:
    script = render_user_data(_boot())
    text = fill_placeholders(settings_template(script), "i-0abc", "10.20.1.200")
    settings = parse_settings(json.loads(text), "user-data")
    assert settings.cluster == "orders-prod"
    assert settings.zookeeper_hosts == "10.20.0.5:2181,10.20.1.5:2181,10.20.2.5:2181"
    assert settings.vm_id == "i-0abc"
    assert settings.address == "10.20.1.37"  # the ENI's, not the instance's primary address
    assert settings.zone == "eu-west-1b"
    assert settings.supervisor == "systemd"
    assert settings.identity.owner == "kafka"  # the units run the JVMs as kafka
    assert settings.kafka_heap == "-Xms2g -Xmx2g"
    assert settings.host_sizing is SizingProfile.STANDARD
    assert str(settings.config_dir) == KAFKA_CONFIG_DIR
    assert settings.data_dir.parent != settings.local_state_dir  # state stays on the root disk


def test_without_an_eni_the_agent_advertises_the_primary_address() -> None:
    script = render_user_data(_boot(interface=None, volume_id=None))
    template = settings_template(script)
    assert PRIMARY_ADDRESS_PLACEHOLDER in template and VM_ID_PLACEHOLDER in template
    settings = parse_settings(json.loads(fill_placeholders(template, "i-0abc", "10.20.1.200")))
    assert settings.address == "10.20.1.200"
    assert "ENI_MAC=''" in script and "VOLUME_ID=''" in script


def test_the_script_configures_the_eni_and_the_volume_it_was_given() -> None:
    script = render_user_data(_boot())
    assert script.startswith("#!/bin/bash\n")
    assert "ENI_ADDRESS=10.20.1.37" in script
    assert "ENI_MAC=02:ab:cd:ef:01:23" in script  # /sys/class/net spells MACs in lower case
    assert "ENI_PREFIX=24" in script and "ENI_GATEWAY=10.20.1.1" in script
    assert "VOLUME_ID=vol-0123456789abcdef0" in script
    assert "VOLUME_XEN_DEVICE=/dev/xvdf" in script
    # The agent's volume marker is written under the agent's own file name.
    assert f"/{VOLUME_ID_FILE}" in script
    assert len(script.encode()) < 16 * 1024  # EC2's user-data limit


def test_the_paths_match_the_image_units() -> None:
    agent_unit = (REPO / "systemd" / "kaas-agent.service").read_text()
    kafka_unit = (REPO / "systemd" / "kaas-kafka.service").read_text()
    assert f"--config {AGENT_SETTINGS_PATH}" in agent_unit
    assert f"EnvironmentFile={KAFKA_CONFIG_DIR}/env" in kafka_unit
    assert f"{KAFKA_CONFIG_DIR}/server.properties" in kafka_unit


@pytest.mark.parametrize(
    ("cidr", "prefix", "gateway"),
    [("10.20.1.0/24", 24, "10.20.1.1"), ("172.31.32.0/20", 20, "172.31.32.1")],
)
def test_eni_prefix_and_gateway(cidr: str, prefix: int, gateway: str) -> None:
    interface = BrokerInterface(address="10.0.0.9", mac="02:00:00:00:00:01", subnet_cidr=cidr)
    assert (interface.prefix_length, interface.gateway) == (prefix, gateway)


@pytest.mark.parametrize(
    ("vpc", "taken", "prefix", "expected"),
    [
        ("10.20.0.0/16", [], 24, "10.20.0.0/24"),
        ("10.20.0.0/16", ["10.20.0.0/24", "10.20.1.0/24"], 24, "10.20.2.0/24"),
        ("10.20.0.0/16", ["10.20.0.0/20"], 24, "10.20.16.0/24"),
        ("10.20.0.0/16", ["10.20.1.0/24"], 23, "10.20.2.0/23"),
        ("10.20.0.0/24", ["10.20.0.0/25", "10.20.0.128/25"], 26, None),
        ("10.20.0.0/24", [], 16, None),
    ],
)
def test_free_subnet_cidr(vpc: str, taken: list[str], prefix: int, expected: str | None) -> None:
    assert free_subnet_cidr(vpc, taken, prefix) == expected


def test_zookeeper_hosts_must_be_a_host_port_list() -> None:
    assert check_zookeeper_hosts("c", "a:2181, b:2181") == "a:2181,b:2181"
    for bad in ("", "a", "a:2181,b", "a:2181/kafka/c", ":2181", "a:x"):
        with pytest.raises(ProviderError, match="is not a host:port list"):
            check_zookeeper_hosts("c", bad)


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"volume_size_gib": 0}, "volume_size_gib must be at least 1"),
        ({"eni_device_index": 0}, "eni_device_index must be 1 or more"),
        ({"subnet_prefix_length": 30}, "subnet_prefix_length must be 16-28"),
        ({"ami_id": None, "ami_name": ""}, "neither ami_id nor ami_name"),
        ({"poll_interval_s": 0}, "must be positive"),
    ],
)
def test_settings_refuse_bad_values(overrides: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        AwsSettings(**overrides)  # type: ignore[arg-type]


def test_settings_defaults_find_the_packer_image() -> None:
    settings = AwsSettings()
    packer = (REPO / "packer" / "kaas-vm.pkr.hcl").read_text()
    assert (
        settings.ami_name == "kaas-vm-*"
        and 'ami_name      = "kaas-vm-${local.timestamp}"' in packer
    )
    assert dict(settings.ami_tags) == {"kaas:role": "image"} and '"kaas:role"  = "image"' in packer


def test_the_user_data_carries_a_boot_ticket_and_no_secret() -> None:
    script = render_user_data(_boot())
    assert parse_boot_ticket(ticket_text(script)) == TICKET
    settings = parse_settings(
        json.loads(fill_placeholders(settings_template(script), "i-0abc", "10.20.1.200"))
    )
    assert str(settings.boot_ticket) == BOOT_TICKET_PATH
    assert settings.identity.directory == Path("/etc/kaas/tls")
    # Written 0600 from creation: the file is made under umask 077, then renamed in place.
    assert f"(umask 077 && cat > {BOOT_TICKET_PATH}.tmp" in script
    assert "PRIVATE KEY" not in script and "password" not in script.lower()


def test_the_boot_unit_redeems_the_ticket_the_user_data_writes_before_the_agent() -> None:
    boot_unit = (REPO / "systemd" / "kaas-boot-identity.service").read_text()
    agent_unit = (REPO / "systemd" / "kaas-agent.service").read_text()
    assert f"ConditionPathExists={BOOT_TICKET_PATH}" in boot_unit
    assert f"--config {AGENT_SETTINGS_PATH} --boot-identity" in boot_unit
    assert "Type=oneshot" in boot_unit and "Before=kaas-agent.service" in boot_unit
    assert "Requires=kaas-boot-identity.service" in agent_unit
    assert "kaas-boot-identity.service" in agent_unit.split("After=")[1].splitlines()[0]
    # The image carries and enables every unit of systemd/.
    template = (REPO / "packer" / "kaas-vm.pkr.hcl").read_text()
    for unit in sorted((REPO / "systemd").glob("*.service")):
        assert f"systemd/{unit.name}" in template, unit.name
    assert "enable kaas-boot-identity.service" in (REPO / "packer/scripts/provision.sh").read_text()


def test_boot_identity_mode_without_a_ticket_leaves_the_identity_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.main import main

    settings = {
        "cluster": "c1",
        "zookeeper_hosts": "127.0.0.1:2181",
        "vm_id": "vm1",
        "address": "127.0.1.1",
        "zone": "zone-a",
        "data_dir": str(tmp_path / "data"),
        "config_dir": str(tmp_path / "config"),
        "boot_ticket": str(tmp_path / "boot-ticket.json"),
    }
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(settings))
    assert main(["--config", str(path), "--boot-identity"]) == 0
    assert "no ticket to redeem" in capsys.readouterr().out
    # A ticket that is not one: refused, naming the file, nothing installed.
    (tmp_path / "boot-ticket.json").write_text("{not json")
    assert main(["--config", str(path), "--boot-identity"]) == 1
    assert "boot-ticket.json" in capsys.readouterr().err
    assert not any((tmp_path / "config").glob("**/*.key"))
