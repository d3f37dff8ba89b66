"""Produce and consume throughput over the TLS tenant listener (SASL_SSL, SCRAM-SHA-512, the
settings KaaS renders) against a plaintext listener, side by side, on one throwaway
single-node KRaft broker (Kafka 4.3.1 from the image) that serves both: the same JVM, disk
and topic settings, so only the listener differs. KaaS clusters have no plaintext listener;
this broker exists only for the baseline and is stopped at the end.

Two workloads: raw (incompressible payloads of `--size` bytes, as fast as the client goes:
the cipher's cost at its worst) and the demo's (the keyed, numbered messages `make demo`
produces, with its producer's settings: acks=all, idempotent, lz4), whose throughput is in
messages per second and whose acknowledgement latency is measured at a fixed rate.

    .venv/bin/python benchmarks/tls_throughput_bench.py [--messages 200000] [--size 1024]
        [--demo-messages 300000] [--latency-rate 2000] [--latency-seconds 10]
        [--runs 3] [--address 127.0.23.1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from management_plane.local.image import find_java, load_image
from management_plane.workload import durable_producer, encode, key_for, produce_keyed
from planner.client_logs import log_client_lines_to
from planner.contracts.vm_config.kafka_tls import (
    TENANT_SASL_MECHANISM,
    ListenerName,
    TlsFiles,
    tenant_listener_security,
)
from planner.contracts.vm_config.kraft import random_kafka_uuid
from planner.pki.authority import Role, create_authority, issue
from planner.pki.client_settings import TenantClient
from planner.pki.files import IdentityFiles, write_identity
from planner.private_files import write_private

KAFKA_VERSION = "4.3.1"
USER = "bench"
Config = dict[str, str | int | float | bool]
# librdkafka's connection chatter (a broker starting, a consumer leaving) stays off the terminal.
QUIET = logging.getLogger("kaas.bench.rdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def _properties(home: Path, address: str, ports: dict[str, int], tls: TlsFiles) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{address}:{ports['controller']}",
        "controller.listener.names": "CONTROLLER",
        "listeners": (
            f"PLAIN://{address}:{ports['plain']},"
            f"{ListenerName.TENANT}://{address}:{ports['tenant']},"
            f"CONTROLLER://{address}:{ports['controller']}"
        ),
        "listener.security.protocol.map": (
            f"PLAIN:PLAINTEXT,{ListenerName.TENANT}:SASL_SSL,CONTROLLER:PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAIN",
        "sasl.enabled.mechanisms": TENANT_SASL_MECHANISM,
        "log.dirs": str(home / "data"),
        "num.partitions": "6",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # The tenant listener exactly as KaaS renders it.
        **tenant_listener_security(tls),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _wait(ready: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except KafkaException:
            pass  # not listening yet
        time.sleep(1)
    raise SystemExit(f"tls_throughput_bench: {what} not ready after {timeout:.0f} s")


def _produce(config: Config, topic: str, messages: int, payload: bytes) -> float:
    producer = Producer(
        {**config, "acks": "all", "linger.ms": 5, "batch.size": 262144}, logger=QUIET
    )
    started = time.monotonic()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    elapsed = time.monotonic() - started
    if left:
        raise SystemExit(f"tls_throughput_bench: {left} messages not delivered to {topic}")
    return elapsed


def _consume(config: Config, topic: str, messages: int) -> float:
    consumer = Consumer(
        {
            **config,
            "group.id": f"bench-{secrets.token_hex(4)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52428800,
        },
        logger=QUIET,
    )
    consumer.subscribe([topic])
    received = 0
    started: float | None = None
    deadline = time.monotonic() + 300
    while received < messages and time.monotonic() < deadline:
        batch = consumer.consume(10000, 1.0)
        if batch and started is None:
            started = time.monotonic()
        received += sum(1 for m in batch if m.error() is None)
    consumer.close()
    if received < messages or started is None:
        raise SystemExit(f"tls_throughput_bench: read {received} of {messages} from {topic}")
    return time.monotonic() - started


DEMO_KEYS = 1000


def _demo_produce(config: Config, topic: str, messages: int) -> float:
    """The demo's producer and messages as fast as they go; messages per second."""
    producer = durable_producer(config)
    started = time.monotonic()
    result = produce_keyed(producer, topic, messages, DEMO_KEYS)
    elapsed = time.monotonic() - started
    if result.errors or len(result.acknowledged) != messages:
        raise SystemExit(f"tls_throughput_bench: demo produce to {topic}: {result.errors[:3]}")
    return messages / elapsed


