"""Tenants on the shared real cluster: SCRAM clients on the SASL listener, prefixed ACLs,
limits checked before Kafka, a producer quota that throttles, and deletion. Every tenant a
test creates is deleted after it (its topics, groups, ACLs, quotas and credential)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from management_plane.local.image import find_java, load_image
from management_plane.tenants import (
    ConnectionDetails,
    Tenant,
    TenantError,
    TenantPlan,
    TopicRequest,
    new_tenant,
    tenant_acl_grants,
)
from management_plane.tenants.kafka import KafkaTenants
from management_plane.tenants.quotas import UserQuotaTool
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

PLAN = TenantPlan(
    max_topics=2,
    max_partitions=4,
    producer_byte_rate=10 * 1024**2,
    consumer_byte_rate=10 * 1024**2,
    request_percentage=200.0,
)


@pytest.fixture(scope="module")
def kafka_tenants(kafka_cluster: ClusterHandle) -> KafkaTenants:
    return KafkaTenants(
        internal=kafka_cluster.admin,
        tenant_bootstrap=kafka_cluster.layout.tenant_bootstrap_servers,
        quotas=UserQuotaTool(
            java=str(find_java()),
            kafka_libs=load_image(verify=False).kafka_libs(),
            kafka=kafka_cluster.admin,
        ),
    )


ClientConfig = dict[str, str | int | float | bool]
Onboard = Callable[..., tuple[Tenant, ConnectionDetails]]


@pytest.fixture
def onboard(kafka_tenants: KafkaTenants) -> Iterator[Onboard]:
    """Create tenants for one test; every one is deleted after it."""
    created: list[Tenant] = []

    def create(base: str, plan: TenantPlan = PLAN) -> tuple[Tenant, ConnectionDetails]:
        tenant = new_tenant(f"{base}-{uuid.uuid4().hex[:8]}", plan)
        created.append(tenant)
        return tenant, kafka_tenants.create_tenant(tenant)

    yield create
    for tenant in created:
        kafka_tenants.delete_tenant(tenant)


@dataclass
class Deliveries:
    acked: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, bytes)
    errors: list[KafkaError] = field(default_factory=list)

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.acked.append((time.monotonic(), len(message.value() or b"")))


def produce(config: ClientConfig, topic: str, count: int, **extra: object) -> Deliveries:
    producer = Producer({**config, "acks": "all", "enable.idempotence": True, **extra})
    deliveries = Deliveries()
    for index in range(count):
        producer.produce(
            topic, key=f"k{index % 5}".encode(), value=b"v%d" % index, on_delivery=deliveries
        )
        producer.poll(0)
    producer.flush(30)
    return deliveries


def first_consumer_error(config: ClientConfig, topic: str, group: str) -> KafkaError | None:
    """The first error a consumer of `topic` in `group` sees within 20 s, or None."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            error = None if message is None else message.error()
            if error is not None:
                return error
        return None
    finally:
        consumer.close()


def test_a_tenants_scram_client_produces_and_consumes_on_its_own_topic(
    kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    started = time.monotonic()
    tenant, details = onboard("acme")
    onboarded_s = time.monotonic() - started
    assert details.bootstrap_servers.count(":9094") == 3
    assert (details.username, details.sasl_mechanism) == (tenant.name, "SCRAM-SHA-512")
    assert details.password is not None and len(details.password) >= 24

    state = kafka_tenants.describe_tenant(tenant)
    assert state.scram_mechanisms == ("SCRAM_SHA_512",)
    assert state.grants == tenant_acl_grants(tenant)
    assert state.other_bindings == ()
    assert state.quotas == tenant.plan.quotas()

    topic = kafka_tenants.create_topic(tenant, TopicRequest(f"{tenant.prefix}orders", 3))
    assert (topic.partitions, topic.replication_factor) == (3, 3)
    assert kafka_tenants.list_topics(tenant) == (topic,)

    # Right away, with the details returned once: produce (idempotent, acks=all), consume.
    sent = time.monotonic()
    deliveries = produce(details.client_config(), topic.name, 200)
    assert deliveries.errors == []
    assert len(deliveries.acked) == 200
    first_ack_s = deliveries.acked[0][0] - sent

    consumer = Consumer(
        {
            **details.client_config(),
            "group.id": f"{tenant.prefix}readers",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic.name])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 200 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value() or b"")
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(200))
    print(f"onboarding {onboarded_s:.1f}s, first acked produce {first_ack_s:.2f}s after topic")


