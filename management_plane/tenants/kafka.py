"""The Kafka side of tenants: SCRAM credentials, ACLs and quotas of a tenant, and its topics.
A thin adapter: the decisions (names, bindings, limits, whitelist) are the pure modules'.

Everything goes to the brokers' internal listener as the admin identity (User:kaas-admin, a
super user): SCRAM credentials and ACLs through confluent-kafka's AdminClient (KIP-554
AlterUserScramCredentials, CreateAcls, DeleteAcls), quotas through Kafka's ConfigCommand
(UserQuotaTool: librdkafka has no client-quota API). In ZooKeeper mode the brokers keep
credentials, ACLs and quotas in ZooKeeper and each broker picks up a change from a ZooKeeper
notification, a moment after the call returns; `create_tenant` therefore returns only once
the new credentials authenticate on every broker.

Each step is idempotent, so an interrupted create or delete is finished by running it again
(the service's journaled operations do). The service serializes topic operations per tenant:
two creates checked at the same time could both fit the plan and together exceed it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import AclOperation as KafkaAclOperation
from confluent_kafka.admin import AclPermissionType as KafkaPermission

from management_plane.errors import UpstreamError
from management_plane.tenants.acls import AclGrant, AclOperation, AclResource, tenant_acl_grants
from management_plane.tenants.model import ConnectionDetails, Problem, Tenant, TenantError
from management_plane.tenants.quotas import QuotaToolError, UserQuotaTool
from management_plane.tenants.topics import (
    ExistingTopic,
    TopicRequest,
    check_topic_config_change,
    check_topic_deletion,
    check_topic_request,
    tenant_topics,
    topic_change_problems,
    topic_request_problems,
)
from planner.client_logs import client_logger
from planner.pki.client_settings import InternalClient, TenantClient

log = structlog.get_logger(__name__)

SCRAM_ITERATIONS = 8192  # Kafka accepts 4096-16384; Kafka's tools use 4096 by default
_RESOURCES = {
    AclResource.TOPIC: ResourceType.TOPIC,
    AclResource.GROUP: ResourceType.GROUP,
    AclResource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
}
_RESOURCES_BACK = {kafka: ours for ours, kafka in _RESOURCES.items()}
_OPERATIONS = {op: KafkaAclOperation[op.name] for op in AclOperation}
_OPERATIONS_BACK = {kafka: ours for ours, kafka in _OPERATIONS.items()}

T = TypeVar("T")


class TenantKafkaError(UpstreamError, RuntimeError):
    """A Kafka call about a tenant failed; the message names the step and Kafka's reason.
    Whatever the step before it did stays done: run the operation again to finish it."""

    http_code = "kafka_error"


def _kafka_message(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)


def _kafka_code(exc: KafkaException) -> int | None:
    error = exc.args[0] if exc.args else None
    return error.code() if isinstance(error, KafkaError) else None


@dataclass(frozen=True)
class TenantState:
    """What Kafka holds for a tenant, read back."""

    scram_mechanisms: tuple[str, ...]  # () when it has no credential
    grants: tuple[AclGrant, ...]  # its PREFIXED ALLOW bindings
    other_bindings: tuple[str, ...]  # any other binding naming its principal
    quotas: dict[str, float]
    topics: tuple[ExistingTopic, ...]


@dataclass(frozen=True)
class TenantDeletion:
    deleted_topics: tuple[str, ...]
    deleted_groups: tuple[str, ...]
    groups_left: tuple[str, ...] = ()  # still had members; Kafka refuses to delete those


@dataclass
class KafkaTenants:
    """Creates, reads and deletes tenants and their topics on one cluster.

    internal: the admin identity on the internal listener (a super user); tenant_bootstrap: the
    SASL_SSL listener of every broker, as handed to tenants with the CA of `internal`.
    """

    internal: InternalClient
    tenant_bootstrap: str
    quotas: UserQuotaTool
    timeout_s: float = 15.0
    verify_timeout_s: float = 30.0
    scram_iterations: int = SCRAM_ITERATIONS
    ca_certificate: str = field(init=False, repr=False)
    admin: AdminClient = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.admin = AdminClient(self.internal.librdkafka(), logger=client_logger)
        self.ca_certificate = self.internal.identity.trust_bundle.read_text()

    # -- tenants --------------------------------------------------------------------------

    def connection_details(self, tenant: Tenant, password: str | None = None) -> ConnectionDetails:
        return ConnectionDetails(
            bootstrap_servers=self.tenant_bootstrap,
            username=tenant.username,
            topic_prefix=tenant.prefix,
            ca_certificate=self.ca_certificate,
            password=password,
        )

    def create_tenant(self, tenant: Tenant, password: str | None = None) -> ConnectionDetails:
        """SCRAM-SHA-512 credential, ACLs, quotas; returns once the credential works on every
        broker. The password (a new random one unless given) is in the result, and nowhere
        else: Kafka keeps only a salted hash. Running it again sets a new password."""
        secret = password if password is not None else secrets.token_urlsafe(24)
        self.set_password(tenant, secret)
        self.create_acls(tenant)
        self.set_quotas(tenant)
        self.wait_until_authenticated(tenant.username, secret)
        log.info("tenant_created", tenant=tenant.name, prefix=tenant.prefix)
        return self.connection_details(tenant, secret)

    def set_password(self, tenant: Tenant, password: str) -> None:
        upsert = UserScramCredentialUpsertion(
            tenant.username,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, self.scram_iterations),
            password.encode(),
        )
        self._each(
            "setting the SCRAM-SHA-512 credential",
            self.admin.alter_user_scram_credentials([upsert], request_timeout=self.timeout_s),
        )

    def create_acls(self, tenant: Tenant) -> None:
        bindings = [_binding(grant) for grant in tenant_acl_grants(tenant)]
        self._each(
            "creating the ACLs", self.admin.create_acls(bindings, request_timeout=self.timeout_s)
        )
        granted, _ = self._grants(tenant)
        missing = set(tenant_acl_grants(tenant)) - set(granted)
        if missing:
            raise TenantKafkaError(
                f"tenant {tenant.name}: ACLs created but not read back: "
                + "; ".join(str(g) for g in sorted(missing))
            )

    def set_quotas(self, tenant: Tenant) -> None:
        try:
            self.quotas.set(tenant.username, tenant.plan.quotas())
        except QuotaToolError as exc:
            raise TenantKafkaError(f"tenant {tenant.name}: {exc}") from None

    def wait_until_authenticated(self, username: str, password: str) -> None:
        """Authenticate on each broker's SASL listener in turn (a client with one bootstrap
        address reads its first metadata from that broker) until every one accepts."""
        deadline = time.monotonic() + self.verify_timeout_s
        for address in self.tenant_bootstrap.split(","):
            while True:
                probe = AdminClient(
                    TenantClient(address, username, password, self.ca_certificate).librdkafka(
                        # Failures until the credential reaches the broker are expected
                        # here, and reported below if they last: keep librdkafka quiet.
                        log_level=0
                    )
                )
                try:
                    probe.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                    break
                except KafkaException as exc:
                    if time.monotonic() >= deadline:
                        raise TenantKafkaError(
                            f"user {username}: the credential does not authenticate on "
                            f"{address} after {self.verify_timeout_s:.0f}s: {_kafka_message(exc)}"
                        ) from None
                    time.sleep(0.2)

    def delete_tenant(self, tenant: Tenant) -> TenantDeletion:
        """Credential first (no new sessions), then ACLs (open sessions lose access), quotas,
        the tenant's consumer groups and topics. A part already gone is skipped."""
        deletion = UserScramCredentialDeletion(tenant.username, ScramMechanism.SCRAM_SHA_512)
        try:
            self.admin.alter_user_scram_credentials([deletion], request_timeout=self.timeout_s)[
                tenant.username
            ].result(timeout=self.timeout_s)
        except KafkaException as exc:
            if _kafka_code(exc) != KafkaError.RESOURCE_NOT_FOUND:
                raise TenantKafkaError(
                    f"tenant {tenant.name}: deleting the SCRAM credential: {_kafka_message(exc)}"
                ) from None
        self._each(
            "deleting the ACLs",
            self.admin.delete_acls([_principal_filter(tenant)], request_timeout=self.timeout_s),
        )
        try:
            self.quotas.remove(tenant.username)
        except QuotaToolError as exc:
            raise TenantKafkaError(f"tenant {tenant.name}: {exc}") from None
        deleted_groups, groups_left = self._delete_groups(tenant)
        topics = [topic.name for topic in self.list_topics(tenant)]
        if topics:
            self._each(
                "deleting its topics",
                self.admin.delete_topics(
                    topics, operation_timeout=self.timeout_s, request_timeout=self.timeout_s
                ),
                ignore=(KafkaError.UNKNOWN_TOPIC_OR_PART,),
            )
            self._wait_for_metadata(tenant, lambda names: not set(topics) & names)
        log.info("tenant_deleted", tenant=tenant.name, topics=len(topics))
        return TenantDeletion(tuple(topics), deleted_groups, groups_left)

    def _delete_groups(self, tenant: Tenant) -> tuple[tuple[str, ...], tuple[str, ...]]:
        listed = self._call(
            "listing consumer groups",
            lambda: self.admin.list_consumer_groups(request_timeout=self.timeout_s).result(
                timeout=self.timeout_s
            ),
        )
        groups = sorted(g.group_id for g in listed.valid if tenant.owns(g.group_id))
        if not groups:
            return (), ()
        deleted, left = [], []
        futures = self.admin.delete_consumer_groups(groups, request_timeout=self.timeout_s)
        for group, future in futures.items():
            try:
                future.result(timeout=self.timeout_s)
                deleted.append(group)
            except KafkaException as exc:
                if _kafka_code(exc) == KafkaError.GROUP_ID_NOT_FOUND:
                    continue
                if _kafka_code(exc) != KafkaError.NON_EMPTY_GROUP:
                    raise TenantKafkaError(
                        f"tenant {tenant.name}: deleting group {group}: {_kafka_message(exc)}"
                    ) from None
                left.append(group)
        return tuple(sorted(deleted)), tuple(sorted(left))

    def describe_tenant(self, tenant: Tenant) -> TenantState:
        try:
            futures = self.admin.describe_user_scram_credentials(
                [tenant.username], request_timeout=self.timeout_s
            )
            assert isinstance(futures, dict)  # one future per user named
            found = futures[tenant.username].result(timeout=self.timeout_s)
            mechanisms = tuple(
                sorted(str(info.mechanism.name) for info in found.scram_credential_infos)
            )
        except KafkaException as exc:
            if _kafka_code(exc) != KafkaError.RESOURCE_NOT_FOUND:
                raise TenantKafkaError(
                    f"tenant {tenant.name}: describing its credential: {_kafka_message(exc)}"
                ) from None
            mechanisms = ()
        grants, others = self._grants(tenant)
        try:
            quotas = self.quotas.describe(tenant.username)
        except QuotaToolError as exc:
            raise TenantKafkaError(f"tenant {tenant.name}: {exc}") from None
        return TenantState(mechanisms, grants, others, quotas, self.list_topics(tenant))

    def _grants(self, tenant: Tenant) -> tuple[tuple[AclGrant, ...], tuple[str, ...]]:
        bindings = self._call(
            "describing the ACLs",
            lambda: self.admin.describe_acls(
                _principal_filter(tenant), request_timeout=self.timeout_s
            ).result(timeout=self.timeout_s),
        )
        grants, others = [], []
        for binding in bindings:
            grant = _grant(binding)
            if grant is None:
                others.append(str(binding))
            else:
                grants.append(grant)
        return tuple(sorted(grants)), tuple(sorted(others))

    # -- topics ---------------------------------------------------------------------------

    def list_topics(self, tenant: Tenant) -> tuple[ExistingTopic, ...]:
        return tenant_topics(tenant, self._cluster_topics()[0])

    def _cluster_topics(self) -> tuple[list[ExistingTopic], list[int]]:
        """Every topic of the cluster, and the ids of its live brokers."""
        metadata = self._call(
            "reading metadata", lambda: self.admin.list_topics(timeout=self.timeout_s)
        )
        topics = [
            ExistingTopic(
                name,
                len(topic.partitions),
                len(topic.partitions[0].replicas) if 0 in topic.partitions else 0,
            )
            for name, topic in metadata.topics.items()
            if topic.error is None
        ]
        return topics, sorted(metadata.brokers)

    def _topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """The configs of these topics as Kafka runs them, by topic."""
        resources = {name: ConfigResource("topic", name) for name in names}
        if not resources:
            return {}
        futures = self._call(
            "reading the topics' configs",
            lambda: self.admin.describe_configs(
                list(resources.values()), request_timeout=self.timeout_s
            ),
        )
        found = {}
        for name, resource in resources.items():
            try:
                entries = futures[resource].result(timeout=self.timeout_s)
            except KafkaException as exc:
                raise TenantKafkaError(
                    f"reading the configs of {name}: {_kafka_message(exc)}"
                ) from None
            found[name] = {key: entry.value for key, entry in entries.items()}
        return found

    def _with_retention(self, topics: Sequence[ExistingTopic]) -> list[ExistingTopic]:
        """The topics with their retention.bytes as Kafka runs them (None: -1, unbounded),
        which the storage budget counts."""
        configs = self._topic_configs([t.name for t in topics])
        found = []
        for topic in topics:
            value = int(configs[topic.name]["retention.bytes"])
            retention = value if value >= 0 else None
            found.append(
                ExistingTopic(topic.name, topic.partitions, topic.replication_factor, retention)
            )
        return found

    def _cluster_min_insync(self, broker_id: int) -> int:
        """min.insync.replicas as the broker runs it (the spec may override the default)."""
        resource = ConfigResource("broker", str(broker_id))
        entries = self._call(
            "reading min.insync.replicas",
            lambda: self.admin.describe_configs([resource], request_timeout=self.timeout_s)[
                resource
            ].result(timeout=self.timeout_s),
        )
        return int(entries["min.insync.replicas"].value)

    def create_topic(self, tenant: Tenant, request: TopicRequest) -> ExistingTopic:
        """Check the request (bad input: TenantError before any Kafka call; then limits
        against the tenant's topics and the cluster), then create it."""
        code, problems = topic_request_problems(tenant, request)
        if problems:
            raise TenantError(code, problems)
        topics, broker_ids = self._cluster_topics()
        topic = check_topic_request(
            tenant,
            request,
            self._with_retention(tenant_topics(tenant, topics)),
            len(broker_ids),
            self._cluster_min_insync(broker_ids[0]),
        )
        new = NewTopic(
            topic.name,
            num_partitions=topic.partitions,
            replication_factor=topic.replication_factor,
            config=dict(topic.configs),
        )
        try:
            # operation_timeout: the answer waits until the controller has created the topic
            # (0, the default, answers as soon as it is asked for).
            self.admin.create_topics(
                [new], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
            )[topic.name].result(timeout=self.timeout_s)
        except KafkaException as exc:
            message = _kafka_message(exc)
            if _kafka_code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                raise TenantError("conflict", [Problem("name", message)]) from None
            raise TenantKafkaError(f"creating topic {topic.name}: {message}") from None
        # The next limit check counts the topics metadata shows: wait until it shows this one.
        self._wait_for_metadata(tenant, lambda names: topic.name in names)
        log.info(
            "tenant_topic_created",
            tenant=tenant.name,
            topic=topic.name,
            partitions=topic.partitions,
            replication_factor=topic.replication_factor,
        )
        return ExistingTopic(topic.name, topic.partitions, topic.replication_factor)

    def alter_topic_configs(
        self, tenant: Tenant, name: str, changes: dict[str, str]
    ) -> dict[str, str]:
        """Set whitelisted configs of the tenant's topic, checked against the whitelist and
        the storage budget (TenantError before any change); the configs set."""
        code, problems = topic_change_problems(tenant, name, changes)
        if problems:
            raise TenantError(code, problems)
        mine = tenant_topics(tenant, self._cluster_topics()[0])
        with_retention = self._with_retention(mine)
        policy = "delete"
        if any(t.name == name for t in mine):
            policy = self._topic_configs([name])[name].get("cleanup.policy") or "delete"
        settled = check_topic_config_change(tenant, name, changes, with_retention, policy)
        resource = ConfigResource(
            "topic",
            name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in settled.items()
            ],
        )
        futures = self._call(
            f"altering the configs of {name}",
            lambda: self.admin.incremental_alter_configs(
                [resource], request_timeout=self.timeout_s
            ),
        )
        self._each(f"altering the configs of {name}", futures)
        log.info("tenant_topic_altered", tenant=tenant.name, topic=name, configs=settled)
        return settled

    def delete_topic(self, tenant: Tenant, name: str) -> None:
        check_topic_deletion(tenant, name, self.list_topics(tenant))
        self._each(
            f"deleting topic {name}",
            self.admin.delete_topics(
                [name], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
            ),
        )
        self._wait_for_metadata(tenant, lambda names: name not in names)
        log.info("tenant_topic_deleted", tenant=tenant.name, topic=name)

    # -- helpers --------------------------------------------------------------------------

    def _wait_for_metadata(self, tenant: Tenant, shows: Callable[[set[str]], bool]) -> None:
        """Until the cluster's metadata shows a topic change: another broker may answer the
        next metadata request a moment before the controller's update reaches it."""
        deadline = time.monotonic() + self.timeout_s
        metadata = self._call(
            "reading metadata", lambda: self.admin.list_topics(timeout=self.timeout_s)
        )
        # Every broker's own metadata, since the next limit check may ask any of them.
        probes = [
            AdminClient(
                self.internal.with_servers(f"{b.host}:{b.port}").librdkafka(),
                logger=client_logger,
            )
            for b in metadata.brokers.values()
        ]

        def everywhere() -> bool:
            for probe in probes:
                answer = probe.list_topics(timeout=self.timeout_s)
                names = {
                    name
                    for name, t in answer.topics.items()
                    if t.error is None and tenant.owns(name)
                }
                if not shows(names):
                    return False
            return True

        while not everywhere():
            if time.monotonic() >= deadline:
                raise TenantKafkaError(
                    f"tenant {tenant.name}: the topic change does not show in the cluster's "
                    f"metadata after {self.timeout_s:.0f}s"
                )
            time.sleep(0.2)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except KafkaException as exc:
            raise TenantKafkaError(f"{what}: {_kafka_message(exc)}") from None

    def _each(self, what: str, futures: dict[Any, Any], ignore: Sequence[int] = ()) -> None:
        failures = []
        for key, future in futures.items():
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                if _kafka_code(exc) not in ignore:
                    failures.append(f"{key}: {_kafka_message(exc)}")
        if failures:
            raise TenantKafkaError(f"{what}: {'; '.join(failures)}")


