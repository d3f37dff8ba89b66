"""What an EC2 broker VM is told at first boot (pure: text out).

The user-data is a shell script cloud-init runs once. It configures the broker's ENI (the
secondary interface holding the broker's stable address, so a replacement keeps it), mounts
the broker's EBS data volume, and writes the agent's settings file (/etc/kaas/agent.json, the format of
agent/settings.py) before restarting kaas-agent. It carries no key and no password: user
data is readable by anyone allowed DescribeInstanceAttribute. The VM's identity comes from a
boot ticket (a one-time, expiring token, the API's address and CA) written 0600 beside the
settings, which the agent redeems at its first start. Two values exist only once the instance
runs (its instance id and, without an ENI, its primary address); the script fills them in
from the instance metadata service in place of the placeholders below.

management_plane never imports agent (they meet in ZooKeeper and in files), so the agent's
field names and its volume marker's file name are spelled here again; the tests check them
against the agent's own loader.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from dataclasses import dataclass

from planner.contracts.boot_ticket import BootTicket
from planner.contracts.vm_config import SizingProfile
from planner.contracts.vm_config.image import KAFKA_LOG4J as IMAGE_KAFKA_LOG4J
from planner.contracts.vm_config.image import ZOOKEEPER_LOGBACK as IMAGE_ZOOKEEPER_LOGBACK

VM_ID_PLACEHOLDER = "@KAAS_VM_ID@"
PRIMARY_ADDRESS_PLACEHOLDER = "@KAAS_PRIMARY_ADDRESS@"
SETTINGS_BEGIN = "KAAS_AGENT_SETTINGS"
"""Here-document delimiter around the settings JSON in the script."""
TICKET_BEGIN = "KAAS_BOOT_TICKET"
"""Here-document delimiter around the boot ticket JSON in the script."""

AGENT_SETTINGS_PATH = "/etc/kaas/agent.json"
BOOT_TICKET_PATH = "/etc/kaas/boot-ticket.json"
TLS_DIR = "/etc/kaas/tls"
KAFKA_CONFIG_DIR = (
    "/etc/kaas/kafka"  # systemd/kaas-kafka.service reads env and server.properties here
)
DATA_MOUNT = "/var/lib/kaas/data"
DATA_DIR = f"{DATA_MOUNT}/kafka"
AGENT_STATE_DIR = (
    "/var/lib/kaas/agent"  # on the root disk: local state does not move with the volume
)
LOGS_DIR = "/var/log/kaas"
VOLUME_ID_FILE = "kaas-volume-id"  # agent.identity.VOLUME_ID_FILE
ENI_ROUTE_TABLE = 1001


@dataclass(frozen=True)
class BrokerInterface:
    """The per-broker ENI as the VM has to configure it."""

    address: str
    mac: str
    subnet_cidr: str

    @property
    def prefix_length(self) -> int:
        return ipaddress.ip_network(self.subnet_cidr, strict=False).prefixlen

    @property
    def gateway(self) -> str:
        # The VPC router answers on the first host address of every subnet.
        return str(ipaddress.ip_network(self.subnet_cidr, strict=False).network_address + 1)


@dataclass(frozen=True)
class VmBoot:
    cluster: str
    zookeeper_hosts: str
    zone: str
    kafka_heap: str
    ticket: BootTicket
    interface: BrokerInterface | None = None
    """None: the broker advertises the instance's primary address."""
    volume_id: str | None = None
    """None: the broker keeps its data on the root disk."""
    volume_device: str = "/dev/sdf"


def agent_settings(boot: VmBoot) -> dict[str, object]:
    """The agent's settings (agent/settings.py fields), with placeholders for what only the
    running instance knows."""
    return {
        "cluster": boot.cluster,
        "zookeeper_hosts": boot.zookeeper_hosts,
        "vm_id": VM_ID_PLACEHOLDER,
        "address": boot.interface.address if boot.interface else PRIMARY_ADDRESS_PLACEHOLDER,
        "zone": boot.zone,
        "data_dir": DATA_DIR,
        "config_dir": KAFKA_CONFIG_DIR,
        "supervisor": "systemd",
        # The units run Kafka and ZooKeeper as kafka; the agent writes their keys as root.
        "identity_owner": "kafka",
        "image_root": "/",
        "kafka_heap": boot.kafka_heap,
        # A broker has the instance to itself: Kafka's own thread and partition defaults.
        "host_sizing": SizingProfile.STANDARD.value,
        "logs_dir": LOGS_DIR,
        "broker_log_config": str(IMAGE_KAFKA_LOG4J),
        "zookeeper_log_config": str(IMAGE_ZOOKEEPER_LOGBACK),
        "state_dir": AGENT_STATE_DIR,
        "tls_dir": TLS_DIR,
        "boot_ticket": BOOT_TICKET_PATH,
    }


def fill_placeholders(text: str, instance_id: str, primary_address: str) -> str:
    """What the script's sed does, for readers of the template (and tests)."""
    return text.replace(VM_ID_PLACEHOLDER, instance_id).replace(
        PRIMARY_ADDRESS_PLACEHOLDER, primary_address
    )


def _here_document(user_data: str, delimiter: str) -> str:
    start = user_data.index(f"<<'{delimiter}'\n") + len(f"<<'{delimiter}'\n")
    end = user_data.index(f"\n{delimiter}\n", start)
    return user_data[start:end]


def settings_template(user_data: str) -> str:
    """The settings JSON embedded in a rendered script, placeholders still in it."""
    return _here_document(user_data, SETTINGS_BEGIN)


def ticket_text(user_data: str) -> str:
    """The boot ticket JSON embedded in a rendered script."""
    return _here_document(user_data, TICKET_BEGIN)


