"""The monitoring pipeline's cost at idle: CPU and resident memory of statsd, carbon and the
render API (graphite-web) of a 3-VM `kaas up` with agents, over a minute with no workload,
beside the same figures of the VMs' agents and brokers from the same run (the baseline: what
the cluster costs without the pipeline, and the agents that feed it).

    .venv/bin/python benchmarks/monitoring_idle_bench.py [--seconds 60] [--settle 30]
        [--address-base 127.0.23] [--kafka-version 3.9.2]

Each daemon is measured with its whole process group (graphite-web's gunicorn master and its
workers; an agent's unit and the agent). CPU is the group's user + system seconds over the
window divided by the window (100% = one core); memory is the mean of a sample every 5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from management_plane.local.cluster import LocalCluster
from management_plane.local.processes import ProcessRecord
from management_plane.local.state import require_state
from management_plane.monitoring.pipeline import pipeline_records, plan_pipeline


def _group(record: ProcessRecord) -> list[psutil.Process]:
    members = []
    for process in psutil.process_iter():
        try:
            if process.pid == record.pid or os.getpgid(process.pid) == record.pid:
                members.append(process)
        except (psutil.Error, ProcessLookupError):
            continue
    return members


def _cpu_seconds(record: ProcessRecord) -> float:
    total = 0.0
    for process in _group(record):
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _rss_bytes(record: ProcessRecord) -> int:
    total = 0
    for process in _group(record):
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total


def measure(
    records: Mapping[str, ProcessRecord], seconds: float, sample_s: float = 5.0
) -> dict[str, tuple[float, float]]:
    """name -> (CPU percent of one core, mean resident MiB) over `seconds`."""
    cpu_before = {name: _cpu_seconds(r) for name, r in records.items()}
    memory: dict[str, list[int]] = {name: [] for name in records}
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for name, record in records.items():
            memory[name].append(_rss_bytes(record))
        time.sleep(min(sample_s, max(0.0, seconds - (time.monotonic() - started))))
    elapsed = time.monotonic() - started
    return {
        name: (
            100.0 * (_cpu_seconds(record) - cpu_before[name]) / elapsed,
            statistics.mean(memory[name]) / 2**20,
        )
        for name, record in records.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=30.0, help="wait after up before measuring")
    parser.add_argument("--address-base", default="127.0.23")
    parser.add_argument("--kafka-version", default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kaas-bench-", dir=Path("build").resolve()) as scratch:
        home = Path(scratch) / "cluster"
        cluster = LocalCluster(home)
        cluster.up(
            3,
            name="idle",
            address_base=args.address_base,
            agents=True,
            kafka_version=args.kafka_version,
        )
        try:
            time.sleep(args.settle)
            state = require_state(home)
            pipeline = pipeline_records(plan_pipeline(home, args.address_base))
            records: dict[str, ProcessRecord] = {
                f"pipeline {daemon.value}": record for daemon, record in pipeline.items()
            }
            for vm in state.layout.vms:
                for kind in ("agent", "kafka"):
                    record = state.record(vm.name, kind)
                    if record is not None:
                        records[f"{vm.name} {kind}"] = record
            figures = measure(records, args.seconds)
        finally:
            cluster.down(purge=True)

    load = os.getloadavg()[0]
    print(f"idle cost over {args.seconds:.0f} s (3 VMs, agents; load average {load:.1f}):")
    print(f"  {'process':<28}{'CPU % of a core':>16}{'RSS MiB':>10}")
    for name, (cpu, rss) in figures.items():
        print(f"  {name:<28}{cpu:>16.2f}{rss:>10.1f}")

    def total(prefix: str) -> tuple[float, float]:
        chosen = [v for k, v in figures.items() if k.startswith(prefix) or k.endswith(prefix)]
        return sum(c for c, _ in chosen), sum(r for _, r in chosen)

    pipeline_cpu, pipeline_rss = total("pipeline")
    agents_cpu, agents_rss = total("agent")
    brokers_cpu, brokers_rss = total("kafka")
    print(f"  {'pipeline (3 daemons)':<28}{pipeline_cpu:>16.2f}{pipeline_rss:>10.1f}")
    print(f"  {'baseline: 3 agents':<28}{agents_cpu:>16.2f}{agents_rss:>10.1f}")
    print(f"  {'baseline: 3 brokers':<28}{brokers_cpu:>16.2f}{brokers_rss:>10.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
