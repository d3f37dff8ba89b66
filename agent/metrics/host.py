"""Host values through psutil: CPU times, memory, the log dirs' disk, network counters.
Each read fails on its own: its fields stay None and the failure is a ReadError."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

import psutil

from agent.metrics.record import HostReading, ReadError


def read_host(log_dirs: Sequence[str]) -> HostReading:
    reading = HostReading()
    errors: list[ReadError] = []
    try:
        times = psutil.cpu_times()
        # psutil's own cpu_percent() definition: guest time is already counted in user and
        # nice on Linux; idle and iowait are not busy.
        total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
        idle = times.idle + getattr(times, "iowait", 0.0)
        reading = replace(reading, cpu_busy_s=total - idle, cpu_total_s=total)
    except Exception as exc:  # any failure of a read is data, not a crash
        errors.append(ReadError("psutil", "host.cpu_percent", f"cpu_times: {exc}"))
    try:
        memory = psutil.virtual_memory()
        reading = replace(
            reading, memory_used_bytes=int(memory.used), memory_total_bytes=int(memory.total)
        )
    except Exception as exc:
        errors.append(
            ReadError(
                "psutil",
                "host.memory_used_bytes, host.memory_total_bytes",
                f"virtual_memory: {exc}",
            )
        )
    try:
        used, free = _log_dirs_usage(log_dirs)
        reading = replace(reading, log_dir_used_bytes=used, log_dir_free_bytes=free)
    except Exception as exc:
        errors.append(
            ReadError(
                "psutil", "host.log_dir_used_bytes, host.log_dir_free_bytes", f"disk_usage: {exc}"
            )
        )
    try:
        network = psutil.net_io_counters()
        reading = replace(
            reading,
            network_bytes_sent=int(network.bytes_sent),
            network_bytes_recv=int(network.bytes_recv),
        )
    except Exception as exc:
        errors.append(
            ReadError(
                "psutil",
                "host.network_bytes_sent, host.network_bytes_recv",
                f"net_io_counters: {exc}",
            )
        )
    return replace(reading, errors=tuple(errors))


def _log_dirs_usage(log_dirs: Sequence[str]) -> tuple[int, int]:
    """Used and free bytes over the filesystems holding the log dirs, each filesystem once
    (several log dirs on one volume would otherwise count it several times)."""
    if not log_dirs:
        raise ValueError("no log dir configured")
    seen_devices: set[int] = set()
    used = free = 0
    for log_dir in log_dirs:
        device = os.stat(log_dir).st_dev
        if device in seen_devices:
            continue
        seen_devices.add(device)
        usage = psutil.disk_usage(log_dir)
        used += int(usage.used)
        free += int(usage.free)
    return used, free
