"""Planner benchmark: seeded synthetic clusters of 6, 30, 300 and 1,000
brokers with 1k, 10k, 100k and 100k partitions (RF 3, 3 zones, skewed sizes: a few topics
hold most bytes), each in three situations: brokers just added (empty), one broker
draining, random imbalance. Kafka's own `--generate` placement runs on the same input as
the baseline.

    .venv/bin/python benchmarks/planner_bench.py [--sizes 6,30,300,1000] [--kafka-libs DIR]

Each situation is planned in a fresh child process so that its peak memory (ru_maxrss) is
its own; its CPU time is measured beside the wall clock, since the machine is shared.
The planner's targets, checked and printed row by row at the end: 1,000 brokers x 100,000
partitions planned in <= 10 s and <= 2 GiB; replicas and leaders per broker max-min <= 1;
disk within +-5% where sizes allow; replicas moved <= 1.1 x the lower bound (see
lower_bound, and beside it the bound extended to soft goals 3 and 4: see goal_bound).

The Kafka baseline: `kafka-reassign-partitions --generate` needs a live cluster in Kafka
3.9 (it reads brokers, racks and current assignments through the Admin API of
--bootstrap-server), so it cannot run on a synthetic layout as a command. The benchmark
therefore calls the very method `--generate` computes its proposal with,
ReassignPartitionsCommand.calculateAssignment (private, reached by reflection), from the
same jars, on the same brokers (active ones, rack-aware) and current assignment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.model import Broker, BrokerState, Cluster, Partition, PlannerSettings
from planner.plan import make_plan
from planner.state import PlacementState

SIZES = {6: 1_000, 30: 10_000, 300: 100_000, 1000: 100_000}
SITUATIONS = ("added", "draining", "imbalance")
ZONES = ("zone-a", "zone-b", "zone-c")
DEFAULT_LIBS = ("build/image/opt/kaas/kafka/3.9.2/libs",)


# ----- synthetic clusters ---------------------------------------------------------------


def topic_shapes(partitions: int, rng: random.Random) -> list[tuple[str, int, float]]:
    """(topic, partitions, bytes per partition): Zipf topic weights (a few topics hold
    most bytes); partitions grow with the square root of a topic's weight, as operators
    give busy topics more partitions but not in proportion."""
    topics = max(4, partitions // 100)
    weights = [1 / (i + 1) for i in range(topics)]
    roots = [w**0.5 for w in weights]
    counts = [max(1, round(partitions * r / sum(roots))) for r in roots]
    while sum(counts) > partitions:
        counts[counts.index(max(counts))] -= 1
    counts[0] += partitions - sum(counts)
    total_bytes = partitions * 100e6
    order = list(range(topics))
    rng.shuffle(order)
    return [
        (f"topic-{order[i]:04d}", n, total_bytes * w / sum(weights) / n)
        for i, (w, n) in enumerate(zip(weights, counts, strict=True))
    ]


def balanced_base(brokers: int, partitions: int, seed: int) -> Cluster:
    """Each topic placed the way Kafka places a new topic (rack-aware round robin from a
    random start), then planned once: the state a planner-kept cluster is in."""
    rng = random.Random(seed)
    broker_list = tuple(Broker(i + 1, ZONES[i % 3]) for i in range(brokers))
    by_zone = [[b.id for b in broker_list if b.rack == zone] for zone in ZONES]
    parts = []
    for topic, count, per_partition in topic_shapes(partitions, rng):
        start = rng.randrange(3 * brokers)
        for number in range(count):
            slot = start + number
            replicas = []
            for j in range(3):
                z = (slot + j) % 3
                zone = by_zone[z]
                # Consecutive partitions on consecutive brokers of each zone, each zone
                # shifted, and shifted again on every lap, as Kafka's assignment does.
                replicas.append(zone[(slot + z * (1 + number // len(zone))) % len(zone)])
            size = int(per_partition * rng.lognormvariate(0, 0.3))
            rate = per_partition / 1e5
            parts.append(
                Partition(
                    topic,
                    number,
                    tuple(replicas),
                    size,
                    round(rate * rng.lognormvariate(0, 0.5), 1),
                    round(2 * rate * rng.lognormvariate(0, 0.5), 1),
                )
            )
    cluster = Cluster(broker_list, tuple(parts))
    return make_plan(cluster, seed=seed).target


def situation(name: str, brokers: int, partitions: int, seed: int) -> Cluster:
    rng = random.Random(seed + 1)
    if name == "added":
        added = max(3, round(brokers * 0.1 / 3) * 3)
        base = balanced_base(brokers - added, partitions, seed)
        new = tuple(
            Broker(len(base.brokers) + i + 1, ZONES[(len(base.brokers) + i) % 3])
            for i in range(added)
        )
        return Cluster(base.brokers + new, base.partitions)
    base = balanced_base(brokers, partitions, seed)
    if name == "draining":
        return base.with_broker_states({base.brokers[0].id: BrokerState.DRAINING})
    # Random imbalance: 5% of replicas moved to a random broker of the same zone (the
    # hard goals still hold), and 5% of partitions led by a random replica.
    zone_of = {b.id: b.rack for b in base.brokers}
    by_zone: dict[str, list[int]] = {}
    for b in base.brokers:
        by_zone.setdefault(b.rack, []).append(b.id)
    assignment = {}
    for p in base.partitions:
        replicas = list(p.replicas)
        if rng.random() < 0.15:  # ~5% of replicas: one of the three
            i = rng.randrange(len(replicas))
            choices = [b for b in by_zone[zone_of[replicas[i]]] if b not in replicas]
            if choices:
                replicas[i] = rng.choice(choices)
        if rng.random() < 0.05:
            j = rng.randrange(len(replicas))
            replicas[0], replicas[j] = replicas[j], replicas[0]
        if tuple(replicas) != p.replicas:
            assignment[(p.topic, p.partition)] = replicas
    return base.with_assignment(assignment)


def lower_bound(cluster: Cluster) -> int:
    """The movement lower bound: replicas on draining brokers plus the excess of over-full
    brokers over the balanced ceiling (the planner's per-broker target range,
    rack-aware)."""
    state = PlacementState(cluster, PlannerSettings())
    draining = sum(state.count[b] for b in range(len(state.broker_ids)) if not state.active[b])
    excess = sum(
        max(0, state.count[b] - state.count_range[b].high)
        for b in range(len(state.broker_ids))
        if state.active[b]
    )
    return draining + excess


def goal_bound(cluster: Cluster) -> int:
    """A lower bound on the replicas moved by any plan that meets soft goals 1 (counts),
    3 (topic spread) and 4 (disk bytes), which lower_bound does not all see.

    Each move takes a replica off one broker and puts it on another, and a broker ends
    with low <= count + in - out <= high. Per active broker, what must leave: its excess
    over the ceiling, its replicas of a topic over goal 3's tolerated most, the fewest of
    its replicas whose bytes cover its excess over +5% of its disk target; what must
    arrive: its shortfall under the floor, the fewest replicas (the cluster's largest)
    whose bytes cover its shortfall under -5%. Then out >= max(must leave, must arrive +
    count - high) and in >= max(must arrive, must leave + low - count). The moves are at
    least the sum of outs plus the replicas on draining brokers, and at least the sum of
    ins."""
    settings = PlannerSettings()
    tol = settings.disk_tolerance
    state = PlacementState(cluster, settings)
    totals = state.topic_totals()
    largest = sorted(state.size, reverse=True)
    outs = ins = 0
    for b in range(len(state.broker_ids)):
        if not state.active[b]:
            outs += state.count[b]  # their arrivals are in the active brokers' shortfalls
            continue
        count, low, high = state.count[b], state.count_range[b].low, state.count_range[b].high
        topic = sum(
            max(0, held - state.topic_upper(t, b, totals))
            for t, held in state.topic_count[b].items()
        )
        target = state.disk_target[b]
        mine = sorted((state.size[p] for p in state.hosted[b]), reverse=True)
        leave = max(0, count - high, topic, _cover(mine, state.disk[b] - target * (1 + tol)))
        arrive = max(0, low - count, _cover(largest, target * (1 - tol) - state.disk[b]))
        outs += max(leave, arrive + count - high)
        ins += max(arrive, leave + low - count)
    return max(outs, ins)


def _cover(sizes: list[int], amount: float) -> int:
    """The fewest of `sizes` (largest first) that add up to `amount` or more."""
    taken = 0
    for size in sizes:
        if amount <= 0:
            break
        amount -= size
        taken += 1
    return taken


# ----- Kafka's --generate, from the jars ---------------------------------------------------

_JAVA_SOURCE = r"""
import java.lang.reflect.Method;
import java.nio.file.*;
import java.util.*;
import org.apache.kafka.admin.BrokerMetadata;
import org.apache.kafka.common.TopicPartition;

public class KafkaGenerate {
  public static void main(String[] args) throws Exception {
    List<BrokerMetadata> brokers = new ArrayList<>();
    Map<TopicPartition, List<Integer>> current = new HashMap<>();
    for (String line : Files.readAllLines(Paths.get(args[0]))) {
      String[] f = line.split(" ");
      if (f[0].equals("B")) brokers.add(new BrokerMetadata(Integer.parseInt(f[1]), Optional.of(f[2])));
      else {
        List<Integer> r = new ArrayList<>();
        for (String s : f[3].split(",")) r.add(Integer.parseInt(s));
        current.put(new TopicPartition(f[1], Integer.parseInt(f[2])), r);
      }
    }
    Method m = Class.forName("org.apache.kafka.tools.reassign.ReassignPartitionsCommand")
        .getDeclaredMethod("calculateAssignment", Map.class, List.class);
    m.setAccessible(true);
    long start = System.nanoTime();
    @SuppressWarnings("unchecked")
    Map<TopicPartition, List<Integer>> proposed = (Map<TopicPartition, List<Integer>>) m.invoke(null, current, brokers);
    long nanos = System.nanoTime() - start;
    StringBuilder out = new StringBuilder("T " + nanos + "\n");
    for (Map.Entry<TopicPartition, List<Integer>> e : proposed.entrySet()) {
      StringBuilder r = new StringBuilder();
      for (Integer b : e.getValue()) { if (r.length() > 0) r.append(','); r.append(b); }
      out.append("P ").append(e.getKey().topic()).append(' ').append(e.getKey().partition())
         .append(' ').append(r).append('\n');
    }
    Files.writeString(Paths.get(args[1]), out.toString());
  }
}
"""


def find_kafka_libs(explicit: str | None) -> Path | None:
    for candidate in [explicit, *DEFAULT_LIBS]:
        if (
            candidate
            and Path(candidate).is_dir()
            and any(Path(candidate).glob("kafka-tools-*.jar"))
        ):
            return Path(candidate)
    return None


def compile_kafka_driver(libs: Path, work: Path) -> str | None:
    """Compile the driver; None on success, else why it cannot run."""
    if not shutil.which("javac") or not shutil.which("java"):
        return "javac/java not found"
    (work / "KafkaGenerate.java").write_text(_JAVA_SOURCE)
    result = subprocess.run(
        ["javac", "-cp", f"{libs}/*", "-d", str(work), str(work / "KafkaGenerate.java")],
        capture_output=True,
        text=True,
    )
    return None if result.returncode == 0 else f"javac failed: {result.stderr.strip()[:300]}"


def kafka_generate(cluster: Cluster, libs: Path, work: Path) -> dict[str, Any]:
    lines = [f"B {b.id} {b.rack}" for b in cluster.brokers if b.is_active]
    lines += [
        f"P {p.topic} {p.partition} {','.join(map(str, p.replicas))}" for p in cluster.partitions
    ]
    (work / "input.txt").write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    result = subprocess.run(
        [
            "java",
            "-cp",
            f"{work}:{libs}/*",
            "KafkaGenerate",
            str(work / "input.txt"),
            str(work / "output.txt"),
        ],
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        return {"error": result.stderr.strip()[:300]}
    current = {(p.topic, p.partition): p for p in cluster.partitions}
    moved = moved_bytes = 0
    compute_seconds = 0.0
    for line in (work / "output.txt").read_text().splitlines():
        fields = line.split(" ")
        if fields[0] == "T":
            compute_seconds = int(fields[1]) / 1e9
            continue
        p = current[(fields[1], int(fields[2]))]
        new = {int(b) for b in fields[3].split(",")}
        added = len(new - set(p.replicas))
        moved += added
        moved_bytes += added * p.size_bytes
    return {
        "seconds": compute_seconds,
        "wall_seconds": wall,
        "replicas_moved": moved,
        "bytes_moved": moved_bytes,
    }


# ----- one situation, in its own process ---------------------------------------------------


def run_one(brokers: int, situation_name: str, seed: int, libs: str | None) -> dict[str, Any]:
    partitions = SIZES.get(brokers, brokers * 100)
    cluster = situation(situation_name, brokers, partitions, seed)
    bound = lower_bound(cluster)
    bound_with_goals = goal_bound(cluster)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu_started = time.perf_counter(), time.process_time()
    plan = make_plan(cluster, seed=seed)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    rss_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    again = make_plan(plan.target, seed=seed)
    summary = plan.summary()
    result: dict[str, Any] = {
        "brokers": brokers,
        "partitions": partitions,
        "situation": situation_name,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mib": rss_peak / 1024,
        "rss_before_plan_mib": rss_before / 1024,
        "replicas_moved": summary["replicas_moved"],
        "bytes_moved": summary["bytes_moved"],
        "leadership_changes": summary["leadership_changes"],
        "lower_bound": bound,
        "goal_bound": bound_with_goals,
        "score_before": summary["score_before"]["total"],
        "score_after": summary["score_after"]["total"],
        "spread_before": summary["spread_before"],
        "spread_after": summary["spread_after"],
        "replan_moves": again.replicas_moved + again.leadership_changes,
    }
    kafka_libs = find_kafka_libs(libs)
    if kafka_libs is None:
        result["kafka"] = {"error": "Kafka jars not found (make setup, or --kafka-libs)"}
    else:
        with tempfile.TemporaryDirectory() as work:
            problem = compile_kafka_driver(kafka_libs, Path(work))
            result["kafka"] = (
                {"error": problem} if problem else kafka_generate(cluster, kafka_libs, Path(work))
            )
    return result


def run_child(brokers: int, situation_name: str, seed: int, libs: str | None) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--one",
        f"{brokers}:{situation_name}",
        "--seed",
        str(seed),
    ]
    if libs:
        command += ["--kafka-libs", libs]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return {
            "brokers": brokers,
            "situation": situation_name,
            "error": result.stderr.strip()[-800:],
        }
    return dict(json.loads(result.stdout))


# ----- report ----------------------------------------------------------------------------


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f}G"


def _ratio(moved: int, bound: int) -> float:
    if bound:
        return moved / bound
    return 1.0 if moved == 0 else float("inf")


def print_report(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'brokers':>7} {'parts':>7} {'situation':<10} {'wall s':>6} {'cpu s':>6} "
        f"{'MiB':>5} {'moved':>6} {'bound':>6} {'ratio':>5} {'gbound':>6} {'gratio':>6} "
        f"{'bytes':>6} {'leader':>6} {'score':>11} {'repl':>5} {'lead':>5} {'disk±':>5} "
        f"{'replan':>6} {'kafka moved':>11} {'kafka/us':>8} {'kafka s':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['brokers']:>7} {'':>7} {r['situation']:<10} ERROR {r['error']}")
            continue
        after = r["spread_after"]
        before = r["spread_before"]
        kafka = r["kafka"]
        if "error" in kafka:
            kafka_cells = f"{'n/a':>11} {'n/a':>8} {'n/a':>7}"
        else:
            times = (
                kafka["replicas_moved"] / r["replicas_moved"]
                if r["replicas_moved"]
                else float("inf")
            )
            kafka_cells = f"{kafka['replicas_moved']:>11} {times:>8.1f} {kafka['seconds']:>7.2f}"
        print(
            f"{r['brokers']:>7} {r['partitions']:>7} {r['situation']:<10} {r['seconds']:>6.2f} "
            f"{r.get('cpu_seconds', float('nan')):>6.2f} {r['peak_rss_mib']:>5.0f} "
            f"{r['replicas_moved']:>6} {r['lower_bound']:>6} "
            f"{_ratio(r['replicas_moved'], r['lower_bound']):>5.2f} "
            f"{r.get('goal_bound', 0):>6} "
            f"{_ratio(r['replicas_moved'], r.get('goal_bound', 0)):>6.2f} "
            f"{_gib(r['bytes_moved']):>6} {r['leadership_changes']:>6} "
            f"{r['score_before']:>5.1f}->{r['score_after']:<5.1f} "
            f"{before['replicas_max_minus_min']:>2}>{after['replicas_max_minus_min']:<2} "
            f"{before['leaders_max_minus_min']:>2}>{after['leaders_max_minus_min']:<2} "
            f"{after['disk_max_deviation'] * 100:>4.1f}% {r['replan_moves']:>6} {kafka_cells}"
        )
    print()
    print("wall s / cpu s: planning time (wall clock, and CPU time of the planning process:")
    print("  the machine is shared, so wall time includes waiting for a core); MiB: peak RSS of")
    print("  the process, which also built the synthetic cluster and its balanced base;")
    print("bound: the movement lower bound (replicas on draining brokers + excess of over-full")
    print("  brokers over the balanced ceiling); ratio: moved / bound;")
    print("gbound: a lower bound for any plan meeting soft goals 1, 3 and 4 (goal_bound: per")
    print("  broker, replicas that must leave or arrive for counts, topics and disk bytes);")
    print("  gratio: moved / gbound;")
    print("repl/lead: max-min per broker before>after (within a rack where racks pin their")
    print("  totals); disk±: largest |disk/target-1| after; replan: replicas moved + leadership")
    print("  changes when the result is planned again; kafka moved: replicas Kafka's --generate")
    print("  placement (calculateAssignment, same jars) would move; kafka/us: that over ours.")
    errors = [r["kafka"]["error"] for r in results if "kafka" in r and "error" in r["kafka"]]
    if errors:
        print(f"Kafka baseline not run: {errors[0]}")
    print()
    print_targets(results)


def print_targets(results: list[dict[str, Any]]) -> None:
    """The planner's targets, row by row: ok or MISS."""
    print("targets: ok / MISS")
    for r in results:
        if "error" in r:
            continue
        after = r["spread_after"]
        checks = {
            "repl<=1": after["replicas_max_minus_min"] <= 1,
            "lead<=1": after["leaders_max_minus_min"] <= 1,
            "disk<=5%": after["disk_max_deviation"] <= 0.05,
            "moved<=1.1xbound": r["replicas_moved"] <= 1.1 * r["lower_bound"],
            "moved<=1.1xgbound": r["replicas_moved"] <= 1.1 * r.get("goal_bound", 0),
            "replan=0": r["replan_moves"] == 0,
        }
        kafka = r["kafka"]
        if "error" not in kafka:
            checks["below kafka"] = r["replicas_moved"] < kafka["replicas_moved"]
        if r["brokers"] >= 1000:
            checks["<=10s wall"] = r["seconds"] <= 10
            checks["<=10s cpu"] = r.get("cpu_seconds", float("inf")) <= 10
            checks["<=2GiB"] = r["peak_rss_mib"] <= 2048
        cells = " ".join(f"{name} {'ok' if good else 'MISS'}" for name, good in checks.items())
        print(f"{r['brokers']:>5} {r['situation']:<10} {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="6,30,300,1000", help="broker counts, comma-separated")
    parser.add_argument("--situations", default=",".join(SITUATIONS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kafka-libs", help="directory of the Kafka 3.9 jars")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--report", type=Path, help="only print the report of a --json file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.report:
        print_report(json.loads(args.report.read_text()))
        return 0
    if args.one:
        brokers, name = args.one.split(":")
        print(json.dumps(run_one(int(brokers), name, args.seed, args.kafka_libs)))
        return 0
    os.chdir(Path(__file__).resolve().parent.parent)
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        for name in args.situations.split(","):
            results.append(run_child(size, name, args.seed, args.kafka_libs))
            print(f"  done: {size} brokers, {name}", file=sys.stderr)
    print_report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