def _binding(grant: AclGrant) -> AclBinding:
    return AclBinding(
        _RESOURCES[grant.resource],
        grant.prefix,
        ResourcePatternType.PREFIXED,
        grant.principal,
        grant.host,
        _OPERATIONS[grant.operation],
        KafkaPermission.ALLOW,
    )


def _grant(binding: AclBinding) -> AclGrant | None:
    """Our form of a binding, or None when it is not a PREFIXED ALLOW we would create."""
    restype, operation_type = binding.restype, binding.operation
    resource = _RESOURCES_BACK.get(restype) if isinstance(restype, ResourceType) else None
    operation = (
        _OPERATIONS_BACK.get(operation_type)
        if isinstance(operation_type, KafkaAclOperation)
        else None
    )
    if (
        resource is None
        or operation is None
        or binding.resource_pattern_type is not ResourcePatternType.PREFIXED
        or binding.permission_type is not KafkaPermission.ALLOW
    ):
        return None
    return AclGrant(resource, binding.name, operation, binding.principal, binding.host)


def _principal_filter(tenant: Tenant) -> AclBindingFilter:
    # None matches any name and any host (AclBindingFilter's documented wildcard).
    return AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        tenant.principal,
        None,  # type: ignore[arg-type]
        KafkaAclOperation.ANY,
        KafkaPermission.ANY,
    )
