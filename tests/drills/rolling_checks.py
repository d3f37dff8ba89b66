"""The agents' rolling config changes, checked on a cluster with agents that other drills
share (tests/drills/test_kaas_drill.py runs them on its cluster): a read-only change in the
spec rolls the brokers one at a time, controller last, under an acks=all idempotent producer
and a consumer (no produce error, no lost message, never two brokers down at once); a
dynamic change reaches every broker without a restart. Each changes a config to a value it
does not hold yet and leaves the rest of the spec as it found it."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

from confluent_kafka.admin import AdminClient, ConfigResource

from management_plane.drills.plane_faults import ROLLED_CONFIG, toggled_config
from management_plane.workload import (
    consume_group,
    create_topic,
    durable_producer,
    produce_keyed,
    verify_per_key_order,
)
from planner.contracts.journal import JournalEntry, parse_journal_entry
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec, parse_spec
from tests.harness import ClusterHandle, agent_sentences, wait_for_healthy_agents, wait_until

READ_ONLY_KEY = ROLLED_CONFIG  # not dynamic in Kafka 3.9 (KIP-226): needs a restart
DYNAMIC_KEY = "log.cleaner.threads"


def check_read_only_change_rolls_brokers_one_at_a_time_controller_last(
    cluster: ClusterHandle,
) -> None:
    paths = ClusterPaths(cluster.layout.name)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    try:

        def sentences() -> list[str]:
            return agent_sentences(zk, cluster.layout.name)

        wait_for_healthy_agents(zk, cluster.layout.name)
        controller = int(json.loads(zk.get(paths.kafka_controller)[0])["brokerid"])
        topic = cluster.unique_topic("roll")
        create_topic(cluster.client_config(), topic, partitions=6)

        # Watch the brokers' registrations through the roll.
        fewest = [3]
        watching = threading.Event()

        def watch() -> None:
            while not watching.is_set():
                fewest[0] = min(fewest[0], len(zk.get_children(paths.kafka_broker_ids)))
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # Produce throughout the roll, in batches, with distinct keys per batch.
        producer = durable_producer(cluster.client_config())
        results = []
        producing = threading.Event()

        def produce() -> None:
            batch = 0
            while not producing.is_set():
                results.append(produce_keyed(producer, topic, 2000, 20, key_prefix=f"b{batch}"))
                batch += 1
                time.sleep(0.2)

        producer_thread = threading.Thread(target=produce, daemon=True)
        producer_thread.start()

        raw, stat = zk.get(paths.spec)
        spec = parse_spec(raw)
        value = toggled_config(spec.broker_config)[READ_ONLY_KEY]
        since_ms = int(time.time() * 1000)
        rolled = ClusterSpec(
            **{
                **spec.__dict__,
                "broker_config": {**spec.broker_config, READ_ONLY_KEY: value},
                "generation": spec.generation + 1,
            }
        )
        zk.set(paths.spec, rolled.encode(), version=stat.version)

        def rolled_everywhere() -> bool:
            done = [
                vm
                for vm in cluster.layout.vms
                if f"{READ_ONLY_KEY}={value}" in (vm.config_dir / "server.properties").read_text()
            ]
            return len(done) == 3 and all("healthy" in s for s in sentences())

        wait_until(rolled_everywhere, 420, "every broker to restart with the new config")
        producing.set()
        producer_thread.join(120)
        watching.set()
        watcher.join(5)

        errors = [e for r in results for e in r.errors]
        assert errors == []
        acknowledged = [a for r in results for a in r.acknowledged]
        assert len(acknowledged) >= 2000
        consumed = consume_group(
            cluster.client_config(), topic, f"{topic}-audit", 1, expected=len(acknowledged)
        )
        check = verify_per_key_order(
            dict(Counter(k for k, _, _, _ in acknowledged)), consumed.records_by_consumer
        )
        assert check.missing == 0, "acknowledged messages were lost"
        assert check.exactly_once_in_order, check
        assert fewest[0] >= 2, "two brokers were down at once"

        entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))
        ]
        restarts = [
            e.broker_id
            for e in entries
            if e.at_ms >= since_ms and e.action == "restart" and e.result == "done, ISR complete"
        ]
        assert sorted(restarts) == [0, 1, 2]
        assert restarts[-1] == controller, (
            f"controller {controller} did not restart last: {restarts}"
        )
    finally:
        zk.stop()
        zk.close()


def check_dynamic_change_reaches_every_broker_without_a_restart(cluster: ClusterHandle) -> None:
    paths = ClusterPaths(cluster.layout.name)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    try:

        def sentences() -> list[str]:
            return agent_sentences(zk, cluster.layout.name)

        wait_for_healthy_agents(zk, cluster.layout.name)
        pids = [(vm.directory / "kafka.pid").read_text() for vm in cluster.layout.vms]
        journal_before = len(zk.get_children(paths.journal))
        raw, stat = zk.get(paths.spec)
        spec = parse_spec(raw)
        value = "1" if spec.broker_config.get(DYNAMIC_KEY) == "2" else "2"
        changed = ClusterSpec(
            **{
                **spec.__dict__,
                "broker_config": {**spec.broker_config, DYNAMIC_KEY: value},
                "generation": spec.generation + 1,
            }
        )
        zk.set(paths.spec, changed.encode(), version=stat.version)
        admin = AdminClient(cluster.client_config())

        def applied_everywhere() -> bool:
            # librdkafka takes one broker resource per describe_configs call.
            values = []
            for broker_id in range(3):
                resource = ConfigResource("broker", str(broker_id))
                values.append(
                    admin.describe_configs([resource])[resource].result(10)[DYNAMIC_KEY].value
                )
            return values == [value] * 3 and all("healthy" in s for s in sentences())

        wait_until(applied_everywhere, 120, f"{DYNAMIC_KEY}={value} on every broker")
        assert [(vm.directory / "kafka.pid").read_text() for vm in cluster.layout.vms] == pids, (
            "a broker restarted"
        )

        def entries() -> list[JournalEntry]:
            return [
                parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
                for c in sorted(zk.get_children(paths.journal))[journal_before:]
            ]

        def applied_by() -> set[int]:
            return {
                e.broker_id
                for e in entries()
                if e.action == "apply_dynamic" and e.result == "done, read back"
            }

        # An agent journals after its read-back, which may come a moment after the value
        # is visible to this test.
        wait_until(lambda: applied_by() == {0, 1, 2}, 60, "every agent to journal its apply")
        assert not [e for e in entries() if e.action == "restart"]
        # The file follows, so that a later restart keeps the value.
        assert all(
            f"{DYNAMIC_KEY}={value}" in (vm.config_dir / "server.properties").read_text()
            for vm in cluster.layout.vms
        )
    finally:
        zk.stop()
        zk.close()
