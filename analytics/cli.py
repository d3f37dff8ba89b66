"""`kaas analytics JOB ...`: dispatch to the job mains (the kaas CLI calls `main`).

Jobs are imported when chosen, so `kaas analytics --help` does not load Spark.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module

JOBS: dict[str, str] = {
    "balance": "score how evenly brokers carry the measured load (metrics topic -> report)",
    "audit": "compare producers' ledger with what Kafka holds; consumer lag",
}
USAGE = (
    "usage: kaas analytics {" + ",".join(JOBS) + "} [options]   (JOB --help for a job's options)"
)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        for name, purpose in JOBS.items():
            print(f"  {name:8} {purpose}")
        return 0 if argv else 2
    job, rest = argv[0], argv[1:]
    if job not in JOBS:
        print(f"kaas analytics: unknown job {job!r}; jobs: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    job_main: Callable[[list[str]], int] = import_module(f"analytics.jobs.{job}").main
    return job_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
