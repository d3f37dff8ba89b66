"""MirrorMaker 2 between two local clusters, measured beside baselines from the same run.

The source is a cluster without agents, the target one with agents: the flow is written
into the target's ZooKeeper as the management plane writes it (its source credentials
delivered as the local provider delivers them, the source's read-only bindings granted),
and the target's agents run MirrorMaker on `--workers` VMs. Then:

- throughput: `--messages` records of `--size` bytes produced to the source as fast as the
  producer goes (acks=all); the mirrored throughput is the records over the time until the
  target held them all; the baseline, the source's own produce throughput of those records;
- replication latency: records produced at `--rate` per second for `--seconds`, read on the
  target (the mirrored topic) and on the source (the topic itself) by two consumers of this
  process at once; latency = when the consumer got it - its timestamp (the producer's create
  time, which MirrorMaker keeps); p50 and p99 beside the source's own produce-to-consume;
- cost: each MirrorMaker's resident memory at the end and CPU seconds over both phases,
  beside the same VM's broker's.

    .venv/bin/python -m benchmarks.mirror_bench [--vms 3] [--workers 2] [--messages 200000]
        [--size 512] [--rate 1000] [--seconds 30]          (from the repository root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from management_plane.local.mirror_sources import MirrorSourceStore
from management_plane.local.processes import ProcessRecord, is_alive
from management_plane.local.state import mirror_maker_record, read_state
from management_plane.local.tls import authority_dir_in
from management_plane.mirror.acls import mirror_source_grants
from management_plane.mirror.kafka import KafkaSourceAcls
from planner.contracts.mirror_flow import MirrorFlow, MirrorSource, SourceKind
from planner.contracts.paths import ClusterPaths
from planner.pki.authority import Role, issue
from planner.pki.files import load_authority
from tests import harness
from tests.harness import ClusterHandle

FLOW = "bench-flow"
ALIAS = "benchsrc"
QUIET = logging.getLogger("kaas.bench.rdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def _wait(ready: Callable[[], bool], what: str, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if ready():
            return time.monotonic() - started
        time.sleep(0.5)
    raise SystemExit(f"mirror_bench: {what} not within {timeout:.0f} s")


def _start_flow(source: ClusterHandle, target: ClusterHandle, workers: int) -> MirrorFlow:
    flow = MirrorFlow(
        name=FLOW,
        source=MirrorSource(SourceKind.EXTERNAL, ALIAS, source.bootstrap_servers),
        target_cluster=target.layout.name,
        topics="bench-.*",
        groups=".*",
        replication_factor=min(3, len(target.layout.vms)),
        workers=workers,
    )
    KafkaSourceAcls(source.bootstrap_servers, source.admin_identity).grant(
        mirror_source_grants(flow)
    )
    issued = issue(
        load_authority(authority_dir_in(source.home)), Role.MIRROR, (), dt.datetime.now(dt.UTC)
    )
    MirrorSourceStore(target.home).deliver(
        [vm.directory for vm in target.layout.vms],
        FLOW,
        issued.key_pem + issued.certificate_pem,
        source.admin_identity.trust_bundle.read_bytes(),
    )
    zk = target.zookeeper()
    zk.start(timeout=30)
    try:
        zk.create(ClusterPaths(target.layout.name).mirror_flow(FLOW), flow.encode(), makepath=True)
    finally:
        zk.stop()
        zk.close()
    return flow


def _mirror_makers(target: ClusterHandle) -> dict[str, ProcessRecord]:
    found = {}
    for vm in target.layout.vms:
        record = mirror_maker_record(vm)
        if record is not None and is_alive(record):
            found[vm.name] = record
    return found


def _brokers(target: ClusterHandle) -> dict[str, psutil.Process]:
    state = read_state(target.home)
    assert state is not None
    records = {vm.name: state.record(vm.name, "kafka") for vm in target.layout.vms}
    return {vm: psutil.Process(r.pid) for vm, r in records.items() if r is not None}


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _ends(config: dict[str, str | int | float | bool], topic: str, partitions: int) -> int:
    consumer = Consumer({**config, "group.id": f"ends-{uuid.uuid4().hex}"}, logger=QUIET)
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    except Exception:  # the mirrored topic does not exist yet
        return 0
    finally:
        consumer.close()


def _throughput(
    source: ClusterHandle, target: ClusterHandle, topic: str, messages: int, size: int
) -> tuple[float, float]:
    """(source produce records/s, mirrored records/s)."""
    producer = Producer(
        source.client_config(acks="all", **{"linger.ms": 5, "batch.size": 262144}), logger=QUIET
    )
    payload = b"x" * size
    started = time.monotonic()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(300):
        raise SystemExit("mirror_bench: the source did not take every record")
    produced = time.monotonic() - started
    mirrored = f"{ALIAS}.{topic}"
    _wait(
        lambda: _ends(target.client_config(), mirrored, 6) >= messages,
        f"{messages} records mirrored",
        900,
    )
    return messages / produced, messages / (time.monotonic() - started)


def _latency(
    source: ClusterHandle, target: ClusterHandle, topic: str, rate: int, seconds: int
) -> tuple[list[float], list[float]]:
    """Produce-to-consume latencies (ms) on the source's topic and the target's mirror."""

    def reader(cluster: ClusterHandle) -> Consumer:
        settings: dict[str, str | int | float | bool] = {
            "group.id": f"latency-{uuid.uuid4().hex}",
            "fetch.wait.max.ms": 100,
        }
        return Consumer(cluster.client_config(**settings), logger=QUIET)

    consumers = {"source": reader(source), "target": reader(target)}
    # Both read from the end as it is now: only this phase's records count.
    for name, consumer in consumers.items():
        subject = topic if name == "source" else f"{ALIAS}.{topic}"
        ends = consumer.get_watermark_offsets
        consumer.assign(
            [
                TopicPartition(subject, p, ends(TopicPartition(subject, p), timeout=10)[1])
                for p in range(6)
            ]
        )
    latencies: dict[str, list[float]] = {"source": [], "target": []}
    producer = Producer(source.client_config(acks="all", **{"linger.ms": 0}), logger=QUIET)
    total = rate * seconds
    started = time.monotonic()
    sent = 0
    deadline = started + seconds + 60
    while time.monotonic() < deadline:
        due = min(total, int((time.monotonic() - started) * rate))
        while sent < due:
            producer.produce(topic, str(sent).encode())
            sent += 1
        producer.poll(0)
        for name, consumer in consumers.items():
            for message in consumer.consume(num_messages=1000, timeout=0.005):
                if message.error() is None:
                    _, stamp = message.timestamp()
                    latencies[name].append(time.time() * 1000 - stamp)
        if sent >= total and all(len(v) >= total for v in latencies.values()):
            break
    producer.flush(30)
    for consumer in consumers.values():
        consumer.close()
    return latencies["source"], latencies["target"]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--vms", type=int, default=3, help="VMs per cluster")
    parser.add_argument("--workers", type=int, default=2, help="target VMs running MirrorMaker")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kaas-mirror-bench-"))
    print(f"load average at start: {psutil.getloadavg()}")
    source = harness.start_cluster(
        home / "source", args.vms, "benchsource", harness.SHARED_CLUSTER_BASE
    )
    target: ClusterHandle | None = None
    try:
        target = harness.start_cluster(
            home / "target", args.vms, "benchtarget", harness.FRESH_CLUSTER_BASE, agents=True
        )
        replication = min(3, args.vms)
        admin = AdminClient(source.client_config(), logger=QUIET)
        topics = {"bench-throughput": 6, "bench-latency": 6}
        for future in admin.create_topics(
            [NewTopic(t, p, replication) for t, p in topics.items()]
        ).values():
            future.result(60)
        _start_flow(source, target, args.workers)
        startup = _wait(
            lambda: len(_mirror_makers(target)) == args.workers, "MirrorMaker started", 180
        )
        # Both topics mirrored (made on the target) before anything is measured.
        _wait(
            lambda: all(
                f"{ALIAS}.{t}"
                in AdminClient(target.client_config(), logger=QUIET).list_topics(timeout=10).topics
                for t in topics
            ),
            "the mirrored topics",
            180,
        )
        makers = {vm: psutil.Process(r.pid) for vm, r in _mirror_makers(target).items()}
        brokers = _brokers(target)
        cpu_before = {vm: _cpu_s(p) for vm, p in makers.items()}
        broker_before = {vm: _cpu_s(p) for vm, p in brokers.items()}
        measured = time.monotonic()
        produce_rate, mirror_rate = _throughput(
            source, target, "bench-throughput", args.messages, args.size
        )
        on_source, on_target = _latency(source, target, "bench-latency", args.rate, args.seconds)
        span = time.monotonic() - measured
        print(
            f"\nMirrorMaker on {args.workers} of {args.vms} target VMs, started "
            f"{startup:.1f} s after the flow was written; load average {psutil.getloadavg()}"
        )
        print(f"\n{'throughput':<34}{'records/s':>12}{'MiB/s':>10}")
        for label, rate in (("source produce (baseline)", produce_rate), ("mirrored", mirror_rate)):
            print(f"{label:<34}{rate:>12,.0f}{rate * args.size / 2**20:>10.2f}")
        print(f"\n{'latency at ' + str(args.rate) + '/s (ms)':<34}{'p50':>10}{'p99':>10}{'n':>8}")
        for label, values in (
            ("source produce->consume (baseline)", on_source),
            ("source produce->target consume", on_target),
        ):
            print(
                f"{label:<34}{_percentile(values, 0.5):>10.1f}"
                f"{_percentile(values, 0.99):>10.1f}{len(values):>8}"
            )
        print(f"\ncost over {span:.0f} s{'':<14}{'RSS MiB':>10}{'CPU s':>10}{'CPU %':>8}")
        for vm, process in sorted(makers.items()):
            cpu = _cpu_s(process) - cpu_before[vm]
            rss = process.memory_info().rss / 2**20
            print(f"{vm} MirrorMaker{'':<17}{rss:>10.0f}{cpu:>10.1f}{100 * cpu / span:>8.1f}")
            broker = brokers.get(vm)
            if broker is not None:
                cpu = _cpu_s(broker) - broker_before[vm]
                rss = broker.memory_info().rss / 2**20
                print(
                    f"{vm} broker (baseline){'':<10}{rss:>10.0f}{cpu:>10.1f}"
                    f"{100 * cpu / span:>8.1f}"
                )
        print(
            f"median mirrored latency over the baseline: "
            f"{statistics.median(on_target) - statistics.median(on_source):.1f} ms"
        )
    finally:
        if target is not None:
            harness.stop_cluster(target)
        harness.stop_cluster(source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
