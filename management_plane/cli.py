"""`kaas`: local clusters, the planner, analytics and every management-plane call."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from management_plane.errors import KaasError
from management_plane.local.layout import DEFAULT_ADDRESS_BASE
from management_plane.local.up_choice import UpChoice
from management_plane.logs import configure_logging
from planner.client_logs import log_client_lines_to
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity

if TYPE_CHECKING:
    from management_plane.local.cluster import UpResult

VM_ACTIONS = ("stop", "start", "kill", "pause", "resume", "wipe")
# The management plane's own commands: `serve` logs to its own file, the rest are HTTP calls.
SERVICE_COMMANDS = ("serve", "cluster", "tenant", "topic", "mirror", "op", "alerts")
# The install extra that brings each package only some planes need.
EXTRA_OF_PACKAGE = {
    **dict.fromkeys(("pyspark", "matplotlib", "pandas", "pyarrow", "numpy"), "analytics"),
    **dict.fromkeys(("fastapi", "starlette", "pydantic", "uvicorn", "sqlalchemy"), "service"),
    **dict.fromkeys(("boto3", "botocore", "psutil"), "service"),
    **dict.fromkeys(("statsd", "sdnotify"), "agent"),
}
CLIENT_LOG = "kafka-clients.log"
SPARK_LOG = "spark.log"


def default_home() -> Path:
    return Path(os.environ.get("KAAS_HOME", str(Path.home() / ".kaas" / "local")))


def _keep_library_lines_off_the_terminal(home: Path, spark: bool = False) -> None:
    """The Kafka clients' (librdkafka's) lines, and Spark's, go to HOME/logs, not the terminal."""
    logs = home / "logs"
    log_client_lines_to(logs / CLIENT_LOG)
    if spark:
        from analytics.session import LOG_FILE_ENV

        os.environ.setdefault(LOG_FILE_ENV, str(logs / SPARK_LOG))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kaas", description="Kafka as a Service")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True)

    def with_home(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--home",
            type=Path,
            default=None,
            help="the local cluster's folder (default: $KAAS_HOME or ~/.kaas/local)",
        )
        return sub

    up = with_home(commands.add_parser("up", help="start a local cluster of N VMs"))
    up.add_argument("--nodes", type=int, default=3, help="number of VMs (default 3)")
    up.add_argument("--name", default="local", help="cluster name; Kafka's chroot is /kafka/NAME")
    up.add_argument(
        "--address-base",
        default=DEFAULT_ADDRESS_BASE,
        help="first three octets of the VMs' loopback addresses; VM i gets BASE.i (default 127.0.1)",
    )
    up.add_argument(
        "--kafka-version", default=None, help="a Kafka version in the image (default: newest)"
    )
    up.add_argument(
        "--agents",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run kaas-agent on every VM, which claims the broker id, starts and heals the broker "
        "(default); --no-agents starts the brokers directly",
    )
    up.add_argument(
        "--insecure-legacy",
        action="store_true",
        help="a test and migration aid: start the cluster as KaaS ran before TLS (PLAINTEXT "
        "and SASL_PLAINTEXT listeners, ZooKeeper without TLS or ACLs, Jolokia over HTTP), to "
        "rehearse `kaas cluster secure`; needs --no-agents",
    )
    up.add_argument(
        "--service",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also start the management plane (kaas serve) in the background, its home under "
        "HOME/service (default); --no-service leaves it out",
    )
    up.add_argument(
        "--service-port",
        type=int,
        default=None,
        help="the service's port on 127.0.0.1 (default 8080 if free, else any free port)",
    )

    status = with_home(
        commands.add_parser(
            "status", help="processes, ZooKeeper modes, under-replicated partitions"
        )
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")

    down = with_home(commands.add_parser("down", help="stop every process of the local cluster"))
    down.add_argument(
        "--purge", action="store_true", help="also delete the cluster's folder and data"
    )

    vm = with_home(commands.add_parser("vm", help="act on one local VM"))
    vm.add_argument("action", choices=VM_ACTIONS)
    vm.add_argument("name", help="VM name, e.g. vm2")
    vm.add_argument(
        "--only",
        choices=("kafka", "zookeeper", "agent", "controller"),
        help="act on one of the VM's processes (controller: KRaft clusters)",
    )

    demo = with_home(
        commands.add_parser("demo", help="the demo workload against a running local cluster")
    )
    demo.add_argument("--messages", type=int, default=100_000)
    demo.add_argument("--partitions", type=int, default=12)
    demo.add_argument("--consumers", type=int, default=3)
    demo.add_argument(
        "--no-managed",
        dest="managed",
        action="store_false",
        help="leave out the management-plane part (a tenant over SCRAM, one VM replaced)",
    )

    drill = with_home(commands.add_parser("drill", help="chaos drills (kaas drill --help)"))
    from management_plane.drills.command import add_arguments as add_drill_arguments

    add_drill_arguments(drill)
    security = commands.add_parser("security", help="check a cluster's ports (kaas security check)")
    security_commands = security.add_subparsers(dest="security_command", required=True)
    check = with_home(
        security_commands.add_parser(
            "check",
            help="probe every listening TCP port of every VM without credentials; exit 1 if "
            "any accepts plaintext or anonymous access",
        )
    )
    check.add_argument(
        "name",
        help="the cluster: the one at --home, or one the management plane that `kaas up` "
        "started runs (HOME/service/local/NAME)",
    )

    from management_plane.service.client import add_commands

    add_commands(commands)

    commands.add_parser("plan", help="partition placement (kaas plan --help)", add_help=False)
    commands.add_parser("analytics", help="PySpark jobs (kaas analytics --help)", add_help=False)
    commands.add_parser(
        "dashboards", help="Grafana dashboard JSON (kaas dashboards export --help)", add_help=False
    )
    return parser


def _plan_text(plan: dict[str, Any] | None) -> str:
    if plan is None:
        return "unknown (ZooKeeper unreachable)"
    if plan["state"] == "none":
        return "none stored"
    if plan["state"] == "refused":
        return f"refused: {plan['detail']}"
    text = (
        f"{plan['plan_id']} {plan['state']}, batch {plan['completed_batches']}/"
        f"{plan['batch_count']} done ({plan['partitions']} partitions, "
        f"{plan['replicas_moved']} replicas to move)"
    )
    movement = plan.get("movement")
    if movement and plan["state"] in ("pending", "executing"):
        mib = 1024**2
        text += (
            f"; {movement['bytes_moved'] / mib:.0f} of {movement['bytes_total'] / mib:.0f} MiB"
            f" moved, {movement['bytes_to_move'] / mib:.0f} MiB to move"
            f" at {movement['rate_bytes_per_s'] / mib:.1f} MiB/s"
        )
        if movement["eta_s"] is not None:
            text += f", about {movement['eta_s']:.0f} s left"
    return text


def _print_status(status: dict[str, Any]) -> None:
    print(f"cluster {status['name']} at {status['home']} (Kafka {status['kafka_version']})")
    print(f"bootstrap servers: {status['bootstrap_servers']}")
    header = f"{'VM':<6}{'address':<13}{'zone':<8}{'broker':<8}{'zookeeper':<22}{'kafka':<18}"
    print(header + f"{'registered':<12}URP")
    for vm in status["vms"]:
        zk = vm["processes"]["zookeeper"]
        kafka = vm["processes"]["kafka"]
        zk_text = f"{vm['zookeeper_mode']} ({zk['pid']})" if zk["pid"] else vm["zookeeper_mode"]
        kafka_text = f"{kafka['state']} ({kafka['pid']})" if kafka["pid"] else kafka["state"]
        urp = vm["under_replicated_partitions"]
        broker = "-" if vm["broker_id"] is None else vm["broker_id"]
        print(
            f"{vm['name']:<6}{vm['address']:<13}{vm['zone']:<8}{broker:<8}{zk_text:<22}"
            f"{kafka_text:<18}{'yes' if vm['broker_registered'] else 'no':<12}{'-' if urp is None else urp}"
        )
    if status["agents"]:
        unreachable = any(
            p.startswith("ZooKeeper ensemble unreachable") for p in status["problems"]
        )
        lock = (
            "unknown (ZooKeeper unreachable)"
            if unreachable
            else status["restart_lock_holder"] or "free"
        )
        print(f"restart lock: {lock}")
        print(f"plan: {_plan_text(status['plan'])}")
        for vm in status["vms"]:
            agent = vm["processes"]["agent"]
            state = f"{agent['state']} ({agent['pid']})" if agent["pid"] else agent["state"]
            role = " (planner)" if vm["agent_role"] == "planner" else ""
            print(
                f"{vm['name']} agent{role} {state}: {vm['agent_sentence'] or '(no sentence yet)'}"
            )
    roles = [(vm["name"], vm.get("controller_role")) for vm in status["vms"]]
    if any(role is not None for _, role in roles):
        print("KRaft controllers: " + ", ".join(f"{n} {r}" for n, r in roles if r is not None))
    monitoring = status.get("monitoring")
    if monitoring:
        down = [name for name, p in monitoring["processes"].items() if not p["running"]]
        state = f"not running: {', '.join(down)}" if down else "running"
        print(
            f"monitoring: statsd {monitoring['statsd']}, Graphite {monitoring['graphite_url']} ({state})"
        )
    for problem in status["problems"]:
        print(f"problem: {problem}")


def _up_outcome(result: UpResult) -> str:
    """What `kaas up` did, and why when it found a cluster already there."""
    choice, reason, seconds = result.decision.choice, result.decision.reason, result.seconds
    if choice is UpChoice.REUSE:
        return f"already running, reused ({reason})"
    if choice is UpChoice.START:
        return f"started again in {seconds:.1f}s ({reason})"
    if choice is UpChoice.REPLACE:
        return f"replaced by a new cluster, up in {seconds:.1f}s ({reason})"
    return f"up in {seconds:.1f}s"


def _run(args: argparse.Namespace) -> int:
    if args.command in SERVICE_COMMANDS:
        from management_plane.service.client import run

        return run(args)
    from management_plane.local.background_service import (
        running_service,
        start_background_service,
    )
    from management_plane.local.cluster import LocalCluster

    home: Path = args.home or default_home()
    if args.command == "security":
        return _security_check(home, args.name)
    cluster = LocalCluster(home)
    if args.command == "up":
        result = cluster.up(
            args.nodes,
            name=args.name,
            address_base=args.address_base,
            kafka_version=args.kafka_version,
            agents=args.agents,
            transport=(
                TransportSecurity.PLAINTEXT_LEGACY if args.insecure_legacy else DEFAULT_TRANSPORT
            ),
        )
        layout = result.state.layout
        print(f"cluster {layout.name}: {len(layout.vms)} VMs {_up_outcome(result)}")
        print(f"bootstrap servers: {layout.bootstrap_servers}")
        print(f"zookeeper: {layout.zookeeper_connect}")
        print(f"cluster file: {home.resolve() / 'cluster.json'}")
        if args.service and result.state.agents:
            service = start_background_service(
                home, port=args.service_port, extra_args=("--heartbeat",)
            )
            verb = "already running" if service.already_running else "started"
            print(f"management plane {verb}: {service.url} (log {service.log_file})")
            print(f"admin API key: in {service.admin_key_file}")
            print(f"dashboard: {service.url}/dashboard")
        return 0
    if args.command == "status":
        status = cluster.status()
        background = running_service(home)
        status["service_url"] = background.url if background is not None else None
        if args.json:
            print(json.dumps(status, indent=2))
        else:
            _print_status(status)
            print(f"management plane: {status['service_url'] or 'not running'}")
        return 0
    if args.command == "down":
        state = cluster.down(purge=args.purge)
        if state is None and not args.purge:
            raise KaasError(f"no local cluster at {home}")
        print(f"cluster at {home} stopped" + (" and purged" if args.purge else ""))
        return 0
    if args.command == "vm":
        print(cluster.vm_action(args.action, args.name, only=args.only))
        return 0
    if args.command == "drill":
        from management_plane.drills.command import run_command

        return run_command(args, home)
    if args.command == "demo":
        from management_plane.demo import run_demo

        return run_demo(
            home,
            messages=args.messages,
            partitions=args.partitions,
            consumers=args.consumers,
            managed=args.managed,
        )
    raise KaasError(f"unknown command {args.command}")


def _security_check(home: Path, name: str) -> int:
    from management_plane.local.state import read_state
    from management_plane.security.scan import report_lines, scan

    candidates = (home, home / "service" / "local" / name)
    for folder in candidates:
        state = read_state(folder)
        if state is not None and state.layout.name == name:
            break
    else:
        raise KaasError(f"no cluster {name} at {' or '.join(str(c) for c in candidates)}")
    reports = scan(state)
    for line in report_lines(reports):
        print(line)
    open_ports = [r for r in reports if not r.verdict.ok]
    # A plaintext port may pass only by serving nothing (ZooKeeper's reconfig client port):
    # the summary names those rather than claiming TLS everywhere.
    inert = [r for r in reports if r.verdict.ok and not r.verdict.tls]
    if open_ports:
        summary = f"{len(open_ports)} open"
    elif inert:
        summary = (
            f"none open; {len(inert)} plaintext serving nothing without a certificate, "
            "every other one requires TLS and authentication"
        )
    else:
        summary = "every one requires TLS and authentication"
    print(f"{len(reports)} ports on {len(state.layout.vms)} VMs: {summary}")
    return 1 if open_ports or not reports else 0


def add_client_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--client-dir",
        type=Path,
        help="folder of the admin identity the internal listener wants (cluster.json's client "
        "files; default: $KAAS_HOME/client, the local cluster's)",
    )


