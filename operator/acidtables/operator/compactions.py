"""A CompactionJob's life as a pure decision: given its spec, its status, its driver pod (or none) and
the time, what to do next. The kopf timer calls `decide` and carries the decision out, so every step
is idempotent (a pod has a deterministic name per attempt; creating one that exists adopts it) and an
operator restarted mid-job picks up exactly where the status says it was.

Phases: Pending (pod created, not running), Running, Succeeded, Conflicted (lost to a concurrent
commit: not retried, the next run will find the files), Failed (after `backoffLimit` retries, or a
driver that never started or vanished).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .conditions import stamp

TERMINAL = ("Succeeded", "Failed", "Conflicted")
#: how long a driver pod may stay unstarted (image pull, unschedulable) before the attempt fails
DEFAULT_START_TIMEOUT = timedelta(minutes=5)


def pod_name(job: str, attempt: int) -> str:
    return f"{job}-driver-{attempt}"[:253]


@dataclass
class Decision:
    status: dict[str, Any] = field(default_factory=dict)
    #: create the driver pod of this attempt
    create_attempt: int | None = None
    delete_pod: str | None = None
    delete_job: bool = False
    #: (type, reason, message) of an Event to post on the job
    event: tuple[str, str, str] | None = None


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


def decide(
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    now: datetime,
    *,
    start_timeout: timedelta = DEFAULT_START_TIMEOUT,
    ttl_seconds: int | None = None,
) -> Decision:
    phase = status.get("phase")
    attempts = int(status.get("attempts") or 0)
    if phase in TERMINAL:
        finished = parse_time(status.get("completionTime"))
        if ttl_seconds is not None and finished is not None and now >= finished + timedelta(seconds=ttl_seconds):
            return Decision(delete_job=True)
        return Decision()
    if attempts == 0:
        return Decision(
            status={"phase": "Pending", "attempts": 1, "startTime": stamp(now)},
            create_attempt=1,
            event=("Normal", "Started", "created driver pod attempt 1"),
        )
    retry_at = parse_time(status.get("retryAt"))
    if retry_at is not None:
        if now < retry_at:
            return Decision()
        return Decision(
            status={"phase": "Pending", "attempts": attempts + 1, "retryAt": None},
            create_attempt=attempts + 1,
            event=("Normal", "Retrying", f"created driver pod attempt {attempts + 1}"),
        )
    if pod is None or (pod.get("metadata", {}).get("deletionTimestamp") and _terminated(pod) is None):
        return _failed_attempt(spec, attempts, now, "the driver pod was deleted before it finished", None)
    pod_phase = pod.get("status", {}).get("phase")
    if pod_phase in ("Succeeded", "Failed"):
        outcome = outcome_of(pod)
        if outcome["phase"] == "Failed":
            why = str(outcome.get("message", "the driver failed"))
            return _failed_attempt(spec, attempts, now, why, None, outcome)
        result = {k: v for k, v in outcome.items() if k not in ("phase", "message")}
        message = str(outcome.get("message") or f"compaction {outcome['phase'].lower()}")
        return Decision(
            status={"phase": outcome["phase"], "completionTime": stamp(now), "result": result, "message": message},
            event=("Normal" if outcome["phase"] == "Succeeded" else "Warning", outcome["phase"], message),
        )
    if pod_phase == "Running":
        return Decision(status={"phase": "Running"} if phase != "Running" else {})
    created = parse_time(pod.get("metadata", {}).get("creationTimestamp")) or now
    if now - created > start_timeout:
        why = f"the driver pod did not start within {int(start_timeout.total_seconds())} s ({_waiting_reason(pod)})"
        return _failed_attempt(spec, attempts, now, why, pod.get("metadata", {}).get("name"))
    return Decision()


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
            status={"retryAt": stamp(now + timedelta(seconds=delay)), "message": why},
            delete_pod=doomed_pod,
            event=("Warning", "AttemptFailed", f"attempt {attempts}: {why}; retrying in {delay} s"),
        )
    status: dict[str, Any] = {"phase": "Failed", "completionTime": stamp(now), "message": why}
    if outcome is not None:
        status["result"] = {k: v for k, v in outcome.items() if k not in ("phase", "message")}
    return Decision(status=status, delete_pod=doomed_pod, event=("Warning", "Failed", why))
