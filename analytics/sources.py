"""Where the jobs read from: the metrics topic, raw JSON files, earlier Parquet output,
and (for the audit) Kafka's offsets. Adapters only: no decisions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from analytics import metrics
from analytics.errors import AnalyticsError
from analytics.metrics import ParsedMetrics
from analytics.session import missing_connector_jars
from planner.client_logs import client_logger
from planner.pki.client_settings import InternalClient

METRICS_TOPIC = "_kaas_metrics"
NORMALISED_TABLES = ("broker_metrics", "topic_metrics", "partition_metrics")
QUARANTINE_SCHEMA = (
    "source_topic string, source_partition int, source_offset bigint, source_timestamp timestamp, "
    "key string, value string, reasons array<string>"
)


_IDENTITY_SCHEMA = "cluster string, broker_id int, rack string, timestamp timestamp"


def _fields_schema(fields: tuple[tuple[str, str], ...], prefix: str = "") -> str:
    # partition is an int in the flat tables (Kafka's own type), a JSON integer in the schema.
    spark_type = {"partition": "int"}
    return ", ".join(f"`{prefix}{name}` {spark_type.get(name, kind)}" for name, kind in fields)


# The flat tables' schemas as the balance job writes them (metrics.flattened), so that
# reading them back infers nothing: inferring reads Parquet footers in a Spark job per table.
NORMALISED_SCHEMAS = {
    "broker_metrics": f"{_IDENTITY_SCHEMA}, interval_s double, "
    f"{_fields_schema(metrics.BROKER_FIELDS)}, {_fields_schema(metrics.HOST_FIELDS, 'host_')}, "
    "read_errors int",
    "topic_metrics": f"{_IDENTITY_SCHEMA}, {_fields_schema(metrics.TOPIC_FIELDS)}",
    "partition_metrics": f"{_IDENTITY_SCHEMA}, {_fields_schema(metrics.PARTITION_FIELDS)}",
}


class SourceError(AnalyticsError, ValueError):
    """A source that cannot be read; the message says which and why."""


def ensure_kafka_connector(jars_dir: Path, launched_by_spark_submit: bool) -> None:
    """Fail early with a clear message when Spark's Kafka connector is not on hand.

    Under spark-submit the jars come from its --jars argument, which cannot be checked
    from here; Spark's own error then names the missing data source.
    """
    if launched_by_spark_submit:
        return
    missing = missing_connector_jars(jars_dir)
    if missing:
        raise SourceError(
            f"Spark's Kafka connector is incomplete in {jars_dir} (missing {', '.join(missing)}*.jar): "
            "run `make setup`, or point KAAS_SPARK_JARS at the folder holding the connector jars"
        )


def require_topics(kafka: InternalClient, topics: Sequence[str], timeout_s: float = 30.0) -> None:
    """Fail with a clear message when a topic is missing (Spark's own error is a stack
    trace about an unknown partition set)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient(kafka.librdkafka(), logger=client_logger).list_topics(
            timeout=timeout_s
        )
    except KafkaException as error:
        raise SourceError(
            f"cannot reach Kafka at {kafka.bootstrap_servers}: {error.args[0]}"
        ) from error
    missing = [topic for topic in topics if topic not in metadata.topics]
    if missing:
        hint = " (no agent has produced metrics yet?)" if METRICS_TOPIC in missing else ""
        raise SourceError(
            f"topic {', '.join(missing)} does not exist on {kafka.bootstrap_servers}{hint}"
        )


def read_kafka_topics(
    spark: SparkSession,
    kafka: InternalClient,
    topics: Sequence[str],
    starting_offsets: str = "earliest",
    ending_offsets: str = "latest",
) -> DataFrame:
    """A batch read of whole topics with Spark's Kafka source (key, value, topic, ...)."""
    if not kafka.bootstrap_servers.strip():
        raise SourceError("bootstrap servers are empty; give HOST:PORT[,HOST:PORT...]")
    if not topics:
        raise SourceError("no topic to read")
    require_topics(kafka, topics)
    return (
        spark.read.format("kafka")
        # bootstrap servers and the client certificate, as the Java client reads them
        .options(**kafka.spark_options())
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", starting_offsets)
        .option("endingOffsets", ending_offsets)
        .load()
    )


def read_kafka_stream(
    spark: SparkSession, kafka: InternalClient, topics: Sequence[str]
) -> DataFrame:
    """A streaming read of whole topics (the incremental jobs'): where it starts is the
    checkpoint's business; a query without one starts from the earliest offsets."""
    if not topics:
        raise SourceError("no topic to read")
    require_topics(kafka, topics)
    return (
        spark.readStream.format("kafka")
        .options(**kafka.spark_options())
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", "earliest")
        .load()
    )


def read_json_lines(spark: SparkSession, path: Path) -> DataFrame:
    """Raw metric records from JSON-lines files, one record per line, as a `value` column."""
    if not path.exists():
        raise SourceError(f"JSON input {path} does not exist")
    return spark.read.text(str(path))


def read_normalised_parquet(spark: SparkSession, path: Path) -> ParsedMetrics:
    """The flat tables a previous balance run wrote (or the benchmark generated).

    These records were validated when they were first parsed, so the quarantine is empty.
    """
    missing = [name for name in NORMALISED_TABLES if not (path / name).exists()]
    if missing:
        raise SourceError(
            f"Parquet input {path} lacks {', '.join(missing)}: expected the folders "
            f"{', '.join(NORMALISED_TABLES)} that the balance job writes"
        )
    tables = {
        name: spark.read.schema(NORMALISED_SCHEMAS[name]).parquet(str(path / name))
        for name in NORMALISED_TABLES
    }
    return ParsedMetrics(**tables, quarantine=spark.createDataFrame([], QUARANTINE_SCHEMA))


def read_ledger(spark: SparkSession, path: Path) -> DataFrame:
    """The producers' ledger (JSON lines, a file or a folder of files)."""
    if not path.exists():
        raise SourceError(f"ledger {path} does not exist")
    return spark.read.schema(
        "schema_version int, producer string, topic string, partition int, "
        "window_start_ms bigint, window_s int, count bigint"
    ).json(str(path), mode="FAILFAST")
