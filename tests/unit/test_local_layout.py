from __future__ import annotations

import json
from pathlib import Path

import pytest

from management_plane.errors import KaasError
from management_plane.local import render
from management_plane.local.image import load_image, verify_image
from management_plane.local.layout import next_vm, plan_layout
from management_plane.local.processes import ProcessRecord
from management_plane.local.state import ClusterState, read_state, write_state

pytestmark = pytest.mark.unit


def test_vms_get_their_own_address_zone_and_broker_id(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 4, "127.0.5")
    assert [vm.address for vm in layout.vms] == ["127.0.5.1", "127.0.5.2", "127.0.5.3", "127.0.5.4"]
    assert [vm.zone for vm in layout.vms] == ["zone-a", "zone-b", "zone-c", "zone-a"]
    assert [vm.broker_id for vm in layout.vms] == [0, 1, 2, 3]
    assert layout.bootstrap_servers == "127.0.5.1:9092,127.0.5.2:9092,127.0.5.3:9092,127.0.5.4:9092"
    assert layout.zookeeper_connect.endswith("127.0.5.4:2181/kafka/c1")


@pytest.mark.parametrize(
    ("nodes", "base", "name", "message"),
    [
        (0, "127.0.1", "c", "--nodes must be at least 1, got 0"),
        (-2, "127.0.1", "c", "--nodes must be at least 1"),
        (3, "10.0.0", "c", "outside the loopback range"),
        (3, "127.0", "c", "not the first three octets"),
        (3, "127.0.1", "bad name!", "cluster name"),
    ],
)
def test_bad_layout_input_is_named(
    tmp_path: Path, nodes: int, base: str, name: str, message: str
) -> None:
    with pytest.raises(KaasError, match=message):
        plan_layout(name, tmp_path, nodes, base)


def test_unknown_vm_name_lists_the_known_ones(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 2)
    with pytest.raises(KaasError, match=r"unknown VM 'vm9' in cluster c1 \(VMs: vm1, vm2\)"):
        layout.vm("vm9")


