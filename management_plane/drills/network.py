"""Network faults' rules, with nftables: one table of KaaS's own per isolated address, so a
heal deletes exactly what the drill added and nothing of anyone else's rule set.

Packets to the VM's address are easy to match, but what the VM's processes send to another
VM leaves from 127.0.0.1 (the kernel's source for every loopback route), like everyone's.
So the VM's processes are moved for the fault into a cgroup (v2) of the table's name, and the
table's output chain matches their sockets by that cgroup; heal moves them back (with any
child they started meanwhile) and removes the cgroup.

A table's (and its cgroup's) name carries the pid of the drill that made it (`kaas_drill_<pid>_<n>`): a drill
deletes its tables when it heals, when it is interrupted (SIGINT, SIGTERM), and at its start
deletes any table whose drill process is gone (killed with SIGKILL, so it could not).
The rule text is made by pure functions; `NftablesRules` only runs `nft`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import psutil
import structlog

from management_plane.drills.errors import DrillError

log = structlog.get_logger(__name__)

TABLE_PREFIX = "kaas_drill_"
# Where nft resolves a `socket cgroupv2` path from, and where the cgroup v2 hierarchy is:
# /sys/fs/cgroup itself on most hosts, its unified/ folder beside the v1 controllers here.
NFT_CGROUP_BASE = Path("/sys/fs/cgroup")
VM_CONNECTION_MARK = "0x6b616173"  # "kaas"
CGROUP2_CANDIDATES = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
_TABLE_NAME = re.compile(rf"^table inet ({TABLE_PREFIX}(\d+)_(\d+))$")


def table_name(pid: int, number: int) -> str:
    return f"{TABLE_PREFIX}{pid}_{number}"


def isolation_script(
    table: str, address: str, cgroup: str, client_ports: Iterable[int] = ()
) -> str:
    """An nft script that creates `table` dropping every packet from or to `address` whose
    other end is another address (loopback traffic passes the input hook once, so one chain
    sees both directions), and every packet the processes of `cgroup` (a path below
    /sys/fs/cgroup, a cgroup at level 1 of the v2 hierarchy) send to another address."""
    return _script(table, address, cgroup, client_ports, "drop")


def loss_script(
    table: str, address: str, cgroup: str, loss_percent: int, client_ports: Iterable[int] = ()
) -> str:
    """Like `isolation_script`, dropping `loss_percent` of those packets at random."""
    if not 1 <= loss_percent <= 99:
        raise DrillError(f"loss must be 1 to 99 percent; got {loss_percent}")
    return _script(
        table, address, cgroup, client_ports, f"numgen random mod 100 < {loss_percent} drop"
    )


def _script(
    table: str, address: str, cgroup: str, client_ports: Iterable[int], verdict: str
) -> str:
    parsed = ipaddress.ip_address(address)
    if parsed.version != 4 or not parsed.is_loopback:
        raise DrillError(f"a drill cuts off only loopback addresses (127.0.0.0/8); got {address!r}")
    if not re.fullmatch(r"[a-z0-9_]+", table):
        raise DrillError(f"nftables table name {table!r} must be lowercase letters, digits, _")
    if not re.fullmatch(r"[a-z0-9_/]+", cgroup):
        raise DrillError(f"cgroup path {cgroup!r} must be lowercase letters, digits, _ and /")
    # The VM's client sockets send from 127.0.0.1, like everyone's (its server sockets from
    # its address). A connection one of them sends on gets a conntrack mark: a socket made
    # after the fault started is known by its cgroup (a socket keeps the cgroup it was made
    # in), one made before by its local port (`client_ports`, read when the fault starts).
    # Marked connections may stay on the VM (its clients to its own servers); everything
    # else from or to the VM's address, and its clients' traffic to any other address, is
    # dropped: the VM keeps talking to itself, and to no one else.
    ports = sorted(set(client_ports))
    if any(not 0 < port < 65536 for port in ports):
        raise DrillError(f"client ports must be 1 to 65535; got {ports}")
    mark = VM_CONNECTION_MARK
    vm_socket = f'socket cgroupv2 level 1 "{cgroup}"'
    port_set = (
        "  set vm_client_ports {\n    type inet_service\n"
        f"    elements = {{ {', '.join(str(p) for p in ports)} }}\n  }}\n"
        if ports
        else "  set vm_client_ports {\n    type inet_service\n  }\n"
    )
    return (
        f"table inet {table} {{\n"
        f"{port_set}"
        "  chain output {\n"
        "    type filter hook output priority -10; policy accept;\n"
        f"    {vm_socket} ip saddr != {address} ct mark set {mark}\n"
        f"    ip saddr != {address} tcp sport @vm_client_ports ct mark set {mark}\n"
        f"    ct mark {mark} ip saddr != {address} ip daddr != {address} {verdict}\n"
        "  }\n"
        "  chain input {\n"
        "    type filter hook input priority -10; policy accept;\n"
        f"    ip saddr {address} tcp dport @vm_client_ports accept\n"
        f"    ip daddr {address} tcp sport @vm_client_ports accept\n"
        f"    ct mark {mark} ip saddr != {address} ip daddr != {address} {verdict}\n"
        f"    ip saddr != {address} ip daddr != {address} tcp dport @vm_client_ports {verdict}\n"
        f"    ct mark != {mark} ip daddr {address} ip saddr != {address} {verdict}\n"
        f"    ct mark != {mark} ip saddr {address} ip daddr != {address} {verdict}\n"
        "  }\n"
        "}\n"
    )


def drill_tables(listing: str) -> list[tuple[str, int]]:
    """KaaS's drill tables in `nft list tables` output, each with the pid that made it."""
    tables = []
    for line in listing.splitlines():
        match = _TABLE_NAME.match(line.strip())
        if match:
            tables.append((match.group(1), int(match.group(2))))
    return tables


