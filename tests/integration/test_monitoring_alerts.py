"""Alerts on real servers: `kaas serve` evaluates the shipped rules against the pipeline
`kaas up` started. A broker killed while its agent is stopped fires the under-replicated rule
once to the test's webhook receiver and resolves once the broker is back; the agents' own
rolling restart is held, and fires nothing."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from management_plane.monitoring.graphite import GraphiteReader
from management_plane.monitoring.rules import load_rules
from management_plane.workload import create_topic
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec, parse_spec
from tests import harness
from tests.harness import ClusterHandle, wait_for_healthy_agents, wait_until
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration

RULE = "under_replicated_partitions"
READ_ONLY_KEY = "offsets.retention.minutes"  # not dynamic (KIP-226): the agents roll for it


class WebhookReceiver:
    """A local stand-in for PagerDuty's Events API v2 endpoint."""

    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.events.append((time.monotonic(), body))
                self.send_response(202)
                self.end_headers()
                self.wfile.write(b'{"status":"success"}')

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v2/enqueue"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def of_rule(self, rule: str) -> list[dict[str, Any]]:
        return [body for _, body in self.events if f"/{rule}/" in body["dedup_key"]]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_killed_broker_pages_once_and_resolves_and_a_rolling_restart_pages_nothing(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = fresh_cluster_with_agents
    name = cluster.layout.name
    receiver = WebhookReceiver()
    service = ServiceHandle(
        tmp_path / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=(
            "--adopt-local-cluster",
            str(cluster.home),
            "--alert-webhook",
            receiver.url,
            "--broker-loss-after",
            "0",
        ),
    )
    zk = cluster.zookeeper()
    zk.start(timeout=30)
    try:
        service.start()
        wait_for_healthy_agents(zk, name)
        create_topic(cluster.client_config(), cluster.unique_topic("alerts"), 6, 3)

        # The broker of vm2 killed, its agent stopped first, so nothing heals it.
        cluster.vm("stop", "vm2", "--only", "agent")
        killed = time.monotonic()
        cluster.vm("kill", "vm2", "--only", "kafka")
        wait_until(lambda: len(receiver.of_rule(RULE)) >= 1, 180, "the URP alert's trigger")
        fired_after = next(t for t, b in receiver.events if f"/{RULE}/" in b["dedup_key"]) - killed
        print(f"alert delay (kill to webhook): {fired_after:.1f}s")
        (trigger,) = receiver.of_rule(RULE)
        assert trigger["event_action"] == "trigger"
        assert trigger["dedup_key"] == f"kaas/{name}/{RULE}/cluster"
        assert trigger["payload"]["severity"] == "critical"
        status, active = service.call("GET", f"/v1/alerts?cluster={name}")
        assert status == 200
        assert any(a["rule"] == RULE and a["state"] == "firing" for a in active), active

        cluster.vm("start", "vm2")
        wait_until(lambda: len(receiver.of_rule(RULE)) >= 2, 240, "the URP alert's resolve")
        time.sleep(20)  # two more evaluations: nothing else may come for the same fault
        assert [b["event_action"] for b in receiver.of_rule(RULE)] == ["trigger", "resolve"]
        assert {b["dedup_key"] for b in receiver.of_rule(RULE)} == {trigger["dedup_key"]}
        wait_for_healthy_agents(zk, name)

        # The agents' own rolling restart: URP rises on the others while each broker
        # restarts, the rule is held, and the webhook hears nothing.
        sent_before = len(receiver.events)
        paths = ClusterPaths(name)
        raw, stat = zk.get(paths.spec)
        spec = parse_spec(raw)
        rolled = ClusterSpec(
            **{
                **spec.__dict__,
                "broker_config": {**spec.broker_config, READ_ONLY_KEY: "10081"},
                "generation": spec.generation + 1,
            }
        )
        zk.set(paths.spec, rolled.encode(), version=stat.version)

        def rolled_everywhere() -> bool:
            return all(
                f"{READ_ONLY_KEY}=10081" in (vm.config_dir / "server.properties").read_text()
                for vm in cluster.layout.vms
            )

        wait_until(rolled_everywhere, 420, "every broker to restart with the new config")
        wait_for_healthy_agents(zk, name, timeout=300)

        # The hold outlives the last restart by the data's delay (settle_s), then for_s
        # runs: after one evaluation, wait until no alert is pending or held any more, so a
        # page that comes late is seen below.
        time.sleep(10)

        # The latency rules' holds outlive a restart by minutes (their own settle_s): not
        # waited for here.
        long_held = {r.name for r in load_rules().rules if r.settle_s is not None}

        def settled() -> bool:
            status, active = service.call("GET", f"/v1/alerts?cluster={name}")
            return status == 200 and not any(
                a["state"] in ("pending", "held") and a["rule"] not in long_held for a in active
            )

        wait_until(settled, 180, "the rolling restart's alerts to clear or fire")
        status, history = service.call("GET", f"/v1/alerts/history?cluster={name}")
        assert status == 200
        held = [e for e in history if e["rule"] == RULE and e["state"] == "held"]
        assert held, history  # URP did rise during the restarts, and was held
        # No page: a resolve of an alert the kill above fired (a broker's produce latency, whose
        # percentiles decay over minutes) may still come, a trigger may not.
        pages = [e for e in receiver.events[sent_before:] if e[1]["event_action"] == "trigger"]
        assert pages == [], receiver.events[sent_before:]
        result = harness.kaas_cli(
            "alerts",
            "history",
            "--cluster",
            name,
            "--api-url",
            service.url,
            "--api-key-file",
            str(service.home / "admin-key"),
            "--api-ca",
            str(service.trust_bundle),
        )
        assert result.returncode == 0, result.stderr
        assert "held" in result.stdout and "firing" in result.stdout

        # The synthetic heartbeat: the same service home started again with --heartbeat
        # (after the checks above, which it would have joined). vm3's broker frozen with
        # SIGSTOP, its agent stopped so that nothing restarts it: the heartbeat rule fires
        # for that broker.
        service.stop()
        heartbeat_service = ServiceHandle(
            service.home,
            free_port(),
            harness.FRESH_CLUSTER_BASE,
            extra_args=(*service.extra_args, "--heartbeat"),
        )
        _heartbeat_pages_for_a_frozen_broker(cluster, heartbeat_service, receiver, spec)
    finally:
        zk.stop()
        zk.close()
        service.stop()
        receiver.close()


HEARTBEAT_RULE = "heartbeat_accepted"


def _heartbeat_pages_for_a_frozen_broker(
    cluster: ClusterHandle, service: ServiceHandle, receiver: WebhookReceiver, spec: ClusterSpec
) -> None:
    name = cluster.layout.name
    assert spec.monitoring is not None
    graphite = GraphiteReader(spec.monitoring.graphite_url)
    frozen = cluster.layout.vms[2]
    zk = cluster.zookeeper()
    zk.start(timeout=30)
    try:  # the broker id its agent claimed, not the layout's guess
        (frozen_id,) = [
            b for b, r in harness.member_records(zk, name).items() if r.vm_id == frozen.name
        ]
    finally:
        zk.stop()
        zk.close()
    started = time.monotonic()
    service.start()
    try:

        def every_broker_heartbeats() -> bool:
            target = f"aliasByNode(kaas.{name}.brokers.*.heartbeat.accepted, 3)"
            latest = graphite.latest(target, "-60s")
            return {str(vm.broker_id) for vm in cluster.layout.vms} <= {
                broker for broker, value in latest.items() if value is not None and value >= 1
            }

        wait_until(every_broker_heartbeats, 180, "every broker's heartbeat in Graphite")
        print(f"heartbeat of every broker in Graphite: {time.monotonic() - started:.1f}s")
        cluster.vm("stop", frozen.name, "--only", "agent")
        paused = time.monotonic()
        cluster.vm("pause", frozen.name, "--only", "kafka")
        try:
            dedup_key = f"kaas/{name}/{HEARTBEAT_RULE}/{frozen_id}"

            def paged() -> bool:
                return any(
                    b["dedup_key"] == dedup_key and b["event_action"] == "trigger"
                    for b in receiver.of_rule(HEARTBEAT_RULE)
                )

            wait_until(paged, 120, "the heartbeat alert of the frozen broker")
            print(f"heartbeat alert delay (SIGSTOP to webhook): {time.monotonic() - paused:.1f}s")
            others = {
                b["dedup_key"]
                for b in receiver.of_rule(HEARTBEAT_RULE)
                if b["dedup_key"] != dedup_key
            }
            assert others == set(), others  # the brokers that answer are not blamed
        finally:
            cluster.vm("resume", frozen.name, "--only", "kafka")
            cluster.vm("start", frozen.name)
        print(f"heartbeat phase: {time.monotonic() - started:.1f}s")
    finally:
        service.stop()
