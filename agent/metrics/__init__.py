"""The agent's metrics: every interval, JMX through one Jolokia bulk
read and host values through psutil become one `_kaas_metrics` record (schema v1,
analytics/schemas/metrics-v1.schema.json), sent as statsd gauges and produced to Kafka
keyed by the broker id. See docs/agent-metrics.md.

    collector = MetricsCollector(cluster, broker_id, rack, jolokia_url, [data_dir], 30.0)
    publisher = MetricsPublisher(statsd_host, 8125, "kaas", settings.kafka_client)
    sample = collector.collect()          # never raises; sample.sentence() names failed reads
    result = publisher.publish(sample)    # bounded; result.sentence() names what did not go out
    publisher.close()
"""

from agent.metrics.collector import MetricsCollector
from agent.metrics.publisher import METRICS_TOPIC, MetricsPublisher, PublishResult
from agent.metrics.record import SCHEMA_VERSION, MetricsSample, ReadError

__all__ = [
    "METRICS_TOPIC",
    "SCHEMA_VERSION",
    "MetricsCollector",
    "MetricsPublisher",
    "MetricsSample",
    "PublishResult",
    "ReadError",
]
