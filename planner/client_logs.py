"""Where the Kafka clients' own log lines go: never onto a user's terminal.

librdkafka, under every confluent-kafka client, prints its lines (`%3|1700000000.123|FAIL|
rdkafka#producer-1| ...`) on stderr unless the client is given a Python logger. Every
client the planes build for the command line gets `client_logger` (`logger=client_logger`).
The `kaas` command sends it to a file under the cluster's folder (`log_client_lines_to`);
elsewhere (the service, tests) the lines go up to the process's own logging like any other.

This lives in the planner because it is the package every plane imports.
"""

from __future__ import annotations

import logging
from pathlib import Path

CLIENT_LOGGER_NAME = "kaas.kafka_client"
CLIENT_LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"

client_logger = logging.getLogger(CLIENT_LOGGER_NAME)


def log_client_lines_to(path: Path) -> None:
    """Write the clients' lines to `path` (appended), and nowhere else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in list(client_logger.handlers):
        client_logger.removeHandler(old)
        old.close()
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)
    handler.setFormatter(logging.Formatter(CLIENT_LOG_FORMAT))
    client_logger.addHandler(handler)
    client_logger.setLevel(logging.INFO)
    client_logger.propagate = False
