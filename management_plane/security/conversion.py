"""The steps of a pre-TLS cluster's conversion to TLS on every channel (`kaas cluster
secure`), registered with the controller's one step registry, so the one runner journals
them and a service killed anywhere resumes at the persisted step.

As for a KRaft migration, the management plane only writes each phase
(planner.contracts.transport_security) into the spec and watches: the agents render the
phase (the one renderer's conditionals on `spec.transport_security`) and roll their VMs one
at a time under the restart lock; the controller's `wait_applied` waits for every agent to
have applied the phase's generation. Between the clients' phase and the last one the znodes
an older release created open to anyone get the cluster's ACLs. Every step looks first at
what is already true, so running it again changes nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from management_plane.errors import PermanentError
from management_plane.security.znode_acls import AclMigration
from management_plane.service.controller import STEPS, Controller, done
from management_plane.service.db import OperationRow
from management_plane.service.operations import FAIL, OperationKind, Outcome, StepName
from management_plane.service.steps import Patience
from planner.contracts.spec import ClusterSpec
from planner.contracts.transport_security import CONVERSION_PHASES, TransportSecurity
from planner.pki.files import IdentityFiles

CONVERTING = frozenset({OperationKind.SECURE_CLUSTER})
step = STEPS.register


class ConversionRefused(PermanentError):
    """The cluster cannot take this conversion step; the message says why."""


@runtime_checkable
class ZnodeSecurityPort(Protocol):
    """The cluster's znodes an older release left open (ClusterIO; a fake in unit tests)."""

    def secure_kaas_znodes(self) -> AclMigration: ...

    def secure_kafka_znodes(self, kafka_version: str, node: IdentityFiles) -> None: ...


@runtime_checkable
class HoldsNodeIdentity(Protocol):
    """A provider that can present the cluster's node identity (the brokers' own): Kafka's
    znodes made by brokers with `zookeeper.set.acl` let only it change their ACLs."""

    def node_identity(self, cluster: str) -> IdentityFiles | None: ...


def _current_spec(controller: Controller, cluster: str) -> ClusterSpec:
    return controller.cluster_port(cluster).read_spec() or controller._spec(cluster)


def _order(transport: TransportSecurity) -> int:
    return (
        -1
        if transport is TransportSecurity.PLAINTEXT_LEGACY
        else CONVERSION_PHASES.index(transport)
    )


@step(StepName.TRANSPORT_PHASE, CONVERTING)
def transport_phase(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    """Ask the agents for the conversion's next phase. A spec already past it (a phase
    written by a later step before the service restarted) is never moved back."""
    phase = CONVERSION_PHASES[batch]
    spec = _current_spec(controller, op.cluster)
    current = spec.transport_security
    if _order(current) > _order(phase):
        return Outcome(
            FAIL,
            f"{op.cluster} runs transport {current.value}, past the phase {phase.value} "
            "this step would write: a conversion never goes back",
        )
    if current is phase:
        return done(f"transport {phase.value} asked already", spec_generation=spec.generation)
    written = controller._write_spec(op.cluster, transport_security=phase)
    return done(f"transport {phase.value} asked", spec_generation=written.generation)


@step(StepName.SECURE_ZNODES, CONVERTING, Patience.APPLIED)
def secure_znodes(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    """Every client talks TLS now: KaaS's znodes get the cluster's policy (its own
    principals, nobody else), Kafka's get Kafka's secure ACLs (zookeeper-security-migration),
    before the plain port that anonymous sessions used is closed."""
    spec = _current_spec(controller, op.cluster)
    if not spec.transport_security.clients_use_tls:
        return Outcome(
            FAIL,
            f"{op.cluster} runs transport {spec.transport_security.value}: its clients still "
            "talk plaintext, and an ACL would lock them out",
        )
    port = controller.cluster_port(op.cluster)
    if not isinstance(port, ZnodeSecurityPort):
        raise ConversionRefused(f"cluster {op.cluster}: its port cannot set znode ACLs")
    node = (
        controller.provider.node_identity(op.cluster)
        if isinstance(controller.provider, HoldsNodeIdentity)
        else None
    )
    if node is None:
        return Outcome(
            FAIL,
            f"the {controller.provider.name} provider presents no node identity of "
            f"{op.cluster}: Kafka's znodes can be given their ACLs only as the brokers",
        )
    kaas = port.secure_kaas_znodes()
    port.secure_kafka_znodes(spec.kafka_version, node)
    return done(
        f"KaaS's znodes secured ({kaas.changed} of {kaas.checked} changed); "
        "Kafka's znodes given Kafka's secure ACLs",
        znodes_checked=kaas.checked,
        znodes_changed=kaas.changed,
    )