def _properties(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


@pytest.mark.parametrize(
    ("nodes", "rf", "min_isr"), [(1, "1", "1"), (2, "2", "1"), (3, "3", "2"), (5, "3", "2")]
)
def test_broker_config_has_durable_defaults(
    tmp_path: Path, nodes: int, rf: str, min_isr: str
) -> None:
    layout = plan_layout("c1", tmp_path, nodes)
    props = _properties(
        render.config_files(layout, layout.vms[-1], "3.9.2")[render.SERVER_PROPERTIES]
    )
    assert props["default.replication.factor"] == rf
    assert props["min.insync.replicas"] == min_isr
    assert props["unclean.leader.election.enable"] == "false"
    assert props["auto.create.topics.enable"] == "false"
    assert props["broker.rack"] == layout.vms[-1].zone
    assert props["broker.id"] == str(nodes - 1)
    assert props["zookeeper.connect"] == layout.zookeeper_connect
    assert props["advertised.listeners"] == (
        f"INTERNAL://127.0.1.{nodes}:9092,TENANT://127.0.1.{nodes}:9094"
    )


def test_zookeeper_config_enables_reconfig_without_standalone(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 3)
    files = render.config_files(layout, layout.vms[0], "3.9.2")
    cfg = _properties(files[render.ZOO_CFG])
    assert cfg["reconfigEnabled"] == "true"
    assert cfg["standaloneEnabled"] == "false"
    assert "clientPort" not in cfg  # no plaintext client port anywhere
    assert cfg["secureClientPort"] == "2181"
    assert cfg["secureClientPortAddress"] == layout.vms[0].address
    assert cfg["ssl.keyStore.location"] == str(layout.vms[0].directory / "tls" / "node.pem")
    assert cfg["dynamicConfigFile"] == str(layout.vms[0].config_dir / render.ZOOKEEPER_DYNAMIC)
    assert cfg["dataDir"] == str(layout.vms[0].zookeeper_data_dir)
    dynamic = files[render.ZOOKEEPER_DYNAMIC].splitlines()
    # No client part: no plaintext client port anywhere; clients use the secure port above.
    assert dynamic[1] == "server.2=127.0.1.2:2888:3888:participant"
    # Beyond the ensemble size (3 for 3 or 4 VMs) a VM's server observes.
    four_vms = plan_layout("c1", tmp_path, 4)
    four_files = render.config_files(four_vms, four_vms.vms[0], "3.9.2")
    four = four_files[render.ZOOKEEPER_DYNAMIC].splitlines()
    assert [line.split(":")[3].split(";")[0] for line in four] == [
        "participant",
        "participant",
        "participant",
        "observer",
    ]


def test_cluster_file_round_trips(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 3)
    state = ClusterState(layout=layout, kafka_version="3.9.2")
    state.set_record("vm2", "kafka", ProcessRecord(pid=1234, create_time=17.5))
    write_state(state)
    again = read_state(tmp_path)
    assert again is not None
    assert again.layout == layout
    assert again.record("vm2", "kafka") == ProcessRecord(1234, 17.5)
    assert again.record("vm1", "kafka") is None


def test_tenants_get_the_tenant_listener_of_every_vm(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 3, "127.0.5")
    assert layout.tenant_bootstrap_servers == "127.0.5.1:9094,127.0.5.2:9094,127.0.5.3:9094"
    assert layout.vms[0].ports.all()["kafka_tenant"] == 9094
    assert layout.vms[0].ports.all()["kafka_internal"] == 9092


def test_a_cluster_file_from_before_the_tenant_listener_reads_with_its_default(
    tmp_path: Path,
) -> None:
    layout = plan_layout("c1", tmp_path, 2)
    write_state(ClusterState(layout=layout, kafka_version="3.9.2"))
    path = tmp_path / "cluster.json"
    value = json.loads(path.read_text())
    for vm in value["vms"]:
        vm["ports"]["kafka"] = vm["ports"].pop("kafka_internal")
        del vm["ports"]["kafka_tenant"]
    path.write_text(json.dumps(value))
    again = read_state(tmp_path)
    assert again is not None and again.layout == layout


def test_a_cluster_file_with_the_old_port_names_reads_them(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 2)
    write_state(ClusterState(layout=layout, kafka_version="3.9.2"))
    path = tmp_path / "cluster.json"
    value = json.loads(path.read_text())
    for vm in value["vms"]:
        vm["ports"]["kafka"] = vm["ports"].pop("kafka_internal") + 1000
        vm["ports"]["kafka_sasl"] = vm["ports"].pop("kafka_tenant") + 1000
    path.write_text(json.dumps(value))
    again = read_state(tmp_path)
    assert again is not None
    assert [(vm.ports.kafka_internal, vm.ports.kafka_tenant) for vm in again.layout.vms] == [
        (10092, 10094),
        (10092, 10094),
    ]


def test_the_cluster_file_names_the_client_files(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 2)
    write_state(ClusterState(layout=layout, kafka_version="3.9.2"))
    client = json.loads((tmp_path / "cluster.json").read_text())["client"]
    assert client["ca_file"] == str(tmp_path / "client" / "ca.pem")
    assert client["java_properties"] == str(tmp_path / "client" / "admin.properties")
    assert client["librdkafka_properties"] == str(
        tmp_path / "client" / "admin-librdkafka.properties"
    )
    assert client["keystore_file"] == str(tmp_path / "client" / "admin.pem")


def test_corrupt_cluster_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text('{"schema_version": 1, "vms": [')
    with pytest.raises(KaasError, match="is not valid JSON"):
        read_state(tmp_path)
    (tmp_path / "cluster.json").write_text('{"schema_version": 7}')
    with pytest.raises(KaasError, match="schema_version 7 is not 1"):
        read_state(tmp_path)


def _fake_image(root: Path) -> Path:
    libs = root / "opt" / "kaas" / "kafka" / "3.9.2" / "libs"
    libs.mkdir(parents=True)
    jar = libs / "kafka.jar"
    jar.write_bytes(b"jar bytes")
    import hashlib

    digest = hashlib.sha256(b"jar bytes").hexdigest()
    (root / "opt" / "kaas" / "SHA256SUMS").write_text(
        f"{digest}  opt/kaas/kafka/3.9.2/libs/kafka.jar\n"
    )
    (root / "opt" / "kaas" / "image.json").write_text(
        '{"kafka_versions": {"3.9.2": "opt/kaas/kafka/3.9.2/libs"}, "default_kafka_version": "3.9.2",'
        ' "zookeeper_lib": "z", "jolokia_agent": "j", "spark_jars": "s"}'
    )
    return jar


def test_image_verification_names_a_corrupt_jar(tmp_path: Path) -> None:
    jar = _fake_image(tmp_path)
    verify_image(tmp_path)
    jar.write_bytes(b"jar bytes, altered")
    with pytest.raises(KaasError, match=r"kafka\.jar is corrupt \(sha256 mismatch\)"):
        verify_image(tmp_path)
    jar.unlink()
    with pytest.raises(KaasError, match=r"kafka\.jar is missing"):
        verify_image(tmp_path)


def test_image_knows_its_kafka_versions(tmp_path: Path) -> None:
    _fake_image(tmp_path)
    image = load_image(tmp_path)
    assert image.kafka_libs() == tmp_path.resolve() / "opt/kaas/kafka/3.9.2/libs"
    with pytest.raises(
        KaasError, match=r"Kafka version 2\.0\.0 is not in the image .* \(it has 3\.9\.2\)"
    ):
        image.kafka_libs("2.0.0")


def test_missing_image_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(KaasError, match="run `make setup`"):
        load_image(tmp_path / "nothing-here")


def test_next_vm_takes_the_next_index_never_a_retired_one(tmp_path: Path) -> None:
    layout = plan_layout("grow", tmp_path, 3, "127.0.9")
    added = next_vm(layout, "zone-b")
    assert (added.name, added.index, added.address, added.zone) == ("vm4", 4, "127.0.9.4", "zone-b")
    assert added.directory == tmp_path / "vm4"
    # vm4 and vm5 were recycled: the next VM is vm6, so no address is ever reused.
    assert next_vm(layout, "zone-a", frozenset({4, 5})).address == "127.0.9.6"


def test_zones_can_be_chosen(tmp_path: Path) -> None:
    layout = plan_layout("two", tmp_path, 3, "127.0.9", zones=("zone-a", "zone-b"))
    assert [vm.zone for vm in layout.vms] == ["zone-a", "zone-b", "zone-a"]
    with pytest.raises(KaasError, match="at least one zone"):
        plan_layout("none", tmp_path, 1, "127.0.9", zones=())


def test_a_joining_vm_keeps_the_live_ensemble_and_adds_itself_as_participant(
    tmp_path: Path,
) -> None:
    layout = plan_layout("c1", tmp_path, 3, "127.0.9")
    live = [
        "server.1=127.0.9.1:2888:3888:participant",
        "server.2=127.0.9.2:2888:3888:participant",
    ]
    added = next_vm(layout, "zone-b")
    assert render.joining_dynamic_file(live, added).splitlines() == [
        *live,
        "server.4=127.0.9.4:2888:3888:participant",
    ]
