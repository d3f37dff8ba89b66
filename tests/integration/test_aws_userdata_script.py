"""The first-boot script run for real by bash, under a temporary root: the instance metadata
service, ifup, chown and systemctl are stand-ins on PATH (there is no EC2 instance here), and
the script's absolute paths are moved under the root. The settings file it leaves behind is
read with the agent's own loader."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from agent.settings import load_settings
from management_plane.providers.aws_userdata import BrokerInterface, VmBoot, render_user_data
from planner.contracts.boot_ticket import BootTicket, parse_boot_ticket

pytestmark = pytest.mark.integration

MOVED_PATHS = ("/etc/", "/var/lib/kaas", "/var/log/kaas", "/sys/class/net")
STUBS = {
    "curl": """case "$*" in
  *api/token*) echo token ;;
  *instance-id*) echo i-0feedbeef0123 ;;
  *local-ipv4*) echo 10.20.1.200 ;;
  *) exit 22 ;;
esac""",
    "ifup": 'echo "ifup $*" >> "$KAAS_TEST_CALLS"',
    "chown": 'echo "chown $*" >> "$KAAS_TEST_CALLS"',
    "systemctl": 'echo "systemctl $*" >> "$KAAS_TEST_CALLS"',
    # install without -o/-g/-m: the test runs without a kafka user.
    "install": """args=(); skip=0
for a in "$@"; do
  if (( skip )); then skip=0; continue; fi
  case $a in -o|-g|-m) skip=1 ;; *) args+=("$a") ;; esac
done
exec /usr/bin/install "${args[@]}\"""",
}


TICKET = BootTicket(
    token="one-time-token-0123456789",
    api_url="https://10.20.0.5:8443",
    api_ca_pem="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
)


def _run(tmp_path: Path, boot: VmBoot) -> tuple[Path, list[str]]:
    root = tmp_path / "root"
    for name, mac in (
        ("lo", "00:00:00:00:00:00"),
        ("ens5", "02:11:11:11:11:11"),
        ("ens6", "02:ab:cd:ef:01:23"),
    ):
        (root / "sys/class/net" / name).mkdir(parents=True)
        (root / "sys/class/net" / name / "address").write_text(mac + "\n")
    (root / "etc/network/interfaces.d").mkdir(parents=True)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    script = render_user_data(boot)
    for path in MOVED_PATHS:
        script = script.replace(path, f"{root}{path}")
    calls = tmp_path / "calls"
    calls.touch()
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "KAAS_TEST_CALLS": str(calls)}
    done = subprocess.run(
        ["bash"], input=script, text=True, capture_output=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return root, calls.read_text().splitlines()


def test_with_an_eni_the_script_configures_it_and_writes_the_settings(tmp_path: Path) -> None:
    boot = VmBoot(
        cluster="orders",
        zookeeper_hosts="10.20.0.10:2181,10.20.1.10:2181",
        zone="eu-west-1b",
        kafka_heap="-Xms2g -Xmx2g",
        ticket=TICKET,
        interface=BrokerInterface("10.20.1.37", "02:AB:CD:EF:01:23", "10.20.1.0/24"),
    )
    root, calls = _run(tmp_path, boot)

    settings = load_settings(root / "etc/kaas/agent.json")
    assert (settings.cluster, settings.vm_id, settings.address, settings.zone) == (
        "orders",
        "i-0feedbeef0123",
        "10.20.1.37",
        "eu-west-1b",
    )
    assert settings.zookeeper_hosts == "10.20.0.10:2181,10.20.1.10:2181"
    assert settings.data_dir.is_dir() and settings.config_dir.is_dir()
    stanza = (root / "etc/network/interfaces.d/60-kaas-broker").read_text()
    assert "iface ens6 inet static" in stanza and "address 10.20.1.37/24" in stanza
    assert "default via 10.20.1.1 dev ens6 table 1001" in stanza
    assert "from 10.20.1.37 lookup 1001" in stanza
    assert calls[0] == "ifup ens6"
    assert calls[-1] == "systemctl restart kaas-agent.service"
    assert not (root / "etc/kaas/agent.json.template").exists()
    # The boot ticket the agent redeems at its first start, 0600 where its settings say.
    assert settings.boot_ticket is not None
    ticket = settings.boot_ticket  # the script's /etc is moved under the root
    assert ticket == root / "etc/kaas/boot-ticket.json"
    assert parse_boot_ticket(ticket.read_bytes()) == TICKET
    assert stat.S_IMODE(ticket.stat().st_mode) == 0o600
    assert not ticket.with_name(ticket.name + ".tmp").exists()


def test_without_an_eni_the_broker_advertises_the_primary_address(tmp_path: Path) -> None:
    boot = VmBoot(
        cluster="orders",
        zookeeper_hosts="10.20.0.10:2181",
        zone="eu-west-1a",
        kafka_heap="-Xmx1g",
        ticket=TICKET,
    )
    root, calls = _run(tmp_path, boot)
    settings = load_settings(root / "etc/kaas/agent.json")
    assert settings.address == "10.20.1.200"
    assert not (root / "etc/network/interfaces.d/60-kaas-broker").exists()
    assert not any(call.startswith("ifup") for call in calls)
