"""A CompactionJob's next step as a pure decision (operator/compactions.py): every branch, no cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from acidtables.operator.compactions import TableState, decide, executor_deadline, waits_for_nothing_but_its_ttl
from acidtables.operator.executor_failures import census, last_words

NOW = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(phase: str, *, created: datetime = NOW, message: str | None = None, code: int = 0) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if message is not None:
        state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}}
        status["containerStatuses"] = [{"name": "driver", "state": state}]
    return {"metadata": {"name": "j-driver-1", "creationTimestamp": stamp(created)}, "status": status}


def test_a_new_job_creates_its_first_driver_pod() -> None:
    decision = decide({}, {}, None, NOW)
    assert (decision.create_attempt, decision.status["phase"], decision.status["attempts"]) == (1, "Pending", 1)


def test_an_outcome_in_the_termination_message_becomes_the_phase_and_result() -> None:
    outcome = {"phase": "Succeeded", "committedVersion": 7, "filesRemoved": 4, "filesAdded": 1}
    decision = decide({}, {"phase": "Running", "attempts": 1}, pod("Succeeded", message=json.dumps(outcome)), NOW)
    assert decision.status["phase"] == "Succeeded"
    assert decision.status["result"] == {"committedVersion": 7, "filesRemoved": 4, "filesAdded": 1}
    assert decision.create_attempt is None


def test_a_conflict_is_final_and_a_failure_is_retried_with_backoff() -> None:
    conflicted = json.dumps({"phase": "Conflicted", "conflict": {"winningVersion": 9}})
    final = decide(
        {"backoffLimit": 3}, {"attempts": 1, "phase": "Running"}, pod("Failed", message=conflicted, code=3), NOW
    )
    assert final.status["phase"] == "Conflicted" and final.create_attempt is None
    failed = json.dumps({"phase": "Failed", "message": "boom"})
    retry = decide({"backoffLimit": 3}, {"attempts": 2, "phase": "Running"}, pod("Failed", message=failed, code=1), NOW)
    assert retry.status["retryAt"] == stamp(NOW + timedelta(seconds=20)) and "phase" not in retry.status
    again = decide(
        {"backoffLimit": 3}, {"attempts": 2, "retryAt": retry.status["retryAt"]}, None, NOW + timedelta(seconds=21)
    )
    assert (again.create_attempt, again.status["attempts"]) == (3, 3)


def test_the_last_allowed_failure_fails_the_job() -> None:
    failed = json.dumps({"phase": "Failed", "message": "boom"})
    decision = decide(
        {"backoffLimit": 0}, {"attempts": 1, "phase": "Running"}, pod("Failed", message=failed, code=1), NOW
    )
    assert (decision.status["phase"], decision.status["message"]) == ("Failed", "boom")


def test_a_pod_without_an_outcome_is_a_failure_that_says_how_it_ended() -> None:
    decision = decide({"backoffLimit": 0}, {"attempts": 1}, pod("Failed", message="", code=137), NOW)
    assert "exit code 137" in decision.status["message"]


def test_a_pod_that_does_not_start_in_time_fails_its_attempt() -> None:
    stuck = pod("Pending", created=NOW - timedelta(seconds=61))
    decision = decide(
        {"backoffLimit": 0}, {"attempts": 1, "phase": "Pending"}, stuck, NOW, start_timeout=timedelta(seconds=60)
    )
    assert decision.status["phase"] == "Failed" and "did not start within 60 s" in decision.status["message"]
    assert decision.delete_pod == "j-driver-1"
    young = pod("Pending", created=NOW - timedelta(seconds=59))
    assert decide({}, {"attempts": 1, "phase": "Pending"}, young, NOW, start_timeout=timedelta(seconds=60)).status == {}


def test_a_finished_job_is_deleted_after_its_ttl_and_not_before() -> None:
    done = {"phase": "Succeeded", "completionTime": stamp(NOW - timedelta(seconds=100))}
    assert decide({}, done, None, NOW, ttl_seconds=101).delete_job is False
    assert decide({}, done, None, NOW, ttl_seconds=100).delete_job is True
    assert decide({}, done, None, NOW).delete_job is False


def test_a_finished_job_needs_no_request_until_its_ttl_is_due() -> None:
    """The operator's 2 s timer fires for every kept job: a finished one is judged from the status kopf
    holds, with no read of the job or its pod, until its TTL is due (then decide deletes it)."""
    done = {"phase": "Failed", "completionTime": stamp(NOW - timedelta(seconds=100))}
    assert waits_for_nothing_but_its_ttl({}, done, NOW)  # no TTL: kept, never touched again
    assert waits_for_nothing_but_its_ttl({"ttlSecondsAfterFinished": 101}, done, NOW)
    assert not waits_for_nothing_but_its_ttl({"ttlSecondsAfterFinished": 100}, done, NOW)
    assert not waits_for_nothing_but_its_ttl({}, {"phase": "Running", "attempts": 1}, NOW)


def unschedulable(message: str) -> dict[str, Any]:
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"metadata": {"name": "j-driver-1", "namespace": "sales", "creationTimestamp": stamp(NOW)},
            "status": {"phase": "Pending", "conditions": [scheduled]}}  # fmt: skip


def test_an_unschedulable_driver_stalls_the_job_once_per_cause_and_a_missing_claim_fails_it() -> None:
    pending = {"attempts": 1, "phase": "Pending"}
    cpu = decide({}, pending, unschedulable("0/1 nodes are available: 1 Insufficient cpu."), NOW)
    assert (cpu.stalled, cpu.reason, cpu.status.get("phase")) == (True, "Unschedulable", None)
    said = {**pending, "message": cpu.status["message"]}
    assert decide({}, said, unschedulable("0/1 nodes are available: 1 Insufficient cpu."), NOW).event is None
    claim = decide({}, pending, unschedulable('0/1 nodes are available: persistentvolumeclaim "lake" not found.'), NOW)
    assert (claim.status["phase"], claim.reason, claim.delete_pod) == ("Failed", "ClaimNotFound", "j-driver-1")
    assert "PersistentVolumeClaim lake, which does not exist in namespace sales" in claim.status["message"]


def test_a_driver_failure_after_executor_failures_leads_with_the_executors_words() -> None:
    executors = {"failed": 4, "recent": [{"pod": "j-exec-4", "reason": "Error", "exitCode": 1, "message": "refused"}]}
    status = {"attempts": 1, "phase": "Running", "executors": executors}
    decision = decide({"backoffLimit": 0}, status, pod("Failed", message=json.dumps(
        {"phase": "Failed", "message": "stopped SparkContext"})), NOW)  # fmt: skip
    assert (decision.status["phase"], decision.reason) == ("Failed", "ExecutorsFailed")
    assert decision.status["message"] == (
        "executors failed to start or to reach the driver (4 executor pods failed; last: executor pod j-exec-4 "
        "exited with code 1 (Error): refused); the driver then ended: stopped SparkContext"
    )
    retried = decide({"backoffLimit": 1}, status, pod("Failed", message=json.dumps({"phase": "Failed"})), NOW)
    assert retried.status["retryAt"] and "executors failed" in retried.status["message"]


def test_an_executors_last_words_skip_stack_frames() -> None:
    log = "INFO starting\nCaused by: java.net.ConnectException: refused\n\tat io.netty.X(X.java:1)\n\t... 12 more\n"
    assert last_words(log) == "INFO starting | Caused by: java.net.ConnectException: refused"
    assert last_words(log, lines=1) == "Caused by: java.net.ConnectException: refused"


WAITING = TableState(False, "WaitingForTable", "no AcidTable orders in namespace sales")


def waiting_since(moment: datetime, message: str) -> dict[str, Any]:
    stalled = {"type": "Stalled", "status": "True", "reason": "WaitingForTable", "lastTransitionTime": stamp(moment)}
    return {"phase": "Pending", "message": message, "conditions": [stalled]}


def test_a_job_whose_table_is_not_ready_waits_and_says_so_once() -> None:
    first = decide({}, {}, None, NOW, table=WAITING)
    assert first.create_attempt is None and first.stalled is True and first.reason == "WaitingForTable"
    assert first.status["message"].startswith("no AcidTable orders in namespace sales; waiting for it to be Ready")
    later = decide({}, waiting_since(NOW, first.status["message"]), None, NOW + timedelta(seconds=60), table=WAITING)
    assert later.status == {} and later.event is None  # said already


def test_the_wait_for_a_table_runs_from_the_stalled_condition_so_a_restart_does_not_extend_it() -> None:
    status = waiting_since(NOW, "said")
    later = NOW + timedelta(seconds=61)
    decision = decide({}, status, None, later, table=WAITING, table_wait_timeout=timedelta(seconds=60))
    assert (decision.status["phase"], decision.reason, decision.stalled) == ("Failed", "NoTable", False)
    assert "gave up waiting for it after 60 s" in decision.status["message"]


def test_a_job_that_waited_for_its_table_starts_once_it_is_ready() -> None:
    decision = decide({}, waiting_since(NOW, "said"), None, NOW + timedelta(seconds=5))
    assert (decision.create_attempt, decision.stalled, decision.status["message"]) == (1, False, None)


# --- the executors' start deadline (issue 40, item 2) ---------------------------------------------


def executor(name: str, **state: Any) -> dict[str, Any]:
    labels = {"spark-role": "executor"}
    return {"metadata": {"name": name, "labels": labels}, "status": {"containerStatuses": [{"state": state}]}}


PULLING = {"reason": "ErrImagePull", "message": 'failed to pull image "spark:nope": not found'}
BACKING_OFF = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "spark:nope"'}
RUNNING_JOB = {"attempts": 1, "phase": "Running"}


def with_executors(requested: int, **spark: Any) -> dict[str, Any]:
    return {"backoffLimit": 3, "spark": {"executors": requested, **spark}}


def judged(spec: dict[str, Any], pods: list[dict[str, Any]], *, after: float, seen_running: int = 0) -> Any:
    """The decision `after` seconds past the driver's start (pod() starts it at NOW), with the attempt's
    executor pods as the operator lists them once the deadline has passed."""
    now = NOW + timedelta(seconds=after)
    due = executor_deadline(spec, RUNNING_JOB, pod("Running"), timedelta(seconds=60))
    found = census(pods, seen_running) if due is not None and now >= due else None
    return decide(spec, RUNNING_JOB, pod("Running"), now, executors=found, executor_start_timeout=timedelta(seconds=60))


def test_executors_none_of_which_started_by_their_deadline_fail_the_job_naming_their_reasons() -> None:
    pods = [executor("j-exec-1", waiting=PULLING), executor("j-exec-2", waiting=BACKING_OFF)]
    assert judged(with_executors(2), pods, after=59).status == {}  # not yet
    decision = judged(with_executors(2), pods, after=61)
    assert (decision.status["phase"], decision.reason, decision.stalled) == ("Failed", "ExecutorsNotStarted", False)
    assert decision.create_attempt is None and "retryAt" not in decision.status  # not retried: backoffLimit 3
    assert decision.status["message"] == (
        "no executor started within 60 s of the driver's start (2 requested): executor pod j-exec-2 cannot "
        'start: ImagePullBackOff: Back-off pulling image "spark:nope" (1 more ErrImagePull)'
    )
    assert (decision.delete_pod, decision.delete_executors) == ("j-driver-1", ("j-exec-1", "j-exec-2"))
    assert decision.event is not None and decision.event[:2] == ("Warning", "ExecutorsNotStarted")


def test_a_driver_that_created_no_executor_pod_fails_at_the_deadline_saying_so() -> None:
    decision = judged(with_executors(2), [], after=61)
    assert decision.status["phase"] == "Failed" and "created no executor pod" in decision.status["message"]


def test_a_job_with_some_executors_running_at_the_deadline_goes_on_and_says_how_many_never_started() -> None:
    pods = [executor(f"j-exec-{i}", running={"startedAt": stamp(NOW)}) for i in range(1, 6)]
    pods += [executor(f"j-exec-{i}", waiting=BACKING_OFF) for i in range(6, 9)]
    decision = judged(with_executors(8), pods, after=61)
    assert "phase" not in decision.status and decision.delete_pod is None and decision.delete_executors == ()
    assert decision.status["executors"] == {"neverStarted": 3} and decision.stalled is False
    assert decision.status["message"].startswith(
        "5 of 8 executors running at the start deadline (60 s); 3 never started: executor pod j-exec-8 cannot "
        "start: ImagePullBackOff"
    )
    assert decision.status["message"].endswith("(2 more ImagePullBackOff); the job goes on with 5")
    once = {**RUNNING_JOB, "executors": {"neverStarted": 3}}
    assert executor_deadline(with_executors(8), once, pod("Running"), timedelta(seconds=60)) is None  # judged once


def test_executors_spark_removed_after_they_ran_are_no_reason_to_fail() -> None:
    """The application ended and Spark deleted its executors just before the deadline, while its driver
    still runs: the operator saw them running, so they started."""
    decision = judged(with_executors(2), [], after=61, seen_running=2)
    assert decision.status == {"executors": {"neverStarted": 0}} and decision.event is None
    ended = [executor("j-exec-1", terminated={"exitCode": 143}), executor("j-exec-2", terminated={"exitCode": 143})]
    assert judged(with_executors(2), ended, after=61).status == {"executors": {"neverStarted": 0}}


def test_a_jobs_own_executor_start_timeout_overrides_the_operators() -> None:
    pods = [executor("j-exec-1", waiting=PULLING)]
    assert judged(with_executors(1, executorStartTimeoutSeconds=120), pods, after=61).status == {}
    assert judged(with_executors(1, executorStartTimeoutSeconds=120), pods, after=121).status["phase"] == "Failed"
    assert judged(with_executors(1, executorStartTimeoutSeconds=30), pods, after=31).status["phase"] == "Failed"


def test_the_deadline_runs_from_the_drivers_container_start() -> None:
    started = pod("Running", created=NOW - timedelta(seconds=600))
    started["status"]["containerStatuses"] = [{"name": "driver", "state": {"running": {"startedAt": stamp(NOW)}}}]
    assert executor_deadline(with_executors(1), RUNNING_JOB, started, timedelta(seconds=60)) == NOW + timedelta(
        seconds=60
    )
    assert executor_deadline({}, RUNNING_JOB, started, timedelta(seconds=60)) is None  # local mode: no executors


def test_automatic_job_names_and_table_labels_fit_a_label_value() -> None:
    """Every pod of a job carries its name as a label value (63 characters at most): an automatic job of a
    table with a long name must still fit, and two such tables must not share a name."""
    import re

    from acidtables.operator.handlers import automatic_job_name, label_value

    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    assert automatic_job_name("orders", 12, "minor") == "orders-auto-12-minor"
    long_a, long_b = "a" * 50 + ".b-" + "x" * 40, "a" * 50 + ".b-" + "y" * 40
    names = {automatic_job_name(t, 123456, "major") for t in (long_a, long_b)}
    assert len(names) == 2
    assert all(len(n) <= 63 and subdomain.match(n) and n.endswith("-auto-123456-major") for n in names), names
    assert label_value("orders") == "orders"
    assert len(label_value(long_a)) == 63 and label_value(long_a) != label_value(long_b)
