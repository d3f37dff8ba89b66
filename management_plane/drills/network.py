"""Network faults' rules, with nftables: one table of KaaS's own per isolated address, so a
heal deletes exactly what the drill added and nothing of anyone else's rule set.

A table's name carries the pid of the drill that made it (`kaas_drill_<pid>_<n>`): a drill
deletes its tables when it heals, when it is interrupted (SIGINT, SIGTERM), and at its start
deletes any table whose drill process is gone (killed with SIGKILL, so it could not).
The rule text is made by pure functions; `NftablesRules` only runs `nft`.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import shutil
import subprocess

import psutil
import structlog

from management_plane.drills.errors import DrillError

log = structlog.get_logger(__name__)

TABLE_PREFIX = "kaas_drill_"
_TABLE_NAME = re.compile(rf"^table inet ({TABLE_PREFIX}(\d+)_(\d+))$")


def table_name(pid: int, number: int) -> str:
    return f"{TABLE_PREFIX}{pid}_{number}"


def isolation_script(table: str, address: str) -> str:
    """An nft script that creates `table` dropping every packet from or to `address` whose
    other end is another address (loopback traffic passes the input hook once, so one chain
    sees both directions)."""
    return _script(table, address, "drop")


def loss_script(table: str, address: str, loss_percent: int) -> str:
    """Like `isolation_script`, dropping `loss_percent` of those packets at random."""
    if not 1 <= loss_percent <= 99:
        raise DrillError(f"loss must be 1 to 99 percent; got {loss_percent}")
    return _script(table, address, f"numgen random mod 100 < {loss_percent} drop")


def _script(table: str, address: str, verdict: str) -> str:
    parsed = ipaddress.ip_address(address)
    if parsed.version != 4 or not parsed.is_loopback:
        raise DrillError(f"a drill cuts off only loopback addresses (127.0.0.0/8); got {address!r}")
    if not re.fullmatch(r"[a-z0-9_]+", table):
        raise DrillError(f"nftables table name {table!r} must be lowercase letters, digits, _")
    return (
        f"table inet {table} {{\n"
        "  chain input {\n"
        "    type filter hook input priority -10; policy accept;\n"
        f"    ip saddr {address} ip daddr != {address} {verdict}\n"
        f"    ip daddr {address} ip saddr != {address} {verdict}\n"
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
        return None

    def listing(self) -> str:
        result = self._run("list", "tables")
        if result.returncode != 0:
            raise DrillError(f"nft list tables failed: {result.stderr.strip()}")
        return result.stdout

    def isolate(self, address: str) -> str:
        table = table_name(os.getpid(), next(self.numbers))
        return self._add(table, address, isolation_script(table, address))

    def degrade(self, address: str, loss_percent: int) -> str:
        table = table_name(os.getpid(), next(self.numbers))
        return self._add(table, address, loss_script(table, address, loss_percent))

    def _add(self, table: str, address: str, script: str) -> str:
        # Remembered before it exists: an interrupt between the two still removes it.
        self.made.add(table)
        result = self._run("-f", "-", script=script)
        if result.returncode != 0:
            self.made.discard(table)
            raise DrillError(f"cannot add nftables table {table}: {result.stderr.strip()}")
        log.info("network_rules_added", table=table, address=address)
        return table

    def remove(self, handle: str) -> None:
        if handle not in {name for name, _ in drill_tables(self.listing())}:
            self.made.discard(handle)
            return
        result = self._run("delete", "table", "inet", handle)
        if result.returncode != 0:
            raise DrillError(f"cannot delete nftables table {handle}: {result.stderr.strip()}")
        self.made.discard(handle)
        log.info("network_rules_removed", table=handle)

    def remove_all(self) -> None:
        """Every table this object made and still holds (the interrupted drill's cleanup)."""
        for table in sorted(self.made):
            self.remove(table)

    def remove_stale(self) -> list[str]:
        """Delete the tables of drills that are no longer running."""
        alive = {p.pid for p in psutil.process_iter()}
        stale = stale_tables(self.listing(), alive)
        for table in stale:
            self.remove(table)
        return stale
