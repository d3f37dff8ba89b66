"""Figures of the local provider: `kaas up --nodes 3` time (median of N fresh starts) and the
resident memory of each JVM once up, then after the demo workload.

    .venv/bin/python benchmarks/local_cluster_bench.py [--runs 3] [--address-base 127.0.21]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from management_plane.demo import run_demo
from management_plane.local.cluster import LocalCluster
from management_plane.local.processes import resident_bytes
from management_plane.local.state import require_state


def _rss_table(home: Path) -> list[str]:
    state = require_state(home)
    rows = []
    for vm in state.layout.vms:
        sizes = {
            kind: resident_bytes(state.record(vm.name, kind)) for kind in ("zookeeper", "kafka")
        }
        rows.append(
            f"  {vm.name}: "
            + ", ".join(f"{kind} {(size or 0) / 2**20:.0f} MiB" for kind, size in sizes.items())
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--address-base", default="127.0.21")
    args = parser.parse_args()

    durations = []
    with tempfile.TemporaryDirectory(prefix="kaas-bench-") as scratch:
        for run in range(args.runs):
            home = Path(scratch) / f"run{run}"
            cluster = LocalCluster(home)
            started = time.monotonic()
            cluster.up(args.nodes, name="bench", address_base=args.address_base)
            durations.append(time.monotonic() - started)
            last = run == args.runs - 1
            if last:
                time.sleep(10)  # let start-up settle before reading memory
                print("resident memory once up:")
                print("\n".join(_rss_table(home)))
                run_demo(home, messages=100_000, partitions=12, consumers=3)
                print("resident memory after the demo workload:")
                print("\n".join(_rss_table(home)))
            cluster.down(purge=True)
    print(
        f"kaas up --nodes {args.nodes}: median {statistics.median(durations):.1f}s over {args.runs} fresh runs "
        f"({', '.join(f'{d:.1f}' for d in durations)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
