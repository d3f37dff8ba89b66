"""The agent's first start with a boot ticket: the ticket's contract, the redemption against
a management API stand-in (the real service's signing code behind a callable; the HTTPS
exchange with a real `kaas serve` is tests/integration/test_mp_service_aws.py), and the
files it leaves (0600, the ticket gone)."""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from agent.boot_identity import (
    BootIdentityError,
    HttpAnswer,
    Unreachable,
    ensure_identity,
    redeem,
)
from management_plane.errors import ApiError
from management_plane.security.boot_tokens import BootTokens, boot_certificate
from planner.contracts.boot_ticket import (
    BootTicket,
    parse_boot_identity_answer,
    parse_boot_ticket,
)
from planner.contracts.fields import ContractError
from planner.pki.authority import Role, create_authority, issued_by, public_key_pem
from planner.pki.files import IdentityFiles
from planner.pki.rotation import certificate_hosts, certificate_public_key_pem

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)
CA = create_authority("orders", NOW)
API_CA = create_authority("management plane", NOW).certificate_pem.decode()


def _ticket(token: str = "tok-0123456789") -> BootTicket:
    return BootTicket(token=token, api_url="https://10.20.0.5:8443", api_ca_pem=API_CA)


class ServiceStandIn:
    """POST /v1/boot/identity as the service answers it, with its own token store."""

    def __init__(self, tmp_path: Path) -> None:
        self.tokens = BootTokens(create_engine(f"sqlite:///{tmp_path / 'kaas.db'}"))
        self.calls = 0

    def post(self, ticket: BootTicket, body: bytes) -> HttpAnswer:
        self.calls += 1
        request = json.loads(body)
        assert set(request) == {"token", "public_key_pem", "hosts"}  # no private key leaves
        try:
            cert, bundle = boot_certificate(
                self.tokens,
                {"orders": CA}.get,
                request["token"],
                request["public_key_pem"],
                tuple(request["hosts"]),
                NOW,
            )
        except ApiError as exc:
            return HttpAnswer(
                exc.status, json.dumps({"code": exc.code, "message": str(exc)}).encode()
            )
        answer = {"certificate_pem": cert.decode(), "trust_bundle_pem": bundle.decode()}
        return HttpAnswer(200, json.dumps(answer).encode())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_start_redeems_the_ticket_and_writes_the_identity_0600(tmp_path: Path) -> None:
    api = ServiceStandIn(tmp_path)
    token = api.tokens.mint("orders", "10.20.1.37", NOW.timestamp())
    ticket_path = tmp_path / "boot-ticket.json"
    ticket_path.write_bytes(_ticket(token).to_json())
    files = IdentityFiles(tmp_path / "tls", Role.NODE)

    assert ensure_identity(ticket_path, files, ("10.20.1.37",), 5, api.post) is True
    assert files.exists() and not ticket_path.exists()
    assert _mode(files.directory) == 0o700
    for path in (files.key, files.keystore, files.certificate, files.trust_bundle):
        assert _mode(path) == 0o600, path
    certificate = files.certificate.read_bytes()
    assert issued_by(certificate, CA.certificate_pem)
    assert certificate_hosts(certificate) == ("10.20.1.37",)
    assert certificate_public_key_pem(certificate) == public_key_pem(files.key.read_bytes())
    # The next start has an identity: nothing asked again.
    assert ensure_identity(ticket_path, files, ("10.20.1.37",), 5, api.post) is False
    assert api.calls == 1


def test_a_spent_token_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    api = ServiceStandIn(tmp_path)
    token = api.tokens.mint("orders", "10.20.1.37", NOW.timestamp())
    redeem(_ticket(token), IdentityFiles(tmp_path / "first", Role.NODE), ("10.20.1.37",), api.post)
    again = IdentityFiles(tmp_path / "second", Role.NODE)
    with pytest.raises(
        BootIdentityError, match=r"refused the boot ticket \(HTTP 403, boot_token_refused"
    ):
        redeem(_ticket(token), again, ("10.20.1.37",), api.post)
    assert not again.directory.exists()


def test_an_unreachable_api_is_tried_again_until_the_timeout(tmp_path: Path) -> None:
    attempts: list[float] = []
    clock = [0.0]

    def down(ticket: BootTicket, body: bytes) -> HttpAnswer:
        attempts.append(clock[0])
        raise Unreachable("connection refused")

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    files = IdentityFiles(tmp_path / "tls", Role.NODE)
    with pytest.raises(
        BootIdentityError, match=r"did not answer within 30 s \(connection refused\)"
    ):
        redeem(_ticket(), files, ("10.0.0.1",), down, 30, 10, sleep, lambda: clock[0])
    assert attempts == [0.0, 10.0, 20.0, 30.0]
    assert not files.directory.exists()


def test_an_answer_for_another_key_is_not_installed(tmp_path: Path) -> None:
    api = ServiceStandIn(tmp_path)
    other = api.tokens.mint("orders", "10.0.0.1", NOW.timestamp())
    foreign = api.post(
        _ticket(other),
        json.dumps(
            {
                "token": other,
                "public_key_pem": public_key_pem(CA.key_pem).decode(),
                "hosts": ["10.0.0.1"],
            }
        ).encode(),
    )
    files = IdentityFiles(tmp_path / "tls", Role.NODE)
    with pytest.raises(BootIdentityError, match="certificate for another key"):
        redeem(_ticket(), files, ("10.0.0.1",), lambda ticket, body: foreign)
    assert not files.exists()


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"token": ""}, "token must not be empty"),
        ({"api_url": "http://10.0.0.5:8443"}, "api_url must be https://HOST:PORT"),
        ({"api_ca_pem": "not a certificate"}, "api_ca_pem holds no PEM certificate"),
        (
            {"api_ca_pem": API_CA + "-----BEGIN PRIVATE KEY-----\n"},
            "api_ca_pem holds a private key",
        ),
        ({"schema_version": 2}, "schema_version is 2, newer"),
    ],
)
def test_a_bad_ticket_is_refused_naming_the_field(changes: dict[str, object], problem: str) -> None:
    value = {**json.loads(_ticket().to_json()), **changes}
    with pytest.raises(ContractError, match=problem):
        parse_boot_ticket(json.dumps(value))


def test_a_ticket_round_trips_and_a_bad_answer_is_refused() -> None:
    assert parse_boot_ticket(_ticket().to_json()) == _ticket()
    assert _ticket().identity_url == "https://10.20.0.5:8443/v1/boot/identity"
    with pytest.raises(ContractError, match="certificate_pem holds no PEM"):
        parse_boot_identity_answer(json.dumps({"certificate_pem": "x", "trust_bundle_pem": API_CA}))


def test_a_broken_ticket_file_stops_the_first_start(tmp_path: Path) -> None:
    path = tmp_path / "boot-ticket.json"
    path.write_text("{")
    with pytest.raises(BootIdentityError, match=r"boot-ticket.json: .*not valid JSON"):
        ensure_identity(path, IdentityFiles(tmp_path / "tls", Role.NODE), ("10.0.0.1",), 5)
    assert ensure_identity(None, IdentityFiles(tmp_path / "tls", Role.NODE), (), 5) is False
