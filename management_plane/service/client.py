"""The `kaas` command line's side of the API: an HTTP client (standard library only) and the
`kaas cluster ...`, `kaas tenant ...`, `kaas topic ...`, `kaas mirror ...` and `kaas op ...`
commands."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from management_plane.errors import KaasError
from management_plane.mirror.cli import add_mirror_commands, run_mirror
from management_plane.service.tls import api_client_context, api_trust_bundle
from planner.pki.client_settings import TenantClient

DEFAULT_URL = "https://127.0.0.1:8080"


def default_service_home() -> Path:
    return Path(os.environ.get("KAAS_SERVICE_HOME", str(Path.home() / ".kaas" / "service")))


class ApiClient:
    def __init__(self, url: str, key: str, trust_bundle: Path) -> None:
        """`trust_bundle`: the service's CA certificate (`tls/ca.pem` in its home), the one
        the API's certificate is verified against."""
        self.url = url.rstrip("/")
        self.key = key
        self.context = api_client_context(trust_bundle)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"X-API-Key": self.key, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60, context=self.context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())
                message = f"{error['message']} ({exc.code} {error['code']})"
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {exc.code}"
            raise KaasError(message) from None
        except urllib.error.URLError as exc:
            raise KaasError(
                f"cannot reach the management plane at {self.url} ({exc.reason}): is `kaas serve` running?"
            ) from None


def tenant_client_config(created: dict[str, Any]) -> dict[str, str | int | float | bool]:
    """librdkafka settings from the onboarding answer (the password is shown only there)."""
    connection = created["tenant"]["connection"]
    return TenantClient(
        connection["bootstrap_servers"],
        connection["username"],
        created["password"],
        connection["ca_certificate"],
    ).librdkafka()


