"""Session harness: one shared real 3-VM cluster, fresh clusters for destructive tests,
JVM logs attached to failed tests, and a check that nothing is left running."""

from __future__ import annotations

import functools
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from management_plane.local.probes import port_open
from planner.pki.files import IdentityFiles
from tests import harness
from tests.harness import ClusterHandle
from tests.mp_service import ServiceHandle, free_port

# The test files that use the shared cluster run together on one worker, ahead of the rest,
# and the cluster stops after the last of them: one cluster start for the session instead of
# one per worker, and no idle cluster beside the drills. `--dist loadfile` groups them
# (SharedClusterScheduling); xdist's own `loadgroup` cannot (pytest 9 ignores the test id
# it rewrites), and its scheduler sees only test ids, so a file counts as one of the group
# when its source names a shared-cluster fixture.
SHARED_CLUSTER_GROUP = "shared-cluster"
_SHARED_CLUSTER_FIXTURE = re.compile(r"\b(kafka_cluster|zk_hosts|zk_identity)\b")
_REPOSITORY = Path(__file__).resolve().parent.parent


@functools.cache
def shared_cluster_files() -> frozenset[str]:
    """The test files (as test ids name them) whose source uses the shared cluster."""
    return frozenset(
        str(path.relative_to(_REPOSITORY))
        for path in sorted((_REPOSITORY / "tests").rglob("test_*.py"))
        if _SHARED_CLUSTER_FIXTURE.search(path.read_text())
    )


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class SharedClusterScheduling(LoadScopeScheduling):
    """`--dist loadfile` (each file on one worker, for its module-scoped cluster), with the
    files of the shared cluster one unit."""

    def _split_scope(self, nodeid: str) -> str:
        file = _file_of(nodeid)
        return SHARED_CLUSTER_GROUP if file in shared_cluster_files() else file


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") == "loadfile":
        return SharedClusterScheduling(config, log)
    return None


class _SharedCluster:
    handle: ClusterHandle | None = None


def _uses_shared_cluster(item: pytest.Item) -> bool:
    return "kafka_cluster" in getattr(item, "fixturenames", ())


def _in_shared_group(item: pytest.Item) -> bool:
    return _file_of(item.nodeid) in shared_cluster_files()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Without xdist too, the shared cluster's files run first, together."""
    items.sort(key=lambda item: not _in_shared_group(item))


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """The real 3-VM cluster shared by every test that leaves it as it found it.
    Use `kafka_cluster.unique_topic(name)` for topic names."""
    home = tmp_path_factory.mktemp("shared-cluster")
    handle = harness.start_cluster(
        home, nodes=3, name="shared", address_base=harness.SHARED_CLUSTER_BASE
    )
    _SharedCluster.handle = handle
    try:
        yield handle
    finally:
        if _SharedCluster.handle is not None:
            _SharedCluster.handle = None
            harness.stop_cluster(handle)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _uses_shared_cluster(item) and not _in_shared_group(item):
        pytest.fail(
            f"{item.nodeid} uses the shared cluster through a fixture its file does not name;"
            f" tests/conftest.py groups the files whose source names one"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    result = yield
    handle = _SharedCluster.handle
    leaving = nextitem is None or not _in_shared_group(nextitem)
    if handle is not None and _in_shared_group(item) and leaving:
        _SharedCluster.handle = None
        harness.stop_cluster(handle)
    return result


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
