"""Parse raw `_kaas_metrics` records against schema v1, quarantine the malformed ones.

The schema is `analytics/schemas/metrics-v1.schema.json` (documented in
docs/metrics-schema.md). The field lists below mirror it; a unit test checks that the
two agree, so the Spark side cannot drift from the published schema.

Raw input has the shape of Spark's Kafka source: `key` and `value` (binary or string),
`topic`, `partition`, `offset`, `timestamp`. Every raw record ends up in exactly one
of two DataFrames: `valid` (normalised into flat tables) or `quarantine` (with the
reasons it was refused). Nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "metrics-v1.schema.json"

# Logical types of leaf fields; each maps to a Spark type and a set of accepted JSON kinds.
INTEGER = "bigint"
NUMBER = "double"
STRING = "string"
BOOLEAN = "boolean"

BROKER_FIELDS: tuple[tuple[str, str], ...] = (
    ("under_replicated_partitions", INTEGER),
    ("offline_partitions_count", INTEGER),
    ("active_controller_count", INTEGER),
    ("isr_shrinks_per_s", NUMBER),
    ("isr_expands_per_s", NUMBER),
    ("bytes_in_per_s", NUMBER),
    ("bytes_out_per_s", NUMBER),
    ("replication_bytes_in_per_s", NUMBER),
    ("replication_bytes_out_per_s", NUMBER),
    ("messages_in_per_s", NUMBER),
    ("request_handler_avg_idle_percent", NUMBER),
    ("network_processor_avg_idle_percent", NUMBER),
    ("leader_count", INTEGER),
    ("partition_count", INTEGER),
    ("log_size_bytes", INTEGER),
    ("log_cleaner_time_since_last_run_ms", INTEGER),
    # Added within v1 (absent, so null, in older agents' records).
    ("under_min_isr_partition_count", INTEGER),
    ("offline_log_directory_count", INTEGER),
    ("produce_total_time_ms_p99", NUMBER),
    ("fetch_consumer_total_time_ms_p99", NUMBER),
)
HOST_FIELDS: tuple[tuple[str, str], ...] = (
    ("cpu_percent", NUMBER),
    ("memory_used_bytes", INTEGER),
    ("memory_total_bytes", INTEGER),
    ("log_dir_used_bytes", INTEGER),
    ("log_dir_free_bytes", INTEGER),
    ("log_dir_free_percent", NUMBER),  # added within v1
    ("network_bytes_sent", INTEGER),
    ("network_bytes_recv", INTEGER),
)
TOPIC_FIELDS: tuple[tuple[str, str], ...] = (
    ("topic", STRING),
    ("bytes_in_per_s", NUMBER),
    ("bytes_out_per_s", NUMBER),
    ("messages_in_per_s", NUMBER),
)
PARTITION_FIELDS: tuple[tuple[str, str], ...] = (
    ("topic", STRING),
    ("partition", INTEGER),
    ("leader", BOOLEAN),
    ("size_bytes", INTEGER),
    ("log_end_offset", INTEGER),
)
TOPIC_REQUIRED = ("topic",)
PARTITION_REQUIRED = ("topic", "partition")

# schema_of_variant() names of the JSON values each logical type accepts. Integers
# must be written as integers (1.5 partitions is an error); numbers take any numeric.
_ACCEPTED_KINDS = {
    INTEGER: r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\(\d+,0\))$",
    NUMBER: r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\(\d+,\d+\)|FLOAT|DOUBLE)$",
    STRING: r"^STRING$",
    BOOLEAN: r"^BOOLEAN$",
}
_TYPE_WORDS = {
    INTEGER: "an integer",
    NUMBER: "a number",
    STRING: "a string",
    BOOLEAN: "true or false",
}


@dataclass(frozen=True)
class ParsedMetrics:
    """The outcome of parsing: flat tables of valid records and the quarantine."""

    broker_metrics: DataFrame
    """One row per valid record: broker identity, time, broker and host values."""
    topic_metrics: DataFrame
    """One row per (record, topic entry)."""
    partition_metrics: DataFrame
    """One row per (record, partition entry): one replica on one broker at one time."""
    quarantine: DataFrame
    """One row per refused record, with the raw value and the reasons."""
    valid_records: DataFrame | None = None
    """The valid records as parsed (nested), when these tables came from raw records:
    a job that writes it once can flatten it again without parsing the JSON again."""


def published_schema() -> dict[str, Any]:
    """The JSON schema document as published in the repository."""
    with SCHEMA_PATH.open(encoding="utf-8") as handle:
        document: dict[str, Any] = json.load(handle)
    return document


def _kind(value: Column, path: str) -> Column:
    """The JSON kind at `path` (BIGINT, STRING, VOID for null...), NULL when absent."""
    return F.schema_of_variant(F.try_variant_get(value, path, "variant"))


def _field_problems(
    value: Column, prefix: str, fields: tuple[tuple[str, str], ...]
) -> list[Column]:
    """One reason column per field: the reason when the field has the wrong type, else NULL."""
    problems = []
    for name, logical_type in fields:
        kind = _kind(value, f"$.{name}")
        wrong = kind.isNotNull() & (kind != "VOID") & ~kind.rlike(_ACCEPTED_KINDS[logical_type])
        negative = (
            F.try_variant_get(value, f"$.{name}", NUMBER) < 0
            if logical_type in (INTEGER, NUMBER)
            else F.lit(False)
        )
        problems.append(
            F.when(wrong, F.lit(f"{prefix}{name} must be {_TYPE_WORDS[logical_type]}")).when(
                negative, F.lit(f"{prefix}{name} must not be negative")
            )
        )
    return problems


def _entry_field_is_bad(
    name: str, logical_type: str, is_required: bool
) -> Callable[[Column], Column]:
    """A one-argument predicate over an entry, as Spark's higher-order functions need."""

    def is_bad(entry: Column) -> Column:
        kind = _kind(entry, f"$.{name}")
        missing = kind.isNull() | (kind == "VOID")
        wrong = ~missing & ~kind.rlike(_ACCEPTED_KINDS[logical_type])
        negative = F.lit(False)
        if logical_type in (INTEGER, NUMBER):
            negative = F.coalesce(F.try_variant_get(entry, f"$.{name}", NUMBER) < 0, F.lit(False))
        return (missing & F.lit(is_required)) | wrong | negative

    return is_bad


