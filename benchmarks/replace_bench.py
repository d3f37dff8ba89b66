"""Figures of the management plane's immutable replacement on the local provider:

1. the time to replace one VM of a 3-VM cluster whose broker holds N MiB (RF 3 on three
   brokers: the old broker holds one replica of every partition), split into the steps of
   the operation, against the throttle's bound (data / spec.budget.throttle_bytes_per_s);
2. the longest produce stall while it runs: the largest delivery latency of an acks=all
   idempotent producer sending one message every 20 ms, and the errors it saw.

    .venv/bin/python -m benchmarks.replace_bench [--data-mib 256]   (from the repository root)
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import KafkaError, Message

from management_plane.workload import create_topic, durable_producer
from planner.contracts.spec import ReassignmentBudget
from planner.pki.client_settings import ClientConfig
from tests import harness
from tests.mp_service import ServiceHandle, free_port


def fill(connection: ClientConfig, topic: str, mib: int) -> float:
    producer = durable_producer(connection, **{"linger.ms": 50, "batch.size": 1_000_000})
    value = b"x" * 10_000
    started = time.monotonic()
    for index in range(mib * 1024 * 1024 // len(value)):
        while True:
            try:
                producer.produce(topic, key=str(index % 64).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(600) == 0, "the fill did not finish"
    return time.monotonic() - started


class StallProbe:
    def __init__(self, connection: ClientConfig, topic: str) -> None:
        self.producer = durable_producer(connection, **{"linger.ms": 0})
        self.topic = topic
        self.max_latency = 0.0
        self.errors: list[str] = []
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            sent_at = time.monotonic()

            def delivered(error: KafkaError | None, _msg: Message, at: float = sent_at) -> None:
                if error is not None:
                    self.errors.append(error.str())
                self.max_latency = max(self.max_latency, time.monotonic() - at)

            self.producer.produce(self.topic, value=b"probe", on_delivery=delivered)
            self.sent += 1
            self.producer.poll(0.02)
        self.producer.flush(180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-mib", type=int, default=256)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="kaas-replace-bench-"))
    service = ServiceHandle(home / "service", free_port(), harness.FRESH_CLUSTER_BASE)
    service.start()
    try:
        _, op = service.call("POST", "/v1/clusters", {"name": "bench", "broker_count": 3})
        service.wait_operation(op["op_id"], 900)
        _, cluster = service.call("GET", "/v1/clusters/bench")
        connection = harness.api_cluster_client(cluster).librdkafka()
        create_topic(connection, "bench-data", partitions=6)
        create_topic(connection, "bench-probe", partitions=3)
        fill_s = fill(connection, "bench-data", args.data_mib)
        print(f"filled {args.data_mib} MiB in {fill_s:.0f}s")
        old = next(vm for vm in cluster["vms"] if vm["broker_id"] == 0)
        probe = StallProbe(connection, "bench-probe")
        probe.thread.start()
        time.sleep(5)
        started = time.monotonic()
        _, op = service.call("POST", "/v1/clusters/bench/replace", {"vm_id": old["vm_id"]})
        final = service.wait_operation(op["op_id"], 7200)
        total = time.monotonic() - started
        probe.stopping.set()
        probe.thread.join(240)
        at = {j["step"]: j["at"] for j in final["journal"] if j["outcome"] == "done"}
        throttle = ReassignmentBudget().throttle_bytes_per_s
        bound = args.data_mib * 1024 * 1024 / throttle
        print(f"replacement of one VM holding {args.data_mib} MiB: {total:.0f}s in all")
        print(f"  new VM up and joined: {at['wait_joined:0'] - at['write_spec']:.0f}s")
        print(
            f"  drain (data moved off the old broker): {at['wait_drained:0'] - at['drain:0']:.0f}s "
            f"against the throttle's bound {bound:.1f}s ({throttle / 2**20:.0f} MiB/s)"
        )
        print(f"  recycle, ensemble, undrain: {at['undrain:0'] - at['wait_drained:0']:.0f}s")
        print(
            f"longest produce stall (max acks=all delivery latency): {probe.max_latency:.2f}s "
            f"over {probe.sent} messages; errors: {len(probe.errors)}"
        )
    finally:
        service.tear_down()


if __name__ == "__main__":
    main()
