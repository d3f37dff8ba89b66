"""`kaas plan generate` end to end on differently generated clusters: wall, CPU and peak
memory of the whole command (reading the layout, planning, writing the plan), beside a
baseline source tree run on the very same layout files in the same run.

    .venv/bin/python benchmarks/plan_speed_bench.py [--shapes NAME,...]
        [--baseline-tree DIR] [--work DIR] [--seed 1]

Shapes (1,000 brokers x 100,000 partitions, RF 3, unless named otherwise):

- kafka-added: every topic placed as Kafka places a new one (rack-aware round robin from a
  random start) on 900 brokers, then 100 brokers just added, empty; Zipf topic sizes.
- random-empty: rack-aware random placement on 90% of the brokers, the other 10% empty,
  lognormal partition sizes (sigma 1).
- unequal-draining: four racks of unequal size (40/30/20/10%), rack-aware random placement
  with a few brokers favoured (a hot spot), one broker draining, lognormal sizes.
- huge-added: 5,000 brokers x 1,000,000 partitions, 10% of the brokers just added
  (kafka-added's placement at that size).

Each command runs as a child process; its CPU time and peak RSS come from os.wait4 (its
own, not the benchmark's). Targets: 1,000 brokers in <= 10 s wall and <= 2 GiB; 5,000
brokers in <= 60 s and <= 4 GiB. The machine is shared: CPU time is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GIB = 1024**3


@dataclass(frozen=True)
class Shape:
    name: str
    brokers: int
    partitions: int
    make: Callable[[int, int, random.Random], dict[str, Any]]
    wall_target: float
    memory_target: float


# ----- layouts ------------------------------------------------------------------------------


def _topics(partitions: int, rng: random.Random) -> list[tuple[str, int, float]]:
    """(topic, partitions, mean bytes per partition): Zipf weights, partitions growing with
    the square root of a topic's weight."""
    topics = max(4, partitions // 100)
    weights = [1 / (i + 1) for i in range(topics)]
    roots = [w**0.5 for w in weights]
    counts = [max(1, round(partitions * r / sum(roots))) for r in roots]
    while sum(counts) > partitions:
        counts[counts.index(max(counts))] -= 1
    counts[0] += partitions - sum(counts)
    total = partitions * 100e6
    order = list(range(topics))
    rng.shuffle(order)
    return [
        (f"topic-{order[i]:05d}", n, total * w / sum(weights) / n)
        for i, (w, n) in enumerate(zip(weights, counts, strict=True))
    ]


def _racks(brokers: int, shares: tuple[float, ...]) -> list[str]:
    """Each broker's rack, racks interleaved, rack r holding about shares[r] of them."""
    names = [f"rack-{chr(ord('a') + r)}" for r in range(len(shares))]
    wanted = [s * brokers for s in shares]
    given = [0] * len(shares)
    out = []
    for _ in range(brokers):
        r = max(range(len(shares)), key=lambda i: (wanted[i] - given[i], -i))
        given[r] += 1
        out.append(names[r])
    return out


def _partition(topic: str, number: int, replicas: list[int], size: float) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": number,
        "replicas": replicas,
        "size_bytes": max(1, int(size)),
        "bytes_in_per_s": round(size / 1e5, 1),
        "bytes_out_per_s": round(2 * size / 1e5, 1),
    }


