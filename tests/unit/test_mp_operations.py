"""The operation state machine and the request validation (pure cores of the service)."""

from __future__ import annotations

import pytest

from management_plane.service.operations import (
    DONE,
    FAIL,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    WAIT,
    OperationKind,
    Outcome,
    StepName,
    StepRef,
    batches,
    expand_steps,
    progress,
    start,
    transition,
)
from management_plane.service.validation import (
    ClusterRequest,
    ValidationError,
    check_scale_down,
    validate_batch_size,
    validate_broker_config,
    validate_cluster_request,
    validate_name,
    zookeeper_participants,
)

pytestmark = pytest.mark.unit

VERSIONS = ("3.8.1", "3.9.2")
ZONES = ("zone-a", "zone-b", "zone-c")
A = StepRef(StepName.DRAIN, 0)
B = StepRef(StepName.FINISH)


def _texts(kind: str, batch_count: int = 0) -> list[str]:
    """The steps as the database stores them."""
    return [str(s) for s in expand_steps(kind, batch_count)]


def test_replacement_expands_one_batch_of_steps_per_group() -> None:
    steps = _texts("replace_vm", 2)
    assert steps[0] == "write_spec" and steps[-1] == "finish"
    assert steps[1:8] == [
        "create_vm:0",
        "wait_joined:0",
        "drain:0",
        "wait_drained:0",
        "recycle:0",
        "ensemble:0",
        "undrain:0",
    ]
    assert steps[8] == "create_vm:1"
    # Drain always precedes recycle, in every batch: no VM goes while it may hold data.
    for batch in (0, 1):
        assert steps.index(f"wait_drained:{batch}") < steps.index(f"recycle:{batch}")
        assert steps.index(f"wait_joined:{batch}") < steps.index(f"drain:{batch}")


def test_scale_down_drains_without_creating() -> None:
    steps = _texts("scale_down", 1)
    assert "create_vm:0" not in steps
    assert steps.index("wait_drained:0") < steps.index("recycle:0")
    assert steps[-2:] == ["write_spec", "finish"]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown operation kind"):
        expand_steps("explode")


@pytest.mark.parametrize(
    ("items", "size", "expected"),
    [
        (["a", "b", "c"], 1, [["a"], ["b"], ["c"]]),
        (["a", "b", "c"], 2, [["a", "b"], ["c"]]),
        (["a"], 5, [["a"]]),
        ([], 1, []),
    ],
)
def test_batches(items: list[str], size: int, expected: list[list[str]]) -> None:
    assert batches(items, size) == expected


def test_batch_size_zero_is_refused() -> None:
    with pytest.raises(ValueError):
        batches(["a"], 0)


def test_step_names_and_batches() -> None:
    drain = StepRef.parse("drain:3")
    assert (drain.name, drain.batch_index, str(drain)) == (StepName.DRAIN, 3, "drain:3")
    finish = StepRef.parse("finish")
    assert (finish.name, finish.batch_index, str(finish)) == (StepName.FINISH, 0, "finish")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("explode:1", "no step is named 'explode'"),
        ("drain:x", "not a step name with an optional ':<batch>'"),
        ("drain:", "not a step name"),
        ("", "not a step name"),
    ],
)
def test_a_bad_stored_step_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StepRef.parse(text)


@pytest.mark.parametrize("kind", list(OperationKind))
def test_every_stored_step_reads_back_as_itself(kind: OperationKind) -> None:
    for step in expand_steps(kind, 2):
        assert StepRef.parse(str(step)) == step


def test_wait_keeps_the_step_and_journals_only_the_start() -> None:
    state = start([A, B])
    assert state.status == PENDING
    first = transition(state, Outcome(WAIT, "not yet"))
    assert first.state.status == RUNNING and first.state.step == A
    assert first.journal == "started" and first.step_started
    again = transition(first.state, Outcome(WAIT, "still not"))
    assert again.state.step == A and again.journal is None and not again.step_started
    assert again.state.message == "still not"


def test_done_advances_and_the_last_done_succeeds() -> None:
    state = start([A, B], {"x": 1})
    one = transition(state, Outcome(DONE, "a done", {"y": 2}))
    assert one.state.step == B and one.state.status == RUNNING and one.journal == "done"
    assert one.state.context == {"x": 1, "y": 2}
    two = transition(one.state, Outcome(DONE, "b done"))
    assert two.state.status == SUCCEEDED and two.state.step is None
    assert progress(two.state) == (2, 2)
    with pytest.raises(ValueError, match="already succeeded"):
        transition(two.state, Outcome(DONE, "again"))


