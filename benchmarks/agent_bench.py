"""Figures of the agent on a local 3-VM cluster (`kaas up`, agents on):

1. cost at idle: each agent's resident memory and CPU share over a quiet minute
   (targets: at most 80 MiB and 2% of one core);
2. a rolling restart under load: a read-only config change in the spec, the time each
   broker's restart took (median; target at most 30 s), and the p99 produce latency of an
   acks=all idempotent producer during the roll against before it, with the errors seen.

    .venv/bin/python benchmarks/agent_bench.py [--idle-seconds 60] [--address-base 127.0.22]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
from confluent_kafka import KafkaError, Message

from management_plane.local.cluster import LocalCluster
from management_plane.local.state import require_state
from management_plane.local.tls import admin_client, admin_identity
from management_plane.workload import create_topic, durable_producer
from planner.contracts.journal import parse_journal_entry
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec, parse_spec
from planner.zookeeper_client import zookeeper_client


def idle_cost(home: Path, seconds: float) -> None:
    state = require_state(home)
    agents = {}
    for vm in state.layout.vms:
        record = state.record(vm.name, "agent")
        assert record is not None, f"{vm.name} runs no agent"
        # The record is the unit's stand-in (management_plane/local/agent_unit.py); its one
        # child is the agent.
        children = psutil.Process(record.pid).children()
        assert children, f"{vm.name}'s agent unit runs no agent"
        agents[vm.name] = children[0]
    start = {name: p.cpu_times() for name, p in agents.items()}
    time.sleep(seconds)
    for name, process in agents.items():
        cpu = process.cpu_times()
        used = (cpu.user + cpu.system) - (start[name].user + start[name].system)
        rss = process.memory_info().rss / 2**20
        print(
            f"  {name} agent: {rss:.0f} MiB resident, {100 * used / seconds:.2f}% of one core over {seconds:.0f}s"
        )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def rolling_restart(home: Path) -> None:
    state = require_state(home)
    layout = state.layout
    paths = ClusterPaths(layout.name)
    topic = "bench-roll"
    connection = admin_client(layout).librdkafka()
    create_topic(connection, topic, 6)
    producer = durable_producer(connection, **{"linger.ms": 0})
    latencies: list[tuple[float, float]] = []  # (sent at, latency)
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            sent = time.monotonic()

            def delivered(error: KafkaError | None, message: Message, sent: float = sent) -> None:
                if error is not None:
                    errors.append(error.str())
                else:
                    latencies.append((sent, time.monotonic() - sent))

            producer.produce(topic, value=b"x" * 200, on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.005)
        producer.flush(120)

    thread = threading.Thread(target=produce, daemon=True)
    producing_since = time.monotonic()
    thread.start()
    time.sleep(20)
    roll_started = time.monotonic()
    zk = zookeeper_client(layout.zookeeper_hosts, admin_identity(layout))
    zk.start(timeout=15)
    raw, stat = zk.get(paths.spec)
    spec = parse_spec(raw)
    changed = ClusterSpec(
        **{
            **spec.__dict__,
            "broker_config": {"offsets.retention.minutes": "10081"},
            "generation": spec.generation + 1,
        }
    )
    zk.set(paths.spec, changed.encode(), version=stat.version)
    journal_start = len(zk.get_children(paths.journal))
    while True:
        entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))[journal_start:]
        ]
        done = [e for e in entries if e.action == "restart" and e.result.startswith("done")]
        if len(done) == len(layout.vms) or time.monotonic() - roll_started > 600:
            break
        time.sleep(1)
    roll_ended = time.monotonic()
    time.sleep(5)
    stop.set()
    thread.join(150)
    starts = {
        e.broker_id: e.at_ms for e in entries if e.action == "restart" and e.result == "started"
    }
    per_broker = [(e.at_ms - starts[e.broker_id]) / 1000 for e in done if e.broker_id in starts]
    zk.stop()
    zk.close()
    # The first seconds carry the producer's metadata and id fetches: not the steady state.
    before = [lat for sent, lat in latencies if producing_since + 5 <= sent < roll_started]
    during = [lat for sent, lat in latencies if roll_started <= sent <= roll_ended]
    print(
        f"  roll of {len(done)} brokers in {roll_ended - roll_started:.0f}s; per broker (decision to ISR complete, lock wait included): "
        f"median {statistics.median(per_broker):.1f}s, each {', '.join(f'{s:.1f}' for s in per_broker)}"
    )
    print(
        f"  produce p99 latency: before {1000 * percentile(before, 0.99):.0f} ms ({len(before)} messages), "
        f"during the roll {1000 * percentile(during, 0.99):.0f} ms ({len(during)} messages); max during "
        f"{1000 * max(during, default=0):.0f} ms"
    )
    print(f"  produce errors: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--address-base", default="127.0.22")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kaas-agent-bench-") as scratch:
        home = Path(scratch) / "cluster"
        cluster = LocalCluster(home)
        cluster.up(3, name="bench", address_base=args.address_base, agents=True)
        try:
            time.sleep(15)
            print("agent cost at idle:")
            idle_cost(home, args.idle_seconds)
            print("rolling restart under load (read-only config change):")
            rolling_restart(home)
        finally:
            cluster.down(purge=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
