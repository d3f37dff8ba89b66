"""Formatting a new local KRaft cluster's storage with Kafka's own tool (kafka-storage format)
before its first start.

The cluster id and each initial voter's directory id are made once and kept in the cluster's
folder (`kraft.json`), so a stopped cluster started again formats nothing (--ignore-formatted
leaves a formatted dir alone) and names the same voters.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from management_plane.errors import KaasError
from management_plane.local import kraft
from management_plane.local.layout import ClusterLayout, VmLayout
from planner.contracts.vm_config.kraft import random_kafka_uuid

IDS_FILE = "kraft.json"
FORMAT_TIMEOUT_S = 120.0


def cluster_ids(home: Path, layout: ClusterLayout) -> tuple[str, dict[str, str]]:
    """(cluster id, VM name -> controller directory id), made on the first call."""
    path = home / IDS_FILE
    if path.exists():
        try:
            value = json.loads(path.read_text())
            return str(value["cluster_id"]), {
                str(k): str(v) for k, v in value["directory_ids"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KaasError(
                f"{path} is malformed ({exc}): `kaas down --purge` and up again"
            ) from None
    cluster_id = random_kafka_uuid()
    directory_ids = {vm.name: random_kafka_uuid() for vm in kraft.controller_vms(layout)}
    path.write_text(
        json.dumps({"cluster_id": cluster_id, "directory_ids": directory_ids}, indent=2) + "\n"
    )
    return cluster_id, directory_ids


def format_storage(
    home: Path, layout: ClusterLayout, java: str, libs: str, joining: VmLayout | None = None
) -> None:
    """Format every VM's controller and broker dirs (those already formatted are left as they
    are), or only those of `joining`, a VM added to the running cluster (its controller an
    observer until the agents make it a voter); the runs go in parallel, each a short JVM."""
    cluster_id, directory_ids = cluster_ids(home, layout)
    voters = () if joining else kraft.initial_voters(layout, directory_ids)
    runs: list[tuple[str, subprocess.Popen[str]]] = []
    for vm in (joining,) if joining else layout.vms:
        vm.controller_data_dir.parent.mkdir(parents=True, exist_ok=True)
        commands = kraft.format_commands(
            java, libs, layout, vm, cluster_id, voters, joining=joining is not None
        )
        for command in commands:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            runs.append((vm.name, process))
    failures = []
    for name, process in runs:
        try:
            output, _ = process.communicate(timeout=FORMAT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            failures.append(f"{name}: kafka-storage format timed out")
            continue
        if process.returncode != 0:
            last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
            failures.append(f"{name}: kafka-storage format failed ({last[0][:200]})")
    if failures:
        raise KaasError("; ".join(failures))