def test_fail_stops_at_the_failed_step() -> None:
    state = transition(start([A, B]), Outcome(DONE, "ok")).state
    failed = transition(state, Outcome(FAIL, "broke"))
    assert failed.state.status == FAILED and failed.state.step == B
    assert failed.journal == "failed" and progress(failed.state) == (1, 2)


def test_unknown_outcome_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown outcome"):
        transition(start([A]), Outcome("maybe", ""))  # type: ignore[arg-type]


def _request(**changes: object) -> ClusterRequest:
    values: dict[str, object] = dict(
        name="orders",
        broker_count=3,
        zones=ZONES,
        instance_type="local",
        kafka_version="3.9.2",
        broker_config={},
    )
    values.update(changes)
    return ClusterRequest(**values)  # type: ignore[arg-type]


def _validate(request: ClusterRequest) -> ClusterRequest:
    return validate_cluster_request(request, VERSIONS, ZONES, ("local",))


def test_a_good_request_passes() -> None:
    clean = _validate(_request(broker_config={"log.retention.hours": " 48 "}))
    assert clean.broker_config == {"log.retention.hours": "48"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"broker_count": 0}, "broker_count must be at least 1"),
        ({"broker_count": 65}, "at most 64"),
        ({"kafka_version": "2.8.0"}, "kafka_version '2.8.0' is not available"),
        ({"name": "Orders"}, "name 'Orders' is invalid"),
        ({"name": "-orders"}, "is invalid"),
        ({"name": "orders-"}, "is invalid"),
        ({"name": ""}, "is invalid"),
        ({"name": "a" * 41}, "is invalid"),
        ({"zones": ("zone-a", "zone-z")}, "zones zone-z unknown"),
        ({"zones": ()}, "at least one zone"),
        ({"zones": ("zone-a", "zone-a")}, "duplicates"),
        ({"instance_type": "m5.large"}, "instance_type 'm5.large' is not offered"),
        (
            {"broker_config": {"listeners": "x"}},
            "broker_config.listeners: 'listeners' is set by the agent",
        ),
        ({"broker_config": {"default.replication.factor": "4"}}, "above the broker count 3"),
        ({"broker_config": {"offsets.topic.replication.factor": "5"}}, "above the broker count"),
        ({"broker_config": {"default.replication.factor": "0"}}, "at least 1"),
        ({"broker_config": {"min.insync.replicas": "4"}}, "min.insync.replicas is 4"),
        (
            {"broker_config": {"log.retention.hours": "soon"}},
            "log.retention.hours='soon' is not a whole number",
        ),
        ({"broker_config": {"log.cleaner.enable": "yes"}}, "true or false"),
        ({"broker_config": {"compression.type": "brotli"}}, "is not one of the valid values"),
        (
            {"broker_config": {"inter.broker.protocol.version": "latest"}},
            "is not one of the valid values",
        ),
    ],
)
def test_bad_requests_name_the_problem(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace(".", r"\.").replace("'", "'")):
        _validate(_request(**changes))


def test_names_and_sizes() -> None:
    assert validate_name("a") == "a"
    assert validate_name("orders-eu-1") == "orders-eu-1"
    assert [zookeeper_participants(n) for n in (1, 2, 3, 4, 5, 9)] == [1, 1, 3, 3, 5, 5]
    with pytest.raises(ValidationError):
        validate_batch_size(0)
    assert validate_batch_size(2) == 2


def test_scale_down_never_goes_below_the_replication_factor() -> None:
    with pytest.raises(ValidationError, match="below the replication factor 3"):
        check_scale_down(4, 2, {"default.replication.factor": "3"})
    with pytest.raises(ValidationError, match="not below the current"):
        check_scale_down(3, 3, {})
    check_scale_down(4, 3, {"default.replication.factor": "3"})


def test_min_isr_is_checked_against_the_default_replication() -> None:
    with pytest.raises(ValidationError, match="replication factor 2"):
        validate_broker_config({"min.insync.replicas": "3"}, 2)
    assert validate_broker_config({"min.insync.replicas": "2"}, 3) == {"min.insync.replicas": "2"}


def test_upgrade_pins_the_protocol_around_the_replacements() -> None:
    steps = _texts("upgrade", 3)
    assert steps[:3] == ["pin_protocol", "wait_applied:0", "write_spec"]
    assert steps[-3:] == ["unpin_protocol", "wait_applied:1", "finish"]
    replaced = [s for s in steps if s.startswith("recycle:")]
    assert replaced == ["recycle:0", "recycle:1", "recycle:2"]
    assert steps.index("wait_applied:0") < steps.index("create_vm:0")
    assert steps.index("undrain:2") < steps.index("unpin_protocol")


def test_protocol_version_is_major_minor() -> None:
    from management_plane.service.controller import protocol_version

    assert protocol_version("3.8.1") == "3.8"
    assert protocol_version("3.9.2") == "3.9"