def _entries_problem(
    record: Column,
    array_name: str,
    fields: tuple[tuple[str, str], ...],
    required: tuple[str, ...],
) -> list[Column]:
    """Reasons for a list of entries (topics, partitions): shape, types, required keys."""
    path = f"$.{array_name}"
    kind = _kind(record, path)
    entries = F.try_variant_get(record, path, "array<variant>")
    problems = [
        F.when(
            kind.isNotNull() & (kind != "VOID") & ~kind.startswith("ARRAY"),
            F.lit(f"{array_name} must be a list"),
        )
    ]
    for name, logical_type in fields:
        is_required = name in required
        requirement = _TYPE_WORDS[logical_type]
        if is_required:
            requirement = f"present and {requirement}"
        problems.append(
            F.when(
                F.exists(entries, _entry_field_is_bad(name, logical_type, is_required)),
                F.lit(f"{array_name}[].{name} must be {requirement}, not negative"),
            )
        )
    return problems


def _record_problems(record: Column, key_text: Column, value_text: Column) -> Column:
    """All reasons a parsed record is refused, as an array (empty when it is valid)."""
    top_kind = F.schema_of_variant(record)
    version = F.try_variant_get(record, "$.schema_version", INTEGER)
    broker_id = F.try_variant_get(record, "$.broker_id", INTEGER)
    not_an_object = F.coalesce(~top_kind.startswith("OBJECT"), F.lit(True))

    def required(name: str, logical_type: str) -> Column:
        kind = _kind(record, f"$.{name}")
        return F.when(
            kind.isNull() | (kind == "VOID") | ~kind.rlike(_ACCEPTED_KINDS[logical_type]),
            F.lit(f"{name} is required and must be {_TYPE_WORDS[logical_type]}"),
        )

    def required_object(name: str) -> Column:
        return F.when(
            F.coalesce(~_kind(record, f"$.{name}").startswith("OBJECT"), F.lit(True)),
            F.lit(f"{name} is required and must be an object"),
        )

    checks: list[Column] = [
        required("schema_version", INTEGER),
        required("cluster", STRING),
        required("broker_id", INTEGER),
        F.when(broker_id < 0, F.lit("broker_id must not be negative")),
        required("timestamp_ms", INTEGER),
        F.when(
            F.try_variant_get(record, "$.timestamp_ms", INTEGER) < 0,
            F.lit("timestamp_ms must not be negative"),
        ),
        F.when(
            key_text.isNotNull() & broker_id.isNotNull() & (key_text != broker_id.cast("string")),
            F.concat(
                F.lit("record key "),
                key_text,
                F.lit(" differs from broker_id "),
                broker_id.cast("string"),
            ),
        ),
        required_object("broker"),
        required_object("host"),
        *_field_problems(
            record, "", (("rack", STRING), ("interval_s", NUMBER), ("agent_version", STRING))
        ),
        *_field_problems(
            F.try_variant_get(record, "$.broker", "variant"), "broker.", BROKER_FIELDS
        ),
        *_field_problems(F.try_variant_get(record, "$.host", "variant"), "host.", HOST_FIELDS),
        *_entries_problem(record, "topics", TOPIC_FIELDS, TOPIC_REQUIRED),
        *_entries_problem(record, "partitions", PARTITION_FIELDS, PARTITION_REQUIRED),
    ]
    # An unparseable value gets one reason, not a cascade of "x is required".
    return F.when(
        value_text.isNull() | (F.trim(value_text) == ""), F.array(F.lit("empty value"))
    ).otherwise(
        F.when(record.isNull(), F.array(F.lit("value is not valid JSON"))).otherwise(
            F.when(not_an_object, F.array(F.lit("value is not a JSON object")))
            # Another version's fields mean other things: that reason alone is the answer.
            .when(
                version.isNotNull() & (version != SCHEMA_VERSION),
                F.array(F.concat(F.lit("unsupported schema_version "), version.cast("string"))),
            )
            .otherwise(F.array_compact(F.array(*checks)))
        )
    )


