"""The configuration files a VM image carries before it knows which cluster and which broker
it will be: the ones that depend on no spec and no identity. The paths are those of the
systemd units (systemd/kaas-kafka.service, systemd/kaas-zookeeper.service). Pure.

server.properties, the dynamic ZooKeeper file and myid depend on the VM's identity: they are
rendered on the VM, by the same modules, once it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Final

from planner.contracts.vm_config.broker import render_kafka_log4j
from planner.contracts.vm_config.zookeeper import render_zoo_cfg, render_zookeeper_logback
from planner.contracts.vm_config.zookeeper_security import ZookeeperSecurity, ZookeeperTlsFiles

KAFKA_CONFIG_DIR: Final = PurePosixPath("/etc/kaas/kafka")
ZOOKEEPER_CONFIG_DIR: Final = PurePosixPath("/etc/kaas/zookeeper")
ZOOKEEPER_DATA_DIR: Final = PurePosixPath("/var/lib/kaas/zookeeper")
# The VM's identity (planner.pki.files), delivered when the VM gets one.
TLS_DIR: Final = PurePosixPath("/etc/kaas/tls")
NODE_TLS: Final = ZookeeperTlsFiles(keystore=TLS_DIR / "node.pem", trust_bundle=TLS_DIR / "ca.pem")
ZOOKEEPER_CLIENT_PORT: Final = 2181

KAFKA_LOG4J: Final = KAFKA_CONFIG_DIR / "log4j.properties"
ZOO_CFG: Final = ZOOKEEPER_CONFIG_DIR / "zoo.cfg"
ZOOKEEPER_DYNAMIC: Final = ZOOKEEPER_CONFIG_DIR / "zoo.cfg.dynamic"
ZOOKEEPER_LOGBACK: Final = ZOOKEEPER_CONFIG_DIR / "logback.xml"


def image_config_files(node_subject: str) -> Mapping[PurePosixPath, str]:
    """Absolute path on the VM -> file text. `node_subject`: the nodes' certificate subject
    (planner.pki), ZooKeeper's super user."""
    security = ZookeeperSecurity(NODE_TLS, node_subject)
    return {
        KAFKA_LOG4J: render_kafka_log4j(),
        ZOO_CFG: render_zoo_cfg(
            ZOOKEEPER_DATA_DIR, ZOOKEEPER_DYNAMIC, security, ZOOKEEPER_CLIENT_PORT
        ),
        ZOOKEEPER_LOGBACK: render_zookeeper_logback(),
    }
