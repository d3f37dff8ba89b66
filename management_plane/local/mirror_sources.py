"""A local cluster's mirror flows' source credentials: kept once in the cluster's
`secrets/mirror/<flow>/` and written into each VM's own folder
(planner.contracts.mirror_flow's `source_credentials_dir`), the one a VM's agent reads, so a
VM added after the flow was made (a replacement, a scale-up, `kaas vm add`) gets them when
it is made, before its agent starts, as it gets its own identity.

Every file is 0600 from creation (planner.private_files).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from planner.contracts.mirror_flow import (
    SOURCE_CA_FILE,
    SOURCE_CLIENT_FILE,
    source_credentials_dir,
    validate_flow_name,
)
from planner.private_files import private_dir, write_private

_FILES = (SOURCE_CLIENT_FILE, SOURCE_CA_FILE)


class MirrorSourceStore:
    def __init__(self, cluster_home: Path) -> None:
        self.kept = cluster_home / "secrets" / "mirror"

    def _write(self, folder: Path, client_pem: bytes, ca_pem: bytes) -> None:
        private_dir(folder)
        write_private(folder / SOURCE_CLIENT_FILE, client_pem)
        write_private(folder / SOURCE_CA_FILE, ca_pem)

    def deliver(self, vm_dirs: Iterable[Path], flow: str, client_pem: bytes, ca_pem: bytes) -> None:
        """Keep the flow's credentials and write them into every VM's folder."""
        self._write(self.kept / validate_flow_name(flow), client_pem, ca_pem)
        for vm_dir in vm_dirs:
            self._write(source_credentials_dir(vm_dir, flow), client_pem, ca_pem)

    def withdraw(self, vm_dirs: Iterable[Path], flow: str) -> None:
        """Remove them from every VM, then the kept copy (gone already: nothing to do)."""
        for vm_dir in vm_dirs:
            shutil.rmtree(source_credentials_dir(vm_dir, flow), ignore_errors=True)
        shutil.rmtree(self.kept / validate_flow_name(flow), ignore_errors=True)

    def flows(self) -> list[str]:
        """The flows whose credentials the cluster keeps (both files present)."""
        if not self.kept.is_dir():
            return []
        return sorted(
            d.name for d in self.kept.iterdir() if all((d / name).is_file() for name in _FILES)
        )

    def provision(self, vm_dir: Path) -> list[str]:
        """Write every kept flow's credentials into a new VM's folder; the flows written."""
        flows = self.flows()
        for flow in flows:
            kept = self.kept / flow
            self._write(
                source_credentials_dir(vm_dir, flow),
                (kept / SOURCE_CLIENT_FILE).read_bytes(),
                (kept / SOURCE_CA_FILE).read_bytes(),
            )
        return flows