def _as_text(column_name: str, raw: DataFrame) -> Column:
    """A raw column as text, whether the source gives binary (Kafka) or string (files)."""
    data_type = (
        raw.schema[column_name].dataType.simpleString() if column_name in raw.columns else None
    )
    if data_type is None:
        return F.lit(None).cast("string")
    if data_type == "binary":
        return F.col(column_name).cast("string")
    return F.col(column_name)


def _source_columns(raw: DataFrame) -> list[Column]:
    """Where each record came from; absent columns (file sources) become NULL."""
    wanted = (
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("timestamp", "timestamp"),
    )
    return [
        (F.col(name) if name in raw.columns else F.lit(None))
        .cast(spark_type)
        .alias(f"source_{name}")
        for name, spark_type in wanted
    ]


def _struct_type(fields: tuple[tuple[str, str], ...]) -> str:
    return "struct<" + ", ".join(f"`{name}`: {spark_type}" for name, spark_type in fields) + ">"


_CORRUPT = "_corrupt_record"
# The whole record as Spark's JSON reader should type it. A value that does not fit
# (a string where a number belongs, 1.5 partitions) marks the record corrupt.
RECORD_SCHEMA = (
    "schema_version bigint, cluster string, broker_id bigint, rack string, timestamp_ms bigint, "
    "interval_s double, agent_version string, "
    f"broker {_struct_type(BROKER_FIELDS)}, host {_struct_type(HOST_FIELDS)}, "
    f"topics array<{_struct_type(TOPIC_FIELDS)}>, partitions array<{_struct_type(PARTITION_FIELDS)}>, "
    f"errors array<string>, {_CORRUPT} string"
)


def _numeric(fields: tuple[tuple[str, str], ...]) -> list[str]:
    return [name for name, logical_type in fields if logical_type in (INTEGER, NUMBER)]


def _entries_look_wrong(
    entries: Column, fields: tuple[tuple[str, str], ...], required: tuple[str, ...]
) -> Column:
    def wrong(entry: Column) -> Column:
        checks = [entry[name].isNull() for name in required] + [
            entry[name] < 0 for name in _numeric(fields)
        ]
        condition = checks[0]
        for check in checks[1:]:
            condition = condition | F.coalesce(check, F.lit(False))
        return condition

    return F.coalesce(F.exists(entries, wrong), F.lit(False))


def _looks_wrong(record: Column, key_text: Column) -> Column:
    """True when a record may break the schema: it then gets the detailed (slower) check.

    Cheap checks on the typed record; most records pass them and are never looked at
    again. The detailed check (`_record_problems`) names what is wrong.
    """
    broker_negative = [record["broker"][name] < 0 for name in _numeric(BROKER_FIELDS)]
    host_negative = [record["host"][name] < 0 for name in _numeric(HOST_FIELDS)]
    checks = [
        record.isNull(),
        record[_CORRUPT].isNotNull(),
        F.coalesce(record["schema_version"] != SCHEMA_VERSION, F.lit(True)),
        F.coalesce(record["cluster"] == "", F.lit(True)),
        F.coalesce(record["broker_id"] < 0, F.lit(True)),
        F.coalesce(record["timestamp_ms"] < 0, F.lit(True)),
        record["broker"].isNull(),
        record["host"].isNull(),
        key_text.isNotNull() & (key_text != record["broker_id"].cast("string")),
        *[F.coalesce(check, F.lit(False)) for check in (*broker_negative, *host_negative)],
        F.coalesce(record["interval_s"] <= 0, F.lit(False)),
        _entries_look_wrong(record["topics"], TOPIC_FIELDS, TOPIC_REQUIRED),
        _entries_look_wrong(record["partitions"], PARTITION_FIELDS, PARTITION_REQUIRED),
    ]
    condition = checks[0]
    for check in checks[1:]:
        condition = condition | check
    return F.coalesce(condition, F.lit(True))


