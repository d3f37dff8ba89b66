"""How an EC2 VM gets its identity without a secret in its user data, and where the aws
provider keeps each cluster's CA.

User data is readable by anyone allowed DescribeInstanceAttribute, so it carries only a boot
ticket (planner/contracts/boot_ticket.py): a one-time token minted for the VM's address, the
management API's address and that API's CA certificate. The VM's agent redeems it at its
first start (agent/boot_identity.py) for a certificate of a key it made itself.

The cluster CAs live in the service's home, `aws/<cluster>/secrets/ca` (0700 folders, keys
0600), laid out as the local provider lays out a cluster's folder, so rotation's staging and
promotion are the same functions.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from management_plane.errors import KaasError
from management_plane.local import tls
from management_plane.providers.base import ProviderError
from management_plane.providers.home_authority import HomeAuthorities
from planner.contracts.boot_ticket import BootTicket
from planner.contracts.fields import ContractError
from planner.contracts.paths import validate_cluster_name
from planner.pki.authority import Authority, create_authority
from planner.pki.files import has_authority, load_authority, write_authority
from planner.private_files import private_dir

DEFAULT_BOOT_TOKEN_TTL_S = 3600.0
"""Long enough for an instance to start and boot; the token is spent at its first use."""


class MintsBootTokens(Protocol):
    """management_plane.security.boot_tokens.BootTokens, as the provider uses it."""

    def mint(self, cluster: str, address: str, now: float, ttl_s: float = ...) -> str: ...

    def bind_address(self, token: str, address: str) -> None: ...


@dataclass(frozen=True)
class BootIssuer:
    """Mints a VM's boot ticket: the token store, and the API as the VMs reach it."""

    tokens: MintsBootTokens
    api_url: str
    """https://HOST:PORT the VMs reach the management API at (not the service's loopback)."""
    api_ca: Callable[[], str]
    """The CA certificate(s) of the API's server certificate, PEM (read when a VM is made:
    the service writes its certificate at start)."""
    ttl_s: float = DEFAULT_BOOT_TOKEN_TTL_S
    clock: Callable[[], float] = time.time

    def ticket(self, cluster: str, address: str) -> BootTicket:
        """A ticket for a VM of `cluster` at `address` (UNBOUND_ADDRESS: bound after launch)."""
        try:
            token = self.tokens.mint(cluster, address, self.clock(), self.ttl_s)
            return BootTicket(token=token, api_url=self.api_url, api_ca_pem=self.api_ca())
        except (KaasError, ContractError, OSError) as exc:
            raise ProviderError(f"VM for cluster {cluster}: no boot ticket ({exc})") from None

    def bind(self, ticket: BootTicket, address: str) -> None:
        try:
            self.tokens.bind_address(ticket.token, address)
        except KaasError as exc:
            raise ProviderError(f"boot ticket for {address}: {exc}") from None


def file_reader(path: Path) -> Callable[[], str]:
    return lambda: path.read_text()


class AwsClusterSecrets(HomeAuthorities):
    """The CA of each aws cluster and the management plane's identity of it, in the
    service's home (the HoldsClusterAuthority capability)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def cluster_home(self, cluster: str) -> Path:
        try:
            validate_cluster_name(cluster)
        except ValueError as exc:
            raise ProviderError(str(exc)) from None
        return private_dir(self.home / "aws" / cluster)

    def cluster_authority(self, cluster: str) -> Authority:
        """The cluster's CA, made at first use (its first VM's boot ticket) and kept."""
        directory = tls.authority_dir_in(self.cluster_home(cluster))
        if not has_authority(directory):
            write_authority(directory, create_authority(cluster, dt.datetime.now(dt.UTC)))
        return load_authority(directory)