def kafka_added(brokers: int, partitions: int, rng: random.Random) -> dict[str, Any]:
    racks = _racks(brokers, (1 / 3, 1 / 3, 1 / 3))
    added = brokers // 10
    present = list(range(1, brokers - added + 1))
    by_rack: dict[str, list[int]] = {}
    for b in present:
        by_rack.setdefault(racks[b - 1], []).append(b)
    zones = [by_rack[r] for r in sorted(by_rack)]
    parts = []
    for topic, count, mean in _topics(partitions, rng):
        start = rng.randrange(3 * len(present))
        for number in range(count):
            slot = start + number
            replicas = []
            for j in range(3):
                zone = zones[(slot + j) % 3]
                z = (slot + j) % 3
                replicas.append(zone[(slot + z * (1 + number // len(zone))) % len(zone)])
            parts.append(_partition(topic, number, replicas, mean * rng.lognormvariate(0, 0.3)))
    return _layout(racks, parts)


def random_empty(brokers: int, partitions: int, rng: random.Random) -> dict[str, Any]:
    racks = _racks(brokers, (1 / 3, 1 / 3, 1 / 3))
    empty = set(rng.sample(range(1, brokers + 1), brokers // 10))
    return _layout(racks, _random_parts(racks, partitions, rng, empty, sigma=1.0, hot=0.0))


def unequal_draining(brokers: int, partitions: int, rng: random.Random) -> dict[str, Any]:
    racks = _racks(brokers, (0.4, 0.3, 0.2, 0.1))
    parts = _random_parts(racks, partitions, rng, set(), sigma=1.0, hot=0.2)
    return _layout(racks, parts, draining={parts[0]["replicas"][0]})


def _random_parts(
    racks: list[str],
    partitions: int,
    rng: random.Random,
    empty: set[int],
    sigma: float,
    hot: float,
) -> list[dict[str, Any]]:
    """Rack-aware random placement (RF 3 over distinct racks); with `hot`, that share of
    replicas goes to the first 5% of each rack's brokers."""
    by_rack: dict[str, list[int]] = {}
    for b, rack in enumerate(racks, start=1):
        if b not in empty:
            by_rack.setdefault(rack, []).append(b)
    names = sorted(by_rack)
    weights = [len(by_rack[r]) for r in names]
    parts = []
    for topic, count, mean in _topics(partitions, rng):
        for number in range(count):
            chosen: set[int] = set()
            while len(chosen) < 3:
                chosen.add(rng.choices(range(len(names)), weights)[0])
            replicas = []
            for r in chosen:
                pool = by_rack[names[r]]
                if hot and rng.random() < hot:
                    pool = pool[: max(1, len(pool) // 20)]
                replicas.append(rng.choice(pool))
            rng.shuffle(replicas)
            size = mean * rng.lognormvariate(-(sigma**2) / 2, sigma)
            parts.append(_partition(topic, number, replicas, size))
    return parts


def _layout(
    racks: list[str], parts: list[dict[str, Any]], draining: set[int] | None = None
) -> dict[str, Any]:
    brokers = [
        {"id": b, "rack": rack, **({"state": "draining"} if b in (draining or ()) else {})}
        for b, rack in enumerate(racks, start=1)
    ]
    return {"version": 1, "brokers": brokers, "partitions": parts}


SHAPES = (
    Shape("kafka-added", 1000, 100_000, kafka_added, 10.0, 2 * GIB),
    Shape("random-empty", 1000, 100_000, random_empty, 10.0, 2 * GIB),
    Shape("unequal-draining", 1000, 100_000, unequal_draining, 10.0, 2 * GIB),
    Shape("huge-added", 5000, 1_000_000, kafka_added, 60.0, 4 * GIB),
)


# ----- running ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    peak_bytes: int
    exit_code: int
    replicas_moved: int | None


def run_generate(tree: Path, layout: Path, out: Path, seed: int) -> Run:
    """`kaas plan generate` as a user runs it, with `tree`'s planner."""
    summary = out.with_suffix(".summary.json").resolve()
    summary.unlink(missing_ok=True)
    tree, layout = tree.resolve(), layout.resolve()
    # The child runs in `tree`: `-c` puts the working directory first on sys.path, so
    # started from another source tree it would import that tree's planner instead.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        "import sys; from management_plane.cli import main; "
        "sys.exit(main(['plan', 'generate', *sys.argv[1:]]))"
    )
    args = [sys.executable, "-c", code, "--layout", str(layout), "--seed", str(seed)]
    args += ["--json-summary", str(summary)]
    started = time.perf_counter()
    with out.open("wb") as stdout:
        child = subprocess.Popen(args, stdout=stdout, stderr=subprocess.DEVNULL, env=env, cwd=tree)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    moved = None
    if summary.exists():
        moved = json.loads(summary.read_text()).get("replicas_moved")
    return Run(
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss * 1024,
        child.returncode,
        moved,
    )


def _fmt(run: Run | None) -> str:
    if run is None:
        return f"{'-':>8} {'-':>8} {'-':>9} {'-':>8}"
    moved = "-" if run.replicas_moved is None else str(run.replicas_moved)
    failed = "" if run.exit_code == 0 else f" (exit {run.exit_code})"
    return f"{run.wall:>8.1f} {run.cpu:>8.1f} {run.peak_bytes / GIB:>8.2f}G {moved:>8}{failed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(s.name for s in SHAPES[:3]))
    parser.add_argument("--baseline-tree", type=Path, help="a source tree to compare with")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "plan_speed")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    wanted = args.shapes.split(",")
    unknown = set(wanted) - {s.name for s in SHAPES}
    if unknown:
        parser.error(f"unknown shapes: {sorted(unknown)}")
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for shape in (s for s in SHAPES if s.name in wanted):
        layout = args.work / f"{shape.name}-{args.seed}.json"
        if not layout.exists():
            document = shape.make(shape.brokers, shape.partitions, random.Random(args.seed))
            layout.write_text(json.dumps(document, separators=(",", ":")))
        this = run_generate(ROOT, layout, args.work / f"{shape.name}.plan.json", args.seed)
        print(f"  {shape.name}: {_fmt(this)}", file=sys.stderr)
        base = None
        if args.baseline_tree:
            base = run_generate(
                args.baseline_tree, layout, args.work / f"{shape.name}.base.json", args.seed
            )
            print(f"  {shape.name} baseline: {_fmt(base)}", file=sys.stderr)
        rows.append((shape, this, base))
    header = (
        f"{'shape':<17} {'brokers':>7} {'parts':>9}  {'wall s':>8} {'cpu s':>8} {'peak':>9} "
        f"{'moved':>8}  | baseline {'wall s':>8} {'cpu s':>8} {'peak':>9} {'moved':>8}  target"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for shape, this, base in rows:
        ok = (
            this.exit_code == 0
            and this.wall <= shape.wall_target
            and this.peak_bytes <= shape.memory_target
        )
        failed |= not ok
        target = f"<= {shape.wall_target:.0f} s, {shape.memory_target / GIB:.0f} GiB"
        print(
            f"{shape.name:<17} {shape.brokers:>7} {shape.partitions:>9}  {_fmt(this)}  | "
            f"         {_fmt(base)}  {target} {'ok' if ok else 'MISS'}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
