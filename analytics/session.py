"""Spark session settings and the one place a SparkSession is built.

Transforms never build a session: the job mains and the test fixture call
`build_spark_session` and pass the session (or its DataFrames) down.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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
LOG_FILE_ENV = "KAAS_SPARK_LOG_FILE"

# Spark's own log lines (its WARN lines, log4j's) to one file instead of the terminal.
LOG4J2_TO_FILE = """\
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""

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
    log_file: Path | None = None
    """Where Spark's log lines go; None: Spark's default, WARN and above on stderr."""

    @classmethod
    def from_env(cls, app_name: str = "kaas-analytics") -> SparkSettings:
        return cls(
            app_name=app_name,
            master=os.environ.get(MASTER_ENV, cls.master),
            driver_memory=os.environ.get(DRIVER_MEMORY_ENV, cls.driver_memory),
            log_file=Path(os.environ[LOG_FILE_ENV]) if os.environ.get(LOG_FILE_ENV) else None,
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


def _driver_java_options(log_file: Path | None) -> str:
    # The throughput collector instead of G1: on 2 cores G1's concurrent threads compete
    # with the job's two tasks. The balance job over 10M records took 50-59 s with it
    # against 65 s with G1 (cold JVM, quiet machine).
    options = "-XX:+UseParallelGC"
    if log_file is None:
        return options
    log_file = log_file.resolve()
    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log_file.with_name(log_file.name + ".log4j2.properties")
    config.write_text(LOG4J2_TO_FILE.format(log_file=log_file))
    return f"{options} -Dlog4j2.configurationFile=file:{config}"


@contextmanager
def _stderr_to(log_file: Path) -> Iterator[None]:
    """File descriptor 2 appends to `log_file` while the block runs (for the processes it
    starts), then is the terminal again."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


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
            .config("spark.driver.extraJavaOptions", _driver_java_options(settings.log_file))
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
    if settings.log_file is not None and not launched_by_spark_submit():
        # The JVM starts here and keeps the stderr it is given: what it prints there
        # itself (the incubator-module warning, "Setting default log level") and its
        # Python workers' lines go to the log file too.
        with _stderr_to(settings.log_file):
            session = builder.getOrCreate()
    else:
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
