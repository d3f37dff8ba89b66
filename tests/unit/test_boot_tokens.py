"""One-time boot tokens: a VM's certificate for its public key, the token single-use,
expiring and stored hashed; a refused request leaves the token as it was."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from management_plane.errors import ApiError, KaasError
from management_plane.local.tls import authority_dir_in
from management_plane.providers.local import LocalProvider
from management_plane.security.boot_tokens import (
    UNBOUND_ADDRESS,
    BootTokenRefused,
    BootTokens,
    boot_certificate,
    boot_tokens,
)
from planner.pki.authority import create_authority, issued_by, new_key_pem, public_key_pem
from planner.pki.files import write_authority
from planner.pki.rotation import certificate_hosts, certificate_public_key_pem
from tests.unit.api_server import running_api

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
CA = create_authority("orders", NOW)
PUBLIC = public_key_pem(new_key_pem()).decode()


def tokens(tmp_path: Path) -> BootTokens:
    return BootTokens(create_engine(f"sqlite:///{tmp_path / 'kaas.db'}"))


def certificate(
    store: BootTokens, token: str, hosts: tuple[str, ...], at: dt.datetime = NOW
) -> tuple[bytes, bytes]:
    return boot_certificate(store, {"orders": CA}.get, token, PUBLIC, hosts, at)


def test_a_token_buys_one_certificate_for_its_address(tmp_path: Path) -> None:
    store = tokens(tmp_path)
    token = store.mint("orders", "10.0.0.7", NOW.timestamp(), ttl_s=600)
    cert, bundle = certificate(store, token, ("10.0.0.7", "ip-10-0-0-7"))
    assert issued_by(cert, CA.certificate_pem) and bundle == CA.certificate_pem
    assert certificate_public_key_pem(cert).decode() == PUBLIC
    assert certificate_hosts(cert) == ("10.0.0.7", "ip-10-0-0-7")
    with pytest.raises(BootTokenRefused, match="unknown, already used or expired"):
        certificate(store, token, ("10.0.0.7",))


def test_an_expired_or_unknown_token_is_refused(tmp_path: Path) -> None:
    store = tokens(tmp_path)
    token = store.mint("orders", "10.0.0.7", NOW.timestamp(), ttl_s=600)
    with pytest.raises(BootTokenRefused):
        certificate(store, token, ("10.0.0.7",), NOW + dt.timedelta(seconds=601))
    with pytest.raises(BootTokenRefused):
        certificate(store, token + "x", ("10.0.0.7",))


def test_the_database_holds_only_the_tokens_hash(tmp_path: Path) -> None:
    store = tokens(tmp_path)
    token = store.mint("orders", "10.0.0.7", NOW.timestamp())
    with store.engine.connect() as connection:
        rows = connection.execute(select(boot_tokens)).all()
    assert len(rows) == 1 and rows[0].token_hash != token and len(rows[0].token_hash) == 64
    assert token.encode() not in (tmp_path / "kaas.db").read_bytes()


def test_a_request_for_another_address_is_refused_and_keeps_the_token(tmp_path: Path) -> None:
    store = tokens(tmp_path)
    token = store.mint("orders", "10.0.0.7", NOW.timestamp())
    with pytest.raises(ApiError, match=r"not the VM.s address 10\.0\.0\.7") as refused:
        certificate(store, token, ("10.0.0.8",))
    assert refused.value.status == 400
    with store.engine.connect() as connection:
        assert connection.execute(select(boot_tokens.c.used_at)).scalar_one() is None
    cert, _ = certificate(store, token, ("10.0.0.7",))  # still good once
    assert issued_by(cert, CA.certificate_pem)


def test_a_token_must_live_a_positive_time(tmp_path: Path) -> None:
    with pytest.raises(ApiError.__mro__[1], match="positive time"):
        tokens(tmp_path).mint("orders", "10.0.0.7", NOW.timestamp(), ttl_s=0)


def test_the_api_exchanges_a_token_for_a_certificate_once_without_an_api_key(
    tmp_path: Path,
) -> None:
    with running_api(tmp_path / "service") as api:
        provider = api.service.provider
        assert isinstance(provider, LocalProvider)
        token = api.service.boot_tokens.mint("orders", "10.0.0.7", time.time())
        body = {"token": token, "public_key_pem": PUBLIC, "hosts": ["10.0.0.7"]}
        status, answer = api.call("POST", "/v1/boot/identity", body, key=None)
        assert status == 409 and "no CA is kept for cluster orders" in answer["message"]
        write_authority(authority_dir_in(provider.cluster_home("orders")), CA)
        status, answer = api.call("POST", "/v1/boot/identity", body, key=None)
        assert status == 200, answer
        assert issued_by(answer["certificate_pem"].encode(), CA.certificate_pem)
        assert answer["trust_bundle_pem"] == CA.certificate_pem.decode()
        assert "PRIVATE KEY" not in json.dumps(answer)
        status, answer = api.call("POST", "/v1/boot/identity", body, key=None)
        assert (status, answer["code"]) == (403, "boot_token_refused")


def test_an_unbound_token_grants_nothing_until_bound_once(tmp_path: Path) -> None:
    store = tokens(tmp_path)
    token = store.mint("orders", UNBOUND_ADDRESS, NOW.timestamp(), ttl_s=600)
    with pytest.raises(BootTokenRefused):
        certificate(store, token, ("10.0.0.9",))
    store.bind_address(token, "10.0.0.9")
    with pytest.raises(KaasError, match="unknown or already bound"):
        store.bind_address(token, "10.0.0.10")  # a second binding cannot move it
    cert, _ = certificate(store, token, ("10.0.0.9",))
    assert certificate_hosts(cert) == ("10.0.0.9",)
    with pytest.raises(KaasError, match="only be bound to an address"):
        store.bind_address(store.mint("orders", UNBOUND_ADDRESS, NOW.timestamp()), "")
