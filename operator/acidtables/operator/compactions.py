"""A CompactionJob's life as a pure decision: given its spec, its status, its driver pod (or none) and
the time, what to do next. The kopf timer calls `decide` and carries the decision out, so every step
is idempotent (a pod has a deterministic name per attempt; creating one that exists adopts it) and an
operator restarted mid-job picks up exactly where the status says it was.

Before its first attempt a job waits for its table (`TableState`): an AcidTable applied together with the
job (one `kubectl apply -f`, a GitOps sync) is Ready a second or two after the job is seen, so the job
stays Pending with `Stalled=True` (reason `WaitingForTable` or `TableNotReady`) and fails with `NoTable`
only when the table is not Ready within `table_wait_timeout` of the wait's start (the Stalled condition's
transition time, kept in status, so a restarted operator does not start the wait again).

A running driver's executors have a start deadline (issue 40, item 2): `spark.executorStartTimeoutSeconds`
of the job, else the operator's `executor_start_timeout`, from the driver's start. It is judged once, from
the attempt's executor pods then (`executor_failures.Census`): with none ever started the job fails
(`ExecutorsNotStarted`, the pods' reasons in the message) and the driver and its executor pods are
removed, not retried (the deadline began once the cluster ran the driver, so what keeps the executors out
for that long, an image, room, a quota, needs someone to change it); with some running it goes on, and
`status.executors.neverStarted` says how many did not start.

Phases: Pending (waiting for its table, or pod created, not running), Running, Succeeded, Conflicted
(lost to a concurrent commit: not retried, the next run will find the files), Failed (after
`backoffLimit` retries, or a driver that never started or vanished, a driver pod the API server refuses
for good, or one no retry can start: its claim does not exist or its image name is invalid, pod_states;
or a table that was not Ready in time).

A driver pod the API server refuses (`creation_refused`) is judged by its answer: an invalid spec
(422/400), a refusal by RBAC (403 "cannot create") or a namespace that is gone (404) will refuse every
attempt alike, so the job fails at once; an exhausted quota, a ServiceAccount not there yet (the
operator creates it before each attempt) or an API server that is busy or away (429, 5xx) may clear,
so the attempt is retried with backoff, and the condition and Event say when.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import pod_states
from .conditions import stamp
from .executor_failures import Census, failure_reported, never_started, some_never_started

TERMINAL = ("Succeeded", "Failed", "Conflicted")
#: how long a driver pod may stay unstarted (image pull, unschedulable) before the attempt fails
DEFAULT_START_TIMEOUT = timedelta(minutes=5)
#: how long a job waits for its AcidTable to be Ready before it fails with NoTable
DEFAULT_TABLE_WAIT_TIMEOUT = timedelta(minutes=5)
#: how long a running driver's executors may take to start before the job fails (none started) or goes
#: on without those that did not
DEFAULT_EXECUTOR_START_TIMEOUT = timedelta(minutes=5)
#: the Stalled reasons of a job waiting for its table
TABLE_WAIT_REASONS = frozenset({"WaitingForTable", "TableNotReady"})


def pod_name(job: str, attempt: int) -> str:
    return f"{job}-driver-{attempt}"[:253]


@dataclass
class Decision:
    status: dict[str, Any] = field(default_factory=dict)
    #: create the driver pod of this attempt
    create_attempt: int | None = None
    delete_pod: str | None = None
    #: executor pods to remove with the driver (Kubernetes' garbage collector would, later, by owner)
    delete_executors: tuple[str, ...] = ()
    delete_job: bool = False
    #: (type, reason, message) of an Event to post on the job
    event: tuple[str, str, str] | None = None
    #: the CamelCase cause for the job's conditions (a refusal's reason), when not the phase itself
    reason: str | None = None
    #: the Stalled condition: True while an attempt waits on something (a retry, a pod that cannot
    #: start), False once one runs; None leaves it as it is
    stalled: bool | None = None


@dataclass(frozen=True)
class TableState:
    """Whether a job's table can be compacted now, and if not, why (read by `driving` from the API
    server and the catalog)."""

    ready: bool
    #: WaitingForTable (no AcidTable of that name yet) or TableNotReady (there, not Ready); "" when ready
    reason: str = ""
    message: str = ""


TABLE_READY = TableState(True)


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        if container.get("name") == "driver" and "terminated" in (container.get("state") or {}):
            terminated: Mapping[str, Any] = container["state"]["terminated"]
            return terminated
    return None


def _waiting_reason(pod: Mapping[str, Any]) -> str:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', 'Waiting')}: {waiting.get('message', '')}".strip(": ")
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("status") == "False" and condition.get("message"):
            return f"{condition.get('reason', condition.get('type'))}: {condition['message']}"
    return "not scheduled or not started"


def outcome_of(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The job's outcome from the driver's termination message (what acidtables.jobs wrote)."""
    terminated = _terminated(pod) or {}
    try:
        outcome = json.loads(terminated.get("message") or "{}")
    except ValueError:
        outcome = {}
    if not isinstance(outcome, dict) or "phase" not in outcome:
        code = terminated.get("exitCode")
        reason = terminated.get("reason") or pod.get("status", {}).get("reason") or "unknown"
        return {"phase": "Failed", "message": f"the driver ended ({reason}, exit code {code}) without an outcome"}
    return outcome


