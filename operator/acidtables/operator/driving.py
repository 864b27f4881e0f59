"""One step of a CompactionJob carried out: what `compactions.decide` says, done against the API server.

Two kopf handlers call `step`: the job's timer (time-based decisions: a retry that is due, a driver that
never started, the TTL after the end) and the event handler on driver pods (a pod's phase changed), so
a job's status follows its driver within a second of the change instead of at the next timer tick.
Each step reads the job afresh and runs under the job's lock, so the two never act on one state twice
(one pod, one Event, one metric per outcome). The Compacting condition of the job's AcidTable is
recomputed whenever the job's phase changes, for the same reason.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from acidtables.core import TableNotFoundError

from . import compactions, conditions, executor_failures
from .context import OperatorContext
from .definition import catalog_name, resource_name, same_table
from .pods import ATTEMPT_LABEL, JOB_LABEL, driver_pod

logger = logging.getLogger(__name__)

#: posts an Event on an object: (object, type, reason, message); kopf.event in the handlers
EventPoster = Callable[[Mapping[str, Any], str, str, str], None]

STALLED = "Stalled"
#: true once the job has ended, whatever the outcome (Succeeded, Failed or Conflicted): what one
#: `kubectl wait --for=condition=Finished` ends on, as a Kubernetes Job's Complete or Failed does
FINISHED = "Finished"
#: reads of an AcidTable that another writer keeps changing before its Compacting condition is set
REFRESH_ATTEMPTS = 5


def api_error(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, the API server's message) of a failed request; (None, what failed) without an answer."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    message = ""
    if isinstance(body, str | bytes) and body:
        try:
            message = str(json.loads(body).get("message") or "")
        except (ValueError, AttributeError):  # not a Status object: the raw text says as much
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    if not message:
        message = str(getattr(exc, "reason", None) or exc)
    return (int(status) if isinstance(status, int) and status else None), message[:2000]


def compacting_conditions(
    previous: Sequence[Mapping[str, Any]] | None, running: Sequence[str], generation: int | None
) -> list[dict[str, Any]] | None:
    """The table's conditions with Compacting matching the running jobs; None when it already does."""
    compacting = next((c for c in previous or () if c.get("type") == conditions.COMPACTING), None)
    if compacting is not None and (compacting.get("status") == "True") == bool(running):
        return None
    message = f"running: {', '.join(running)}" if running else "no compaction job running"
    reason = "JobRunning" if running else "Idle"
    return conditions.merged(
        previous, conditions.condition(previous, conditions.COMPACTING, bool(running), reason, message, generation)
    )


def running_jobs(jobs: Sequence[Mapping[str, Any]], table: str) -> list[str]:
    return sorted(
        j["metadata"]["name"]
        for j in jobs
        if same_table(str((j.get("spec") or {}).get("table")), table)
        and (j.get("status") or {}).get("phase") not in compactions.TERMINAL
        and not j["metadata"].get("deletionTimestamp")
    )


def refresh_compacting(context: OperatorContext, namespace: str, table: str) -> None:
    """Set the AcidTable's Compacting condition from the jobs now in the namespace. The conditions are
    written back only onto the version they were read from (a job applied with its table steps while
    the operator makes the table Ready: an unconditional write would take Ready away again), read
    afresh when another writer came in between."""
    table = resource_name(table)
    for _ in range(REFRESH_ATTEMPTS):
        resource = context.kube.read_table(namespace, table)
        if resource is None:
            return  # no AcidTable of that name: the job's own status says so
        status = resource.get("status") or {}
        updated = compacting_conditions(
            status.get("conditions"),
            running_jobs(context.kube.list_jobs(namespace), table),
            resource["metadata"].get("generation"),
        )
        if updated is None:
            return
        version = resource["metadata"].get("resourceVersion")
        if context.kube.patch_table_status(namespace, table, {"conditions": updated}, resource_version=version):
            return
    # the step fails and is run again (kopf's backoff), counted as a reconcile error
    raise RuntimeError(f"AcidTable {namespace}/{table} kept changing while its Compacting condition was set")


