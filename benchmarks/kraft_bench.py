"""KRaft (Kafka 4.3.1) against ZooKeeper mode (3.9.2, the baseline, measured in the same run):
`kaas up --no-agents --nodes 3` time (median of N fresh starts of each) and the resident
memory of each JVM once up.

    .venv/bin/python benchmarks/kraft_bench.py [--runs 3] [--address-base 127.0.21]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from management_plane.local.cluster import LocalCluster
from management_plane.local.processes import resident_bytes
from management_plane.local.state import require_state

MODES = (("ZooKeeper mode (baseline)", "3.9.2"), ("KRaft", "4.3.1"))


def _rss(home: Path) -> dict[str, list[float]]:
    """MiB of each JVM kind, one entry per VM that runs it."""
    state = require_state(home)
    sizes: dict[str, list[float]] = {}
    for vm in state.layout.vms:
        for kind in state.vm_kinds(vm.name):
            size = resident_bytes(state.record(vm.name, kind))
            sizes.setdefault(kind, []).append((size or 0) / 2**20)
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--address-base", default="127.0.21")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory(prefix="kaas-kraft-bench-") as scratch:
        for label, version in MODES:
            durations = []
            memory: dict[str, list[float]] = {}
            for run in range(args.runs):
                home = Path(scratch) / f"{version}-{run}"
                cluster = LocalCluster(home)
                started = time.monotonic()
                try:
                    cluster.up(
                        args.nodes,
                        name="bench",
                        address_base=args.address_base,
                        kafka_version=version,
                    )
                    durations.append(time.monotonic() - started)
                    if run == args.runs - 1:
                        time.sleep(10)  # let start-up settle before reading memory
                        memory = _rss(home)
                finally:
                    cluster.down(purge=True)
            results.append((label, version, durations, memory))
    for label, version, durations, memory in results:
        print(
            f"{label} {version}: kaas up --no-agents --nodes {args.nodes} median "
            f"{statistics.median(durations):.1f}s over {args.runs} fresh runs "
            f"({', '.join(f'{d:.1f}' for d in durations)})"
        )
        for kind, sizes in memory.items():
            print(f"  {kind}: {', '.join(f'{s:.0f}' for s in sizes)} MiB resident once up")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