def _plan_export(argv: list[str]) -> int:
    from planner.live_layout import LiveLayoutError, read_live_layout
    from planner.pki.authority import PkiError
    from planner.pki.client_settings import admin_client_in

    parser = argparse.ArgumentParser(
        prog="kaas plan export", description="write the LAYOUT.json of a live cluster"
    )
    parser.add_argument("--bootstrap-server", required=True, help="HOST:PORT of any broker")
    parser.add_argument("--jolokia-port", type=int, default=8778, help="the brokers' Jolokia port")
    parser.add_argument(
        "--node-identity",
        type=Path,
        required=True,
        help="folder of a node certificate (ca.pem, node.crt, node.key: a local VM's tls/), "
        "the one identity the brokers' Jolokia answers",
    )
    add_client_dir_argument(parser)
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    from planner.pki.authority import Role
    from planner.pki.files import IdentityFiles
    from planner.pki.tls import client_context

    identity = IdentityFiles(args.node_identity, Role.NODE)
    if not identity.exists():
        print(
            f"kaas: error: --node-identity {args.node_identity}: no node certificate there",
            file=sys.stderr,
        )
        return 1
    try:
        client = admin_client_in(
            args.client_dir or default_home() / "client", args.bootstrap_server
        )
        layout = read_live_layout(
            client, args.jolokia_port, jolokia_context=client_context(identity)
        )
    except (LiveLayoutError, PkiError) as exc:
        print(f"kaas: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(layout, indent=1) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    print(
        f"{len(layout['brokers'])} brokers, {len(layout['partitions'])} partitions",
        file=sys.stderr,
    )
    return 0


