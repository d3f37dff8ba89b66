"""Spark session settings and the one place a SparkSession is built.

Transforms never build a session: the job mains and the test fixture call
`build_spark_session` and pass the session (or its DataFrames) down.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[1]

# Where the image recipe installs Spark's Kafka connector jars: on a baked VM, and in
# the local image the foundation bakes into build/image.
VM_IMAGE_JARS_DIR = Path("/opt/kaas/spark/jars")
LOCAL_IMAGE_JARS_DIR = REPO_ROOT / "build" / "image" / "opt" / "kaas" / "spark" / "jars"

JARS_DIR_ENV = "KAAS_SPARK_JARS"
MASTER_ENV = "KAAS_SPARK_MASTER"
DRIVER_MEMORY_ENV = "KAAS_SPARK_DRIVER_MEMORY"

# The jars the Kafka source needs; names are prefixes, versions come from the Maven file.
KAFKA_CONNECTOR_JAR_PREFIXES = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
)


def default_jars_dir() -> Path:
    """The connector jar folder: env KAAS_SPARK_JARS, else the VM image, else the local image."""
    configured = os.environ.get(JARS_DIR_ENV)
    if configured:
        return Path(configured)
    if VM_IMAGE_JARS_DIR.is_dir():
        return VM_IMAGE_JARS_DIR
    return LOCAL_IMAGE_JARS_DIR


def launched_by_spark_submit() -> bool:
    """True when spark-submit started this Python process (it then owns master and jars)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


@dataclass(frozen=True)
class SparkSettings:
    """How the embedded (local) session is built.

    Defaults suit the 2-core development box that also runs a 6-JVM test cluster:
    two local cores, a small driver heap, few shuffle partitions, no web UI.
    """

    app_name: str = "kaas-analytics"
    master: str = "local[2]"
    driver_memory: str = "2g"
    shuffle_partitions: int = 4
    adaptive_query_execution: bool = False
    """Off by default: every shuffle here is small (per-window aggregates), and AQE's
    re-planning cost more than it saved (13 s against 19 s for the balance job over 1M
    records on local[2])."""
    jars_dir: Path = field(default_factory=default_jars_dir)
    extra_conf: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_env(cls, app_name: str = "kaas-analytics") -> SparkSettings:
        return cls(
            app_name=app_name,
            master=os.environ.get(MASTER_ENV, cls.master),
            driver_memory=os.environ.get(DRIVER_MEMORY_ENV, cls.driver_memory),
        )


def connector_jars(jars_dir: Path) -> list[Path]:
    """The Kafka connector jars found in `jars_dir` (empty when the folder is absent)."""
    if not jars_dir.is_dir():
        return []
    return sorted(
        jar for jar in jars_dir.glob("*.jar") if jar.name.startswith(KAFKA_CONNECTOR_JAR_PREFIXES)
    )


def missing_connector_jars(jars_dir: Path) -> list[str]:
    """Prefixes of connector jars that `jars_dir` lacks; empty means the Kafka source works."""
    names = [jar.name for jar in connector_jars(jars_dir)]
    return [
        prefix
        for prefix in KAFKA_CONNECTOR_JAR_PREFIXES
        if not any(name.startswith(prefix) for name in names)
    ]


def build_spark_session(settings: SparkSettings) -> SparkSession:
    """Build (or return the running) session.

    Under spark-submit the master, memory and jars come from spark-submit's own
    arguments, so only the session-level SQL settings are applied here.
    """
    builder = SparkSession.builder.appName(settings.app_name)
    if not launched_by_spark_submit():
        builder = builder.master(settings.master).config(
            "spark.driver.memory", settings.driver_memory
        )
        jars = connector_jars(settings.jars_dir)
        if jars:
            # spark.jars, never spark.jars.packages: nothing is downloaded at run time.
            builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            # On a starved shared box the driver can miss heartbeats for minutes; past the
            # default 120 s it declares its own local executor lost and the job fails.
            .config("spark.network.timeout", "600s")
            .config("spark.executor.heartbeatInterval", "60s")
            # The throughput collector instead of G1: on 2 cores G1's concurrent threads
            # compete with the job's two tasks. The balance job over 10M records took
            # 50-59 s with it against 65 s with G1 (cold JVM, quiet machine).
            .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
        )
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.adaptive.enabled", str(settings.adaptive_query_execution).lower())
        # Windows are cut in UTC whatever the machine's zone is.
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in settings.extra_conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
