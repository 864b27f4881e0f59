"""What a job's executor pods say when they fail or cannot start, kept on the job (issue 30, item 3).

When executors die, Spark's driver ends with its own error ("Cannot call methods on a stopped
SparkContext", the real cause only in its log), and Spark deletes the failed executor pods. The
operator sees every executor pod change (they carry the driver pod's labels, through the pod
template), so it keeps what each failed or stuck executor said: its exit code and reason, and the last
lines of its log (the template's `FallbackToLogsOnError` makes the kubelet put them in the terminated
state's message), or why it cannot be scheduled or started. Each pod is posted once as a Warning Event
when it cannot start and once when it fails; `status.executors` counts pods (issue 40, item 4): `failed`,
the pods of the attempt that failed, each once whatever its pod did afterwards; `pending`, the pods that
cannot start now (read from the attempt's pods as they are, so a pod that went from ErrImagePull to
ImagePullBackOff is one, and one that started is none). A driver that fails after executors did is
reported as `ExecutorsFailed` with the executors' own reasons first.

Executors have a start deadline of their own (issue 40, item 2): a driver whose executors cannot start
(an image that cannot be pulled, no room on any node) would wait for them for ever ("Initial job has not
accepted any resources"). `Census` is what the attempt's executor pods are at the deadline, and
`never_started` says it in words; `compactions.decide` judges it once.

An executor Spark's driver removed is no failure (issue 40, item 3): the driver deletes its executor pods
when the application ends, and one that gets the deletion's SIGTERM before it exits by itself ends with
code 143 (or 137, killed after the grace period); an executor that ends after its driver has ended
(the driver gone, it loses its driver) is a consequence, not a cause.

Pure functions: `driving.executor_changed` reads and writes the job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .pod_states import blocked

#: Spark's label on the pods it creates: executors are `executor`
ROLE_LABEL = "spark-role"
EXECUTOR_ROLE = "executor"
#: how many executor troubles status keeps (the count keeps counting)
KEEP = 5
#: 128 + SIGTERM: what a JVM stopped by its pod's deletion exits with
SIGTERM_EXIT = 143
#: 128 + SIGKILL: what the kubelet's kill after a deletion's grace period (or the kernel's OOM killer) gives
SIGKILL_EXIT = 137


@dataclass(frozen=True)
class ExecutorTrouble:
    pod: str
    #: Failed (the container ended badly) or a cause that keeps it from starting
    reason: str
    message: str
    exit_code: int | None = None

    @property
    def failed(self) -> bool:
        return self.exit_code is not None

    def to_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pod": self.pod, "reason": self.reason, "message": self.message}
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        return out

    def describe(self) -> str:
        if self.exit_code is None:
            return self.message
        return f"executor pod {self.pod} exited with code {self.exit_code} ({self.reason}): {self.message}"


def is_executor(pod: Mapping[str, Any]) -> bool:
    return (pod.get("metadata", {}).get("labels") or {}).get(ROLE_LABEL) == EXECUTOR_ROLE


def last_words(log: str, lines: int = 2) -> str:
    """The last lines of a log that say something: stack frames (`at ...`, `... 12 more`) and blank
    lines left out, so a Java failure ends on its exception rather than on its deepest frame."""
    said = [line.strip() for line in log.splitlines() if line.strip() and not line.lstrip().startswith(("at ", "..."))]
    return " | ".join(said[-lines:])[:500]


def _ended_badly(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The terminated state of a container of the pod that exited with a code other than 0."""
    for container in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode") or 0) != 0:
            found: Mapping[str, Any] = terminated
            return found
    return None


def ended_badly(pod: Mapping[str, Any]) -> bool:
    """Whether a container of the pod exited with a code other than 0 (whatever stopped it)."""
    return _ended_badly(pod) is not None


def _disrupted(pod: Mapping[str, Any]) -> str | None:
    """Why Kubernetes itself stopped the pod (evicted, preempted, its node tainted), if it did: the
    condition DisruptionTarget, or the kubelet's Evicted; Spark's own deletion sets neither."""
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return str(condition.get("reason") or "DisruptionTarget")
    reason = pod.get("status", {}).get("reason")
    return str(reason) if reason == "Evicted" else None