def driver_started(pod: Mapping[str, Any]) -> datetime | None:
    """When the driver's container started (the kubelet's startedAt), else the pod's start, else its
    creation."""
    for container in pod.get("status", {}).get("containerStatuses") or []:
        running = (container.get("state") or {}).get("running") or {}
        if container.get("name") == "driver" and parse_time(running.get("startedAt")) is not None:
            return parse_time(running.get("startedAt"))
    return parse_time(pod.get("status", {}).get("startTime")) or parse_time(
        pod.get("metadata", {}).get("creationTimestamp")
    )


def executor_start_timeout(spec: Mapping[str, Any], default: timedelta) -> timedelta:
    """The job's own `spark.executorStartTimeoutSeconds`, else the operator's."""
    seconds = (spec.get("spark") or {}).get("executorStartTimeoutSeconds")
    return timedelta(seconds=int(seconds)) if seconds is not None else default


def executor_deadline(
    spec: Mapping[str, Any], status: Mapping[str, Any], pod: Mapping[str, Any] | None, default: timedelta
) -> datetime | None:
    """When the attempt's executors must be running by; None when there is nothing to judge: no
    executors asked for, the driver not running, or the deadline judged already (`neverStarted` set)."""
    requested = int((spec.get("spark") or {}).get("executors") or 0)
    if not requested or pod is None or status.get("phase") != "Running":
        return None
    if pod.get("status", {}).get("phase") != "Running" or "neverStarted" in (status.get("executors") or {}):
        return None
    started = driver_started(pod)
    return None if started is None else started + executor_start_timeout(spec, default)


def _judge_executors(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    pod: Mapping[str, Any],
    found: Census,
    now: datetime,
    default: timedelta,
) -> Decision:
    """The start deadline has passed: fail the job when no executor ever started, else say how many did not."""
    requested = int((spec.get("spark") or {}).get("executors") or 0)
    seconds = int(executor_start_timeout(spec, default).total_seconds())
    failed = int((status.get("executors") or {}).get("failed") or 0)
    if found.running == 0 and found.started == 0 and failed == 0:
        why = never_started(found, requested, seconds)
        return Decision(
            status={"phase": "Failed", "completionTime": stamp(now), "message": why},
            delete_pod=pod.get("metadata", {}).get("name"),
            delete_executors=found.pods,
            event=("Warning", "ExecutorsNotStarted", f"{why}; the driver and its executor pods are removed"),
            reason="ExecutorsNotStarted",
            stalled=False,
        )
    missing = max(0, requested - max(found.running, found.started))
    if missing == 0:
        return Decision(status={"executors": {"neverStarted": 0}})
    message = some_never_started(found, requested, seconds)
    return Decision(
        status={"executors": {"neverStarted": missing}, "message": message},
        event=("Warning", "ExecutorsNotStarted", message),
        reason="ExecutorsNotStarted",
        stalled=False,  # it goes on with the executors it has: nothing waits for the others any more
    )


@dataclass(frozen=True)
class Refusal:
    """Why the API server refused a driver pod, in a condition's terms."""

    #: CamelCase, for the condition and the Event
    reason: str
    #: whether another attempt can succeed without anyone changing anything but time
    transient: bool


def classify_refusal(status: int | None, message: str) -> Refusal:
    """What an API server's answer to a pod creation means (status None: no answer at all)."""
    text = message.lower()
    if status is None or status == 429 or status >= 500:
        return Refusal("ApiUnavailable", True)
    if status == 403 and "exceeded quota" in text:
        return Refusal("QuotaExceeded", True)
    if status == 403 and "serviceaccount" in text and "not found" in text:
        return Refusal("ServiceAccountNotFound", True)
    if status == 403:
        return Refusal("Forbidden", False)
    if status in (400, 422):
        return Refusal("InvalidPodSpec", False)
    if status == 404:
        return Refusal("NamespaceNotFound", False)
    return Refusal("PodRefused", False)