def missing_extra_message(module: str | None) -> str | None:
    """The error for a command whose plane's install extra is missing, or None when the
    missing module is not one an extra brings."""
    extra = EXTRA_OF_PACKAGE.get((module or "").split(".")[0])
    if extra is None:
        return None
    return (
        f"this command needs the {extra} extra, which is not installed (no module "
        f"{module!r}): pip install 'kaas[{extra}]'"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc.name)
        if message is None:
            raise
        print(f"kaas: error: {message}", file=sys.stderr)
        return 1


def _main(argv: list[str]) -> int:
    # `plan` and `analytics` belong to their packages' own command lines, but for `plan
    # export`, which reads a live cluster.
    if argv[:2] == ["plan", "export"]:
        _keep_library_lines_off_the_terminal(default_home())
        return _plan_export(argv[2:])
    if argv and argv[0] == "plan":
        from planner.cli import main as plan_main

        return plan_main(argv[1:])
    if argv and argv[0] == "dashboards":
        from management_plane.monitoring.grafana import main as dashboards_main

        return dashboards_main(argv[1:])
    if argv and argv[0] == "analytics":
        from analytics.cli import main as analytics_main

        _keep_library_lines_off_the_terminal(default_home(), spark=True)
        return analytics_main(argv[1:])
    args = _parser().parse_args(argv)
    configure_logging(args.verbose)
    if args.command not in SERVICE_COMMANDS:
        _keep_library_lines_off_the_terminal(getattr(args, "home", None) or default_home())
    try:
        return _run(args)
    except KaasError as exc:
        print(f"kaas: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kaas: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