def removed_by_driver(pod: Mapping[str, Any], *, driver_ended: bool = False) -> bool:
    """Whether an executor that ended badly was stopped rather than failing: SIGTERM (143, what Spark's
    driver deleting its executors at shutdown gives), a pod being deleted whose container the deletion's
    kill stopped (137, not the OOM killer's), or any executor that ended after its driver had ended;
    not one Kubernetes stopped (evicted, preempted: `_disrupted`), which the job lost."""
    terminated = _ended_badly(pod)
    if terminated is None:
        return False
    if driver_ended:
        return True
    if _disrupted(pod) is not None:
        return False
    code = int(terminated.get("exitCode") or 0)
    deleting = bool(pod.get("metadata", {}).get("deletionTimestamp"))
    killed = code == SIGKILL_EXIT and deleting and terminated.get("reason") != "OOMKilled"
    return code == SIGTERM_EXIT or killed


def trouble_of(pod: Mapping[str, Any], *, driver_ended: bool = False) -> ExecutorTrouble | None:
    """What is wrong with an executor pod, or None while it is fine, ended well, was removed by Spark's
    driver (`removed_by_driver`), or is being deleted before it ever started."""
    name = str(pod.get("metadata", {}).get("name", ""))
    terminated = _ended_badly(pod)
    if terminated is not None:
        if removed_by_driver(pod, driver_ended=driver_ended):
            return None
        message = last_words(str(terminated.get("message") or "")) or "no log"
        reason = _disrupted(pod) or str(terminated.get("reason") or "Error")
        return ExecutorTrouble(name, reason, message, int(terminated["exitCode"]))
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return None  # going away before it ever started: nothing waits on it any more
    stuck = blocked(pod, who=f"executor pod {name}")
    if stuck is not None:
        return ExecutorTrouble(name, stuck.reason, stuck.message)
    return None


def cannot_start(pods: Sequence[Mapping[str, Any]]) -> list[ExecutorTrouble]:
    """The executor pods among `pods` that cannot start now, each once (by name: a listing may repeat)."""
    found: dict[str, ExecutorTrouble] = {}
    for pod in pods:
        if not is_executor(pod):
            continue
        trouble = trouble_of(pod)
        if trouble is not None and not trouble.failed:
            found[trouble.pod] = trouble
    return [found[name] for name in sorted(found)]


