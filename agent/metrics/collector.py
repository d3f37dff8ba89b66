"""MetricsCollector: one collect = one Jolokia bulk read + psutil reads -> one record."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Sequence

from agent.metrics.host import read_host
from agent.metrics.jmx import JMX_READS, merge_results, split_reads
from agent.metrics.jolokia import JolokiaBulkReader
from agent.metrics.record import (
    Baseline,
    BrokerIdentity,
    HostReading,
    MetricsSample,
    build_record,
)

DEFAULT_JOLOKIA_TIMEOUT_S = 5.0


class MetricsCollector:
    """Collects this broker's metrics record. Holds no connection between collects; keeps
    only the previous collect's counters, for interval rates. `collect()` never raises:
    a failed read leaves its values null and lists the failure in the sample's errors.

    Not thread-safe: call collect() from one thread (the agent's cycle).
    """

    def __init__(
        self,
        cluster: str,
        broker_id: int,
        rack: str | None,
        jolokia_url: str,
        log_dirs: Sequence[str],
        interval_s: float,
        *,
        agent_version: str | None = None,
        jolokia_timeout_s: float | None = None,
        jolokia_context: ssl.SSLContext | None = None,
        read_host_values: Callable[[Sequence[str]], HostReading] = read_host,
        controller_jolokia_url: str | None = None,
        kraft: bool = False,
    ) -> None:
        """`interval_s` is the agent's collection interval: the record's interval_s on the
        first collect (later ones record the measured time since the previous collect).
        `jolokia_timeout_s` bounds the Jolokia read; default: the smaller of 5 s and half
        the interval, so a hung broker cannot hold up the agent's cycle.
        `kraft`: the controller MBeans are not the broker's; they are read from
        `controller_jolokia_url` (the VM's controller), or not at all on a VM without one."""
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if broker_id < 0:
            raise ValueError(f"broker_id must be non-negative, got {broker_id}")
        self.identity = BrokerIdentity(cluster, broker_id, rack, agent_version)
        self.log_dirs = tuple(str(d) for d in log_dirs)
        self.interval_s = interval_s
        timeout = jolokia_timeout_s or min(DEFAULT_JOLOKIA_TIMEOUT_S, interval_s / 2)
        self.jolokia = JolokiaBulkReader(jolokia_url, timeout, jolokia_context)
        self.broker_reads, self.controller_reads = split_reads(JMX_READS, kraft)
        self.controller_jolokia = (
            JolokiaBulkReader(controller_jolokia_url, timeout, jolokia_context)
            if controller_jolokia_url is not None and self.controller_reads
            else None
        )
        self._read_host_values = read_host_values
        self._baseline: Baseline | None = None

    def collect(self) -> MetricsSample:
        started = time.perf_counter()
        jmx = self.jolokia.read(self.broker_reads)
        if self.controller_jolokia is not None:
            controller = self.controller_jolokia.read(self.controller_reads)
            jmx = merge_results(jmx, controller, self.controller_reads)
        at_s = time.monotonic()
        host = self._read_host_values(self.log_dirs)
        built = build_record(
            self.identity,
            jmx,
            host,
            previous=self._baseline,
            at_s=at_s,
            timestamp_ms=time.time_ns() // 1_000_000,
            interval_s=self.interval_s,
        )
        self._baseline = built.baseline
        return MetricsSample(built.record, built.errors, time.perf_counter() - started)
