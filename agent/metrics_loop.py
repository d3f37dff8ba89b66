"""The agent's metrics loop: collect and publish every `metrics_interval_s`, off the
cycle's thread, so that a slow Jolokia or Kafka never delays a decision. A failed read is a
metric and a note for the cycle sentence, never a crash."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from agent.metrics import MetricsCollector, MetricsPublisher
from agent.metrics.agent_stats import AgentStats
from agent.metrics.gauges import extra_gauges
from agent.metrics.lag import ConsumerLagReader, GroupLag
from agent.metrics.zookeeper import ZookeeperProbe
from agent.settings import AgentSettings
from planner.pki.tls import client_context


def start_metrics_loop(
    settings: AgentSettings,
    broker_id: int,
    topic_replication: int,
    agent_version: str,
    stop: threading.Event,
    on_sample: Callable[[str | None], None],
    statsd_target: Callable[[], tuple[str, int] | None] = lambda: None,
    stats: AgentStats | None = None,
    is_planner: Callable[[], bool] = lambda: False,
    log_rates: Callable[[], Mapping[str, float]] = dict,
    mirror_lags: Callable[[], tuple[list[tuple[str, float]], list[str]]] = lambda: ([], []),
) -> threading.Thread:
    """`on_sample(problem)` after every interval; `problem` is None when all went out.
    `statsd_target()`, asked every interval: the spec's statsd address, which wins over the
    settings' (None: the settings' own). Beside the record: the VM's ZooKeeper server
    (`mntr`), the agent's own `stats`, while `is_planner()` every group's lag, and the log
    stream's `log_rates()` (errors per minute), and the lag of the mirror flows this VM
    reports (`mirror_lags()`: gauges and problems)."""
    s = settings
    zookeeper = (
        ZookeeperProbe(s.address, s.zookeeper_client_port, s.identity)
        if s.zookeeper_server_id is not None
        else None
    )
    lag_reader = ConsumerLagReader(s.kafka_client)

    def extras() -> tuple[list[tuple[str, float]], list[str]]:
        problems: list[str] = []
        zk_values: dict[str, float] = {}
        if zookeeper is not None:
            zk_values, problem = zookeeper.read()
            problems += [problem] if problem else []
        lags: dict[str, GroupLag] = {}
        if is_planner():
            lags, problem = lag_reader.read()
            problems += [problem] if problem else []
        agent = stats.take() if stats is not None else {}
        gauges = extra_gauges(s.cluster, broker_id, zk_values, agent, lags, log_rates())
        mirror, mirror_problems = mirror_lags()
        return gauges + mirror, problems + mirror_problems

    collector = MetricsCollector(
        s.cluster,
        broker_id,
        s.zone,
        s.jolokia_url,
        [str(s.data_dir)],
        s.metrics_interval_s,
        agent_version=agent_version,
        jolokia_context=client_context(s.identity),
        controller_jolokia_url=s.controller_jolokia_url,
        kraft=s.kraft,
    )
    publisher = MetricsPublisher(
        s.statsd_host,
        s.statsd_port,
        "kaas",
        s.kafka_client,
        topic=s.metrics_topic,
        topic_replication_factor=topic_replication,
        # Brokers start one at a time under the restart lock: a topic of RF 3 cannot be
        # made until the third is up, so try again soon rather than every 5 minutes.
        topic_retry_s=30.0,
    )

    def run() -> None:
        try:
            while not stop.wait(s.metrics_interval_s):
                try:
                    target = statsd_target()
                    if target is not None:
                        publisher.set_statsd_target(*target)
                    sample = collector.collect()
                    extra, problems = extras()
                    result = publisher.publish(sample, extra)
                    on_sample(sample.sentence() or result.sentence() or "; ".join(problems) or None)
                except Exception as exc:  # never let metrics take the agent down
                    on_sample(f"metrics failed: {exc}")
        finally:
            publisher.close()

    thread = threading.Thread(target=run, name="agent-metrics", daemon=True)
    thread.start()
    return thread
