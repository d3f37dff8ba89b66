"""First start on a VM that was handed a boot ticket instead of an identity (EC2): make the
VM's key here, send only its public half with the one-time token to the management API,
and write the certificate it signs beside the key, every file 0600.

The ticket is deleted once the identity is written (the token is spent by then anyway). A
refused token is final and said so; an unreachable API is tried again until the timeout,
since a VM may boot before the service answers on its address.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from agent.errors import AgentError
from planner.contracts.boot_ticket import (
    BootTicket,
    parse_boot_identity_answer,
    parse_boot_ticket,
)
from planner.contracts.fields import ContractError
from planner.pki.authority import IssuedCertificate, PkiError, new_key_pem, public_key_pem
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.rotation import certificate_public_key_pem

log = structlog.get_logger("kaas.agent.boot")

REQUEST_TIMEOUT_S = 20.0
RETRY_WAIT_S = 5.0


class BootIdentityError(AgentError):
    """The VM could not get its identity with its boot ticket; the message says why."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes


class Unreachable(Exception):
    """The API did not answer (connection refused, timeout, TLS failure): try again."""


Post = Callable[[BootTicket, bytes], HttpAnswer]
"""POST a JSON body to the ticket's identity URL, verifying the API with the ticket's CA."""


def https_post(ticket: BootTicket, body: bytes) -> HttpAnswer:
    context = ssl.create_default_context(cadata=ticket.api_ca_pem)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    request = urllib.request.Request(
        ticket.identity_url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S, context=context) as answer:
            return HttpAnswer(answer.status, answer.read())
    except urllib.error.HTTPError as exc:
        return HttpAnswer(exc.code, exc.read())
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable(str(getattr(exc, "reason", exc))) from exc


def _refusal(answer: HttpAnswer) -> str:
    try:
        body = json.loads(answer.body)
        return f"{body.get('code', 'error')}: {body.get('message', '')}"
    except ValueError:
        return answer.body[:200].decode(errors="replace")


def redeem(
    ticket: BootTicket,
    files: IdentityFiles,
    hosts: tuple[str, ...],
    post: Post = https_post,
    timeout_s: float = 600.0,
    wait_s: float = RETRY_WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Get a certificate for a new key of this VM against the ticket and write the identity."""
    key_pem = new_key_pem()
    body = json.dumps(
        {
            "token": ticket.token,
            "public_key_pem": public_key_pem(key_pem).decode(),
            "hosts": list(hosts),
        }
    ).encode()
    deadline = clock() + timeout_s
    while True:
        try:
            answer = post(ticket, body)
        except Unreachable as exc:
            if clock() + wait_s > deadline:
                raise BootIdentityError(
                    f"the management API at {ticket.api_url} did not answer within "
                    f"{timeout_s:.0f} s ({exc})"
                ) from None
            log.warning("boot_identity_api_unreachable", api=ticket.api_url, error=str(exc))
            sleep(wait_s)
            continue
        if answer.status >= 500 and clock() + wait_s <= deadline:
            log.warning("boot_identity_api_error", api=ticket.api_url, status=answer.status)
            sleep(wait_s)
            continue
        break
    if answer.status != 200:
        raise BootIdentityError(
            f"the management API at {ticket.api_url} refused the boot ticket "
            f"(HTTP {answer.status}, {_refusal(answer)})"
        )
    try:
        issued = parse_boot_identity_answer(answer.body)
        if certificate_public_key_pem(issued.certificate_pem.encode()) != public_key_pem(key_pem):
            raise BootIdentityError(
                "the management API answered with a certificate for another key: not installed"
            )
    except (ContractError, PkiError, ValueError) as exc:
        raise BootIdentityError(f"the management API's answer is unusable: {exc}") from None
    write_identity(
        files,
        IssuedCertificate(key_pem, issued.certificate_pem.encode()),
        issued.trust_bundle_pem.encode(),
    )


def ensure_identity(
    ticket_path: Path | None,
    files: IdentityFiles,
    hosts: tuple[str, ...],
    timeout_s: float,
    post: Post = https_post,
) -> bool:
    """At the agent's start: redeem the boot ticket when the VM has no identity yet. True when
    an identity was fetched. A ticket left over beside an identity is deleted unused."""
    if ticket_path is None or not ticket_path.exists():
        return False
    if files.exists():
        ticket_path.unlink()
        return False
    try:
        ticket = parse_boot_ticket(ticket_path.read_bytes(), str(ticket_path))
    except (ContractError, OSError) as exc:
        raise BootIdentityError(f"boot ticket {ticket_path}: {exc}") from None
    redeem(ticket, files, hosts, post, timeout_s)
    ticket_path.unlink()
    log.info("boot_identity_installed", directory=str(files.directory), hosts=list(hosts))
    return True
