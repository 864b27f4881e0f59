"""The kopf handlers: thin. Each reads the resource, calls `tables` (or the job code), and writes status
and an Event; the decisions live in modules that know nothing of kopf.

kopf keeps its own progress in annotations (not in status, which the CRDs' structural schemas would
prune), and the deletion finalizer is `acidtables.io/finalizer`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from acidtables.core import (
    AcidTablesError,
    CoordinatorUnavailable,
    InvalidArgumentError,
    partition_files,
)

from . import autocompact, compactions, conditions, driving, executor_failures, maintenance, mirroring, tables
from .config import OperatorConfig
from .context import OperatorContext
from .definition import catalog_name, same_table
from .health import Health, heartbeat
from .pods import JOB_LABEL
from .status import table_status

logger = logging.getLogger(__name__)

GROUP, VERSION = "acidtables.io", "v1alpha1"
FINALIZER = "acidtables.io/finalizer"
#: the job timer's tick: only time-based steps wait for it (a driver pod's change steps its job at once)
JOB_TIMER_SECONDS = 2.0


def build_registry(config: OperatorConfig, health: Health | None = None) -> kopf.OperatorRegistry:
    """A registry of this operator's handlers (explicit, so importing this module registers nothing);
    with `health`, a heartbeat task in kopf's event loop feeds its liveness."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In a pod, its service account; elsewhere, the kubeconfig (KUBECONFIG or ~/.kube/config)."""
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.persistence.finalizer = FINALIZER
        settings.posting.level = logging.INFO
        settings.watching.server_timeout = 60
        # A timer still running when its resource is deleted is checked again after this long (kopf's
        # default is a minute, which is how long a deleted AcidTable would wait for auto_compact).
        settings.background.cancellation_polling = 1
        memo.finalizer = FINALIZER
        memo.start()

    if health is not None:
        beating: list[asyncio.Task[None]] = []

        @kopf.on.startup(registry=registry)
        async def start_heartbeat(**_: Any) -> None:
            # a task of kopf's own loop: a handler that blocks the loop stops the beat (liveness)
            beating.append(asyncio.get_running_loop().create_task(heartbeat(health)))

        @kopf.on.cleanup(registry=registry)
        async def stop_heartbeat(**_: Any) -> None:
            for task in beating:
                task.cancel()

    @kopf.on.cleanup(registry=registry)
    def stop(memo: Any, **_: Any) -> None:
        memo.stop()

    @kopf.on.resume(GROUP, VERSION, "acidtables", registry=registry)
    @kopf.on.create(GROUP, VERSION, "acidtables", registry=registry)
    @kopf.on.update(GROUP, VERSION, "acidtables", field="spec", registry=registry)
    def reconcile_table(
        body: kopf.Body,
        spec: kopf.Spec,
        name: str,
        namespace: str | None,
        meta: kopf.Meta,
        status: kopf.Status,
        patch: kopf.Patch,
        memo: Any,
        **_: Any,
    ) -> None:
        assert namespace is not None  # both kinds are namespaced (the CRDs say so)
        context: OperatorContext = memo
        generation = meta.get("generation")
        previous = status.get("conditions")
        try:
            result = tables.reconcile(context.catalog, namespace, name, spec, known_id=status.get("tableId"))
        except CoordinatorUnavailable as exc:
            context.metrics.reconcile_errors.labels("AcidTable").inc()
            raise kopf.TemporaryError(str(exc), delay=10) from exc
        except (tables.DefinitionMismatch, InvalidArgumentError) as exc:
            reason = "DefinitionMismatch" if isinstance(exc, tables.DefinitionMismatch) else "InvalidSpec"
            patch.status["observedGeneration"] = generation
            patch.status["conditions"] = conditions.merged(
                previous,
                conditions.condition(previous, conditions.READY, False, reason, str(exc), generation),
                conditions.condition(previous, conditions.DEGRADED, True, reason, str(exc), generation),
            )
            kopf.warn(body, reason=reason, message=str(exc))
            return  # a permanent error: the status says what to fix, nothing is retried until the spec changes
        except AcidTablesError as exc:
            context.metrics.reconcile_errors.labels("AcidTable").inc()
            raise kopf.TemporaryError(f"{type(exc).__name__}: {exc}", delay=30) from exc
        patch.status.update(table_status(result.table, small_file_bytes=context.small_file_bytes(spec)))
        patch.status["observedGeneration"] = generation
        message = {
            "created": f"created table {result.table.name}",
            "adopted": f"adopted the existing table {result.table.name}",
            "altered": f"altered {result.table.name}: "
            + "; ".join(
                part
                for part in (
                    f"added columns {', '.join(result.added_columns)}" if result.added_columns else "",
                    f"properties {', '.join(result.changed_properties)} changed" if result.changed_properties else "",
                )
                if part
            ),
            "unchanged": f"table {result.table.name} matches the spec",
        }[result.outcome]
        patch.status["conditions"] = conditions.merged(
            previous,
            conditions.condition(previous, conditions.READY, True, result.outcome.capitalize(), message, generation),
            conditions.condition(previous, conditions.DEGRADED, False, "AsSpecified", message, generation),
        )
        if result.outcome != "unchanged":
            kopf.info(body, reason=result.outcome.capitalize(), message=message)
        context.follow(result.table, namespace, name, spec)

    @kopf.on.delete(GROUP, VERSION, "acidtables", registry=registry)
    def release_table(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        name: str,
        namespace: str | None,
        memo: Any,
        **_: Any,
    ) -> None:
        assert namespace is not None
        context: OperatorContext = memo
        policy = spec.get("deletionPolicy", "Retain")
        try:
            said = tables.release(
                context.catalog, namespace, name, deletion_policy=policy, managed_id=status.get("tableId")
            )
        except CoordinatorUnavailable as exc:
            raise kopf.TemporaryError(str(exc), delay=10) from exc
        context.unfollow(namespace, name)
        kopf.info(body, reason="Released", message=said)

    def post(obj: Any, kind: str, reason: str, message: str) -> None:
        kopf.event(obj, type=kind, reason=reason, message=message)

    # backoff: a step that failed (the API server away) is tried again after this long, not kopf's minute
    @kopf.timer(GROUP, VERSION, "compactionjobs", interval=JOB_TIMER_SECONDS, backoff=5, registry=registry)
    def drive_compaction(
        spec: kopf.Spec, status: kopf.Status, name: str, namespace: str | None, memo: Any, **_: Any
    ) -> None:
        """A CompactionJob's time-based steps (the first attempt, a retry that is due, a driver that
        never started, the TTL after the end); its driver pod's changes come through `follow_driver`.
        Idempotent (driving.step reads the job afresh), so a restarted operator continues from the status.
        A finished job waits only for its TTL: until then it costs no request (kept ones add up)."""
        assert namespace is not None  # both kinds are namespaced (the CRDs say so)
        if compactions.waits_for_nothing_but_its_ttl(spec, status, datetime.now(UTC)):
            return
        driving.step(memo, namespace, name, post)

    @kopf.on.event("", "v1", "pods", labels={JOB_LABEL: kopf.PRESENT}, registry=registry)
    def follow_driver(
        type: str | None, labels: kopf.Labels, namespace: str | None, body: kopf.Body, memo: Any, **_: Any
    ) -> None:
        """A driver pod changed: step its job now, not at the next timer tick (issue 25: a finished
        job's conditions must follow within seconds). Executor pods carry the driver's labels (their
        template is the driver pod's): what goes wrong with one is kept on the job (issue 30)."""
        if namespace is None or type is None:
            return  # the initial listing: the jobs' timers look at every job once anyway
        if executor_failures.is_executor(body):
            driving.executor_changed(memo, namespace, str(labels[JOB_LABEL]), body, post)
            return
        driving.step(memo, namespace, str(labels[JOB_LABEL]), post)

    @kopf.on.delete(GROUP, VERSION, "compactionjobs", optional=True, registry=registry)
    def forget_job(name: str, namespace: str | None, spec: kopf.Spec, memo: Any, **_: Any) -> None:
        """A deleted job no longer counts as running on its table."""
        assert namespace is not None
        context: OperatorContext = memo
        context.forget_job(namespace, name)
        driving.refresh_compacting(context, namespace, str(spec.get("table")))

    @kopf.timer(GROUP, VERSION, "acidtables", interval=config.autocompact_interval_seconds, registry=registry)
    def auto_compact(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        meta: kopf.Meta,
        name: str,
        namespace: str | None,
        patch: kopf.Patch,
        memo: Any,
        **_: Any,
    ) -> None:
        """The Compacting condition, and automatic compaction (autocompact.choose): one job per table at
        a time, never next to a running user job, with backoff after a conflict; each decision an Event
        with its reason, and what it waits for in status.autoCompaction (issue 40, item 7)."""
        if not status.get("tableId"):
            return
        assert namespace is not None
        context: OperatorContext = memo
        now = datetime.now(UTC)
        jobs = [j for j in context.kube.list_jobs(namespace) if same_table(str(j["spec"].get("table")), name)]
        running = driving.running_jobs(jobs, name)
        updated = driving.compacting_conditions(status.get("conditions"), running, meta.get("generation"))
        if updated is not None:
            patch.status["conditions"] = updated

        def say(verdict: autocompact.Verdict) -> None:
            if (status.get("autoCompaction") or {}) != verdict.to_status():  # patched when it changes only
                patch.status["autoCompaction"] = verdict.to_status()

        compaction = spec.get("compaction") or {}
        if not compaction.get("auto"):
            say(autocompact.Verdict("Off", "compaction.auto is not true: only the CompactionJobs you create run"))
            return
        if running:  # one at a time, and never next to a running job of the user's
            automatic = {j["metadata"]["name"] for j in jobs if _automatic(j)}
            named = ", ".join(f"{job} (automatic)" if job in automatic else job for job in running)
            say(autocompact.Verdict("JobRunning", f"waiting for CompactionJob {named} to end: automatic compaction "
                                    "runs one job per table at a time, and never next to a job of yours"))  # fmt: skip
            return
        backoff = _backoff(jobs, context.config.autocompact_backoff)
        if backoff is not None and now < backoff[1]:
            streak, until, why = backoff
            say(autocompact.Verdict("BackingOff", f"the last {streak} automatic job(s) {why}: the next is not "
                                    f"created before {conditions.stamp(until)} (the backoff doubles per job in a row "
                                    "that did not succeed)"))  # fmt: skip
            return
        table = context.catalog.table(catalog_name(namespace, name))
        thresholds = autocompact.Thresholds.from_spec(compaction)
        snapshot = table.snapshot()

        def written_at(version: int) -> datetime | None:
            records = table.commits(version, version)
            return datetime.fromtimestamp(records[0].committed_at / 1e6, UTC) if records else None

        partitions, in_flight = partition_files(snapshot, thresholds.small_file_bytes), table.in_flight()
        policy = snapshot.metadata.conflict_policy.value
        choice = autocompact.choose(
            policy, snapshot.metadata.row_level_concurrency, thresholds, partitions, in_flight, written_at, now
        )
        if choice is None:
            say(autocompact.explain(policy, thresholds, partitions, in_flight))
            return
        job_name = automatic_job_name(name, snapshot.version, choice.kind)
        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "CompactionJob",
            "metadata": {
                "name": job_name,
                "namespace": namespace,
                "labels": {AUTOMATIC_LABEL: "true", TABLE_LABEL: label_value(name)},
                "ownerReferences": [
                    {
                        "apiVersion": body["apiVersion"],
                        "kind": body["kind"],
                        "name": name,
                        "uid": body["metadata"]["uid"],
                    }
                ],
            },
            "spec": {
                "table": name,
                "type": choice.kind,
                "targetFileBytes": thresholds.target_file_bytes,
                **({"where": choice.where} if choice.where else {}),
                "ttlSecondsAfterFinished": context.config.autocompact_job_ttl_seconds,
            },
        }
        if not context.kube.create_job(job):
            # the same decision on the same version was taken before: that job ended and is still kept (its
            # ttlSecondsAfterFinished), and nothing changed since that would make another one different
            said = f"CompactionJob {job_name} exists already, for this version of the table: no other is created"
            say(autocompact.Verdict("JobExists", f"{said} until the table changes or that job is deleted"))
            return
        logger.info("%s/%s: automatic compaction: %s", namespace, name, choice.reason)
        kopf.info(body, reason="AutoCompaction", message=f"{job_name}: {choice.reason}")
        say(autocompact.Verdict("JobCreated", f"created CompactionJob {job_name}: {choice.reason}"))

    maintenance_settings = maintenance.settings_from(config.maintenance_interval_seconds, config.archive_quiet_seconds)

    @kopf.timer(GROUP, VERSION, "acidtables", interval=config.maintenance_check_seconds, registry=registry)
    def maintain_table(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        name: str,
        namespace: str | None,
        patch: kopf.Patch,
        memo: Any,
        **_: Any,
    ) -> None:
        """Archive a quiet table's log, and with spec.retention expire and vacuum it when due
        (operator.maintenance); the table's etcd footprint as metrics."""
        if not status.get("tableId"):
            return
        assert namespace is not None
        context: OperatorContext = memo
        table = context.catalog.table(catalog_name(namespace, name))
        try:
            outcome = maintenance.maintain(
                table, spec, status, datetime.now(UTC), maintenance_settings, str(body["metadata"]["uid"])
            )
            keys, size = context.catalog.services.coordinator.table_usage(table.table_id)
        except AcidTablesError as exc:
            context.metrics.maintained(table.name, "maintenance", "error")
            raise kopf.TemporaryError(f"maintenance of {table.name}: {type(exc).__name__}: {exc}", delay=60) from exc
        for kind, result, files, freed in outcome.runs:
            context.metrics.maintained(table.name, kind, result, files, freed)
        context.metrics.table_etcd(table.name, keys, size)
        if outcome.status:
            patch.status.update(outcome.status)
        for kind, reason, message in outcome.events:
            kopf.event(body, type=kind, reason=reason, message=message)

    @kopf.timer(GROUP, VERSION, "acidtables", interval=config.mirror_check_seconds, registry=registry)
    def mirror_table(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        name: str,
        namespace: str | None,
        meta: kopf.Meta,
        patch: kopf.Patch,
        memo: Any,
        **_: Any,
    ) -> None:
        """Catch a mirrored table's Delta log up and say how far behind it was (operator.mirroring)."""
        if not status.get("tableId") or not (spec.get("mirror") or status.get("mirror")):
            return
        assert namespace is not None
        context: OperatorContext = memo
        table = context.catalog.table(catalog_name(namespace, name))
        now_us = int(datetime.now(UTC).timestamp() * 1_000_000)
        try:
            report = mirroring.look_at_mirror(table, now_us, config.mirror_lag_threshold_seconds)
        except AcidTablesError as exc:
            raise kopf.TemporaryError(f"mirror of {table.name}: {type(exc).__name__}: {exc}", delay=60) from exc
        patch.status["mirror"] = report.status
        context.metrics.mirror_lag(table.name, "delta", report.lag_versions, report.lag_seconds)
        previous = status.get("conditions")
        degraded: Mapping[str, Any] = next((c for c in previous or () if c.get("type") == conditions.DEGRADED), {})
        generation = meta.get("generation")
        if report.behind is not None:
            patch.status["conditions"] = conditions.merged(
                previous,
                conditions.condition(
                    previous, conditions.DEGRADED, True, mirroring.MIRROR_BEHIND, report.behind, generation
                ),
            )
            if degraded.get("reason") != mirroring.MIRROR_BEHIND:
                kopf.warn(body, reason=mirroring.MIRROR_BEHIND, message=report.behind)
        elif degraded.get("reason") == mirroring.MIRROR_BEHIND:
            message = f"the Delta mirror of {table.name} caught up" if report.status else "the mirror is off"
            patch.status["conditions"] = conditions.merged(
                previous,
                conditions.condition(
                    previous, conditions.DEGRADED, False, mirroring.MIRROR_CAUGHT_UP, message, generation
                ),
            )
            kopf.info(body, reason=mirroring.MIRROR_CAUGHT_UP, message=message)

    return registry


