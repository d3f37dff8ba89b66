"""`kaas-agent`: the daemon on every broker VM."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import threading
from pathlib import Path

from agent.settings import AgentSettings, SettingsError, load_settings, settings_to_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kaas-agent", description="KaaS agent: converges this VM toward the cluster spec"
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", type=Path, help="settings file (JSON)")
    group.add_argument(
        "--validate-config", type=Path, metavar="FILE", help="check a settings file and exit"
    )
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument(
        "--boot-identity",
        action="store_true",
        help="redeem the VM's boot ticket for its certificate (if it has one) and exit",
    )
    args = parser.parse_args(argv)

    path = args.validate_config or args.config
    try:
        settings = load_settings(path)
    except SettingsError as exc:
        print(f"kaas-agent: error: {exc}", file=sys.stderr)
        return 1
    if args.validate_config:
        print(json.dumps(settings_to_json(settings), indent=2))
        print(f"kaas-agent: {path} is valid", file=sys.stderr)
        return 0

    if args.boot_identity:
        return boot_identity(settings)

    from sdnotify import SystemdNotifier

    from agent.agent_log import apply_limits, configure_agent_logging
    from agent.boot_identity import BootIdentityError, ensure_identity

    log_file = configure_agent_logging(settings.logs_dir)
    # A crash inside a C library (librdkafka) leaves its Python stack on stderr, which the
    # service manager keeps.
    faulthandler.enable()

    from agent.wiring import build_agent

    notifier = SystemdNotifier()
    try:
        # First start on a VM handed a boot ticket: its identity before anything uses it.
        ensure_identity(
            settings.boot_ticket, settings.identity, (settings.address,), settings.boot_timeout_s
        )
        agent = build_agent(settings)
    except (SettingsError, BootIdentityError) as exc:
        print(f"kaas-agent: error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()
        agent.wake.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        agent.start()
    except Exception as exc:
        print(f"kaas-agent: error: cannot start: {exc}", file=sys.stderr)
        agent.close()
        return 1
    if args.once:
        print(agent.run_cycle())
        agent.close()
        return 0
    ready = [False]

    def on_cycle(sentence: str) -> None:
        spec = agent.memory.last_good_spec
        if spec is not None and log_file is not None:
            apply_limits(log_file, spec.log_limits)
        if not ready[0]:
            notifier.notify("READY=1")
            ready[0] = True
        notifier.notify(f"WATCHDOG=1\nSTATUS={sentence[:200]}")

    try:
        agent.run_forever(stop, on_cycle)
    finally:
        agent.close()
    if agent.reload_requested:
        # The same process (pid, service unit, parent) with its clients made anew.
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main())


def boot_identity(settings: AgentSettings) -> int:
    """kaas-boot-identity.service: the VM's identity from its boot ticket, before the agent."""
    from agent.boot_identity import BootIdentityError, ensure_identity

    try:
        fetched = ensure_identity(
            settings.boot_ticket, settings.identity, (settings.address,), settings.boot_timeout_s
        )
    except BootIdentityError as exc:
        print(f"kaas-agent: error: {exc}", file=sys.stderr)
        return 1
    what = "installed from the boot ticket" if fetched else "already in place (no ticket to redeem)"
    print(f"kaas-agent: identity {what}: {settings.identity.directory}")
    return 0
