"""`kaas drill list` and `kaas drill run NAME`, against the local cluster in `--home`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from management_plane.drills.catalog import DRILLS, GAME_DAY_DRILLS, choose_drill
from management_plane.drills.errors import DrillRefused
from management_plane.service.client import add_api_arguments, api_client, watch_operation

if TYPE_CHECKING:
    from management_plane.drills.runner import DrillResult


def add_arguments(drill: argparse.ArgumentParser) -> None:
    actions = drill.add_subparsers(dest="drill_action", required=True)
    actions.add_parser("list", help="every drill, with what it does")
    run = actions.add_parser("run", help="run one drill against the cluster under load")
    run.add_argument("name", help="the drill (kaas drill list)")
    run.add_argument("--cluster", help="refuse unless the local cluster has this name")
    run.add_argument("--duration", type=float, help="seconds each fault lasts")
    run.add_argument("--rate", type=float, default=200.0, help="messages per second")
    run.add_argument("--bounces", type=int, default=3, help="bounces of the bounce drills")
    run.add_argument(
        "--drills",
        type=lambda text: tuple(n.strip() for n in text.split(",") if n.strip()),
        help="game-day only: the drills it runs in turn, comma-separated (default: "
        + ",".join(GAME_DAY_DRILLS)
        + ")",
    )
    run.add_argument("--report", type=Path, help="folder for report.json, report.html, history")
    run.add_argument(
        "--api",
        action="store_true",
        help="run it as an operation of the management plane (journaled; the report stays in "
        "the service's home, named by the operation)",
    )
    add_api_arguments(run)


def run_command(args: argparse.Namespace, home: Path) -> int:
    if args.drill_action == "list":
        width = max(len(d.name) for d in DRILLS)
        for drill in DRILLS:
            print(f"{drill.name:<{width}}  {drill.duration_s:>4.0f}s  {drill.summary}")
        return 0
    drill = choose_drill(args.name, args.drills)
    if args.api:
        return _run_through_api(args, home)
    # Here, not above: every `kaas` command builds this parser, and these pull in the local
    # cluster, the checker and the Kafka clients, a second of start-up for `kaas status`.
    from management_plane.drills.local_cluster import LocalFaultCluster
    from management_plane.drills.local_plane import BackgroundPlane
    from management_plane.drills.network import NftablesRules
    from management_plane.drills.runner import DrillOptions, run_drill

    cluster = LocalFaultCluster(home)
    if args.cluster is not None and args.cluster != cluster.name:
        raise DrillRefused(
            f"drill {drill.name} refused: the local cluster at {home} is {cluster.name!r}, "
            f"not {args.cluster!r}"
        )
    network = NftablesRules()
    if network.problem() is None:
        network.remove_stale()
    for vm in cluster.restore_stale_log_dirs():
        print(f"drill {drill.name}: {vm}'s log directory moved back from a stopped drill's tmpfs")
    result = run_drill(
        drill,
        cluster,
        DrillOptions(duration_s=args.duration, rate_per_s=args.rate, bounces=args.bounces),
        report_dir=args.report,
        network=network,
        on_progress=lambda line: print(f"drill {drill.name}: {line}", flush=True),
        plane=BackgroundPlane(home, cluster.name),
    )
    print(summary(result))
    return 0 if result.passed else 1


def _run_through_api(args: argparse.Namespace, home: Path) -> int:
    if args.report is not None:
        raise DrillRefused("--report names a folder here; with --api the service keeps the report")
    from management_plane.drills.local_cluster import LocalFaultCluster

    name = args.cluster or LocalFaultCluster(home).name
    client = api_client(args)
    body = {"drill": args.name, "duration_s": args.duration, "rate_per_s": args.rate}
    body |= {"bounces": args.bounces, "drills": list(args.drills) if args.drills else None}
    op = client.call("POST", f"/v1/clusters/{name}/drills", body)
    print(
        f"drill {args.name} on {name}: operation {op['op_id']}, report in {op['params']['report_dir']}"
    )
    return watch_operation(client, int(op["op_id"]))


def summary(result: DrillResult) -> str:
    report = result.report["summary"]
    lines = [
        f"drill {result.drill} on {result.cluster}: {'passed' if result.passed else 'FAILED'}",
        f"  checker: {'valid' if result.verdict.valid else 'INVALID'} "
        f"({report['acknowledged']} acknowledged, {report['failed_sends']} failed sends; "
        + ", ".join(f"{k} {v}" for k, v in report["anomalies"].items())
        + ")",
        f"  longest produce stall: {report['longest_stall_s']} s",
    ]
    for fault in report["faults"]:
        lines.append(
            f"  {fault['fault']} ({fault['target']}): first ack after "
            f"{fault['first_ack_after_fault_s']} s, recovery {fault['recovery_s']} s"
        )
    if result.report_dir is not None:
        lines.append(f"  report: {result.report_dir / 'report.html'}")
    return "\n".join(lines)
