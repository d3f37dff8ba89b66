"""A local VM's folders and files: its identity, ZooKeeper's myid, and the config files the
renderer gives it, keeping those another owner has taken over."""

from __future__ import annotations

from management_plane.local import kraft, render
from management_plane.local.layout import ClusterLayout, VmLayout
from management_plane.local.tls import ensure_vm_identity, write_admin_client_files
from planner.contracts.kafka_release import KafkaMode, kafka_mode
from planner.contracts.vm_config import render_zookeeper_myid


def make_vm_folders(vm: VmLayout) -> None:
    for folder in (vm.config_dir, vm.kafka_data_dir, vm.zookeeper_data_dir, vm.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)


def write_vm_files(
    layout: ClusterLayout, vm: VmLayout, kafka_version: str, agents: bool = False
) -> None:
    make_vm_folders(vm)
    ensure_vm_identity(layout, vm)
    write_admin_client_files(layout)
    (vm.zookeeper_data_dir / "myid").write_text(render_zookeeper_myid(vm.index))
    keep = {
        # After a reconfig ZooKeeper rewrites zoo.cfg to name its new dynamic file, and owns that.
        render.ZOO_CFG,
        render.ZOOKEEPER_DYNAMIC,
        # Once rendered, the agent owns server.properties.
        *((render.SERVER_PROPERTIES, kraft.CONTROLLER_PROPERTIES) if agents else ()),
    }
    files = render.config_files(layout, vm, kafka_version)
    if kafka_mode(kafka_version) is KafkaMode.KRAFT:
        kafka_files = (render.SERVER_PROPERTIES, render.KAFKA_LOG4J)
        files = {n: t for n, t in files.items() if n not in kafka_files}
        files.update(kraft.config_files(layout, vm, kafka_version))
    for name, text in files.items():
        path = vm.config_dir / name
        if not (name in keep and path.exists()):
            path.write_text(text)
