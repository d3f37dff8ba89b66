"""What every job main shares: the session's life, and turning bad input into exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from analytics.audit import AuditInputError
from analytics.balance_run import BalanceInputError
from analytics.kafka_offsets import OffsetsError
from analytics.layout import LayoutFileError
from analytics.session import SparkSettings, build_spark_session
from analytics.sources import SourceError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

# Errors that mean "the input is wrong": reported in one line, exit 2, no traceback.
INPUT_ERRORS: tuple[type[Exception], ...] = (
    LayoutFileError,
    SourceError,
    BalanceInputError,
    AuditInputError,
    OffsetsError,
    ValueError,
)


def parse_utc_timestamp(text: str) -> datetime:
    """An ISO 8601 timestamp with a zone, e.g. 2026-01-01T12:00:00+00:00 or ...Z."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as error:
        raise ValueError(f"{text!r} is not an ISO 8601 timestamp: {error}") from error
    if value.tzinfo is None:
        raise ValueError(f"timestamp {text!r} needs a zone, e.g. {text}+00:00")
    return value


def run_with_session(job: str, body: Callable[[SparkSession], int]) -> int:
    """Build the session, run the body, stop the session; bad input exits 2 with one line."""
    spark = build_spark_session(SparkSettings.from_env(app_name=f"kaas-analytics-{job}"))
    try:
        return body(spark)
    except INPUT_ERRORS as error:
        print(f"kaas analytics {job}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PySparkException as error:
        # Spark's own message names the problem (unreachable brokers, unreadable files).
        print(f"kaas analytics {job}: Spark failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        spark.stop()