def table_state(context: OperatorContext, namespace: str, table: str) -> compactions.TableState:
    """Whether the AcidTable `table` of the namespace is Ready for a job to start on it. A table in
    the catalog that no AcidTable declares (one a writer created) is ready as it is."""
    resource = context.kube.read_table(namespace, resource_name(table))
    if resource is None:
        try:
            context.catalog.table(catalog_name(namespace, table))
        except TableNotFoundError:
            return compactions.TableState(False, "WaitingForTable", f"no AcidTable {table} in namespace {namespace}")
        return compactions.TABLE_READY
    ready = next((c for c in (resource.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "True" and not resource["metadata"].get("deletionTimestamp"):
        return compactions.TABLE_READY
    if resource["metadata"].get("deletionTimestamp"):
        why = "it is being deleted"
    elif ready is None:
        why = "the operator has not created or adopted its table yet"
    else:
        why = f"Ready={ready.get('status')}, {ready.get('reason')}: {ready.get('message')}"
    return compactions.TableState(False, "TableNotReady", f"AcidTable {table} is not Ready ({why})")


def step(context: OperatorContext, namespace: str, name: str, post_event: EventPoster) -> None:
    """One step of the job `namespace/name`, under its lock, from its current state. A step that fails
    (the API server away) counts as a reconcile error; kopf runs it again."""
    with context.job_lock(namespace, name):
        try:
            job = context.kube.read_job(namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                return  # gone, or going: nothing to drive
            _step(context, job, post_event)
        except Exception:  # counted, not handled: kopf logs it and runs the step again after its backoff
            context.metrics.reconcile_errors.labels("CompactionJob").inc()
            raise


def _step(context: OperatorContext, job: dict[str, Any], post_event: EventPoster) -> None:
    meta, spec, status = job["metadata"], job.get("spec") or {}, job.get("status") or {}
    namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
    attempts = int(status.get("attempts") or 0)
    finished = status.get("phase") in compactions.TERMINAL  # decided on the status alone: no pod to read
    pod = context.kube.read_pod(namespace, compactions.pod_name(name, attempts)) if attempts and not finished else None
    starting = attempts == 0 and status.get("phase") not in compactions.TERMINAL
    now = datetime.now(UTC)
    census = None
    deadline = compactions.executor_deadline(spec, status, pod, context.config.executor_start_timeout)
    if deadline is not None and now >= deadline:  # listed only when there is something to judge
        said = context.executors_said(namespace, name, str(attempts))
        census = executor_failures.census(
            context.kube.list_pods(namespace, _executor_selector(name, str(attempts))),
            seen_running=sum(state == "running" for state in said.values()),
        )
    decision = compactions.decide(
        spec,
        status,
        pod,
        now,
        start_timeout=context.config.driver_start_timeout,
        ttl_seconds=spec.get("ttlSecondsAfterFinished"),
        table=table_state(context, namespace, str(spec.get("table"))) if starting else compactions.TABLE_READY,
        table_wait_timeout=context.config.table_wait_timeout,
        executors=census,
        executor_start_timeout=context.config.executor_start_timeout,
    )
    if decision.delete_job:
        context.kube.delete_job(namespace, name, context.finalizer)
        return
    attempt = decision.create_attempt
    if attempt is not None:
        decision = _create_driver(context, job, attempt, decision, now)
    if decision.delete_pod is not None:
        context.kube.delete_pod(namespace, decision.delete_pod)
    if not decision.status and decision.stalled is None:
        if decision.event is not None:
            post_event(job, *decision.event)
        return
    patch: dict[str, Any] = dict(decision.status)
    patch["observedGeneration"] = generation
    phase = decision.status.get("phase")
    previous = status.get("conditions")
    updates = []
    message = str(decision.status.get("message") or phase or "")
    if phase in compactions.TERMINAL:
        started = compactions.parse_time(status.get("startTime") or decision.status.get("startTime"))
        ended = compactions.parse_time(decision.status.get("completionTime"))
        seconds = (ended - started).total_seconds() if started and ended else None
        rewritten = int((decision.status.get("result") or {}).get("bytesRewritten") or 0)
        context.metrics.job_finished(str(spec.get("type")), str(phase), seconds, rewritten)
        reason = decision.reason or str(phase)
        updates += [
            conditions.condition(previous, "Succeeded", phase == "Succeeded", reason, message, generation),
            conditions.condition(previous, "Failed", phase != "Succeeded", reason, message, generation),
            conditions.condition(previous, FINISHED, True, reason, message, generation),
        ]
    elif phase is not None and not any(c.get("type") == FINISHED for c in previous or ()):
        updates.append(conditions.condition(previous, FINISHED, False, str(phase), "the job has not ended", generation))
    if phase in compactions.TERMINAL and int((status.get("executors") or {}).get("pending") or 0):
        patch["executors"] = {"pending": 0}  # settled: no pod of an ended job waits to start
    stalled = False if phase in compactions.TERMINAL else decision.stalled
    if stalled is False and "message" not in decision.status and status.get("message"):
        patch["message"] = None  # the message said why it was stalled, which no longer holds
    if stalled is not None:
        reason = (decision.reason or "Waiting") if stalled else "Progressing"
        text = message if stalled else (message or "an attempt is under way")
        updates.append(conditions.condition(previous, STALLED, stalled, reason, text, generation))
    if updates:
        patch["conditions"] = conditions.merged(previous, *updates)
    context.kube.patch_job_status(namespace, name, patch)
    if decision.event is not None:
        post_event(job, *decision.event)
    for executor in decision.delete_executors:  # after the status: the job has ended whatever happens here
        try:
            context.kube.delete_pod(namespace, executor)
        except (context.kube.errors, OSError) as exc:  # its owner, the driver pod, is gone: the collector follows
            logger.warning("%s/%s: could not remove executor pod %s (%s)", namespace, name, executor, exc)
    if phase is not None and phase != status.get("phase"):
        refresh_compacting(context, namespace, str(spec.get("table")))


def executor_changed(
    context: OperatorContext, namespace: str, name: str, pod: Mapping[str, Any], post_event: EventPoster
) -> None:
    """An executor pod of the job `namespace/name` changed: `status.executors` counts the attempt's pods
    that failed and that cannot start (executor_failures.tally), each failed or stuck pod is posted once
    as a Warning Event, and the job is Stalled, its message saying why, while any cannot start. A pod
    Spark's driver removed at shutdown is no failure (executor_failures.removed_by_driver)."""
    attempt = str((pod.get("metadata", {}).get("labels") or {}).get(ATTEMPT_LABEL))
    with context.job_lock(namespace, name):
        job = context.kube.read_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        status = job.get("status") or {}
        if status.get("phase") in compactions.TERMINAL or attempt != str(status.get("attempts") or 0):
            return  # an earlier attempt's executor, or a job that has ended
        if not attempt.isdigit():
            return  # no attempt label: not a pod Spark made from this operator's template
        said = context.executors_said(namespace, name, attempt)
        if executor_failures.is_running(pod) and said.get(str(pod["metadata"]["name"])) is None:
            # remembered for the start deadline: Spark deletes its executors when the application ends
            said[str(pod["metadata"]["name"])] = "running"
        driver_ended = False
        if executor_failures.ended_badly(pod):  # stopped by its driver's end, or failed: the driver says
            driver = context.kube.read_pod(namespace, compactions.pod_name(name, int(attempt)))
            driver_ended = driver is None or (driver.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        trouble = executor_failures.trouble_of(pod, driver_ended=driver_ended)
        if trouble is None and not int((status.get("executors") or {}).get("pending") or 0):
            return  # a pod that is fine, and none was waiting: nothing to count
        update = executor_failures.tally(
            status, trouble, context.kube.list_pods(namespace, _executor_selector(name, attempt)), said
        )
        if update is None:
            return
        patch: dict[str, Any] = {"executors": update.executors}
        previous, generation = status.get("conditions"), job["metadata"].get("generation")
        was_stalled = any(c.get("type") == STALLED and c.get("status") == "True" for c in previous or ())
        past_deadline = "neverStarted" in (status.get("executors") or {})
        if past_deadline:
            pass  # the start deadline was judged: the job goes on without the pods that cannot start
        elif update.stalled is not None:  # waiting on something (room on a node, an image): said in the message too
            reason, message = update.stalled
            stalled = conditions.condition(previous, STALLED, True, reason, message, generation)
            patch["conditions"], patch["message"] = conditions.merged(previous, stalled), message
        elif was_stalled and status.get("phase") == "Running" and not status.get("retryAt"):
            # the attempt's driver runs and no retry is due: only its executors stalled it
            going = conditions.condition(
                previous, STALLED, False, "Progressing", "every executor pod started", generation
            )
            patch["conditions"], patch["message"] = conditions.merged(previous, going), None
        context.kube.patch_job_status(namespace, name, patch)
        if trouble is not None and update.said is not None:
            said[trouble.pod] = update.said
        if update.event is not None:
            post_event(job, "Warning", *update.event)


def _executor_selector(job: str, attempt: str) -> dict[str, str]:
    """The labels of an attempt's executor pods: the driver's (through the template) and Spark's role."""
    return {JOB_LABEL: job, ATTEMPT_LABEL: attempt, executor_failures.ROLE_LABEL: executor_failures.EXECUTOR_ROLE}


def _create_driver(
    context: OperatorContext, job: Mapping[str, Any], attempt: int, decision: compactions.Decision, now: datetime
) -> compactions.Decision:
    """Create the attempt's driver pod (and, first, what Spark needs in the job's namespace); a refusal
    becomes the decision instead (compactions.creation_refused)."""
    namespace, spec = job["metadata"]["namespace"], job.get("spec") or {}
    table = catalog_name(namespace, spec["table"])
    try:
        context.catalog.table(table)
    except TableNotFoundError:
        started = (job.get("status") or {}).get("startTime") or conditions.stamp(now)
        return compactions.Decision(
            status={
                "phase": "Failed",
                "completionTime": conditions.stamp(now),
                "attempts": attempt,
                "startTime": started,
                "message": f"no table {table} (AcidTable {spec['table']})",
            },
            event=("Warning", "NoTable", f"no table {table}: create the AcidTable {spec['table']} first"),
            reason="NoTable",
        )
    account = context.config.job_service_account
    try:
        context.ensure_job_account(namespace)
    except (context.kube.errors, OSError) as exc:  # the operator may not create it: say so on the job
        code, message = api_error(exc)
        if code != 403:
            return _refused(job, attempt, decision, now, exc)  # busy or away: judged like a pod refusal
        why = (
            f"the operator may not create Spark's ServiceAccount, Role and RoleBinding {account} in namespace "
            f"{namespace} ({message}); create them there (the chart's jobs.serviceAccount with watchNamespaces) "
            "or grant the operator what operator-rbac.yaml grants"
        )
        logger.error("%s/%s: %s; the job fails", namespace, job["metadata"]["name"], why)
        refused = compactions.creation_refused(
            spec, attempt, now, compactions.Refusal("SparkAccountForbidden", False), why
        )
        carried = {k: v for k, v in decision.status.items() if k in ("attempts", "startTime")}
        refused.status = {**carried, **refused.status}
        return refused
    try:
        context.kube.create_pod(driver_pod(job, attempt, table, context.config))
    except (context.kube.errors, OSError) as exc:  # the answer decides: fail now, or retry later
        refused = _refused(job, attempt, decision, now, exc)
        if refused.reason == "ServiceAccountNotFound":
            context.forget_job_account(namespace)  # deleted since: created again before the next attempt
        return refused
    return decision


def _refused(
    job: Mapping[str, Any], attempt: int, decision: compactions.Decision, now: datetime, exc: BaseException
) -> compactions.Decision:
    code, message = api_error(exc)
    refusal = compactions.classify_refusal(code, message)
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    logger.warning(
        "%s/%s: driver pod attempt %d refused (%s, HTTP %s): %s; %s",
        namespace,
        name,
        attempt,
        refusal.reason,
        code,
        message,
        "retrying with backoff" if refusal.transient else "the job fails",
    )
    refused = compactions.creation_refused(job.get("spec") or {}, attempt, now, refusal, message)
    # the attempt counts (it was tried) and keeps the step's start time: both are in the decision's status
    carried = {k: v for k, v in decision.status.items() if k in ("attempts", "startTime")}
    refused.status = {**carried, "phase": "Pending", **refused.status, "retryAt": refused.status.get("retryAt")}
    if refused.status["retryAt"] is None:
        del refused.status["retryAt"]
    return refused


__all__ = [
    "api_error",
    "compacting_conditions",
    "executor_changed",
    "refresh_compacting",
    "running_jobs",
    "step",
    "table_state",
]