def creation_refused(spec: Mapping[str, Any], attempts: int, now: datetime, refusal: Refusal, message: str) -> Decision:
    """The attempt whose pod was refused: Failed at once for a permanent cause, else retried with the
    same backoff as a failed driver while attempts remain (`backoffLimit`)."""
    why = f"the API server refused driver pod attempt {attempts}: {message}"
    if not refusal.transient:
        return Decision(
            status={"phase": "Failed", "completionTime": stamp(now), "message": why},
            event=("Warning", refusal.reason, f"{why}; not retried (the same request would be refused again)"),
            reason=refusal.reason,
            stalled=False,
        )
    decision = _failed_attempt(spec, attempts, now, why, None)
    kind, _, text = decision.event or ("Warning", "", why)
    decision.event = (kind, refusal.reason, text)
    decision.reason = refusal.reason
    return decision


def _ttl_due(ttl_seconds: int | None, status: Mapping[str, Any], now: datetime) -> bool:
    """Whether a finished job's ttlSecondsAfterFinished has passed (never without one)."""
    finished = parse_time(status.get("completionTime"))
    return ttl_seconds is not None and finished is not None and now >= finished + timedelta(seconds=int(ttl_seconds))


def waits_for_nothing_but_its_ttl(spec: Mapping[str, Any], status: Mapping[str, Any], now: datetime) -> bool:
    """A finished job whose TTL (if any) is not due: `decide` would do nothing, so nothing need be read."""
    return status.get("phase") in TERMINAL and not _ttl_due(spec.get("ttlSecondsAfterFinished"), status, now)


def decide(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    now: datetime,
    *,
    start_timeout: timedelta = DEFAULT_START_TIMEOUT,
    ttl_seconds: int | None = None,
    table: TableState = TABLE_READY,
    table_wait_timeout: timedelta = DEFAULT_TABLE_WAIT_TIMEOUT,
    executors: Census | None = None,
    executor_start_timeout: timedelta = DEFAULT_EXECUTOR_START_TIMEOUT,
) -> Decision:
    """The job's next step. `executors` is the attempt's executor pods once their start deadline has
    passed (`executor_deadline`; the caller lists them only then), None before."""
    phase = status.get("phase")
    attempts = int(status.get("attempts") or 0)
    if phase in TERMINAL:
        return Decision(delete_job=True) if _ttl_due(ttl_seconds, status, now) else Decision()
    if attempts == 0:
        if not table.ready:
            return _wait_for_table(status, table, now, table_wait_timeout)
        return Decision(
            status={"phase": "Pending", "attempts": 1, "startTime": stamp(now), "message": None},
            create_attempt=1,
            event=("Normal", "Started", "created driver pod attempt 1"),
            # a job that waited for its table stops being stalled; one that did not has no Stalled yet
            stalled=False if _waiting_since(status) is not None else None,
        )
    retry_at = parse_time(status.get("retryAt"))
    if retry_at is not None:
        if now < retry_at:
            return Decision()
        return Decision(
            status={"phase": "Pending", "attempts": attempts + 1, "retryAt": None, "executors": None},
            create_attempt=attempts + 1,
            event=("Normal", "Retrying", f"created driver pod attempt {attempts + 1}"),
            stalled=False,
        )
    if pod is None or (pod.get("metadata", {}).get("deletionTimestamp") and _terminated(pod) is None):
        return _failed_attempt(spec, attempts, now, "the driver pod was deleted before it finished", None)
    pod_phase = pod.get("status", {}).get("phase")
    if pod_phase in ("Succeeded", "Failed"):
        outcome = outcome_of(pod)
        if outcome["phase"] == "Failed":
            why = str(outcome.get("message", "the driver failed"))
            reported = failure_reported(status, why)  # executors failed first: their words lead
            decision = _failed_attempt(spec, attempts, now, reported[1] if reported else why, None, outcome)
            if reported is not None and decision.status.get("phase") == "Failed":
                decision.reason, decision.event = reported[0], ("Warning", reported[0], reported[1])
            return decision
        result = {k: v for k, v in outcome.items() if k not in ("phase", "message")}
        message = str(outcome.get("message") or f"compaction {outcome['phase'].lower()}")
        return Decision(
            status={"phase": outcome["phase"], "completionTime": stamp(now), "result": result, "message": message},
            event=("Normal" if outcome["phase"] == "Succeeded" else "Warning", outcome["phase"], message),
        )
    if pod_phase == "Running":
        if phase != "Running":
            return Decision(status={"phase": "Running"}, stalled=False)
        due = executor_deadline(spec, status, pod, executor_start_timeout)
        if due is not None and now >= due and executors is not None:
            return _judge_executors(spec, status, pod, executors, now, executor_start_timeout)
        return Decision()
    created = parse_time(pod.get("metadata", {}).get("creationTimestamp")) or now
    if now - created > start_timeout:
        why = f"the driver pod did not start within {int(start_timeout.total_seconds())} s ({_waiting_reason(pod)})"
        return _failed_attempt(spec, attempts, now, why, pod.get("metadata", {}).get("name"))
    blocked = pod_states.blocked(pod)
    if blocked is not None and blocked.permanent:
        # no attempt of this spec can start: fail now, not after every attempt's start timeout
        return Decision(
            status={"phase": "Failed", "completionTime": stamp(now), "message": blocked.message},
            delete_pod=pod.get("metadata", {}).get("name"),
            event=("Warning", blocked.reason, f"{blocked.message}; not retried"),
            reason=blocked.reason,
            stalled=False,
        )
    if blocked is not None and status.get("message") != blocked.message:
        # said once per cause, at once: the kubelet and the scheduler retry (a Secret, an image or room
        # on a node that comes now still helps) until the start timeout fails the attempt
        deadline = int((created + start_timeout - now).total_seconds())
        return Decision(
            status={"message": blocked.message},
            event=(
                "Warning",
                blocked.reason,
                f"{blocked.message}; the attempt fails if the pod has not started in {deadline} s",
            ),
            reason=blocked.reason,
            stalled=True,
        )
    return Decision()


