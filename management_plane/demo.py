"""`kaas demo`: the one place a newcomer sees the whole system work on a local cluster."""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path

from analytics.ledger import ProducedLedger
from management_plane.demo_managed import run_managed_demo
from management_plane.errors import KaasError
from management_plane.local.background_service import running_service
from management_plane.local.state import require_state
from management_plane.local.tls import admin_client
from management_plane.workload import (
    LEDGER_DIR_ENV,
    consume_group,
    create_topic,
    durable_producer,
    produce_keyed,
    verify_per_key_order,
)

KEYS = 1000


def ledger_dir(home: Path) -> Path:
    """Where the demo's produced-messages ledger goes: KAAS_PRODUCED_LEDGER_DIR, else HOME/ledger."""
    configured = os.environ.get(LEDGER_DIR_ENV)
    return Path(configured) if configured else home / "ledger"


def run_demo(
    home: Path, messages: int, partitions: int, consumers: int, managed: bool = True
) -> int:
    if messages < 1 or partitions < 1 or consumers < 1:
        raise KaasError("--messages, --partitions and --consumers must be at least 1")
    state = require_state(home)
    client = admin_client(state.layout)
    bootstrap = client.bootstrap_servers
    connection = client.librdkafka()
    replication = min(3, len(state.layout.vms))
    topic = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()

    create_topic(connection, topic, partitions, replication)
    print(f"topic {topic}: {partitions} partitions, replication factor {replication}")

    keys = min(KEYS, messages)
    # Every acknowledged message is counted per partition and minute, for the audit job.
    ledger = ProducedLedger(producer="demo")
    produced = produce_keyed(durable_producer(connection), topic, messages, keys, ledger=ledger)
    ledger_path = ledger.write(ledger_dir(home) / f"{topic}.jsonl")
    if produced.errors:
        raise KaasError(f"{len(produced.errors)} produce errors, first: {produced.errors[0]}")
    rate = messages / produced.seconds if produced.seconds else float("inf")
    print(
        f"produced {messages} keyed messages (acks=all, idempotent) in {produced.seconds:.1f}s: {rate:,.0f} msg/s"
    )
    print(
        f"ledger: {ledger.total()} acknowledged messages in {len(ledger.entries())} "
        f"(partition, minute) counts, {ledger_path}"
    )

    consumed = consume_group(connection, topic, f"{topic}-group", consumers, expected=messages)
    sent_per_key = Counter(key for key, _, _, _ in produced.acknowledged)
    result = verify_per_key_order(dict(sent_per_key), consumed.records_by_consumer)
    per_consumer = ", ".join(str(len(r)) for r in consumed.records_by_consumer)
    print(
        f"consumed {result.received} messages with a group of {consumers} ({per_consumer}) "
        f"in {consumed.seconds:.1f}s"
    )
    total = time.monotonic() - started
    if not result.exactly_once_in_order:
        print(
            f"FAILED: missing {result.missing}, duplicates {result.duplicates}, "
            f"keys out of order {result.out_of_order_keys}"
        )
        return 1
    print(
        f"OK: all {messages} messages arrived exactly once and in order per key ({total:.1f}s in all)"
    )
    if managed:
        service = running_service(home)
        if service is None:
            raise KaasError(
                f"no management plane runs beside the cluster at {home}: start it with `kaas up` "
                "(it starts `kaas serve`), or pass --no-managed"
            )
        code = run_managed_demo(service, state.layout.name, ledger_path.parent)
        if code != 0:
            return code
    print(
        f"audit: kaas analytics audit --bootstrap-servers {bootstrap} "
        f"--client-dir {client.identity.directory} --ledger {ledger_path.parent} "
        "--out build/demo/audit"
    )
    print(f"the cluster is still running: stop it with `kaas down --home {home}` (or `make down`)")
    return 0
