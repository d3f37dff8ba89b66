"""What a migration to KRaft reads of Kafka's own znodes, against the shared real cluster
(read only): the cluster id the controllers would format with is the one Kafka's brokers
report, and a cluster that never migrated has no migration record."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from management_plane.service.cluster_io import ClusterIO
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration


def test_kafkas_cluster_id_and_no_migration_record(kafka_cluster: ClusterHandle) -> None:
    layout = kafka_cluster.layout
    io = ClusterIO(layout.name, [vm.address for vm in layout.vms], kafka_cluster.admin_identity)
    metadata = AdminClient(kafka_cluster.client_config()).list_topics(timeout=30)
    found = io.kafka_cluster_id()
    assert found is not None and found == metadata.cluster_id
    assert io.zk_migration_record() is None