def _waiting_since(status: Mapping[str, Any]) -> datetime | None:
    """When the job started waiting for its table: the transition time of its Stalled condition while
    that says so, None when it is not waiting."""
    for condition in status.get("conditions") or ():
        stalled = condition.get("type") == "Stalled" and condition.get("status") == "True"
        if stalled and condition.get("reason") in TABLE_WAIT_REASONS:
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _wait_for_table(status: Mapping[str, Any], table: TableState, now: datetime, timeout: timedelta) -> Decision:
    """Wait for the table (Stalled, said once per cause), or fail with NoTable once `timeout` has passed
    since the wait began without it becoming Ready."""
    since = _waiting_since(status) or now
    seconds = int(timeout.total_seconds())
    if now >= since + timeout:
        why = f"{table.message}; gave up waiting for it after {seconds} s (ACIDTABLES_TABLE_WAIT_TIMEOUT_SECONDS)"
        return Decision(
            status={"phase": "Failed", "completionTime": stamp(now), "message": why},
            event=("Warning", "NoTable", f"{why}; create the AcidTable or fix what keeps it from being Ready"),
            reason="NoTable",
            stalled=False,
        )
    message = f"{table.message}; waiting for it to be Ready (the job fails with NoTable after {seconds} s)"
    if status.get("message") == message and _waiting_since(status) is not None:
        return Decision()  # said already: the timer looks again at its next tick
    return Decision(
        status={"phase": "Pending", "message": message},
        event=("Normal", table.reason, message),
        reason=table.reason,
        stalled=True,
    )


def _failed_attempt(
    spec: Mapping[str, Any],
    attempts: int,
    now: datetime,
    why: str,
    doomed_pod: str | None,
    outcome: Mapping[str, Any] | None = None,
) -> Decision:
    """Retry with exponential backoff while attempts remain (backoffLimit retries), else Failed."""
    limit = int(spec.get("backoffLimit", 3))
    if attempts <= limit:
        delay = min(10 * 2 ** (attempts - 1), 300)
        return Decision(
            status={"retryAt": stamp(now + timedelta(seconds=delay)), "message": f"{why}; retrying in {delay} s"},
            delete_pod=doomed_pod,
            event=("Warning", "AttemptFailed", f"attempt {attempts}: {why}; retrying in {delay} s"),
            reason="AttemptFailed",
            stalled=True,
        )
    status: dict[str, Any] = {"phase": "Failed", "completionTime": stamp(now), "message": why}
    if outcome is not None:
        status["result"] = {k: v for k, v in outcome.items() if k not in ("phase", "message")}
    return Decision(status=status, delete_pod=doomed_pod, event=("Warning", "Failed", why), stalled=False)