def test_a_tenant_cannot_read_write_or_see_another_tenants_topics(
    kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    acme, acme_details = onboard("acme")
    beta, beta_details = onboard("beta")
    secret = kafka_tenants.create_topic(beta, TopicRequest(f"{beta.prefix}secret", 1)).name
    assert produce(beta_details.client_config(), secret, 5).errors == []
    own = kafka_tenants.create_topic(acme, TopicRequest(f"{acme.prefix}own", 1)).name
    acme_config = acme_details.client_config()

    refused = produce(acme_config, secret, 3, **{"message.timeout.ms": 10_000})
    assert refused.acked == []
    assert {e.code() for e in refused.errors} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    read = first_consumer_error(acme_config, secret, f"{acme.prefix}spy")
    assert read is not None and read.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, read

    # Its own topic through another tenant's consumer group: the group is not its own.
    group = first_consumer_error(acme_config, own, f"{beta.prefix}group")
    assert group is not None and group.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, group

    visible = AdminClient(acme_config).list_topics(timeout=15).topics
    assert own in visible and secret not in visible
    assert not any(name.startswith("__") for name in visible)  # nor the internal topics

    # No CREATE grant: topics come through the management plane's checks only.
    tenant_admin = AdminClient(acme_config)  # held: a dropped client cancels its futures
    direct = tenant_admin.create_topics([NewTopic(f"{acme.prefix}direct", 1, 3)])
    with pytest.raises(KafkaException) as denied:
        direct[f"{acme.prefix}direct"].result(timeout=30)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert kafka_tenants.list_topics(acme)[0].name == own

    wrong = AdminClient({**acme_config, "sasl.password": "not-the-password", "log_level": 0})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=5)


def test_topics_beyond_the_plan_or_off_the_whitelist_are_refused_before_kafka(
    kafka_cluster: ClusterHandle, kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    tenant, _ = onboard("limits")  # max 2 topics, 4 partitions
    p = tenant.prefix
    kafka_tenants.create_topic(tenant, TopicRequest(f"{p}first", 3))
    cases = [
        (TopicRequest(f"{p}second", 2), "limit_exceeded", "plan allows 4 (1 left)"),
        (TopicRequest(f"{p}second", 1, 4), "invalid", "above the cluster's 3 brokers"),
        (
            TopicRequest(f"{p}second", 1, configs={"unclean.leader.election.enable": "true"}),
            "invalid",
            "'unclean.leader.election.enable' is not on the whitelist",
        ),
        (TopicRequest(f"{p}second", 1, configs={"retention.ms": "-1"}), "invalid", "out of range"),
        (TopicRequest("other.second", 1), "forbidden", "outside tenant"),
        (TopicRequest(f"{p}first", 1), "conflict", "exists"),
    ]
    for request, code, says in cases:
        with pytest.raises(TenantError) as refused:
            kafka_tenants.create_topic(tenant, request)
        assert (refused.value.code, says in str(refused.value)) == (code, True), refused.value
    kafka_tenants.create_topic(tenant, TopicRequest(f"{p}second", 1))
    with pytest.raises(TenantError) as full:
        kafka_tenants.create_topic(tenant, TopicRequest(f"{p}third", 1))
    assert full.value.code == "limit_exceeded"
    assert "has 2 topics; its plan allows 2" in str(full.value)
    names = [t.name for t in kafka_tenants.list_topics(tenant)]
    assert names == [f"{p}first", f"{p}second"]
    cluster = AdminClient(kafka_cluster.client_config())
    assert "other.second" not in cluster.list_topics(timeout=15).topics

    # Bad input costs no Kafka call: against an address nothing listens on, the answer is
    # the same TenantError, at once, rather than a Kafka timeout.
    unreachable = KafkaTenants(
        internal=kafka_cluster.admin.with_servers("127.0.0.1:1"),
        tenant_bootstrap="127.0.0.1:2",
        quotas=kafka_tenants.quotas,
        timeout_s=10,
    )
    started = time.monotonic()
    with pytest.raises(TenantError) as refused:
        unreachable.create_topic(tenant, TopicRequest(f"{p}x", 1, configs={"preallocate": "true"}))
    assert refused.value.code == "invalid"
    assert "'preallocate' is not on the whitelist" in str(refused.value)
    assert time.monotonic() - started < 5.0  # a Kafka call would wait out timeout_s=10


QUOTA_BYTES_PER_S = 100 * 1024


def measure_produce_rate(
    config: ClientConfig, topic: str, seconds: float, buffer_kib: int = 64
) -> float:
    """Bytes acknowledged per second by a producer sending 1 KiB records as fast as it may.
    The throttled one gets a small buffer, so that what it has queued cannot hide the
    throttle; rate = acknowledged bytes / (sending time + flush)."""
    producer = Producer(
        {
            **config,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": min(16384 * 16, buffer_kib * 1024 // 4),
            "queue.buffering.max.kbytes": buffer_kib,
        }
    )
    deliveries = Deliveries()
    payload = b"x" * 1024
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, payload, on_delivery=deliveries)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - started
    assert deliveries.errors == []
    return sum(size for _, size in deliveries.acked) / elapsed


