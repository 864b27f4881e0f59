"""What an executor pod's change means for its job (operator/executor_failures.py), as pure functions:
which terminations are failures (issue 40, item 3) and how pods are counted (item 4). No cluster."""

from __future__ import annotations

from typing import Any

import pytest

from acidtables.operator.executor_failures import ExecutorTrouble, tally, trouble_of


def executor(name: str = "j-driver-1-exec-1", *, deleting: bool = False, **state: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": {"spark-role": "executor"}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T12:00:00Z"
    return {"metadata": metadata, "status": {"containerStatuses": [{"name": "executor", "state": state}]}}


def ended(
    code: int, reason: str = "Error", *, deleting: bool = False, name: str = "j-driver-1-exec-1"
) -> dict[str, Any]:
    return executor(name, deleting=deleting, terminated={"exitCode": code, "reason": reason, "message": "boom"})


def waiting(reason: str, name: str = "j-driver-1-exec-1") -> dict[str, Any]:
    return executor(name, waiting={"reason": reason, "message": f"{reason} message"})


@pytest.mark.parametrize(
    "pod",
    [ended(143), ended(143, deleting=True), ended(137, deleting=True), waiting("ErrImagePull") | {"metadata": {
        "name": "x", "deletionTimestamp": "2026-11-28T12:00:00Z"}}],
    ids=["SIGTERM", "SIGTERM-while-deleted", "killed-after-grace-while-deleted", "deleted-before-it-started"],
)  # fmt: skip
def test_an_executor_its_driver_stopped_is_no_trouble(pod: dict[str, Any]) -> None:
    assert trouble_of(pod) is None


def test_an_executor_that_ends_badly_after_its_driver_ended_is_no_failure() -> None:
    assert trouble_of(ended(1), driver_ended=True) is None
    assert trouble_of(ended(1)) == ExecutorTrouble("j-driver-1-exec-1", "Error", "boom", 1)


@pytest.mark.parametrize(
    ("pod", "code"),
    [(ended(1, deleting=True), 1), (ended(137, "OOMKilled", deleting=True), 137), (ended(137, "OOMKilled"), 137)],
    ids=["failed-then-deleted", "oom-killed-while-deleted", "oom-killed"],
)
def test_an_executor_that_failed_by_itself_is_a_failure_even_when_spark_deletes_it_since(
    pod: dict[str, Any], code: int
) -> None:
    """Spark deletes a failed executor's pod: the change the operator sees may already carry the
    deletion (kopf hands a handler the newest state of a burst), and its exit code says it failed."""
    trouble = trouble_of(pod)
    assert trouble is not None and trouble.exit_code == code


def test_an_executor_kubernetes_evicted_is_a_failure_with_that_reason() -> None:
    """Spark's deletion sets no DisruptionTarget; an eviction or a preemption does, and the job lost
    that executor."""
    pod = ended(143, deleting=True)
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    assert trouble_of(pod) == ExecutorTrouble("j-driver-1-exec-1", "EvictionByEvictionAPI", "boom", 143)
    evicted = ended(143)
    evicted["status"]["reason"] = "Evicted"
    assert trouble_of(evicted) == ExecutorTrouble("j-driver-1-exec-1", "Evicted", "boom", 143)


def test_a_pod_that_passes_through_two_reasons_is_one_pending_pod_said_once() -> None:
    first = tally({}, trouble_of(waiting("ErrImagePull")), [waiting("ErrImagePull")], {})
    assert first is not None and first.executors["pending"] == 1 and first.event is not None
    status = {"executors": first.executors}
    second = tally(status, trouble_of(waiting("ImagePullBackOff")), [waiting("ImagePullBackOff")], {})
    assert second is not None and second.executors["pending"] == 1 and second.event is None
    assert [e["reason"] for e in second.executors["recent"]] == ["ImagePullBackOff"]
    assert second.stalled == ("ImagePullBackOff", "executor pod j-driver-1-exec-1 cannot start: ImagePullBackOff: "
                              "ImagePullBackOff message")  # fmt: skip


def test_a_failed_pod_is_counted_once_however_often_it_changes() -> None:
    first = tally({}, trouble_of(ended(1)), [ended(1)], {})
    assert first is not None and first.executors["failed"] == 1 and first.said == "failed"
    # Spark deletes it: the same failure again, with a deletion timestamp; status alone remembers it
    again = tally({"executors": first.executors}, trouble_of(ended(1, deleting=True)), [], {})
    assert again is None
    # beyond the few pods status keeps, the operator's own memory does
    assert tally({}, trouble_of(ended(1)), [], {"j-driver-1-exec-1": "failed"}) is None


def test_a_pending_pod_that_fails_is_counted_failed_and_said_again() -> None:
    first = tally({}, trouble_of(waiting("Unschedulable")), [waiting("Unschedulable")], {})
    assert first is None  # Unschedulable comes from the scheduler's condition, not a container
    pending = tally({}, trouble_of(waiting("ErrImagePull")), [waiting("ErrImagePull")], {})
    assert pending is not None
    failed = tally({"executors": pending.executors}, trouble_of(ended(1)), [ended(1)], {"j-driver-1-exec-1": "pending"})
    assert failed is not None and failed.event is not None and failed.event[0] == "ExecutorFailed"
    assert (failed.executors["failed"], failed.executors["pending"], failed.stalled) == (1, 0, None)


def test_pending_counts_the_pods_waiting_now() -> None:
    pods = [waiting("ErrImagePull", "e-1"), waiting("ErrImagePull", "e-2"), executor("e-3", running={})]
    update = tally({}, trouble_of(pods[1]), pods, {})
    assert update is not None and update.executors["pending"] == 2
    assert update.stalled is not None and update.stalled[1].startswith(
        "2 executor pods cannot start; last: executor pod e-2"
    )
    started = tally({"executors": update.executors}, None, [pods[1], executor("e-1", running={})], {})
    assert started is not None and started.executors["pending"] == 1
