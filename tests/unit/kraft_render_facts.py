"""The VM the KRaft renderers' tests render for (test_kraft_config.py, the KRaft cluster's;
test_migration_config.py, a ZooKeeper-mode cluster's during its migration): the second of
three VMs on 127.0.9.x, broker 1 in zone b, whose controller is node 3001."""

from __future__ import annotations

from dataclasses import replace

from planner.contracts.vm_config import BrokerFacts
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.kraft import ControllerFacts
from planner.contracts.vm_config.sizing import SizingProfile, sizing_properties

KRAFT_BROKER = BrokerFacts(
    broker_id=1,
    rack="b",
    listener_address="127.0.9.2",
    port=9092,
    tenant_port=9094,
    advertised_address="127.0.9.2",
    log_dirs=("/data/kafka",),
    zookeeper_connect="",  # a KRaft broker knows no ZooKeeper
    tls=TlsFiles("/tls/node.pem", "/tls/ca.pem"),
    host_sizing=sizing_properties(SizingProfile.LOCAL),
)
ZOOKEEPER_BROKER = replace(KRAFT_BROKER, zookeeper_connect="127.0.9.1:2281,127.0.9.2:2281/kafka/k1")
"""The same VM's broker in ZooKeeper mode (the cluster's chroot `/kafka/k1`)."""

CONTROLLER = ControllerFacts(3001, "127.0.9.2", 9093, "/data/kraft-controller")
CONTROLLER_ENDPOINTS = ("127.0.9.1:9093", "127.0.9.2:9093", "127.0.9.3:9093")
"""The three VMs' controller listeners, in VM order."""