def parse_metric_records(raw: DataFrame) -> ParsedMetrics:
    """Split raw records into normalised valid tables and a quarantine with reasons.

    Two passes of different cost: every record is read once with Spark's JSON reader
    into the typed schema and checked cheaply; only records that fail that check are
    examined field by field (as a variant) to say what is wrong with them.
    """
    if "value" not in raw.columns:
        raise ValueError(f"raw metrics need a 'value' column; got columns {raw.columns}")
    typed = F.from_json(
        F.col("_value_text"),
        RECORD_SCHEMA,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT},
    )
    checked = (
        raw.select(
            *_source_columns(raw),
            _as_text("key", raw).alias("_key_text"),
            _as_text("value", raw).alias("_value_text"),
        )
        .withColumn("_record", typed)
        .withColumn("_suspect", _looks_wrong(F.col("_record"), F.col("_key_text")))
    )
    detailed = _record_problems(
        F.try_parse_json(F.col("_value_text")), F.col("_key_text"), F.col("_value_text")
    )
    quarantine = (
        checked.where(F.col("_suspect"))
        .withColumn("_problems", detailed)
        .select(
            "source_topic",
            "source_partition",
            "source_offset",
            "source_timestamp",
            F.col("_key_text").alias("key"),
            F.col("_value_text").alias("value"),
            # A record the reader refused but the field check cannot fault (a number too
            # large for 64 bits, say) still needs a reason.
            F.when(F.size("_problems") > 0, F.col("_problems"))
            .otherwise(F.array(F.lit(f"value does not fit schema v{SCHEMA_VERSION}")))
            .alias("reasons"),
        )
    )
    record = F.col("_record")
    valid = checked.where(~F.col("_suspect")).select(
        record["cluster"].alias("cluster"),
        record["broker_id"].cast("int").alias("broker_id"),
        record["rack"].alias("rack"),
        F.timestamp_millis(record["timestamp_ms"]).alias("timestamp"),
        record["interval_s"].alias("interval_s"),
        record["broker"].alias("broker"),
        record["host"].alias("host"),
        F.coalesce(record["topics"], F.array()).alias("topics"),
        F.coalesce(record["partitions"], F.array()).alias("partitions"),
        F.coalesce(F.size(record["errors"]), F.lit(0)).alias("read_errors"),
    )
    return flattened(valid, quarantine)


def flattened(valid_records: DataFrame, quarantine: DataFrame) -> ParsedMetrics:
    """The flat tables of parsed valid records (as `ParsedMetrics.valid_records` holds them)."""
    return ParsedMetrics(
        broker_metrics=broker_metrics_of(valid_records),
        topic_metrics=_exploded(valid_records, "topics", TOPIC_FIELDS),
        partition_metrics=_exploded(valid_records, "partitions", PARTITION_FIELDS),
        quarantine=quarantine,
        valid_records=valid_records,
    )


IDENTITY_COLUMNS = ("cluster", "broker_id", "rack", "timestamp")


def broker_metrics_of(valid: DataFrame) -> DataFrame:
    """Flatten the broker and host structs into one column per metric."""
    return valid.select(
        *IDENTITY_COLUMNS,
        "interval_s",
        *[F.col(f"broker.{name}").alias(name) for name, _ in BROKER_FIELDS],
        *[F.col(f"host.{name}").alias(f"host_{name}") for name, _ in HOST_FIELDS],
        "read_errors",
    )


def _exploded(valid: DataFrame, array_name: str, fields: tuple[tuple[str, str], ...]) -> DataFrame:
    entry = F.col("entry")
    cast: dict[str, Callable[[Column], Column]] = {"partition": lambda c: c.cast("int")}
    return valid.select(*IDENTITY_COLUMNS, F.explode(array_name).alias("entry")).select(
        *IDENTITY_COLUMNS,
        *[cast.get(name, lambda c: c)(entry[name]).alias(name) for name, _ in fields],
    )


def quarantine_counts(quarantine: DataFrame) -> DataFrame:
    """How many refused records per reason (a record with two reasons counts under each)."""
    return (
        quarantine.select(F.explode("reasons").alias("reason"))
        .groupBy("reason")
        .agg(F.count(F.lit(1)).alias("records"))
        .orderBy(F.desc("records"), "reason")
    )
