"""`kaas up --no-agents --nodes 3` with TLS on every channel against the same cluster as KaaS
ran before TLS (`--insecure-legacy`, the baseline, measured in the same run): median of N
fresh starts of each, alternating so that a change of the machine's load hits both.

Both run Kafka 3.9.2 in ZooKeeper mode, the only mode a pre-TLS cluster had, and without
agents (a legacy cluster has none). What TLS adds: the cluster CA and every VM's and the
admin's identity issued, Netty and TLS handshakes on ZooKeeper's client port and quorum, and
the readiness probes over TLS.

    .venv/bin/python benchmarks/legacy_up_bench.py [--runs 3] [--address-base 127.0.22]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from management_plane.local.cluster import LocalCluster
from planner.contracts.transport_security import TransportSecurity

VERSION = "3.9.2"
MODES = (
    ("plaintext (legacy, baseline)", TransportSecurity.PLAINTEXT_LEGACY),
    ("TLS", TransportSecurity.TLS),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--address-base", default="127.0.22")
    args = parser.parse_args()

    durations: dict[TransportSecurity, list[float]] = {t: [] for _, t in MODES}
    with tempfile.TemporaryDirectory(prefix="kaas-legacy-bench-") as scratch:
        for run in range(args.runs):
            for _, transport in MODES:
                home = Path(scratch) / f"{transport.value}-{run}"
                cluster = LocalCluster(home)
                started = time.monotonic()
                try:
                    cluster.up(
                        args.nodes,
                        name="bench",
                        address_base=args.address_base,
                        kafka_version=VERSION,
                        transport=transport,
                    )
                    durations[transport].append(time.monotonic() - started)
                finally:
                    cluster.down(purge=True)
    baseline = statistics.median(durations[TransportSecurity.PLAINTEXT_LEGACY])
    for label, transport in MODES:
        median = statistics.median(durations[transport])
        print(
            f"{label}: kaas up --no-agents --nodes {args.nodes} (Kafka {VERSION}) median "
            f"{median:.1f}s over {args.runs} fresh runs "
            f"({', '.join(f'{d:.1f}' for d in durations[transport])}); "
            f"{median / baseline:.2f}x the plaintext baseline"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
