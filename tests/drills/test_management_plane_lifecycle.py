"""A cluster's life through the `kaas` command line and the service (local provider): create,
scale up by one VM, change a broker config, scale back down (the leaving broker is drained
first, so no data goes with it), delete."""

from __future__ import annotations

import os
import re

import pytest

from management_plane.local.state import read_state
from management_plane.workload import create_topic, durable_producer, produce_keyed
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import parse_spec
from tests import harness
from tests.mp_service import ServiceHandle

pytestmark = pytest.mark.drill


def kaas(service: ServiceHandle, *args: str) -> str:
    env = dict(os.environ, KAAS_API_URL=service.url, KAAS_SERVICE_HOME=str(service.home))
    env.pop("KAAS_API_KEY", None)
    result = harness.kaas_cli(*args, env=env, timeout=1500)
    assert result.returncode == 0, f"kaas {' '.join(args)}: {result.stderr}{result.stdout}"
    return result.stdout


def test_create_scale_configure_shrink_delete(service: ServiceHandle) -> None:
    out = kaas(service, "cluster", "create", "life", "--brokers", "3", "--wait")
    assert re.search(r"\[#+\] 4/4 succeeded", out), out
    service.remember_clusters()
    _, cluster = service.call("GET", "/v1/clusters/life")
    connection = harness.api_cluster_client(cluster).librdkafka()
    topic = harness.ClusterHandle.unique_topic("life")
    create_topic(connection, topic, partitions=4)
    assert produce_keyed(durable_producer(connection), topic, 4000, 8).errors == []

    out = kaas(service, "cluster", "scale", "life", "--brokers", "4", "--wait")
    assert "succeeded" in out, out
    service.remember_clusters()
    _, cluster = service.call("GET", "/v1/clusters/life")
    assert sorted(vm["broker_id"] for vm in cluster["vms"]) == [0, 1, 2, 3]
    assert cluster["spec"]["broker_count"] == 4

    out = kaas(service, "cluster", "config", "life", "log.retention.hours=48", "--wait")
    assert "succeeded" in out, out
    _status, cluster = service.call("GET", "/v1/clusters/life")
    assert cluster["spec"]["broker_config"]["log.retention.hours"] == "48"
    zk = service.zookeeper("life", ",".join(f"{vm['address']}:2181" for vm in cluster["vms"]))
    zk.start(timeout=15)
    try:
        spec = parse_spec(zk.get(ClusterPaths("life").spec)[0])
        assert spec.broker_config["log.retention.hours"] == "48"
        generations = [m.spec_generation for m in harness.member_records(zk, "life").values()]
        assert len(generations) == 4 and min(generations) >= spec.generation
    finally:
        zk.stop()
        zk.close()

    out = kaas(service, "cluster", "scale", "life", "--brokers", "3", "--wait")
    assert "succeeded" in out, out
    _, cluster = service.call("GET", "/v1/clusters/life")
    assert sorted(vm["broker_id"] for vm in cluster["vms"]) == [0, 1, 2]
    assert cluster["spec"]["broker_count"] == 3 and cluster["spec"]["draining_broker_ids"] == []
    _, op = service.call("GET", "/v1/operations?cluster=life&limit=1")
    steps = [j["step"] for j in service.operation(op[0]["op_id"])["journal"]]
    assert steps.index("wait_drained:0") < steps.index("recycle:0")
    listing = kaas(service, "cluster", "get", "life")
    assert "life/vm4" not in listing and "broker 3" not in listing

    out = kaas(service, "cluster", "delete", "life", "--wait")
    assert "succeeded" in out, out
    assert service.call("GET", "/v1/clusters/life")[0] == 404
    assert read_state(service.home / "local" / "life") is None
    assert "life" not in kaas(service, "cluster", "list")
