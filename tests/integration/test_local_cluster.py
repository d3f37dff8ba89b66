"""The shared real 3-VM cluster: clients, registrations, Kafka's own tools, `kaas status`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter

import pytest
from confluent_kafka import Consumer

from management_plane.local.image import load_image
from management_plane.local.probes import broker_registrations
from management_plane.workload import (
    consume_group,
    create_topic,
    durable_producer,
    produce_keyed,
    verify_per_key_order,
)
from planner.pki.tls import client_context
from tests.harness import SHARED_CLUSTER_BASE, ClusterHandle

pytestmark = pytest.mark.integration


def test_a_real_client_produces_and_consumes_through_the_cluster(
    kafka_cluster: ClusterHandle,
) -> None:
    topic = kafka_cluster.unique_topic("produce-consume")
    create_topic(kafka_cluster.client_config(), topic, partitions=6)
    produced = produce_keyed(
        durable_producer(kafka_cluster.client_config()), topic, messages=3000, keys=30
    )
    assert produced.errors == []
    assert len(produced.acknowledged) == 3000
    consumed = consume_group(
        kafka_cluster.client_config(), topic, f"{topic}-g", consumers=2, expected=3000
    )
    result = verify_per_key_order(
        dict(Counter(key for key, _, _, _ in produced.acknowledged)), consumed.records_by_consumer
    )
    assert result.received == 3000
    assert result.exactly_once_in_order, result


def test_broker_registrations_carry_the_vms_addresses_and_racks(
    kafka_cluster: ClusterHandle,
) -> None:
    registrations = broker_registrations(kafka_cluster.layout)
    assert sorted(registrations) == [0, 1, 2]
    for vm in kafka_cluster.layout.vms:
        registration = registrations[vm.broker_id]
        assert registration.host == vm.address
        assert registration.port == 9092
        assert registration.rack == vm.zone
        assert registration.endpoints == (
            f"INTERNAL://{vm.address}:9092",
            f"TENANT://{vm.address}:9094",
        )


def test_topics_get_the_durable_defaults(kafka_cluster: ClusterHandle) -> None:
    topic = kafka_cluster.unique_topic("defaults")
    libs = load_image().kafka_libs()
    subprocess.run(
        [
            "java",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            kafka_cluster.bootstrap_servers,
            # The admin settings `kaas up` wrote and cluster.json names: mutual TLS.
            "--command-config",
            str(kafka_cluster.admin_properties),
            "--create",
            "--topic",
            topic,
            "--partitions",
            "3",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    describe = subprocess.run(
        [
            "java",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            kafka_cluster.bootstrap_servers,
            "--command-config",
            str(kafka_cluster.admin_properties),
            "--describe",
            "--topic",
            topic,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "ReplicationFactor: 3" in describe
    assert describe.count("Isr:") == 3
    # Each partition's replicas span the three zones (rack-aware assignment).
    for line in describe.splitlines():
        if "Replicas:" in line:
            replicas = line.split("Replicas:")[1].split()[0].split(",")
            assert sorted(replicas) == ["0", "1", "2"]


def test_kafka_configs_tool_reads_min_isr(kafka_cluster: ClusterHandle) -> None:
    libs = load_image().kafka_libs()
    out = subprocess.run(
        [
            "java",
            "-cp",
            f"{libs}/*",
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            kafka_cluster.bootstrap_servers,
            "--command-config",
            str(kafka_cluster.admin_properties),
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--describe",
            "--all",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "min.insync.replicas=2" in out
    assert "unclean.leader.election.enable=false" in out
    assert "auto.create.topics.enable=false" in out


def test_auto_topic_creation_is_off(kafka_cluster: ClusterHandle) -> None:
    topic = kafka_cluster.unique_topic("never-created")
    consumer = Consumer({**kafka_cluster.client_config(), "group.id": topic})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        assert metadata.topics[topic].error is not None  # UNKNOWN_TOPIC_OR_PART, not auto-created
    finally:
        consumer.close()


def test_status_reports_every_vm(kafka_cluster: ClusterHandle) -> None:
    result = kafka_cluster.kaas("status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert [vm["name"] for vm in status["vms"]] == ["vm1", "vm2", "vm3"]
    modes = sorted(vm["zookeeper_mode"] for vm in status["vms"])
    assert modes == ["follower", "follower", "leader"]
    for vm in status["vms"]:
        assert vm["processes"]["kafka"]["state"] == "running"
        assert vm["processes"]["kafka"]["pid"] > 0
        assert vm["broker_registered"] is True
        assert vm["under_replicated_partitions"] == 0
    text = kafka_cluster.kaas("status")
    assert text.returncode == 0
    assert "leader" in text.stdout and "vm3" in text.stdout


def test_jolokia_serves_broker_mbeans(kafka_cluster: ClusterHandle) -> None:
    import urllib.request

    vm = kafka_cluster.layout.vms[0]
    url = vm.jolokia_url + "read/kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions"
    context = client_context(kafka_cluster.node_identity)
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        body = json.load(response)
    assert body["status"] == 200
    assert body["value"]["Value"] == 0


def test_unknown_vm_name_is_a_clear_error(kafka_cluster: ClusterHandle) -> None:
    result = kafka_cluster.kaas("vm", "stop", "vm7")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "kaas: error: unknown VM 'vm7' in cluster shared (VMs: vm1, vm2, vm3)"
    )


def test_kaas_up_on_a_running_cluster_reports_it(kafka_cluster: ClusterHandle) -> None:
    result = kafka_cluster.kaas(
        "up", "--nodes", "3", "--address-base", SHARED_CLUSTER_BASE, "--name", "shared"
    )
    assert result.returncode == 0, result.stderr
    assert "already running" in result.stdout
    assert kafka_cluster.bootstrap_servers in result.stdout


def test_packer_template_validates() -> None:
    packer = shutil.which("packer")
    if packer is None and os.environ.get("CI"):
        pytest.fail("CI must have packer: .ci/run installs Debian's packer package")
    if packer is None:
        pytest.skip(
            "no packer binary here; .ci/run installs Debian's packer so CI always runs this"
        )
    result = subprocess.run(
        [packer, "validate", "-var", "agent_wheel=setup.cfg", "packer/kaas-vm.pkr.hcl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