def stale_tables(listing: str, alive: set[int]) -> list[str]:
    """Tables whose drill process is no longer running."""
    return [name for name, pid in drill_tables(listing) if pid not in alive]


class NftablesRules:
    """Runs `nft`; every table it makes is remembered until removed."""

    def __init__(self, nft: str = "nft") -> None:
        self.nft = nft
        self.numbers = itertools.count(1)
        self.made: set[str] = set()
        self.cgroup_root = next((p for p in CGROUP2_CANDIDATES if _is_cgroup2(p)), None)
        self.origins: dict[int, Path] = {}  # pid -> the cgroup it was in before a fault

    def _run(self, *args: str, script: str | None = None) -> subprocess.CompletedProcess[str]:
        binary = shutil.which(self.nft)
        if binary is None:
            raise DrillError(f"{self.nft} is not installed: install nftables for network drills")
        return subprocess.run(
            [binary, *args], input=script, capture_output=True, text=True, timeout=30, check=False
        )

    def problem(self) -> str | None:
        if shutil.which(self.nft) is None:
            return "network rules cannot be set here: nft (nftables) is not installed"
        result = self._run("list", "tables")
        if result.returncode != 0:
            return f"network rules cannot be set here: nft list tables: {result.stderr.strip()}"
        if self.cgroup_root is None:
            return "network rules cannot be set here: no cgroup v2 hierarchy under /sys/fs/cgroup"
        return None

    def listing(self) -> str:
        result = self._run("list", "tables")
        if result.returncode != 0:
            raise DrillError(f"nft list tables failed: {result.stderr.strip()}")
        return result.stdout

    def _cgroup(self, table: str) -> Path:
        if self.cgroup_root is None:
            raise DrillError("no cgroup v2 hierarchy under /sys/fs/cgroup")
        return self.cgroup_root / table

    def isolate(self, address: str, pids: Iterable[int]) -> str:
        pids = tuple(pids)
        table = table_name(os.getpid(), next(self.numbers))
        cgroup = self._cgroup(table).relative_to(NFT_CGROUP_BASE).as_posix()
        ports = client_ports(pids, address)
        return self._add(table, address, pids, isolation_script(table, address, cgroup, ports))

    def degrade(self, address: str, pids: Iterable[int], loss_percent: int) -> str:
        pids = tuple(pids)
        table = table_name(os.getpid(), next(self.numbers))
        cgroup = self._cgroup(table).relative_to(NFT_CGROUP_BASE).as_posix()
        ports = client_ports(pids, address)
        script = loss_script(table, address, cgroup, loss_percent, ports)
        return self._add(table, address, pids, script)

    def _add(self, table: str, address: str, pids: Iterable[int], script: str) -> str:
        # Remembered before it exists: an interrupt between the two still removes it.
        self.made.add(table)
        try:
            group = self._cgroup(table)
            group.mkdir(exist_ok=True)
            for pid in pids:
                self.origins.setdefault(pid, _cgroup_of(pid, group.parent))
                _move(pid, group)
            result = self._run("-f", "-", script=script)
            if result.returncode != 0:
                raise DrillError(f"cannot add nftables table {table}: {result.stderr.strip()}")
        except BaseException:
            self.remove(table)
            raise
        log.info("network_rules_added", table=table, address=address, cgroup=str(group))
        return table

    def remove(self, handle: str) -> None:
        """Delete the table, then move the cgroup's processes back where the drill found
        them (the hierarchy's root) and delete the cgroup."""
        if handle in {name for name, _ in drill_tables(self.listing())}:
            result = self._run("delete", "table", "inet", handle)
            if result.returncode != 0:
                raise DrillError(f"cannot delete nftables table {handle}: {result.stderr.strip()}")
            log.info("network_rules_removed", table=handle)
        if self.cgroup_root is not None:
            _remove_cgroup(self.cgroup_root / handle, self.cgroup_root, self.origins)
        self.made.discard(handle)

    def remove_all(self) -> None:
        """Every table this object made and still holds (the interrupted drill's cleanup)."""
        for table in sorted(self.made):
            self.remove(table)

    def remove_stale(self) -> list[str]:
        """Delete the tables of drills that are no longer running."""
        alive = {p.pid for p in psutil.process_iter()}
        stale = stale_tables(self.listing(), alive)
        if self.cgroup_root is not None:
            groups = "\n".join(
                f"table inet {p.name}" for p in self.cgroup_root.glob(f"{TABLE_PREFIX}*")
            )
            stale += [t for t in stale_tables(groups, alive) if t not in stale]
        for table in stale:
            self.remove(table)
        return stale


