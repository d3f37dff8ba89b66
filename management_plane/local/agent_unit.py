"""The local provider's stand-in for the kaas-agent systemd unit (Restart=always,
RestartSec=5): runs the agent and starts it again when it exits on its own, so a local VM
heals a crashed agent as a real one does. It leads its process group; stopping, pausing or
killing it (management_plane/local/processes.py signals the group) does the same to the
agent, which also dies with it (PR_SET_PDEATHSIG) if the unit is killed alone."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

RESTART_S = 5.0
_PR_SET_PDEATHSIG = 1


def exit_reason(returncode: int) -> str:
    """How a child ended, in words, from Popen's return code."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _die_with_the_unit() -> None:
    # Runs in the child between fork and exec; the unit itself has no other thread.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def run_unit(command: Sequence[str], restart_s: float = RESTART_S) -> int:
    stopping = threading.Event()
    child: list[subprocess.Popen[bytes]] = []

    def on_stop(signum: int, frame: object) -> None:
        stopping.set()
        if child and child[-1].poll() is None:
            child[-1].send_signal(signum)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    while True:
        child.append(subprocess.Popen(list(command), preexec_fn=_die_with_the_unit))
        del child[:-1]
        returncode = child[-1].wait()
        if stopping.is_set():
            return returncode
        print(
            f"kaas-agent unit: the agent {exit_reason(returncode)}; starting it again in"
            f" {restart_s:g} s",
            file=sys.stderr,
            flush=True,
        )
        if stopping.wait(restart_s):
            return returncode


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "--":
        print("usage: python -m management_plane.local.agent_unit -- COMMAND...", file=sys.stderr)
        return 2
    return run_unit(args[1:])


if __name__ == "__main__":
    sys.exit(main())
