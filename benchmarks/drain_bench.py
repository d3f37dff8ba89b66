"""Drain time of the pipelined executor against the throttle's bound: for each size N a
fresh 4-VM local cluster with agents drains one broker holding N under load at throttle T,
and the time from the spec change to no replica left (every ISR complete) is printed beside
the bound 1.3 x N / T + 30 s, with the longest acks=all produce stall during it, the
throttles left behind and the messages lost (both must be 0), and beside the stall the same
probe's longest stall over a quiet stretch just before (the machine's own).

    .venv/bin/python -m benchmarks.drain_bench [--sizes-mib 512,2048] [--throttle-mib 50]
                                               (from the repository root)

Each size needs about 7 x N of free disk (2 x N written at RF 3, plus the copy).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests import harness
from tests.drills.drain_run import DrainFigures, drain_under_load, start_drain_cluster


def one(size_mib: int, throttle_mib: int) -> DrainFigures:
    home = Path(tempfile.mkdtemp(prefix="kaas-drain-bench-"))
    cluster = start_drain_cluster(home / "cluster")
    try:
        return drain_under_load(cluster, data_mib=size_mib, throttle_mib=throttle_mib)
    finally:
        harness.stop_cluster(cluster)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes-mib", default="512,2048")
    parser.add_argument("--throttle-mib", type=int, default=50)
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes_mib.split(",")):
        figures = one(size, args.throttle_mib)
        print("\n".join(figures.lines()), flush=True)
        rows.append(figures)
    print(
        f"{'N MiB':>8} {'T MiB/s':>8} {'drain s':>8} {'bound s':>8} {'ratio':>6} "
        f"{'stall s':>8} {'quiet stall s':>14}"
    )
    for f in rows:
        print(
            f"{f.data_bytes / 2**20:8.0f} {f.throttle_bytes_per_s / 2**20:8.0f} "
            f"{f.seconds:8.1f} {f.bound_s:8.1f} {f.seconds / f.bound_s:6.2f} "
            f"{f.longest_stall_s:8.2f} {f.baseline_stall_s:14.2f}"
        )


if __name__ == "__main__":
    main()