def client_ports(pids: Iterable[int], address: str) -> set[int]:
    """The local ports of the processes' open TCP connections made from another address
    than the VM's own (their client sockets)."""
    ports: set[int] = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(c.laddr.port for c in connections if c.raddr and c.laddr.ip != address)
    return ports


def _is_cgroup2(path: Path) -> bool:
    return (path / "cgroup.controllers").is_file() and (path / "cgroup.procs").is_file()


def _move(pid: int, group: Path) -> None:
    # A process gone meanwhile has nothing left to cut off.
    with contextlib.suppress(ProcessLookupError):
        (group / "cgroup.procs").write_text(str(pid))


def _cgroup_of(pid: int, root: Path) -> Path:
    """The v2 cgroup a process is in (its `0::` line), as a folder under `root`."""
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return root / line[3:].lstrip("/")
    except OSError:
        pass
    return root


def _remove_cgroup(group: Path, root: Path, origins: dict[int, Path]) -> None:
    """Every process of `group` back to where it was (a child started meanwhile: the root),
    then the cgroup deleted."""
    if not group.is_dir():
        return
    # Until the cgroup is empty: a process may start a child while it is being emptied.
    for _ in range(20):
        pids = [int(line) for line in (group / "cgroup.procs").read_text().split()]
        if not pids:
            break
        for pid in pids:
            origin = origins.pop(pid, root)
            _move(pid, origin if origin.is_dir() else root)
    group.rmdir()
