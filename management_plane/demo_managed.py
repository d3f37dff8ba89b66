"""The managed half of `kaas demo`, through the management plane that `kaas up` started:
onboard a tenant, produce as that tenant over SASL/SCRAM, replace one VM immutably while it
produces, and check that every acknowledged message is still there."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from analytics.ledger import ProducedLedger
from management_plane.errors import KaasError
from management_plane.local.background_service import BackgroundService
from management_plane.security.probes import negotiate
from management_plane.service.client import ApiClient, tenant_client_config, watch_operation
from management_plane.workload import (
    BackgroundProducer,
    read_back,
)

BATCH_MESSAGES = 500
BATCH_KEYS = 50

# The producer writes as fast as the replacement lets it (3M to 14M messages here), and a
# loaded 2-core machine reads them back at 20,000 a second or less: the read-back's limit
# grows with what was written, so that a slow read is not reported as a loss.
READ_BACK_MIN_TIMEOUT_S = 180.0
READ_BACK_MIN_RATE = 10_000  # messages a second

DEMO_RETENTION_BYTES = 4 * 1024**3


def run_managed_demo(service: BackgroundService, cluster: str, ledger_dir: Path) -> int:
    admin = ApiClient(service.url, service.admin_key_file.read_text().strip(), service.trust_bundle)
    name = f"demo{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    created = admin.call("POST", f"/v1/clusters/{cluster}/tenants", {"name": name, "plan": "small"})
    connection = created["tenant"]["connection"]
    print(
        f"tenant {name}: onboarded through {service.url} in {time.monotonic() - started:.1f}s "
        f"(SCRAM user, ACLs on prefix {created['tenant']['prefix']!r}, quotas); connects to "
        f"{connection['bootstrap_servers']} with {connection['sasl_mechanism']}"
    )
    # What the tenant's client negotiates: the brokers' certificate checked against the CA
    # in its connection details.
    host, _, port = connection["bootstrap_servers"].split(",")[0].rpartition(":")
    session = negotiate(host, int(port), connection["ca_certificate"])
    print(
        f"tenant {name}: {connection['security_protocol']} to {host}:{port}, "
        f"{session.version} with {session.cipher}, the broker's certificate checked against "
        "the cluster CA from the connection details"
    )
    tenant_api = ApiClient(service.url, created["api_key"], service.trust_bundle)
    topic = f"{created['tenant']['prefix']}orders"
    # The tenant produces millions of messages during the replacement and reads them all
    # back: a partition may keep 4 GiB (6 x 3 replicas x 4 GiB fits the plan's storage), so
    # retention never deletes what the zero-loss check reads.
    tenant_api.call(
        "POST",
        f"/v1/clusters/{cluster}/tenants/{name}/topics",
        {"name": topic, "partitions": 6, "configs": {"retention.bytes": str(DEMO_RETENTION_BYTES)}},
    )
    print(f"topic {topic}: created with the tenant's own API key")
    client_config = tenant_client_config(created)

    vms = admin.call("GET", f"/v1/clusters/{cluster}")["vms"]
    old = vms[0]
    replace_started = time.monotonic()
    load = BackgroundProducer(
        client_config,
        topic,
        BATCH_MESSAGES,
        BATCH_KEYS,
        pause_s=0.0,
        ledger=ProducedLedger(producer="demo-tenant"),
    )
    with load:
        # Some data on every broker before the VM goes, so the drain has something to move.
        while len(load.acknowledged) < 5 * BATCH_MESSAGES and load.thread.is_alive():
            time.sleep(0.5)
        op = admin.call("POST", f"/v1/clusters/{cluster}/replace", {"vm_id": old["vm_id"]})
        print(f"replacing {old['vm_id']} (broker {old['broker_id']}) while the tenant produces:")
        outcome = watch_operation(admin, int(op["op_id"]))
    replace_seconds = time.monotonic() - replace_started
    if outcome != 0:
        raise KaasError(
            f"the replacement of {old['vm_id']} failed: see `kaas op watch {op['op_id']}`"
        )
    assert load.ledger is not None
    ledger_path = load.ledger.write(ledger_dir / f"{topic}.jsonl")

    acknowledged = load.acknowledged
    slowest = load.slowest_batch_s
    check = read_back(
        client_config,
        topic,
        acknowledged,
        group=f"{topic}.audit",  # the tenant's ACLs cover groups with its prefix only
        timeout=max(READ_BACK_MIN_TIMEOUT_S, len(acknowledged) / READ_BACK_MIN_RATE),
    )
    print(
        f"replacement done in {replace_seconds:.0f}s under load: {len(acknowledged)} messages "
        f"acknowledged, {len(load.errors)} produce errors, slowest {BATCH_MESSAGES}-message "
        f"batch {slowest:.1f}s; ledger {ledger_path}"
    )
    if load.errors or not check.exactly_once_in_order:
        print(
            f"FAILED: {len(load.errors)} produce errors, missing {check.missing}, duplicates "
            f"{check.duplicates}, keys out of order {check.out_of_order_keys}"
        )
        return 1
    print(f"OK: zero loss, the tenant read back all {check.received} messages in order per key")
    return 0
