"""What `management_plane.workload` records, as history records.

`produce_keyed` and `BackgroundProducer` keep each acknowledged message as (key, sequence,
partition, offset), with neither the ack's time nor the failed attempts; their value is
`workload.encode(key, sequence)`, whose text is the value id here. `ConsumeResult` keeps only
(key, sequence) per consumer, without partition or offset, and `analytics.ledger` only counts
per time window: neither says where a message sits in the log, so neither converts.
"""

from __future__ import annotations

from collections.abc import Iterable

from management_plane.drills.history import ProducerInfo, SendRecord
from management_plane.workload import encode

# (key, sequence, partition, offset), as in `ProduceResult.acknowledged`
WorkloadAck = tuple[str, int, int, int]


def workload_sends(
    producer: str, topic: str, acknowledged: Iterable[WorkloadAck], idempotent: bool = True
) -> list[ProducerInfo | SendRecord]:
    """The producer's declaration (the workload's producer is idempotent unless told
    otherwise) followed by one acknowledged send per message, without ack times."""
    records: list[ProducerInfo | SendRecord] = [ProducerInfo(producer, idempotent)]
    records.extend(
        SendRecord(
            producer=producer,
            topic=topic,
            key=key,
            sequence=sequence,
            value_id=encode(key, sequence).decode(),
            partition=partition,
            offset=offset,
            time_s=None,
            error=None,
        )
        for key, sequence, partition, offset in acknowledged
    )
    return records
