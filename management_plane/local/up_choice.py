"""What `kaas up` does with the cluster already recorded in its folder (pure).

Running `kaas up` (or `make demo`) again must work whatever the last run left: a cluster
that runs and serves is reused, a stopped one is started from its own record (which may
differ from a fresh layout: the demo replaces a VM), and one that is partly running or
runs without serving is stopped and replaced. A cluster of another size or on other
addresses is refused rather than thrown away: the user asked for something else. So is
a cluster made by a release before TLS (no cluster CA in its folder): starting it with
this release's secured files would fail obscurely, and replacing it would delete its data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from management_plane.errors import KaasError


class UpChoice(Enum):
    CREATE = "create"  # nothing recorded: a new cluster
    REUSE = "reuse"  # every process alive and the cluster serves
    START = "start"  # every process stopped: the recorded cluster starts again
    REPLACE = "replace"  # partly running or not serving: stopped, deleted, created anew


@dataclass(frozen=True)
class RecordedCluster:
    """What `kaas up` found in the cluster's folder."""

    vm_count: int
    address_base: str  # the first three octets of the VMs' addresses
    processes_alive: int
    processes_expected: int
    serving_problem: str | None = None
    """Why a cluster whose processes all run does not serve; None when it serves (or when
    not every process runs, and so it was not probed)."""
    name: str = "local"
    has_authority: bool = True
    """Whether its folder holds the cluster's CA: every cluster made since TLS does."""


class ClusterPredatesTls(KaasError):
    """A recorded cluster made by a release before TLS: plaintext listeners, ZooKeeper
    without TLS or ACLs. Refused by name rather than started, replaced or half-converted."""


@dataclass(frozen=True)
class UpDecision:
    choice: UpChoice
    reason: str


def address_base_of(address: str) -> str:
    return address.rsplit(".", 1)[0]


def decide_up(
    recorded: RecordedCluster | None, nodes: int, address_base: str, home: Path
) -> UpDecision:
    """Refuses (KaasError) a recorded cluster of another size or on other addresses."""
    if recorded is None:
        return UpDecision(UpChoice.CREATE, f"no cluster at {home}")
    if not recorded.has_authority:
        raise ClusterPredatesTls(
            f"cluster {recorded.name!r} at {home} predates TLS: it was made by a KaaS release "
            "before TLS (plaintext Kafka listeners, ZooKeeper without TLS or ACLs; no cluster "
            f"CA in {home}/secrets/ca). This release runs secured clusters only and does not "
            "convert a local cluster in place: copy out what you need, then "
            f"`kaas down --purge --home {home}` deletes it and `kaas up` makes a secured one"
        )
    if recorded.vm_count != nodes or recorded.address_base != address_base:
        raise KaasError(
            f"a cluster of {recorded.vm_count} VMs on {recorded.address_base}.x already lives at "
            f"{home}, not the {nodes} VMs on {address_base}.x asked for: `kaas up --nodes "
            f"{recorded.vm_count} --address-base {recorded.address_base}` uses it, "
            f"`kaas down --purge --home {home}` deletes it"
        )
    alive, expected = recorded.processes_alive, recorded.processes_expected
    if alive == 0:
        return UpDecision(UpChoice.START, "it was stopped")
    if alive < expected:
        return UpDecision(
            UpChoice.REPLACE, f"it was partly running ({alive} of {expected} processes)"
        )
    if recorded.serving_problem is not None:
        return UpDecision(
            UpChoice.REPLACE, f"its processes ran but it did not serve: {recorded.serving_problem}"
        )
    return UpDecision(UpChoice.REUSE, "it was running and serving")
