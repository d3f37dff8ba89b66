"""The drill checker over a clean history of a million records (500,000 sends, 500,000
reads), beside the floor of one plain pass that only indexes the same records by value id.

    .venv/bin/python benchmarks/checker_bench.py [--per-key N]
"""

from __future__ import annotations

import argparse
import time

from management_plane.drills.checker import check
from tests.unit.test_drill_checker import clean_history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-key", type=int, default=1000, help="messages per key (default 1000)")
    args = parser.parse_args()
    history = clean_history(10, 50, args.per_key)
    started = time.perf_counter()
    floor_index = {getattr(record, "value_id", None): record for record in history.records()}
    floor_s = time.perf_counter() - started
    started = time.perf_counter()
    verdict = check(history)
    checker_s = time.perf_counter() - started
    records = len(history.sends) + len(history.consumer_events)
    print(f"records {records:,}  verdict {'valid' if verdict.valid else 'INVALID'}")
    print(f"{'what':<28}{'seconds':>10}{'records/s':>14}")
    print(f"{'floor: index by value id':<28}{floor_s:>10.2f}{records / floor_s:>14,.0f}")
    print(f"{'checker':<28}{checker_s:>10.2f}{records / checker_s:>14,.0f}")
    print(f"checker / floor: {checker_s / floor_s:.1f} x ({len(floor_index):,} distinct ids)")


if __name__ == "__main__":
    main()
