"""What the operator's handlers share: the catalog, and the thread that keeps table status in step
with etcd by following the change feed (one watch per operator, design §6)."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from acidtables.core import (
    AcidTablesError,
    Catalog,
    ChangeFeed,
    InvalidArgumentError,
    KeyChange,
    LiveRowCounter,
    Resync,
    Table,
    TableNotFoundError,
)
from acidtables.metrics import ClusterMetrics

from . import spark_rbac
from .compactions import parse_time
from .config import OperatorConfig
from .status import DEFAULT_SMALL_FILE_BYTES, table_status

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "acidtables.io", "v1alpha1", "acidtables"

_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


#: the CRDs' own pattern for a size
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")


def quantity_bytes(value: object, default: int) -> int:
    """A Kubernetes quantity (`32Mi`, `128M`, `1000`) in bytes; the CRD has checked its form."""
    if value is None:
        return default
    if isinstance(value, int):
        return value
    found = _QUANTITY.match(str(value).strip())
    if found is None:
        raise InvalidArgumentError(
            f"{value!r} is not a size in bytes; write it like '134217728', '128M', '128Mi' or '512Ki'"
        )
    number, unit = found.groups()
    return int(float(number) * _UNITS[unit or ""])


class StatusFollower:
    """Follows the change feed on its own thread: patches the status of followed AcidTables whenever
    their head or in-flight set changes, and counts what every writer did (ClusterMetrics): commits
    from the log between the heads it saw, and the recorded conflicts, retries, exhaustions and aborts.
    The kopf handlers only say which resource follows which table."""

    def __init__(self, catalog: Catalog, patch_status: Any, metrics: ClusterMetrics) -> None:
        self.catalog = catalog
        self.patch_status = patch_status
        self.metrics = metrics
        #: table id -> catalog name, from the feed's catalog entries
        self._names: dict[str, str] = {}
        #: table id -> newest version counted
        self._versions: dict[str, int] = {}
        #: a table's status is recomputed at most this often: a burst of commits costs one update
        self.min_refresh_seconds = 0.1
        self._refreshed: dict[str, float] = {}
        #: tables with a commit seen on the live feed (not a resync) whose status has not shown it yet:
        #: the next status update observes its lag
        self._committed_live: set[str] = set()
        self._pending: set[str] = set()
        self._followed: dict[str, tuple[str, str, int, Table]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.feed = ChangeFeed(catalog.services.coordinator)
        #: live rows per partition, remembered by file set: a commit re-reads only what it touched
        self.counter = LiveRowCounter()
        #: monotonic time the follower last went round its loop (it waits at most 0.5 s per round)
        self.last_cycle = time.monotonic()
        #: monotonic time the watch went down, None while it is up
        self.watch_down_since: float | None = None
        #: liveness: a loop silent this long is stuck; a watch down this long (etcd answering) is dead
        self.stuck_after_seconds = 30.0
        self.watch_down_limit_seconds = 120.0

    def follow(self, table: Table, namespace: str, name: str, small_file_bytes: int) -> None:
        with self._lock:
            self._followed[table.table_id] = (namespace, name, small_file_bytes, table)

    def unfollow(self, namespace: str, name: str) -> None:
        with self._lock:
            self._followed = {k: v for k, v in self._followed.items() if v[:2] != (namespace, name)}

    def start(self) -> None:
        # the state now: the handlers' own reconcile wrote the status it implies; counting starts here
        self._apply(self.feed.start(), count=False)
        self._thread = threading.Thread(target=self._run, name="acidtables-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.feed.close()

    def problem(self, etcd_answers: bool) -> str | None:
        """What liveness reports about the follower: None while it runs, cycles and watches. A watch
        that is down counts only while etcd itself answers (`etcd_answers`): with etcd away, restarting
        the operator would not bring the watch back, and readiness says so already."""
        if self._thread is None or self._stop.is_set():
            return None  # not started (a standby), or stopped on purpose
        if not self._thread.is_alive():
            return "the etcd change-feed follower thread ended: table status and cluster metrics stopped"
        silent = time.monotonic() - self.last_cycle
        if silent > self.stuck_after_seconds:
            return f"the etcd change-feed follower has not gone round its loop for {silent:.0f} s: it is stuck"
        down = self.watch_down_since
        if down is not None and etcd_answers and time.monotonic() - down > self.watch_down_limit_seconds:
            return (
                f"the etcd watch has been down for {time.monotonic() - down:.0f} s while etcd answers "
                f"(limit {self.watch_down_limit_seconds:.0f} s): it does not come back by itself"
            )
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.last_cycle = time.monotonic()
            try:
                got = self.feed.next(self.min_refresh_seconds if self._pending else 0.5)
                self.metrics.watch_up.set(1 if self.feed.up else 0)
                if self.feed.up:
                    self.watch_down_since = None
                elif self.watch_down_since is None:
                    self.watch_down_since = time.monotonic()
                self._pending |= self._apply(got, count=not isinstance(got, Resync))
                now = time.monotonic()
                for table_id in sorted(self._pending):
                    if now - self._refreshed.get(table_id, 0.0) >= self.min_refresh_seconds:
                        self._pending.discard(table_id)
                        self._refreshed[table_id] = now
                        self._refresh(table_id)
            except Exception:  # a bad moment must not stop status for every table
                logger.exception("the status follower hit an error; continuing in 1 s")
                if not self.feed.up and self.watch_down_since is None:
                    self.watch_down_since = time.monotonic()
                self._stop.wait(1.0)

    def _apply(self, got: list[KeyChange] | Resync, *, count: bool) -> set[str]:
        """Take the changes in; returns the tables whose status may have changed."""
        changes = list(got.state) if isinstance(got, Resync) else got
        touched: set[str] = set()
        for change in changes:
            if change.kind == "catalog" and change.table_id and change.value is not None:
                self._names[change.table_id] = str(change.value.get("name", ""))
                self.metrics.table_known(self._names[change.table_id])  # its counters from zero
            elif change.kind == "event":
                if change.value is not None:
                    self.metrics.recorded_event(change.key, change.value)
                elif change.deleted:
                    self.metrics.forget_event(change.key)
            elif change.kind in ("head", "inflight") and change.table_id:
                touched.add(change.table_id)
                if change.kind == "head" and change.value is not None:
                    self._count_commits(change.table_id, int(change.value.get("version", 0)), count=count)
                    if count:
                        self._committed_live.add(change.table_id)
        return touched

    def _count_commits(self, table_id: str, version: int, *, count: bool) -> None:
        seen = self._versions.get(table_id)
        self._versions[table_id] = version
        name = self._names.get(table_id)
        if not count or seen is None or version <= seen or not name:
            return
        try:
            records = self.catalog.table(name).commits(seen + 1, version)
        except AcidTablesError as exc:  # dropped meanwhile, or damaged: count what can be counted
            logger.info("could not read the commits of %s: %s", name, exc)
            return
        for record in records:
            self.metrics.committed(name, record.operation.value)

    def _refresh(self, table_id: str) -> None:
        with self._lock:
            target = self._followed.get(table_id)
        if target is None:
            return
        namespace, name, small_file_bytes, table = target
        try:
            in_flight = table.in_flight()
            status = table_status(table, small_file_bytes=small_file_bytes, in_flight=in_flight, counter=self.counter)
        except TableNotFoundError:  # dropped behind the resource's back; its handler will say so
            return
        self.patch_status(namespace, name, status)
        now_us = time.time() * 1_000_000
        if table_id in self._committed_live and "lastCommit" in status:
            self._committed_live.discard(table_id)
            committed = parse_time(status["lastCommit"]["time"])
            if committed is not None:
                self.metrics.status_lag.observe(max(0.0, now_us / 1_000_000 - committed.timestamp()))
        started = [t.started_at for t in in_flight if t.started_at is not None]
        self.metrics.table_state(table.name, status, (now_us - min(started)) / 1_000_000 if started else 0.0)


class KubeClient:
    """The few API calls the operator makes outside kopf's handlers: status from the feed thread, and
    the driver pods of compaction jobs. Credentials: the pod's service account, else the kubeconfig."""

    def __init__(self) -> None:
        import kubernetes

        try:
            kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        except kubernetes.config.ConfigException:
            # KUBECONFIG as it is now: the client reads the variable once, when it is imported
            kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)  # type: ignore[no-untyped-call]
        self._errors = kubernetes.client.ApiException
        self._custom = kubernetes.client.CustomObjectsApi()
        self._core = kubernetes.client.CoreV1Api()
        self._client = kubernetes.client.ApiClient()

    @property
    def errors(self) -> type[Exception]:
        """The client's exception for an answer other than 2xx (its `status` and `body` say which)."""
        errors: type[Exception] = self._errors
        return errors

    def ping(self) -> None:
        """Ask the API server for its version (readiness: it answers, with our credentials)."""
        import kubernetes

        kubernetes.client.VersionApi(self._client).get_code(_request_timeout=5)

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read_custom(namespace, "compactionjobs", name)

    def read_table(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read_custom(namespace, PLURAL, name)

    def _read_custom(self, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        try:
            found: Any = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except self._errors as exc:
            if exc.status == 404:  # deleted meanwhile: the caller has nothing to do
                return None
            raise
        return dict(found)

    def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "compactionjobs", name, {"status": dict(status)}
            )
        except self._errors as exc:
            if exc.status != 404:  # the job is gone: nothing to show the status on
                raise

    def patch_table_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, resource_version: str | None = None
    ) -> bool:
        """Merge `status` into the AcidTable's; with `resource_version`, only if the resource is still at
        that version. False when it is not (409: someone wrote in between) or is gone.

        A list in a merge patch replaces the whole list, so a writer that read `conditions`, changed one
        and patched them back would undo a condition another writer set in between (kopf's Ready, say);
        the version makes that read-modify-write fail instead, for the caller to read again."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self._custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, body)
        except self._errors as exc:
            if exc.status in (404, 409):  # gone: nothing to show it on; 409: changed since it was read
                return False
            raise
        return True

    def create_if_absent(self, manifest: Mapping[str, Any]) -> bool:
        """Create a ServiceAccount, Role or RoleBinding; False when one of that name exists (left as it is)."""
        import kubernetes

        namespace, kind = manifest["metadata"]["namespace"], manifest["kind"]
        body: Any = dict(manifest)  # the client takes a plain manifest as well as its models
        try:
            if kind == "ServiceAccount":
                self._core.create_namespaced_service_account(namespace, body)
            else:
                rbac = kubernetes.client.RbacAuthorizationV1Api(self._client)
                create = rbac.create_namespaced_role if kind == "Role" else rbac.create_namespaced_role_binding
                create(namespace, body)
        except self._errors as exc:
            if exc.status == 409:  # already there (the chart's, an administrator's, or ours): theirs stays
                return False
            raise
        return True

    def create_pod(self, manifest: Mapping[str, Any]) -> None:
        """Create the pod; one of that name already there is this attempt's, created before a restart."""
        try:
            body: Any = dict(manifest)  # the client takes a plain manifest as well as a V1Pod
            self._core.create_namespaced_pod(manifest["metadata"]["namespace"], body)
        except self._errors as exc:
            if exc.status != 409:
                raise

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            # the raw JSON, not the client's models: the decisions read a few fields, and a model
            # refuses a status a newer API server (or a test) shapes differently
            answer: Any = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
        except self._errors as exc:
            if exc.status == 404:
                return None
            raise
        result: dict[str, Any] = json.loads(answer.data)
        return result

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The pods of the namespace carrying all of `labels`, as raw JSON (like read_pod)."""
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        answer: Any = self._core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
        items: list[dict[str, Any]] = json.loads(answer.data).get("items") or []
        return items

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            # the answer unread, as in read_pod: the client's model refuses a status shaped otherwise
            self._core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _preload_content=False)
        except self._errors as exc:
            if exc.status != 404:
                raise

    def list_jobs(self, namespace: str) -> list[dict[str, Any]]:
        listed: Any = self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compactionjobs")
        items: list[dict[str, Any]] = listed.get("items", [])
        return items

    def create_job(self, manifest: Mapping[str, Any]) -> bool:
        """Create a CompactionJob; False if one of that name exists (a decision taken twice)."""
        try:
            self._custom.create_namespaced_custom_object(
                GROUP, VERSION, manifest["metadata"]["namespace"], "compactionjobs", dict(manifest)
            )
        except self._errors as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete_job(self, namespace: str, name: str, finalizer: str) -> None:
        """Delete a finished CompactionJob, which carries kopf's finalizer (kopf keeps one on resources
        with timers). This call comes from the job's own timer, which kopf waits for before it lets the
        job go, and it checks again only after a minute. So the operator takes its own finalizer off,
        after the delete: once the deletion timestamp is set kopf never puts it back (taken off before,
        kopf may put it back between the two calls). Other controllers' finalizers stay."""
        try:
            self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "compactionjobs", name)
            while True:
                job: Any = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "compactionjobs", name)
                held = job["metadata"].get("finalizers") or []
                if finalizer not in held:
                    return
                try:
                    self._custom.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        namespace,
                        "compactionjobs",
                        name,
                        {
                            "metadata": {
                                "finalizers": [f for f in held if f != finalizer],
                                "resourceVersion": job["metadata"]["resourceVersion"],
                            }
                        },
                    )
                    return
                except self._errors as exc:
                    if exc.status != 409:  # 409: changed since read; read again
                        raise
        except self._errors as exc:
            if exc.status != 404:
                raise