def xen_device(device: str) -> str:
    """The name a Xen instance gives an EBS device requested as /dev/sdX."""
    return device.replace("/dev/sd", "/dev/xvd", 1)


def render_user_data(boot: VmBoot) -> str:
    settings = json.dumps(agent_settings(boot), indent=2, sort_keys=True)
    eni = boot.interface
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# KaaS broker VM of cluster {boot.cluster}: rendered by management_plane.providers.aws,",
        "# run once by cloud-init at first boot.",
        "set -euo pipefail",
        f"ENI_ADDRESS={q(eni.address if eni else '')}",
        f"ENI_MAC={q(eni.mac.lower() if eni else '')}",
        f"ENI_PREFIX={q(str(eni.prefix_length) if eni else '')}",
        f"ENI_GATEWAY={q(eni.gateway if eni else '')}",
        f"VOLUME_ID={q(boot.volume_id or '')}",
        f"VOLUME_XEN_DEVICE={q(xen_device(boot.volume_device))}",
        "",
        _SCRIPT_BODY.format(
            route_table=ENI_ROUTE_TABLE,
            mount=DATA_MOUNT,
            data_dir=DATA_DIR,
            state_dir=AGENT_STATE_DIR,
            config_dir=KAFKA_CONFIG_DIR,
            logs_dir=LOGS_DIR,
            marker=VOLUME_ID_FILE,
            settings_path=AGENT_SETTINGS_PATH,
            vm_id=VM_ID_PLACEHOLDER,
            primary=PRIMARY_ADDRESS_PLACEHOLDER,
        ),
        "# The boot ticket: 0600 from creation (the token is good once, until the agent's",
        "# first start spends it); in place before the settings that name it, since the",
        "# image's kaas-agent unit keeps restarting until they exist.",
        f"(umask 077 && cat > {BOOT_TICKET_PATH}.tmp <<'{TICKET_BEGIN}'",
        boot.ticket.to_json().decode(),
        TICKET_BEGIN,
        ")",
        f"mv {BOOT_TICKET_PATH}.tmp {BOOT_TICKET_PATH}",
        f"cat > {AGENT_SETTINGS_PATH}.template <<'{SETTINGS_BEGIN}'",
        settings,
        SETTINGS_BEGIN,
        f'sed -e "s/{VM_ID_PLACEHOLDER}/$instance_id/" -e "s/{PRIMARY_ADDRESS_PLACEHOLDER}/$primary_address/" \\',
        f"  {AGENT_SETTINGS_PATH}.template > {AGENT_SETTINGS_PATH}.tmp",
        f"mv {AGENT_SETTINGS_PATH}.tmp {AGENT_SETTINGS_PATH}",
        f"rm -f {AGENT_SETTINGS_PATH}.template",
        "systemctl restart kaas-agent.service",
        "",
    ]
    return "\n".join(lines)


# Braces for str.format are doubled where the shell needs them.
_SCRIPT_BODY = """\
metadata="http://169.254.169.254/latest"
token=$(curl -sf --retry 10 -X PUT -H "X-aws-ec2-metadata-token-ttl-seconds: 600" "$metadata/api/token")
imds() {{ curl -sf --retry 10 -H "X-aws-ec2-metadata-token: $token" "$metadata/meta-data/$1"; }}
instance_id=$(imds instance-id)
primary_address=$(imds local-ipv4)

# The broker's ENI (attached at launch as the secondary interface): its address, with a
# route table of its own so that replies leave by the interface they came in on.
if [[ -n $ENI_MAC ]]; then
  iface=""
  for _ in $(seq 300); do
    for dev in /sys/class/net/*; do
      [[ $(cat "$dev/address") == "$ENI_MAC" ]] && iface=${{dev##*/}}
    done
    [[ -n $iface ]] && break
    sleep 1
  done
  [[ -n $iface ]] || {{ echo "kaas: no interface with the broker ENI's MAC $ENI_MAC" >&2; exit 1; }}
  cat > /etc/network/interfaces.d/60-kaas-broker <<EOF
auto $iface
iface $iface inet static
    address $ENI_ADDRESS/$ENI_PREFIX
    post-up ip route replace default via $ENI_GATEWAY dev $iface table {route_table}
    post-up ip rule add from $ENI_ADDRESS lookup {route_table} priority {route_table} || true
EOF
  ifup "$iface"
fi

# The broker's data volume (attached after launch): formatted once, mounted by UUID.
install -d -m 0755 {mount}
if [[ -n $VOLUME_ID ]]; then
  device=""
  for _ in $(seq 600); do
    for candidate in "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_${{VOLUME_ID/-/}}" "$VOLUME_XEN_DEVICE"; do
      [[ -b $candidate ]] && device=$candidate
    done
    [[ -n $device ]] && break
    sleep 1
  done
  [[ -n $device ]] || {{ echo "kaas: data volume $VOLUME_ID never appeared" >&2; exit 1; }}
  blkid "$device" >/dev/null || mkfs.ext4 -q -L kaas-data "$device"
  uuid=$(blkid -s UUID -o value "$device")
  grep -q "UUID=$uuid" /etc/fstab || echo "UUID=$uuid {mount} ext4 defaults,noatime,nofail 0 2" >> /etc/fstab
  mountpoint -q {mount} || mount {mount}
fi
install -d -o kafka -g kafka {data_dir}
# The agent's volume marker names the EBS volume, so ZooKeeper's broker-id claim does too.
if [[ -n $VOLUME_ID && ! -f {data_dir}/{marker} ]]; then
  echo "$VOLUME_ID" > {data_dir}/{marker}
fi
install -d {state_dir} {config_dir} {logs_dir}
chown kafka:kafka {config_dir} {logs_dir}
"""