def add_api_arguments(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that say which management plane to call and with which key."""
    sub.add_argument(
        "--api-url",
        default=os.environ.get("KAAS_API_URL", DEFAULT_URL),
        help=f"the management plane (default: $KAAS_API_URL or {DEFAULT_URL})",
    )
    sub.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help="file holding the API key (default: $KAAS_API_KEY, else SERVICE_HOME/admin-key)",
    )
    sub.add_argument(
        "--api-ca",
        type=Path,
        default=None,
        help="the service's CA certificate the API is verified with "
        "(default: $KAAS_API_CA, else SERVICE_HOME/tls/ca.pem)",
    )
    return sub


def add_commands(commands: Any) -> None:
    with_api = add_api_arguments

    serve = commands.add_parser("serve", help="run the management plane (HTTP API)")
    serve.add_argument(
        "--service-home",
        type=Path,
        default=None,
        help="default: $KAAS_SERVICE_HOME or ~/.kaas/service",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument(
        "--database-url", default=None, help="SQLAlchemy URL (default: SQLite in the service home)"
    )
    serve.add_argument(
        "--local-address-base",
        action="append",
        default=None,
        help="a /24 of loopback the local provider may give a cluster (repeatable; default 127.0.2..127.0.10)",
    )

    serve.add_argument(
        "--provider",
        choices=("local", "aws"),
        default="local",
        help="where VMs run (default local)",
    )
    serve.add_argument(
        "--aws-config", type=Path, default=None, help="TOML file of the aws provider's settings"
    )
    serve.add_argument("--aws-region", default=None)
    serve.add_argument("--aws-image", default=None, help="AMI id of the Packer image")
    serve.add_argument(
        "--aws-subnet",
        action="append",
        default=[],
        metavar="ZONE=SUBNET_ID",
        help="the broker subnet of a zone (repeatable; the zones clusters may use)",
    )
    serve.add_argument("--aws-endpoint-url", default=None, help="another EC2 endpoint (moto)")
    serve.add_argument(
        "--aws-zookeeper-hosts", default=None, help="host:port list the brokers' agents join"
    )
    serve.add_argument(
        "--aws-api-url",
        default=None,
        help="https://HOST:PORT at which the VMs reach this service (their boot tickets name it)",
    )
    serve.add_argument(
        "--aws-monitoring-address",
        default=None,
        help="IP of this host the VMs send statsd to (default: --aws-api-url's host)",
    )
    serve.add_argument(
        "--step-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="cap every operation step's timeout (default: 5-60 min per step)",
    )
    serve.add_argument(
        "--adopt-local-cluster",
        type=Path,
        action="append",
        default=None,
        metavar="HOME",
        help="also manage the `kaas up` cluster in this folder (repeatable; kaas up sets it)",
    )
    serve.add_argument(
        "--broker-loss-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="replace a VM whose agent and broker have both been gone this long "
        "(default 300; 0 turns broker-loss replacement off)",
    )
    serve.add_argument(
        "--alert-rules",
        type=Path,
        default=None,
        metavar="FILE",
        help="alert rules TOML (default: the rules KaaS ships, docs/monitoring.md)",
    )
    serve.add_argument(
        "--alert-webhook",
        default=os.environ.get("KAAS_ALERT_WEBHOOK_URL"),
        metavar="URL",
        help="send alerts to this PagerDuty Events API v2-shaped URL "
        "(default: $KAAS_ALERT_WEBHOOK_URL; none: alerts are recorded only)",
    )
    serve.add_argument(
        "--alert-routing-key-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="file holding the webhook's routing key (default: kaas)",
    )
    serve.add_argument(
        "--heartbeat",
        action="store_true",
        help="run the synthetic heartbeat: a heartbeat tenant per cluster producing and "
        "consuming through every broker (kaas up turns it on; docs/monitoring.md)",
    )
    serve.add_argument(
        "--no-engine",
        action="store_true",
        help="store operations without running them (API tests, maintenance)",
    )

    cluster = commands.add_parser("cluster", help="clusters of the management plane")
    actions = cluster.add_subparsers(dest="action", required=True)
    create = with_api(actions.add_parser("create", help="create a cluster"))
    create.add_argument("name")
    create.add_argument("--brokers", type=int, default=3)
    create.add_argument("--zones", default=None, help="comma-separated zones")
    create.add_argument("--instance-type", default=None)
    create.add_argument("--kafka-version", default=None)
    create.add_argument(
        "--controllers",
        type=int,
        default=None,
        help="KRaft (Kafka 4.x) only: the controller quorum's size, 1, 3 or 5 (default 3)",
    )
    create.add_argument("--config", action="append", default=[], help="KEY=VALUE broker config")
    create.add_argument("--wait", action="store_true", help="watch the operation to its end")
    _add_log_limit_arguments(create, "--log-")
    with_api(actions.add_parser("list", help="list clusters"))
    get = with_api(actions.add_parser("get", help="one cluster and its VMs"))
    get.add_argument("name")
    scale = with_api(actions.add_parser("scale", help="change the broker count"))
    scale.add_argument("name")
    scale.add_argument("--brokers", type=int, required=True)
    scale.add_argument("--batch-size", type=int, default=1)
    scale.add_argument("--wait", action="store_true")
    upgrade = with_api(
        actions.add_parser("upgrade", help="change the Kafka version by replacement")
    )
    upgrade.add_argument("name")
    upgrade.add_argument("--kafka-version", required=True)
    upgrade.add_argument("--batch-size", type=int, default=1)
    upgrade.add_argument("--wait", action="store_true")
    migrate = with_api(
        actions.add_parser(
            "migrate-to-kraft", help="migrate a Kafka 3.9 ZooKeeper-mode cluster to KRaft"
        )
    )
    migrate.add_argument("name")
    migrate.add_argument(
        "--rollback",
        action="store_true",
        help="return an unfinalised migration to ZooKeeper mode",
    )
    migrate.add_argument(
        "--no-finalize",
        action="store_true",
        help="stop before the finalisation (the controllers keep writing to ZooKeeper, "
        "so --rollback stays possible); run again without it to finalise",
    )
    migrate.add_argument("--wait", action="store_true")
    rotate = with_api(
        actions.add_parser(
            "rotate-certs",
            help="renew every VM's certificate (--ca: and the CA) by rolling restarts",
        )
    )
    rotate.add_argument("name")
    rotate.add_argument("--ca", action="store_true", help="replace the cluster's CA too")
    rotate.add_argument("--wait", action="store_true")
    secure = with_api(
        actions.add_parser(
            "secure",
            help="convert a cluster made before TLS (plaintext listeners) to TLS on every "
            "channel, by rolling phases with no loss",
        )
    )
    secure.add_argument("name")
    secure.add_argument("--wait", action="store_true")
    replace = with_api(actions.add_parser("replace", help="replace one VM immutably"))
    replace.add_argument("name")
    replace.add_argument("vm", help="VM id (e.g. vm2)")
    replace.add_argument("--wait", action="store_true")
    config = with_api(actions.add_parser("config", help="change broker configs"))
    config.add_argument("name")
    config.add_argument("settings", nargs="+", help="KEY=VALUE (KEY= removes it)")
    config.add_argument("--wait", action="store_true")
    logs = with_api(
        actions.add_parser("logs", help="bound each VM's Kafka and ZooKeeper log files")
    )
    logs.add_argument("name")
    _add_log_limit_arguments(logs, "--")
    logs.add_argument("--wait", action="store_true")
    delete = with_api(actions.add_parser("delete", help="delete a cluster and its VMs"))
    delete.add_argument("name")
    delete.add_argument("--wait", action="store_true")

    alerts = commands.add_parser("alerts", help="alerts of the management plane's clusters")
    alert_actions = alerts.add_subparsers(dest="action", required=True)
    alerts_list = with_api(
        alert_actions.add_parser("list", help="alerts pending, held or firing now")
    )
    alerts_list.add_argument("--cluster", default=None)
    alerts_history = with_api(
        alert_actions.add_parser("history", help="every alert state change, oldest first")
    )
    alerts_history.add_argument("--cluster", default=None)
    alerts_history.add_argument("--limit", type=int, default=50)

    tenant = commands.add_parser("tenant", help="tenants of a cluster (admin key)")
    tenant_actions = tenant.add_subparsers(dest="action", required=True)
    tenant_create = with_api(
        tenant_actions.add_parser(
            "create", help="onboard a tenant: prints its password and API key, once"
        )
    )
    tenant_create.add_argument("cluster")
    tenant_create.add_argument("name")
    tenant_create.add_argument(
        "--plan", default="small", help="small, medium, large, or a JSON plan object"
    )
    tenant_create.add_argument("--prefix", default=None, help="default: NAME.")
    tenant_list = with_api(tenant_actions.add_parser("list", help="a cluster's tenants"))
    tenant_list.add_argument("cluster")
    for action, text in (("get", "one tenant (its own key may)"), ("delete", "delete a tenant")):
        one = with_api(tenant_actions.add_parser(action, help=text))
        one.add_argument("cluster")
        one.add_argument("name")

    topic = commands.add_parser("topic", help="a tenant's topics (its own key or the admin key)")
    topic_actions = topic.add_subparsers(dest="action", required=True)
    topic_create = with_api(topic_actions.add_parser("create", help="create a topic"))
    topic_create.add_argument("cluster")
    topic_create.add_argument("tenant")
    topic_create.add_argument("name", help="starts with the tenant's prefix")
    topic_create.add_argument("--partitions", type=int, default=1)
    topic_create.add_argument("--replication-factor", type=int, default=None)
    topic_create.add_argument(
        "--config", action="append", default=[], help="KEY=VALUE (whitelisted topic configs)"
    )
    topic_list = with_api(topic_actions.add_parser("list", help="the tenant's topics"))
    topic_list.add_argument("cluster")
    topic_list.add_argument("tenant")
    topic_delete = with_api(topic_actions.add_parser("delete", help="delete a topic"))
    topic_delete.add_argument("cluster")
    topic_delete.add_argument("tenant")
    topic_delete.add_argument("name")

    add_mirror_commands(commands, with_api)

    op = commands.add_parser("op", help="operations of the management plane")
    op_actions = op.add_subparsers(dest="action", required=True)
    watch = with_api(op_actions.add_parser("watch", help="follow an operation to its end"))
    watch.add_argument("op_id", type=int)
    with_api(op_actions.add_parser("list", help="recent operations"))


def api_client(args: argparse.Namespace) -> ApiClient:
    """The client the options of `add_api_arguments` name."""
    return _client(args)


def _client(args: argparse.Namespace) -> ApiClient:
    key = os.environ.get("KAAS_API_KEY")
    key_file = args.api_key_file or default_service_home() / "admin-key"
    if args.api_key_file is not None or not key:
        try:
            key = key_file.read_text().strip()
        except OSError:
            raise KaasError(
                f"no API key: set KAAS_API_KEY or pass --api-key-file (tried {key_file})"
            ) from None
    ca = args.api_ca or Path(
        os.environ.get("KAAS_API_CA", str(api_trust_bundle(default_service_home())))
    )
    if not ca.exists():
        raise KaasError(
            f"no CA certificate of the service at {ca}: pass --api-ca or set KAAS_API_CA"
        )
    return ApiClient(args.api_url, key, ca)


def _config_pairs(pairs: list[str], allow_empty: bool) -> dict[str, str | None]:
    config: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise KaasError(f"{pair!r} is not KEY=VALUE")
        config[key] = value if value or not allow_empty else None
    return config


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done}/{total}"


def watch_operation(client: ApiClient, op_id: int, interval: float = 2.0, out: Any = None) -> int:
    out = out or sys.stdout
    last = None
    while True:
        op = client.call("GET", f"/v1/operations/{op_id}")
        line = f"op {op_id} {op['kind']} {_bar(op['steps_done'], len(op['steps']))} {op['status']}: {op['message']}"
        if line != last:
            print(line, file=out, flush=True)
            last = line
        if op["status"] in ("succeeded", "failed"):
            return 0 if op["status"] == "succeeded" else 1
        time.sleep(interval)


def _print_cluster(cluster: dict[str, Any]) -> None:
    spec = cluster["spec"]
    print(
        f"cluster {cluster['name']}: {cluster['status']}, Kafka {spec['kafka_version']}, "
        f"{spec['broker_count']} brokers, provider {cluster['provider']}"
    )
    print(f"bootstrap servers: {cluster['bootstrap_servers']}")
    if spec.get("draining_broker_ids"):
        print(f"draining brokers: {spec['draining_broker_ids']}")
    for vm in cluster["vms"]:
        broker = "-" if vm["broker_id"] is None else vm["broker_id"]
        print(
            f"  {vm['vm_id']:<24}{vm['address']:<14}{vm['zone']:<9}broker {broker!s:<4}{vm['state']}"
        )


def _alerts_command(client: Any, args: argparse.Namespace) -> int:
    query = f"?cluster={args.cluster}" if args.cluster else ""
    if args.action == "list":
        alerts = client.call("GET", f"/v1/alerts{query}")
        if not alerts:
            print("no alerts")
        for a in alerts:
            held = (
                f" (held until {time.strftime('%H:%M:%S', time.localtime(a['held_until']))})"
                if a["held_until"]
                else ""
            )
            print(
                f"{a['state']:<8} {a['severity']:<9} {a['cluster']:<16}{a['rule']:<30}"
                f"{a['subject']:<9} value {a['value']:g}{held}"
            )
        return 0
    separator = "&" if query else "?"
    for entry in client.call("GET", f"/v1/alerts/history{query}{separator}limit={args.limit}"):
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry["at"]))
        print(
            f"{at} {entry['state']:<8} {entry['severity']:<9} {entry['cluster']:<16}"
            f"{entry['rule']:<30}{entry['subject']:<9} value {entry['value']:g}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "serve":
        from management_plane.service.aws_config import load_aws_config, parse_subnet_options
        from management_plane.service.broker_loss import DEFAULT_THRESHOLD_S
        from management_plane.service.main import DEFAULT_LOCAL_ADDRESS_BASES, ServeSettings, serve

        aws = None
        if args.provider == "aws":
            aws = load_aws_config(
                args.aws_config,
                {
                    "region": args.aws_region,
                    "image": args.aws_image,
                    "endpoint_url": args.aws_endpoint_url,
                    "zookeeper_hosts": args.aws_zookeeper_hosts,
                    "api_url": args.aws_api_url,
                    "monitoring_address": args.aws_monitoring_address,
                    "subnets": parse_subnet_options(args.aws_subnet),
                },
            )
        elif (
            args.aws_config
            or args.aws_region
            or args.aws_subnet
            or args.aws_image
            or args.aws_api_url
            or args.aws_monitoring_address
        ):
            raise KaasError("the --aws-* options need --provider aws")
        return serve(
            ServeSettings(
                provider=args.provider,
                aws=aws,
                step_timeout_s=args.step_timeout,
                home=args.service_home or default_service_home(),
                host=args.host,
                port=args.port,
                database_url=args.database_url,
                local_address_bases=tuple(args.local_address_base or DEFAULT_LOCAL_ADDRESS_BASES),
                run_engine=not args.no_engine,
                adopt_local_clusters=tuple(args.adopt_local_cluster or ()),
                broker_loss_after_s=(
                    DEFAULT_THRESHOLD_S
                    if args.broker_loss_after is None
                    else args.broker_loss_after
                ),
                alert_rules_file=args.alert_rules,
                alert_webhook_url=args.alert_webhook,
                alert_routing_key_file=args.alert_routing_key_file,
                heartbeat=args.heartbeat,
            )
        )
    client = _client(args)
    if args.command == "alerts":
        return _alerts_command(client, args)
    if args.command == "tenant":
        return _tenant_command(client, args)
    if args.command == "mirror":
        return run_mirror(client, args, watch_operation)
    if args.command == "topic":
        return _topic_command(client, args)
    if args.command == "op":
        if args.action == "watch":
            return watch_operation(client, args.op_id)
        for entry in client.call("GET", "/v1/operations"):
            print(
                f"{entry['op_id']:>5} {entry['cluster']:<16}{entry['kind']:<22}"
                f"{entry['status']:<10}{entry['message']}"
            )
        return 0
    name = getattr(args, "name", None)
    op: dict[str, Any] | None = None
    if args.action == "list":
        for cluster in client.call("GET", "/v1/clusters"):
            spec = cluster["spec"]
            print(
                f"{cluster['name']:<20}{cluster['status']:<10}Kafka {spec['kafka_version']:<8}"
                f"{len(cluster['vms'])} VMs  {cluster['bootstrap_servers']}"
            )
        return 0
    if args.action == "get":
        _print_cluster(client.call("GET", f"/v1/clusters/{name}"))
        return 0
    if args.action == "create":
        body: dict[str, Any] = {
            "name": name,
            "broker_count": args.brokers,
            "instance_type": args.instance_type,
            "kafka_version": args.kafka_version,
            "broker_config": {k: v or "" for k, v in _config_pairs(args.config, False).items()},
        }
        if args.controllers is not None:
            body["kraft_controllers"] = args.controllers
        if args.zones:
            body["zones"] = [z.strip() for z in args.zones.split(",") if z.strip()]
        if args.max_file_mb is not None or args.files is not None:
            body["logs"] = _log_limits_body(args)
        op = client.call("POST", "/v1/clusters", body)
    elif args.action == "scale":
        op = client.call(
            "POST",
            f"/v1/clusters/{name}/scale",
            {"broker_count": args.brokers, "batch_size": args.batch_size},
        )
    elif args.action == "upgrade":
        op = client.call(
            "POST",
            f"/v1/clusters/{name}/upgrade",
            {"kafka_version": args.kafka_version, "batch_size": args.batch_size},
        )
    elif args.action == "migrate-to-kraft":
        op = client.call(
            "POST",
            f"/v1/clusters/{name}/migrate-to-kraft",
            {"rollback": args.rollback, "finalize": not args.no_finalize},
        )
    elif args.action == "replace":
        op = client.call("POST", f"/v1/clusters/{name}/replace", {"vm_id": args.vm})
    elif args.action == "secure":
        op = client.call("POST", f"/v1/clusters/{name}/secure")
    elif args.action == "rotate-certs":
        op = client.call("POST", f"/v1/clusters/{name}/rotate-certs", {"ca": args.ca})
    elif args.action == "config":
        op = client.call(
            "PATCH",
            f"/v1/clusters/{name}/config",
            {"broker_config": _config_pairs(args.settings, True)},
        )
    elif args.action == "logs":
        if args.max_file_mb is None and args.files is None:
            print("kaas cluster logs: give --max-file-mb, --files or both", file=sys.stderr)
            return 2
        op = client.call("PATCH", f"/v1/clusters/{name}/logs", _log_limits_body(args))
    elif args.action == "delete":
        op = client.call("DELETE", f"/v1/clusters/{name}")
    assert op is not None
    print(
        f"operation {op['op_id']}: {op['kind']} of {op['cluster']} queued ({len(op['steps'])} steps)"
    )
    if args.wait:
        return watch_operation(client, int(op["op_id"]))
    print(f"follow it with: kaas op watch {op['op_id']}")
    return 0


def _add_log_limit_arguments(parser: argparse.ArgumentParser, prefix: str) -> None:
    parser.add_argument(
        f"{prefix}max-file-mb",
        dest="max_file_mb",
        type=int,
        default=None,
        help="a log file rolls at this size (default 100)",
    )
    parser.add_argument(
        f"{prefix}files",
        dest="files",
        type=int,
        default=None,
        help="rolled log files kept beside the live one (default 10)",
    )


def _log_limits_body(args: argparse.Namespace) -> dict[str, int]:
    """The bounds given; the service fills the others with the defaults and checks them."""
    return {
        k: v for k, v in (("max_file_mb", args.max_file_mb), ("files", args.files)) if v is not None
    }


def _print_tenant(tenant: dict[str, Any]) -> None:
    plan = tenant["plan"]
    connection = tenant["connection"]
    print(
        f"tenant {tenant['name']} of cluster {tenant['cluster']}: {tenant['status']}, "
        f"prefix {tenant['prefix']}"
    )
    print(
        f"plan: {plan['max_topics']} topics, {plan['max_partitions']} partitions, "
        f"produce {plan['producer_byte_rate']} B/s, consume {plan['consumer_byte_rate']} B/s, "
        f"requests {plan['request_percentage']:g}% (per broker)"
    )
    if "storage_bytes" in plan:
        print(
            f"storage: {plan['storage_bytes']} bytes (replicas counted), a topic's default "
            f"retention.bytes {plan['retention_bytes']}"
        )
    print(f"bootstrap servers: {connection['bootstrap_servers']}")
    print(
        f"security.protocol={connection['security_protocol']} "
        f"sasl.mechanism={connection['sasl_mechanism']} sasl.username={connection['username']}"
    )
    print("ssl.ca.pem: the cluster CA, in the connection details' ca_certificate")


def _tenant_command(client: ApiClient, args: argparse.Namespace) -> int:
    base = f"/v1/clusters/{args.cluster}/tenants"
    if args.action == "list":
        for tenant in client.call("GET", base):
            print(
                f"{tenant['name']:<24}{tenant['status']:<10}prefix {tenant['prefix']:<20}"
                f"{tenant['plan']['max_topics']} topics max"
            )
        return 0
    if args.action == "get":
        _print_tenant(client.call("GET", f"{base}/{args.name}"))
        return 0
    if args.action == "delete":
        done = client.call("DELETE", f"{base}/{args.name}")
        print(f"operation {done['op_id']}: {done['message']}")
        return 0
    plan: Any = args.plan
    if plan.lstrip().startswith("{"):
        try:
            plan = json.loads(plan)
        except ValueError as exc:
            raise KaasError(f"--plan is not a plan name nor a JSON object: {exc}") from None
    created = client.call("POST", base, {"name": args.name, "plan": plan, "prefix": args.prefix})
    _print_tenant(created["tenant"])
    print(f"sasl.password={created['password']}")
    print(f"API key: {created['api_key']}")
    print("(the password and the API key are shown once; they are not stored in clear)")
    return 0


def _topic_command(client: ApiClient, args: argparse.Namespace) -> int:
    base = f"/v1/clusters/{args.cluster}/tenants/{args.tenant}/topics"
    if args.action == "list":
        for topic in client.call("GET", base):
            print(
                f"{topic['name']:<40}{topic['partitions']:>4} partitions  "
                f"replication factor {topic['replication_factor']}"
            )
        return 0
    if args.action == "delete":
        done = client.call("DELETE", f"{base}/{args.name}")
        print(f"operation {done['op_id']}: {done['message']}")
        return 0
    body = {
        "name": args.name,
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "configs": {k: v or "" for k, v in _config_pairs(args.config, False).items()},
    }
    topic = client.call("POST", base, body)
    print(
        f"topic {topic['name']} created: {topic['partitions']} partitions, "
        f"replication factor {topic['replication_factor']} (operation {topic['op_id']})"
    )
    return 0