AUTOMATIC_LABEL = "acidtables.io/automatic"
TABLE_LABEL = "acidtables.io/table"
#: the longest label value Kubernetes takes; a job's name is one on its pods (pods.JOB_LABEL)
LABEL_VALUE_MAX = 63


def label_value(text: str) -> str:
    """`text` as a label value: itself when it fits, else its start and a digest of the whole."""
    if len(text) <= LABEL_VALUE_MAX:
        return text
    return f"{text[: LABEL_VALUE_MAX - 11]}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def automatic_job_name(table: str, version: int, kind: str) -> str:
    """`<table>-auto-<version>-<kind>`, the table's part shortened (and told apart by a digest) so the
    name fits a label value: every pod of the job carries it as one."""
    suffix = f"-auto-{version}-{kind}"
    room = LABEL_VALUE_MAX - len(suffix)
    if len(table) <= room:
        return table + suffix
    start = table[: room - 11].rstrip("-.")  # a name's parts between dots start and end alphanumeric
    return f"{start}-{hashlib.sha256(table.encode()).hexdigest()[:10]}{suffix}"


def _automatic(job: dict[str, Any]) -> bool:
    return (job["metadata"].get("labels") or {}).get(AUTOMATIC_LABEL) == "true"


#: how an automatic job that did not succeed ended, in the BackingOff message
_UNSUCCESSFUL = {"Conflicted": "lost a conflict to a concurrent commit", "Failed": "failed"}


def _backoff(jobs: list[dict[str, Any]], first_backoff: timedelta) -> tuple[int, datetime, str] | None:
    """After n automatic jobs in a row that lost conflicts or failed: (n, the end of the last plus
    first_backoff x 2^(n-1), before which no automatic job is created, and how they ended in words);
    None after none. A job that keeps failing is not created again at every write to the table."""
    automatic = sorted((j for j in jobs if _automatic(j)), key=lambda j: str(j["metadata"].get("creationTimestamp")))
    phases: list[str] = []
    for job in reversed(automatic):
        phase = (job.get("status") or {}).get("phase")
        if phase not in _UNSUCCESSFUL:
            break
        phases.append(phase)
    if not phases:
        return None
    ended = compactions.parse_time((automatic[-1].get("status") or {}).get("completionTime"))
    why = " or ".join(_UNSUCCESSFUL[p] for p in dict.fromkeys(phases))
    return None if ended is None else (len(phases), ended + first_backoff * 2 ** (len(phases) - 1), why)
