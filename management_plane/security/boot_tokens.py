"""One-time boot tokens: how a new VM gets its certificate without a private key in its user
data. The provider mints a token for the VM's address and puts only the token in the user
data; at boot the VM makes its key, and sends the public half with the token to the service
(`POST /v1/boot/identity`), which redeems the token and signs a certificate for that address. The aws provider mints them
(management_plane/providers/aws_boot.py); the agent redeems them at its first start
(agent/boot_identity.py).

A token is single-use (redeeming marks it used in the same UPDATE that checks it), expires,
and is stored as its SHA-256 only: the database never holds a token that would work.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Column, Engine, Float, MetaData, String, Table, insert, select, update

from management_plane.errors import ApiError, KaasError
from planner.pki.authority import Authority, PkiError
from planner.pki.rotation import sign_request

DEFAULT_TOKEN_TTL_S = 3600.0
UNBOUND_ADDRESS = ""
"""The address of a token minted before its VM has one (an EC2 instance without a broker
ENI gets its address at launch): such a token grants nothing until bound."""
T = TypeVar("T")

metadata = MetaData()

boot_tokens = Table(
    "boot_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("cluster", String(64), nullable=False),
    Column("address", String(64), nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("used_at", Float, nullable=True),
)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class BootTokenRefused(ApiError):
    """A token that is unknown, used or expired; the same answer for all three."""

    def __init__(self) -> None:
        super().__init__(
            403, "boot_token_refused", "the boot token is unknown, already used or expired"
        )


@dataclass(frozen=True)
class BootGrant:
    """What a redeemed token allows: a node certificate for this address of this cluster."""

    cluster: str
    address: str


class BootTokens:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)

    def mint(
        self, cluster: str, address: str, now: float, ttl_s: float = DEFAULT_TOKEN_TTL_S
    ) -> str:
        if ttl_s <= 0:
            raise KaasError(f"a boot token must live a positive time, got {ttl_s} s")
        token = secrets.token_urlsafe(32)
        with self.engine.begin() as connection:
            connection.execute(
                insert(boot_tokens).values(
                    token_hash=token_hash(token),
                    cluster=cluster,
                    address=address,
                    expires_at=now + ttl_s,
                    used_at=None,
                )
            )
        return token

    def bind_address(self, token: str, address: str) -> None:
        """Give a token minted unbound its VM's address, once."""
        if address == UNBOUND_ADDRESS:
            raise KaasError("a boot token can only be bound to an address, got none")
        with self.engine.begin() as connection:
            result = connection.execute(
                update(boot_tokens)
                .where(
                    boot_tokens.c.token_hash == token_hash(token),
                    boot_tokens.c.address == UNBOUND_ADDRESS,
                )
                .values(address=address)
            )
        if result.rowcount != 1:
            raise KaasError("the boot token is unknown or already bound to an address")

    def redeem(self, token: str, now: float, use: Callable[[BootGrant], T]) -> T:
        """Mark the token used and return what `use` makes of its grant; BootTokenRefused
        for a token that grants nothing. The check and the mark are one UPDATE (two requests
        with one token cannot both pass), in the transaction `use` runs in: if `use` refuses
        the request, the token stays unused."""
        hashed = token_hash(token)
        with self.engine.begin() as connection:
            result = connection.execute(
                update(boot_tokens)
                .where(
                    boot_tokens.c.token_hash == hashed,
                    boot_tokens.c.used_at.is_(None),
                    boot_tokens.c.expires_at > now,
                    boot_tokens.c.address != UNBOUND_ADDRESS,
                )
                .values(used_at=now)
            )
            if result.rowcount != 1:
                raise BootTokenRefused()
            row = connection.execute(
                select(boot_tokens.c.cluster, boot_tokens.c.address).where(
                    boot_tokens.c.token_hash == hashed
                )
            ).one()
            return use(BootGrant(row.cluster, row.address))


def boot_certificate(
    tokens: BootTokens,
    authority_of: Callable[[str], Authority | None],
    token: str,
    public_key_pem: str,
    hosts: tuple[str, ...],
    now: dt.datetime,
) -> tuple[bytes, bytes]:
    """Redeem `token` and sign the VM's public key for the address the token was minted
    for: (certificate PEM, trust bundle PEM)."""

    def issue(grant: BootGrant) -> tuple[bytes, bytes]:
        authority = authority_of(grant.cluster)
        if authority is None:
            raise ApiError(409, "no_authority", f"no CA is kept for cluster {grant.cluster}")
        try:
            certificate = sign_request(
                authority, public_key_pem.encode(), hosts, grant.address, now
            )
        except PkiError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        return certificate, authority.certificate_pem

    return tokens.redeem(token, now.timestamp(), issue)
