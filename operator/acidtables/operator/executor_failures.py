"""What a job's executor pods say when they fail or cannot start, kept on the job (issue 30, item 3).

When executors die, Spark's driver ends with its own error ("Cannot call methods on a stopped
SparkContext", the real cause only in its log), and Spark deletes the failed executor pods. The
operator sees every executor pod change (they carry the driver pod's labels, through the pod
template), so it keeps what each failed or stuck executor said: its exit code and reason, and the last
lines of its log (the template's `FallbackToLogsOnError` makes the kubelet put them in the terminated
state's message), or why it cannot be scheduled or started. Each is posted once as a Warning Event;
`status.executors` counts them, and a driver that fails after executors did is reported as
`ExecutorsFailed` with the executors' own reasons first.

Pure functions: `driving.executor_changed` reads and writes the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .pod_states import blocked

#: Spark's label on the pods it creates: executors are `executor`
ROLE_LABEL = "spark-role"
EXECUTOR_ROLE = "executor"
#: how many executor troubles status keeps (the count keeps counting)
KEEP = 5


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


def trouble_of(pod: Mapping[str, Any]) -> ExecutorTrouble | None:
    """What is wrong with an executor pod, or None while it is fine (or ended well)."""
    name = str(pod.get("metadata", {}).get("name", ""))
    for container in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and int(terminated.get("exitCode") or 0) != 0:
            message = last_words(str(terminated.get("message") or "")) or "no log"
            reason = str(terminated.get("reason") or "Error")
            return ExecutorTrouble(name, reason, message, int(terminated["exitCode"]))
    stuck = blocked(pod, who=f"executor pod {name}")
    if stuck is not None:
        return ExecutorTrouble(name, stuck.reason, stuck.message)
    return None


def recorded(status: Mapping[str, Any], trouble: ExecutorTrouble) -> dict[str, Any] | None:
    """`status.executors` with `trouble` added, or None when it is there already (each pod's trouble
    is counted and posted once, however often its pod changes)."""
    executors = dict(status.get("executors") or {})
    recent = [dict(entry) for entry in executors.get("recent") or []]
    if any(entry.get("pod") == trouble.pod and entry.get("reason") == trouble.reason for entry in recent):
        return None
    key = "failed" if trouble.failed else "pending"
    executors[key] = int(executors.get(key) or 0) + 1
    executors["recent"] = [*recent, trouble.to_status()][-KEEP:]
    return executors


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


__all__ = ["ExecutorTrouble", "failure_reported", "is_executor", "last_words", "recorded", "trouble_of"]