class OperatorContext:
    """kopf's `memo`: one per operator process."""

    def __init__(
        self,
        catalog: Catalog,
        config: OperatorConfig,
        stop_flag: threading.Event | None = None,
        metrics: ClusterMetrics | None = None,
    ) -> None:
        self.catalog = catalog
        self.config = config
        self.metrics = metrics or ClusterMetrics()
        #: kopf's stop flag: set on cleanup too, because kopf waits for it in a worker thread that would
        #: otherwise keep the process from exiting after a SIGTERM
        self.stop_flag = stop_flag
        self.follower: StatusFollower | None = None
        self._kube: KubeClient | None = None
        #: the finalizer kopf puts on both kinds (handlers.FINALIZER; set here so helpers need no kopf)
        self.finalizer = "acidtables.io/finalizer"
        self._job_locks: dict[tuple[str, str], threading.Lock] = {}
        #: namespaces where Spark's account is known to exist (ensure_job_account)
        self._accounts: set[str] = set()
        #: per job and attempt, what was said of each executor pod ("pending", "failed"): each is posted
        #: and counted once however often its pod changes (status keeps only the last few)
        self._executors_said: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
        self._locks_lock = threading.Lock()

    def job_lock(self, namespace: str, name: str) -> threading.Lock:
        """One lock per CompactionJob: its timer and its driver pod's events never step it at once."""
        with self._locks_lock:
            return self._job_locks.setdefault((namespace, name), threading.Lock())

    def forget_job(self, namespace: str, name: str) -> None:
        with self._locks_lock:
            self._job_locks.pop((namespace, name), None)
            self._executors_said.pop((namespace, name), None)

    def executors_said(self, namespace: str, name: str, attempt: str) -> dict[str, str]:
        """What was said of the executor pods of the job's attempt (a new attempt starts afresh)."""
        with self._locks_lock:
            known = self._executors_said.get((namespace, name))
            if known is None or known[0] != attempt:
                known = self._executors_said[(namespace, name)] = (attempt, {})
            return known[1]

    def ensure_job_account(self, namespace: str) -> None:
        """Create Spark's ServiceAccount, Role and RoleBinding in `namespace` (spark_rbac) once per
        operator process and namespace, when the config says so; raises the API server's refusal."""
        name = self.config.job_service_account
        if not (self.config.create_job_accounts and name) or namespace in self._accounts:
            return
        created = [m["kind"] for m in spark_rbac.manifests(namespace, name) if self.kube.create_if_absent(m)]
        if created:
            logger.info("created %s %s in namespace %s for Spark's driver pods", "/".join(created), name, namespace)
        self._accounts.add(namespace)

    def forget_job_account(self, namespace: str) -> None:
        """The account went missing (a pod was refused for it): create it again before the next attempt."""
        self._accounts.discard(namespace)

    @property
    def kube(self) -> KubeClient:
        if self._kube is None:
            self._kube = KubeClient()
        return self._kube

    def start(self) -> None:
        self.follower = StatusFollower(self.catalog, self.kube.patch_table_status, self.metrics)
        self.follower.start()

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        if self.stop_flag is not None:
            self.stop_flag.set()

    @staticmethod
    def small_file_bytes(spec: Mapping[str, Any]) -> int:
        minor = (spec.get("compaction") or {}).get("minor") or {}
        return quantity_bytes(minor.get("smallFileBytes"), DEFAULT_SMALL_FILE_BYTES)

    def follow(self, table: Table, namespace: str, name: str, spec: Mapping[str, Any] | None = None) -> None:
        self.metrics.table_known(table.name)
        if self.follower is not None:
            self.follower.follow(table, namespace, name, self.small_file_bytes(spec or {}))

    def unfollow(self, namespace: str, name: str) -> None:
        if self.follower is not None:
            self.follower.unfollow(namespace, name)


__all__ = ["OperatorContext", "StatusFollower", "quantity_bytes"]
