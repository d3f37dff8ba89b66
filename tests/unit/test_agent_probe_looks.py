"""The agent's repeated TLS looks (ZooKeeper `srvr`, the serial a listener presents) are
spaced out while what they saw stays true, and repeated at once while it does not."""

from __future__ import annotations

import pytest

from agent.cert_keeper import PresentedLooks
from agent.zk_ensemble import ServingLooks

pytestmark = pytest.mark.unit


class Answers:
    """A probe that answers from a script and counts its calls."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self, *_: object) -> object:
        self.calls += 1
        return self.answers.pop(0)


# (probe answers, call times, expected results, expected probe calls)
SERVING_CASES = [
    # Serving: looked at again only once the recheck interval has passed.
    ([True, True], [0, 3, 9.9, 10], [True, True, True, True], 2),
    # Not serving: looked at on every call, and the recovery is seen at once.
    ([False, False, True], [0, 1, 2, 3], [False, False, True, True], 3),
    # A failure is seen at the first look after the interval, then on every call.
    ([True, False, False], [0, 10, 11], [True, False, False], 3),
    # A clock that went back does not extend a look.
    ([True, True], [5, 1], [True, True], 2),
]


@pytest.mark.parametrize(("answers", "times", "expected", "calls"), SERVING_CASES)
def test_serving_looks_repeat_only_what_may_have_changed(
    answers: list[bool], times: list[float], expected: list[bool], calls: int
) -> None:
    probe = Answers(*answers)
    looks = ServingLooks(probe, recheck_s=10)  # type: ignore[arg-type]
    assert [looks.serving("127.0.1.1", t) for t in times] == expected
    assert probe.calls == calls


def test_serving_looks_keep_each_server_apart() -> None:
    looks = ServingLooks(lambda address: address == "127.0.1.1", recheck_s=10)
    assert looks.serving("127.0.1.1", 0) is True
    assert looks.serving("127.0.1.2", 0) is False


# (presented answers, (clock, serial on disk) per look, expected results, expected calls)
PRESENTED_CASES = [
    # The certificate on disk is presented: not looked at again within the interval.
    (["aa", "aa"], [(0, "aa"), (30, "aa"), (60, "aa")], ["aa", "aa", "aa"], 2),
    # A new certificate on disk: looked at at once, and on every call until presented.
    (
        ["aa", "aa", "aa", "bb"],
        [(0, "aa"), (1, "bb"), (2, "bb"), (3, "bb")],
        ["aa", "aa", "aa", "bb"],
        4,
    ),
    # A listener that does not answer is looked at on every call.
    ([None, None, "aa"], [(0, "aa"), (1, "aa"), (2, "aa")], [None, None, "aa"], 3),
]


@pytest.mark.parametrize(("answers", "looks", "expected", "calls"), PRESENTED_CASES)
def test_presented_looks_repeat_until_the_certificate_on_disk_is_presented(
    answers: list[str | None],
    looks: list[tuple[float, str]],
    expected: list[str | None],
    calls: int,
) -> None:
    probe = Answers(*answers)
    clock = [0.0]
    presented = PresentedLooks(60, lambda: clock[0])
    seen = []
    for at, on_disk in looks:
        clock[0] = at
        seen.append(presented.look("broker", probe, on_disk))  # type: ignore[arg-type]
    assert seen == expected
    assert probe.calls == calls


def test_presented_looks_keep_each_listener_apart() -> None:
    presented = PresentedLooks(60, lambda: 0.0)
    assert presented.look("broker", lambda: "aa", "aa") == "aa"
    assert presented.look("zookeeper", lambda: "old", "aa") == "old"