def test_the_producer_quota_throttles_the_tenant(
    kafka_cluster: ClusterHandle, kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    plan = TenantPlan(2, 4, QUOTA_BYTES_PER_S, 10 * 1024**2, 200.0)
    tenant, details = onboard("quota", plan)
    # One partition: one leader enforces the quota (it is per broker).
    topic = kafka_tenants.create_topic(tenant, TopicRequest(f"{tenant.prefix}load", 1)).name

    throttled = measure_produce_rate(details.client_config(), topic, 10.0)
    unthrottled = measure_produce_rate(kafka_cluster.client_config(), topic, 4.0, buffer_kib=4096)
    print(
        f"quota {QUOTA_BYTES_PER_S} B/s: tenant achieved {throttled:.0f} B/s "
        f"({throttled / QUOTA_BYTES_PER_S:.2f} x), the internal listener {unthrottled:.0f} B/s"
    )
    assert unthrottled > 4 * QUOTA_BYTES_PER_S  # without the quota the same producer is faster
    assert 0.6 * QUOTA_BYTES_PER_S <= throttled <= 1.25 * QUOTA_BYTES_PER_S


def measure_consume_rate(config: ClientConfig, topic: str, group: str, seconds: float) -> float:
    """Bytes per second a consumer of `topic` reads from the first message on, for `seconds`.
    Small fetches (32 KiB per partition, 64 KiB per request): the broker sends a throttled
    fetch whole and then delays the next, so one large first fetch would be a burst the
    quota only pays back later."""
    consumer = Consumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 32768,
            "fetch.max.bytes": 65536,
            "message.max.bytes": 65536,
        }
    )
    consumer.subscribe([topic])
    received, first = 0, None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            if first is None:
                first = time.monotonic()
                deadline = first + seconds
            received += len(message.value() or b"")
    finally:
        consumer.close()
    assert first is not None, "the consumer read nothing"
    return received / seconds


def test_the_consumer_quota_throttles_the_tenant(
    kafka_cluster: ClusterHandle, kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    plan = TenantPlan(2, 4, 10 * 1024**2, QUOTA_BYTES_PER_S, 200.0)
    tenant, details = onboard("cquota", plan)
    # One partition, so one leader enforces the (per broker) quota.
    topic = kafka_tenants.create_topic(tenant, TopicRequest(f"{tenant.prefix}load", 1)).name
    internal: ClientConfig = kafka_cluster.client_config()
    producer = Producer({**internal, "acks": "all", "linger.ms": 20})
    payload = b"x" * 1024
    for _ in range(3 * 1024):  # 3 MiB: more than 10 s at the quota can read
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0

    throttled = measure_consume_rate(details.client_config(), topic, f"{tenant.prefix}slow", 10.0)
    # The same consumer settings without the quota: the internal listener's super user.
    unthrottled = measure_consume_rate(internal, topic, f"{tenant.prefix}fast", 2.0)
    print(
        f"consumer quota {QUOTA_BYTES_PER_S} B/s: tenant read {throttled:.0f} B/s "
        f"({throttled / QUOTA_BYTES_PER_S:.2f} x), the internal listener {unthrottled:.0f} B/s"
    )
    assert unthrottled > 4 * QUOTA_BYTES_PER_S  # without the quota the same consumer is faster
    assert 0.6 * QUOTA_BYTES_PER_S <= throttled <= 1.4 * QUOTA_BYTES_PER_S


def test_deleting_a_tenant_removes_everything_it_had(
    kafka_tenants: KafkaTenants, onboard: Onboard
) -> None:
    tenant, details = onboard("gone")
    topic = kafka_tenants.create_topic(tenant, TopicRequest(f"{tenant.prefix}data", 2)).name
    assert produce(details.client_config(), topic, 10).errors == []
    consumer = Consumer(
        {
            **details.client_config(),
            "group.id": f"{tenant.prefix}g",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumer.commit(message=message, asynchronous=False)
            break
    consumer.close()

    deletion = kafka_tenants.delete_tenant(tenant)
    assert deletion.deleted_topics == (topic,)
    assert deletion.deleted_groups == (f"{tenant.prefix}g",)
    assert deletion.groups_left == ()
    state = kafka_tenants.describe_tenant(tenant)
    assert (state.scram_mechanisms, state.grants, state.other_bindings, state.quotas) == (
        (),
        (),
        (),
        {},
    )
    deadline = time.monotonic() + 30
    while kafka_tenants.list_topics(tenant) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert kafka_tenants.list_topics(tenant) == ()
    with pytest.raises(KafkaException):
        AdminClient({**details.client_config(), "log_level": 0}).list_topics(timeout=5)
    # A second delete finds nothing left and does nothing.
    assert kafka_tenants.delete_tenant(tenant).deleted_topics == ()