def _ack_latencies(config: Config, topic: str, rate: int, seconds: float) -> list[float]:
    """Acknowledgement latencies (ms) of the demo's producer sending `rate` messages a second:
    latency at a load the listener carries, not at saturation."""
    producer = durable_producer(config)
    latencies: list[float] = []
    errors: list[str] = []

    def delivered(sent: float) -> Callable[[object, object], None]:
        def record(error: object, _message: object) -> None:
            if error is not None:
                errors.append(str(error))
            else:
                latencies.append((time.monotonic() - sent) * 1000)

        return record

    # Not measured: the producer's first messages wait for its connections and producer id.
    for index in range(100):
        producer.produce(topic, key=key_for(index), value=b"warm-up")
    producer.flush(60)
    interval = 1.0 / rate
    due = time.monotonic()
    for index in range(int(rate * seconds)):
        key = key_for(index % DEMO_KEYS)
        sent = time.monotonic()
        producer.produce(
            topic, key=key, value=encode(key, index // DEMO_KEYS), on_delivery=delivered(sent)
        )
        producer.poll(0)
        due += interval
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    producer.flush(60)
    if errors:
        raise SystemExit(f"tls_throughput_bench: latency run on {topic}: {errors[:3]}")
    return latencies


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--demo-messages", type=int, default=1_000_000)
    parser.add_argument("--latency-rate", type=int, default=2000, help="messages per second")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--address", default="127.0.23.1")
    args = parser.parse_args()

    image = load_image()
    java = find_java()
    ports = {"plain": 19092, "tenant": 19094, "controller": 19093}
    with tempfile.TemporaryDirectory(prefix="kaas-tls-bench-") as scratch:
        home = Path(scratch)
        now = dt.datetime.now(dt.UTC)
        authority = create_authority("tls-bench", now)
        identity = IdentityFiles(home / "tls", Role.NODE)
        write_identity(
            identity,
            issue(authority, Role.NODE, (args.address,), now),
            authority.certificate_pem,
        )
        tls = TlsFiles(str(identity.keystore), str(identity.trust_bundle))
        # The demo producer's client lines (coordinator loading, reconnects) into the scratch.
        log_client_lines_to(home / "clients.log")
        config_file = write_private(
            home / "server.properties", _properties(home, args.address, ports, tls)
        )
        libs = f"{image.kafka_libs(KAFKA_VERSION)}/*"
        jvm = [str(java), "-Xms1g", "-Xmx1g", "-cp", libs]
        log = (home / "kafka.log").open("ab")
        subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "--cluster-id", random_kafka_uuid(),
             "--config", str(config_file)],
            check=True, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        broker = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(config_file)], stdout=log, stderr=subprocess.STDOUT
        )
        try:
            plain: Config = {"bootstrap.servers": f"{args.address}:{ports['plain']}"}
            admin = AdminClient(plain, logger=QUIET)
            _wait(lambda: bool(admin.list_topics(timeout=2).brokers), "the broker")
            password = secrets.token_urlsafe(24)
            credential = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
            for future in admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(USER, credential, password.encode())]
            ).values():
                future.result()
            tenant: Config = dict(
                TenantClient(
                    f"{args.address}:{ports['tenant']}",
                    USER,
                    password,
                    authority.certificate_pem.decode(),
                ).librdkafka()
            )
            payload = secrets.token_bytes(args.size)
            results: dict[str, dict[str, list[float]]] = {
                label: {"produce": [], "consume": []}
                for label in ("plaintext (baseline)", "TLS tenant listener")
            }
            demo: dict[str, dict[str, list[float]]] = {
                label: {"produce": [], "consume": [], "p50": [], "p99": []} for label in results
            }
            for run in range(args.runs):
                # Alternate which goes first, so neither always meets a warmer broker.
                order = [("plaintext (baseline)", plain), ("TLS tenant listener", tenant)]
                for label, config in order if run % 2 == 0 else order[::-1]:
                    topic = f"bench-{run}-{'tls' if config is tenant else 'plain'}"
                    for future in admin.create_topics([NewTopic(topic, 6, 1)]).values():
                        future.result()
                    megabytes = args.messages * args.size / 2**20
                    produced = _produce(config, topic, args.messages, payload)
                    consumed = _consume(config, topic, args.messages)
                    results[label]["produce"].append(megabytes / produced)
                    results[label]["consume"].append(megabytes / consumed)
                    demo_topic = f"{topic}-demo"
                    for future in admin.create_topics([NewTopic(demo_topic, 6, 1)]).values():
                        future.result()
                    demo[label]["produce"].append(
                        _demo_produce(config, demo_topic, args.demo_messages)
                    )
                    demo[label]["consume"].append(
                        args.demo_messages / _consume(config, demo_topic, args.demo_messages)
                    )
                    latencies = _ack_latencies(
                        config, demo_topic, args.latency_rate, args.latency_seconds
                    )
                    demo[label]["p50"].append(_percentile(latencies, 0.50))
                    demo[label]["p99"].append(_percentile(latencies, 0.99))
        finally:
            broker.terminate()
            try:
                broker.wait(60)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
            log.close()

    print(
        f"{args.messages} messages of {args.size} B, {args.runs} runs, one broker "
        f"(Kafka {KAFKA_VERSION}), acks=all; MiB/s, median (min-max)"
    )
    print(f"{'listener':<24}{'produce':>26}{'consume':>26}")
    for label, figures in results.items():
        cells = [
            f"{statistics.median(v):8.1f} ({min(v):.1f}-{max(v):.1f})"
            for v in (figures["produce"], figures["consume"])
        ]
        print(f"{label:<24}{cells[0]:>26}{cells[1]:>26}")
    base, secured = results["plaintext (baseline)"], results["TLS tenant listener"]
    for kind in ("produce", "consume"):
        change = statistics.median(secured[kind]) / statistics.median(base[kind]) - 1
        print(f"TLS against plaintext, {kind}: {change:+.0%}")
    print()
    print(
        f"the demo's workload: {args.demo_messages} keyed messages over {DEMO_KEYS} keys, "
        f"acks=all, idempotent, lz4; messages/s, median (min-max); acknowledgement latency "
        f"at {args.latency_rate} messages/s for {args.latency_seconds:.0f} s, ms, median of runs"
    )
    print(f"{'listener':<24}{'produce':>24}{'consume':>24}{'p50':>8}{'p99':>8}")
    for label, figures in demo.items():
        cells = [
            f"{statistics.median(v):8.0f} ({min(v):.0f}-{max(v):.0f})"
            for v in (figures["produce"], figures["consume"])
        ]
        p50, p99 = statistics.median(figures["p50"]), statistics.median(figures["p99"])
        print(f"{label:<24}{cells[0]:>24}{cells[1]:>24}{p50:8.1f}{p99:8.1f}")
    base, secured = demo["plaintext (baseline)"], demo["TLS tenant listener"]
    for kind in ("produce", "consume", "p99"):
        change = statistics.median(secured[kind]) / statistics.median(base[kind]) - 1
        print(f"TLS against plaintext, demo {kind}: {change:+.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