def _container_state(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        state: Mapping[str, Any] = container.get("state") or {}
        return state
    return {}


def is_running(pod: Mapping[str, Any]) -> bool:
    """Whether the executor's container runs now (and Spark has not removed the pod)."""
    return "running" in _container_state(pod) and not pod.get("metadata", {}).get("deletionTimestamp")


def has_started(pod: Mapping[str, Any]) -> bool:
    """Whether the executor's container ever ran: it runs, or it ended (whatever its exit code)."""
    state = _container_state(pod)
    return "running" in state or "terminated" in state


@dataclass(frozen=True)
class Census:
    """The executor pods of one attempt as they are now, at the start deadline."""

    #: how many run now
    running: int
    #: how many ever ran (running or ended): the application had executors
    started: int
    #: the pods that cannot start now, each with its reason (`cannot_start`)
    waiting: tuple[ExecutorTrouble, ...]
    #: every executor pod of the attempt, by name (removed with the driver when the job fails)
    pods: tuple[str, ...]


def census(pods: Sequence[Mapping[str, Any]], seen_running: int = 0) -> Census:
    """The executor pods among `pods`; `seen_running` counts pods this operator saw running that may be
    gone from the listing since (Spark deletes its executors when the application ends)."""
    executors = {str(p.get("metadata", {}).get("name", "")): p for p in pods if is_executor(p)}
    started = sum(has_started(p) for p in executors.values())
    return Census(
        running=sum(is_running(p) for p in executors.values()),
        started=max(started, seen_running),
        waiting=tuple(cannot_start(list(executors.values()))),
        pods=tuple(sorted(executors)),
    )


def _reasons(waiting: Sequence[ExecutorTrouble]) -> str:
    """The pods' reasons in words: the last pod's own, then how many more and why."""
    last = waiting[-1]
    others: dict[str, int] = {}
    for trouble in waiting[:-1]:
        others[trouble.reason] = others.get(trouble.reason, 0) + 1
    more = ", ".join(f"{count} more {reason}" for reason, count in sorted(others.items()))
    return last.describe() + (f" ({more})" if more else "")


def never_started(found: Census, requested: int, seconds: int) -> str:
    """Why no executor runs at the start deadline, naming the pods' reasons (ErrImagePull...)."""
    head = f"no executor started within {seconds} s of the driver's start ({requested} requested)"
    if found.waiting:
        return f"{head}: {_reasons(found.waiting)}"
    if found.pods:
        return f"{head}: {len(found.pods)} executor pods created, none running yet (not scheduled or still starting)"
    return (
        f"{head}: Spark's driver created no executor pod (its log says why: the job's ServiceAccount may not "
        "create pods, or the executor settings were refused)"
    )


def some_never_started(found: Census, requested: int, seconds: int) -> str:
    """What the status says when some executors run at the deadline and the job goes on with them."""
    missing = requested - found.running
    why = f": {_reasons(found.waiting)}" if found.waiting else ""
    return (
        f"{found.running} of {requested} executors running at the start deadline ({seconds} s); {missing} never "
        f"started{why}; the job goes on with {found.running}"
    )


@dataclass(frozen=True)
class ExecutorsUpdate:
    """What one executor pod's change does to its job."""

    #: the job's new `status.executors`
    executors: dict[str, Any]
    #: (reason, message) of a Warning Event: once per pod that cannot start, once per pod that fails
    event: tuple[str, str] | None
    #: the changed pod's state as `said` should now remember it: "pending" or "failed"
    said: str | None
    #: (reason, message) the job is stalled on while executors cannot start; None when none waits
    stalled: tuple[str, str] | None


def tally(
    status: Mapping[str, Any],
    trouble: ExecutorTrouble | None,
    pods: Sequence[Mapping[str, Any]],
    said: Mapping[str, str],
) -> ExecutorsUpdate | None:
    """`status.executors` after an executor pod changed (`trouble`: what is wrong with it now, if
    anything), counting pods: `failed` goes up once per pod, `pending` is how many of the attempt's
    `pods` cannot start now. `said` is what was already posted per pod (this process's memory, beside
    `recent`, which outlives a restart for the last few pods). None when nothing changes."""
    given = dict(status.get("executors") or {})
    recent = [dict(entry) for entry in given.get("recent") or []]
    failed = int(given.get("failed") or 0)
    before = {**given, "failed": failed, "pending": int(given.get("pending") or 0), "recent": recent[-KEEP:]}
    event: tuple[str, str] | None = None
    state: str | None = None
    if trouble is not None:
        state = "failed" if trouble.failed else "pending"
        known = said.get(trouble.pod) or next(
            ("failed" if "exitCode" in e else "pending" for e in reversed(recent) if e.get("pod") == trouble.pod), None
        )
        if known == "failed":
            state = "failed"  # a failed pod stays failed, whatever it reports while it is removed
        elif known != state:
            failed += int(trouble.failed)
            event = ("ExecutorFailed" if trouble.failed else trouble.reason, trouble.describe())
        if known != "failed":
            recent = [e for e in recent if e.get("pod") != trouble.pod] + [trouble.to_status()]
    waiting = cannot_start(pods)
    executors = {**before, "failed": failed, "pending": len(waiting), "recent": recent[-KEEP:]}
    stalled = None
    if waiting:
        last = trouble if trouble is not None and not trouble.failed else waiting[-1]
        many = f"{len(waiting)} executor pods cannot start; last: " if len(waiting) > 1 else ""
        stalled = (last.reason, f"{many}{last.message}")
    if executors == before and event is None:
        return None
    return ExecutorsUpdate(executors, event, state, stalled)


def failure_reported(status: Mapping[str, Any], driver_message: str) -> tuple[str, str] | None:
    """(reason, message) of a driver failure after executors failed or could not start: the executors'
    own words first, then the driver's; None when no executor had trouble."""
    executors = status.get("executors") or {}
    recent = executors.get("recent") or []
    if not recent:
        return None
    failed, pending = int(executors.get("failed") or 0), int(executors.get("pending") or 0)
    last = recent[-1]
    trouble = ExecutorTrouble(
        str(last.get("pod")), str(last.get("reason")), str(last.get("message")), last.get("exitCode")
    )
    parts = (f"{failed} executor pods failed" if failed else "", f"{pending} could not start" if pending else "")
    counts = ", ".join(part for part in parts if part)
    message = (
        f"executors failed to start or to reach the driver ({counts}; last: {trouble.describe()}); "
        f"the driver then ended: {driver_message}"
    )
    return "ExecutorsFailed", message


__all__ = [
    "Census",
    "ExecutorTrouble",
    "ExecutorsUpdate",
    "cannot_start",
    "census",
    "ended_badly",
    "failure_reported",
    "has_started",
    "is_executor",
    "is_running",
    "last_words",
    "never_started",
    "removed_by_driver",
    "some_never_started",
    "tally",
    "trouble_of",
]
