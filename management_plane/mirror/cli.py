"""`kaas mirror create|get|list|delete`: MirrorMaker 2 flows through the API (admin key)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from management_plane.errors import KaasError
from planner.contracts.mirror_flow import DEFAULT_WORKERS


def add_mirror_commands(
    commands: Any, with_api: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
) -> None:
    mirror = commands.add_parser("mirror", help="MirrorMaker 2 flows between clusters")
    actions = mirror.add_subparsers(dest="action", required=True)
    create = with_api(
        actions.add_parser("create", help="mirror a source cluster's topics into a target")
    )
    create.add_argument("target", help="the cluster the flow mirrors into")
    create.add_argument("name", help="the flow's name")
    create.add_argument("--source-cluster", default=None, help="the source: a KaaS cluster")
    create.add_argument(
        "--source-bootstrap", default=None, help="the source: host:port,... outside KaaS"
    )
    create.add_argument("--source-alias", default=None, help="an outside source's name")
    create.add_argument("--topics", required=True, help="regular expression of source topics")
    create.add_argument("--groups", default=".*", help="consumer groups to sync (default .*)")
    create.add_argument("--checkpoint-interval", type=int, default=10, help="seconds")
    create.add_argument("--replication-factor", type=int, default=None)
    create.add_argument(
        "--placement", default="", help="comma-separated broker ids of the VMs that run it"
    )
    create.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"without --placement: how many VMs run it (default {DEFAULT_WORKERS})",
    )
    create.add_argument("--wait", action="store_true", help="watch the operation to its end")
    listing = with_api(actions.add_parser("list", help="the flows into a cluster"))
    listing.add_argument("target")
    failover = with_api(
        actions.add_parser(
            "failover", help="a group's offsets on the source beside those synced to the target"
        )
    )
    failover.add_argument("target")
    failover.add_argument("name")
    failover.add_argument("--group", required=True, help="the consumer group to move")
    for action, text in (("get", "one flow"), ("delete", "stop and remove a flow")):
        one = with_api(actions.add_parser(action, help=text))
        one.add_argument("target")
        one.add_argument("name")
        if action == "delete":
            one.add_argument("--wait", action="store_true", help="watch the operation")


def _placement(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise KaasError(f"--placement {text!r} must be broker ids separated by commas") from None


def flow_line(flow: dict[str, Any]) -> str:
    placement = (
        f"brokers {','.join(map(str, flow['placement']))}"
        if flow["placement"]
        else f"{flow['workers']} workers"
    )
    return (
        f"{flow['name']:<20}{flow['source']['alias']} -> {flow['target_cluster']:<16}"
        f"{flow['state']:<10}topics {flow['topics']!r} groups {flow['groups']!r} {placement}"
    )


def lag_text(lag: dict[str, Any] | None) -> str:
    """The flow's lag in all and per topic (the most behind first)."""
    if lag is None:
        return "lag: not measured yet\n"
    rate = "?" if lag["records_per_s"] is None else f"{lag['records_per_s']:.1f}"
    lines = [
        f"lag: {lag['lag_records']} records, {rate} records/s mirrored "
        f"(broker {lag['broker_id']}, {lag['age_s']:.0f} s ago, from {lag['method']})"
    ]
    for topic in lag["topics"]:
        missing = (
            f", {topic['missing_partitions']} not yet on the target"
            if topic["missing_partitions"]
            else ""
        )
        lines.append(
            f"  {topic['topic']}: lag {topic['lag_records']} "
            f"(max {topic['max_partition_lag']} of {topic['partitions']} partitions{missing})"
        )
    if lag["topics_omitted"]:
        lines.append(f"  and {lag['topics_omitted']} more topics")
    return "\n".join(lines) + "\n"


def failover_text(answer: dict[str, Any]) -> str:
    """One line per partition: where the group resumes on the target."""
    lines = [f"group {answer['group']} of flow {answer['flow']}:"]
    for row in answer["partitions"]:
        source = "?" if row["source_offset"] is None else row["source_offset"]
        target = "-" if row["target_offset"] is None else row["target_offset"]
        lines.append(
            f"  {row['source_topic']}[{row['partition']}] source {source} -> "
            f"{row['target_topic']}[{row['partition']}] target {target} {row['state']}"
        )
    return "\n".join(lines) + "\n"


def run_mirror(client: Any, args: argparse.Namespace, watch: Callable[[Any, int], int]) -> int:
    base = f"/v1/clusters/{args.target}/mirror/flows"
    if args.action == "list":
        answer = client.call("GET", base)
        if not answer["flows"]:
            print(f"no flows into {args.target}")
        for flow in answer["flows"]:
            print(flow_line(flow))
        for name, reason in answer["unreadable"].items():
            print(f"{name:<20}unreadable: {reason}")
        return 0
    if args.action == "get":
        flow = client.call("GET", f"{base}/{args.name}")
        print(flow_line(flow))
        print(f"source bootstrap servers: {flow['source']['bootstrap_servers']}")
        print(
            f"checkpoints every {flow['checkpoint_interval_s']} s, "
            f"replication factor {flow['replication_factor']}"
        )
        print(lag_text(flow.get("lag")), end="")
        return 0
    if args.action == "failover":
        answer = client.call(
            "GET", f"{base}/{args.name}/failover?{urlencode({'group': args.group})}"
        )
        print(failover_text(answer), end="")
        return 0
    if args.action == "delete":
        op = client.call("DELETE", f"{base}/{args.name}")
    else:
        body: dict[str, Any] = {
            "name": args.name,
            "topics": args.topics,
            "groups": args.groups,
            "checkpoint_interval_s": args.checkpoint_interval,
            "placement": _placement(args.placement),
            "workers": args.workers,
        }
        for key in ("source_cluster", "source_bootstrap", "source_alias", "replication_factor"):
            if getattr(args, key) is not None:
                body[key] = getattr(args, key)
        op = client.call("POST", base, body)
    print(f"op {op['op_id']} {op['kind']} queued")
    return watch(client, op["op_id"]) if args.wait else 0
