"""Session harness: one shared real 3-VM cluster, fresh clusters for destructive tests,
JVM logs attached to failed tests, and a check that nothing is left running."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from management_plane.local.probes import port_open
from planner.pki.files import IdentityFiles
from tests import harness
from tests.harness import ClusterHandle
from tests.mp_service import ServiceHandle, free_port


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """The real 3-VM cluster shared by every test that leaves it as it found it.
    Use `kafka_cluster.unique_topic(name)` for topic names."""
    home = tmp_path_factory.mktemp("shared-cluster")
    handle = harness.start_cluster(
        home, nodes=3, name="shared", address_base=harness.SHARED_CLUSTER_BASE
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


@pytest.fixture(scope="session")
def zk_hosts(kafka_cluster: ClusterHandle) -> str:
    """host:port list of the shared cluster's real ZooKeeper ensemble (no chroot)."""
    return kafka_cluster.zookeeper_hosts


@pytest.fixture(scope="session")
def zk_identity(kafka_cluster: ClusterHandle) -> IdentityFiles:
    """The admin certificate the shared cluster's ZooKeeper takes (its clients need one)."""
    return kafka_cluster.admin_identity


@pytest.fixture
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServiceHandle]:
    """The real management-plane service (`kaas serve`) in a process of its own; the local
    clusters it makes live in the fresh-cluster address range. A test marked
    `@pytest.mark.service_args("--opt", "value")` starts it with those options."""
    marker = request.node.get_closest_marker("service_args")
    handle = ServiceHandle(
        tmp_path / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=tuple(marker.args) if marker else (),
    )
    handle.start()
    try:
        yield handle
    finally:
        handle.tear_down()


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[ClusterHandle]:
    """A 3-VM cluster of the test's own, for tests that break it."""
    handle = harness.start_cluster(
        tmp_path / "cluster", nodes=3, name="fresh", address_base=harness.FRESH_CLUSTER_BASE
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


@pytest.fixture
def fresh_cluster_with_agents(tmp_path: Path) -> Iterator[ClusterHandle]:
    """A 3-VM cluster of the test's own whose VMs run kaas-agent (`kaas up --agents`)."""
    handle = harness.start_cluster(
        tmp_path / "cluster",
        nodes=3,
        name="agents",
        address_base=harness.FRESH_CLUSTER_BASE,
        agents=True,
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, ClusterHandle):
                for title, text in value.log_tails():
                    report.sections.append((f"{value.layout.name} {title}", text))
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = harness.kill_leftovers()
    listening = [
        f"{a}:{p}" for a, p in sorted(harness.USED_ENDPOINTS) if port_open(a, p, timeout=0.2)
    ]
    if left or listening:
        pids = ", ".join(str(r.pid) for r in left)
        message = f"harness: processes left running after the session (killed now): [{pids}]; still listening: {listening}"
        session.config.get_terminal_writer().line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
