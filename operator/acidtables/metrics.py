"""Prometheus metrics for commits, conflicts, retries and aborts; the only module importing prometheus_client.

Core reports every commit outcome as a plain `CommitEvent` (style §3: core knows nothing of
Prometheus), so whichever process runs transactions — a Spark driver, a job pod, the operator —
installs `CommitMetrics` to count its own commits:

    from prometheus_client import start_http_server
    from acidtables.metrics import CommitMetrics

    metrics = CommitMetrics().install()  # the default registry
    start_http_server(9108)

Conflicts and aborts inside short-lived Spark pods die with the pod's /metrics endpoint, so core also
records them in etcd under a lease (design §2). The operator registers `EtcdEventCollector` to expose
how many of those are still under their lease, whichever process they happened in.

Label values come from closed sets only (style §3 "Metrics"): namespace and table (bounded by the
tables that exist), operation (core's `Operation` values), outcome, and conflict exception class
names. Never txn ids, versions, partitions or paths.

client_python exposes a labelled series only once `.labels()` was called, so a counter that has not
moved yet would be missing: a dashboard shows "no data" and `rate()`/`increase()` miss its first
event. Every counter is therefore created at zero for each known label value as soon as what it is
about is known (Prometheus' instrumentation guidance): the operator's own ones when ClusterMetrics is
made, a table's when the operator first sees the table (`ClusterMetrics.table_known`), a process's
commit counters when it first commits to a table with an operation (`CommitMetrics`).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from acidtables.core import (
    CONFLICT_CLASSES,
    AcidTablesError,
    CommitEvent,
    InvalidArgumentError,
    Operation,
    split_name,
    subscribe_to_commits,
)

__all__ = [
    "DURATION_BUCKETS_SECONDS",
    "JOB_RESULTS",
    "JOB_TYPES",
    "MAINTENANCE_RUNS",
    "OUTCOMES",
    "RECONCILED_KINDS",
    "ClusterMetrics",
    "CommitMetrics",
    "EtcdEventCollector",
    "EtcdUsageCollector",
    "EventSource",
    "register_collector",
    "start_http_server",
]

logger = logging.getLogger(__name__)

#: the values of the `outcome` label of acidtables_commits_total
OUTCOMES = ("committed", "conflict", "aborted", "exhausted")

#: the `kind` values of acidtables_operator_reconcile_errors_total: the resources the operator reconciles
RECONCILED_KINDS = ("AcidTable", "CompactionJob")
#: a CompactionJob's `type` (the CRD's enum) and its `result` (the phases a job ends in)
JOB_TYPES = ("minor", "major", "cluster")
JOB_RESULTS = ("Succeeded", "Failed", "Conflicted")
#: the (kind, outcome) pairs of acidtables_maintenance_runs_total: what operator.maintenance reports
#: (archive; expire, ok or refused by the retention rules; vacuum), and a maintenance pass that failed
MAINTENANCE_RUNS = (
    ("archive", "ok"),
    ("expire", "ok"),
    ("expire", "refused"),
    ("vacuum", "ok"),
    ("maintenance", "error"),
)

#: commits take from about a millisecond (an uncontended CAS on a local etcd) to a minute (a busy table
#: rebasing many times against a remote etcd), so the buckets grow roughly x2.5 from 1 ms to 60 s
DURATION_BUCKETS_SECONDS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

#: event kinds that end a commit attempt, and so have a duration worth observing (an abort never
#: reached the commit loop: core reports it without a duration)
_TIMED_KINDS = frozenset({"committed", "conflict", "exhausted"})

_OPERATIONS = frozenset(op.value for op in Operation)
# Anything outside the closed sets (a newer core, a bug) is folded into one value rather than
# becoming a new label value: an unbounded label would grow the series without limit.
_OTHER = "other"


def _operation_label(value: str) -> str:
    return value if value in _OPERATIONS else _OTHER


def _exception_label(value: str | None) -> str:
    return value if value is not None and value in CONFLICT_CLASSES else _OTHER


class CommitMetrics:
    """Counts this process's commits from core's events.

    `acidtables_commit_retries_total` counts the per-rebase `retry` events, not the `retries` field of
    `committed` events: a retry event arrives as the rebase happens, so rebases of a commit that later
    fails (conflict, exhausted) are counted too, and the two are never added together.

    `registry` follows client_python: the default process registry, a fresh `CollectorRegistry()`
    (tests), or None to register nowhere.
    """

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        self.commits = Counter(
            "acidtables_commits",
            "Commit attempts that ended, by outcome: committed, conflict (a concurrent commit won and the "
            "rules say this one cannot be rebased), aborted (given up before committing) or exhausted (ran "
            "out of rebase attempts, ACIDTABLES_COMMIT_MAX_ATTEMPTS).",
            ["namespace", "table", "operation", "outcome"],
            registry=registry,
        )
        self.conflicts = Counter(
            "acidtables_commit_conflicts",
            "Commits that lost to a concurrent commit, by the conflict exception raised "
            "(a ConcurrentModificationException subclass).",
            ["namespace", "table", "operation", "exception"],
            registry=registry,
        )
        self.retries = Counter(
            "acidtables_commit_retries",
            "Rebases: a commit lost the compare-and-swap to commits it does not conflict with, and was "
            "rebased onto the new head and tried again (one per rebase, whatever the commit's outcome).",
            ["namespace", "table", "operation"],
            registry=registry,
        )
        self.backoff = Counter(
            "acidtables_commit_backoff_seconds",
            "Time commits paused before retrying after losing the compare-and-swap again in a row (the "
            "first retry after a loss goes at once).",
            ["namespace", "table", "operation"],
            registry=registry,
        )
        self.duration = Histogram(
            "acidtables_commit_duration_seconds",
            "Time from calling commit() to its outcome, rebases and backoff included.",
            ["operation", "outcome"],
            buckets=DURATION_BUCKETS_SECONDS,
            registry=registry,
        )
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str, str]] = set()
        self._unsubscribe: Callable[[], None] | None = None

    def install(self) -> CommitMetrics:
        """Start counting core's commit events; installing twice counts once."""
        with self._lock:
            if self._unsubscribe is None:
                self._unsubscribe = subscribe_to_commits(self.observe)
        return self

    def uninstall(self) -> None:
        """Stop counting; the metrics keep their values."""
        with self._lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()

    def _initialise(self, namespace: str, table: str, operation: str) -> None:
        # client_python exposes a labelled series only once .labels() was called; creating every
        # outcome at 0 when a table/operation is first seen lets rate() and alerts see the first
        # conflict as an increase instead of a series appearing from nowhere.
        key = (namespace, table, operation)
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
        for outcome in OUTCOMES:
            self.commits.labels(namespace, table, operation, outcome)
        for exception in CONFLICT_CLASSES:
            self.conflicts.labels(namespace, table, operation, exception)
        self.retries.labels(namespace, table, operation)
        self.backoff.labels(namespace, table, operation)

    def observe(self, event: CommitEvent) -> None:
        """Count one event; core calls this for every commit, conflict, retry, abort and exhaustion."""
        operation = _operation_label(event.operation)
        self._initialise(event.namespace, event.table, operation)
        if event.kind == "retry":
            self.retries.labels(event.namespace, event.table, operation).inc()
            self.backoff.labels(event.namespace, event.table, operation).inc(event.backoff_seconds)
            return
        if event.kind not in OUTCOMES:
            logger.debug("ignoring commit event of unknown kind %r", event.kind)
            return
        self.commits.labels(event.namespace, event.table, operation, event.kind).inc()
        if event.kind == "conflict":
            self.conflicts.labels(event.namespace, event.table, operation, _exception_label(event.exception)).inc()
        if event.kind in _TIMED_KINDS:
            self.duration.labels(operation, event.kind).observe(event.duration_seconds)


class EventSource(Protocol):
    """What the collector needs of core's `Coordinator`: the event records still under their lease."""

    def list_events(self, table_id: str | None = None) -> list[dict[str, Any]]: ...


class EtcdEventCollector:
    """Conflicts and aborts core recorded in etcd and still under their lease, for the operator.

    A job pod's own /metrics dies with the pod; these records outlive it (for
    `CommitSettings.event_ttl_seconds`, one hour by default), so the operator sees conflicts of every
    writer. The values are counts of records alive now, so they are gauges that also go down as
    leases expire. Register it on the operator's registry:

        registry.register(EtcdEventCollector(catalog.services.coordinator))

    Each scrape lists the events in one etcd range read. When etcd cannot be reached the scrape still
    succeeds: `acidtables_recent_events_up` is 0 and the two event families are empty, rather than
    the scrape failing or the counts reading as zero.
    """

    def __init__(self, coordinator: EventSource) -> None:
        self._coordinator = coordinator

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                "acidtables_recent_conflicts",
                "Conflicts recorded in etcd that are still under their lease, by conflict exception.",
                labels=["namespace", "table", "exception"],
            ),
            GaugeMetricFamily(
                "acidtables_recent_aborts",
                "Aborted transactions recorded in etcd that are still under their lease.",
                labels=["namespace", "table"],
            ),
            GaugeMetricFamily(
                "acidtables_recent_events_up",
                "1 if the last scrape could list the conflict and abort events in etcd, 0 if etcd was unreachable.",
            ),
        )

    def describe(self) -> Iterable[Metric]:
        # Without describe(), registering would call collect() and so read etcd at start-up.
        return self._families()

    def collect(self) -> Iterable[Metric]:
        conflicts_family, aborts_family, up_family = self._families()
        try:
            recorded = self._coordinator.list_events()
        except AcidTablesError as exc:  # CoordinatorUnavailable: report it, keep the scrape working
            logger.warning("could not list conflict and abort events in etcd: %s", exc)
            up_family.add_metric([], 0)
            return [up_family]
        conflicts: Tally[tuple[str, str, str]] = Tally()
        aborts: Tally[tuple[str, str]] = Tally()
        for event in recorded:
            try:
                namespace, table = split_name(str(event.get("table", "")), method="metrics")
            except InvalidArgumentError:  # a record another version wrote: count it, under its raw name
                namespace, table = "", str(event.get("table", ""))
            if event.get("kind") == "conflict":
                conflicts[(namespace, table, _exception_label(event.get("exception")))] += 1
            elif event.get("kind") == "aborted":
                aborts[(namespace, table)] += 1
        for (namespace, table, exception), count in sorted(conflicts.items()):
            conflicts_family.add_metric([namespace, table, exception], count)
        for (namespace, table), count in sorted(aborts.items()):
            aborts_family.add_metric([namespace, table], count)
        up_family.add_metric([], 1)
        return [conflicts_family, aborts_family, up_family]


def register_collector(collector: Any, registry: CollectorRegistry = REGISTRY) -> None:
    """Add a custom collector (read at each scrape) to the registry /metrics serves."""
    registry.register(collector)


class UsageSource(Protocol):
    """What the usage collector needs of core's `Coordinator`."""

    def endpoint_usage(self) -> list[Any]: ...

    def alarms(self) -> list[str]: ...


class EtcdUsageCollector:
    """etcd's database size, in-use size and quota per endpoint, and its raised alarms, read at each
    scrape (issue 18): a full etcd stops every table at once, so it is alerted on before it happens.
    An endpoint that cannot be asked is left out of the size families and counted in
    `acidtables_etcd_usage_up` as 0."""

    def __init__(self, coordinator: UsageSource) -> None:
        self._coordinator = coordinator

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily("acidtables_etcd_db_size_bytes", "etcd's database file size", labels=["endpoint"]),
            GaugeMetricFamily(
                "acidtables_etcd_db_in_use_bytes", "The part of etcd's database in use", labels=["endpoint"]
            ),
            GaugeMetricFamily("acidtables_etcd_quota_bytes", "etcd's backend quota", labels=["endpoint"]),
            GaugeMetricFamily("acidtables_etcd_usage_up", "1 if the endpoint reported its usage", labels=["endpoint"]),
            GaugeMetricFamily("acidtables_etcd_alarm", "1 for each alarm etcd has raised (NOSPACE)", labels=["alarm"]),
        ]

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        size, in_use, quota, up, alarm = self._families()
        try:
            usage = self._coordinator.endpoint_usage()
            alarms = self._coordinator.alarms()
        except AcidTablesError as exc:
            logger.warning("could not read etcd's usage: %s", exc)
            return [up]
        for u in usage:
            up.add_metric([u.endpoint], 0 if u.error else 1)
            for family, value in ((size, u.db_size_bytes), (in_use, u.db_in_use_bytes), (quota, u.quota_bytes)):
                if value is not None:
                    family.add_metric([u.endpoint], value)
        for name in alarms:
            alarm.add_metric([name], 1)
        return [size, in_use, quota, up, alarm]


class ClusterMetrics:
    """What every writer in the cluster did, as the operator sees it in etcd (design §2, §6): monotonic
    `_total` counters of commits (from the table logs), and of conflicts, retries, exhaustions and
    aborts (from the records core writes under a lease, each counted once by its key, however short it
    lived), per-table gauges, compaction jobs, and the operator's own health.

    The operator feeds it from its change feed; nothing here talks to etcd or Kubernetes itself.
    """

    _EVENT_COUNTERS = {"conflict": "conflicts", "retry": "retries", "exhausted": "exhausted", "aborted": "aborts"}

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        labels = ("namespace", "table", "operation")
        self.commits = Counter(
            "acidtables_cluster_commits", "Commits of every writer, from the table logs", labels, registry=registry
        )
        self.conflicts = Counter(
            "acidtables_cluster_conflicts",
            "Commits of any writer that lost a conflict, by exception",
            (*labels, "exception"),
            registry=registry,
        )
        self.retries = Counter(
            "acidtables_cluster_retries",
            "Rebases of any writer after a lost compare-and-swap",
            labels,
            registry=registry,
        )
        self.exhausted = Counter(
            "acidtables_cluster_exhausted", "Commits that ran out of attempts", labels, registry=registry
        )
        self.aborts = Counter("acidtables_cluster_aborts", "Transactions aborted", labels, registry=registry)
        table = ("namespace", "table")
        self.version = Gauge("acidtables_table_version", "Newest version of a table", table, registry=registry)
        self.files = Gauge("acidtables_table_files", "Active data files", table, registry=registry)
        self.small_files = Gauge(
            "acidtables_table_small_files", "Active files under the small-file size", table, registry=registry
        )
        self.bytes = Gauge("acidtables_table_bytes", "Bytes in active data files", table, registry=registry)
        self.in_flight = Gauge(
            "acidtables_table_inflight_transactions", "Running transactions", table, registry=registry
        )
        self.oldest_in_flight = Gauge(
            "acidtables_table_oldest_inflight_seconds",
            "Age of the oldest running transaction",
            table,
            registry=registry,
        )
        self.jobs = Counter(
            "acidtables_compaction_jobs",
            "Finished CompactionJobs by type and result",
            ("type", "result"),
            registry=registry,
        )
        self.job_seconds = Histogram(
            "acidtables_compaction_job_duration_seconds",
            "Time from a CompactionJob's start to its end",
            ("type", "result"),
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600),
            registry=registry,
        )
        self.bytes_rewritten = Counter(
            "acidtables_compaction_bytes_rewritten", "Bytes compaction jobs rewrote", ("type",), registry=registry
        )
        self.reconcile_errors = Counter(
            "acidtables_operator_reconcile_errors",
            "Handler runs that failed and will be retried",
            ("kind",),
            registry=registry,
        )
        self.watch_up = Gauge("acidtables_operator_etcd_watch_up", "1 while the etcd watch is up", registry=registry)
        self.commit_seconds = Histogram(
            "acidtables_cluster_commit_duration_seconds",
            "Time from a writer's commit() to the answer of its compare-and-swap that landed (rebases, backoff and "
            "that round trip included), as each writer measured it and recorded it in etcd after the commit",
            ("namespace", "table", "operation"),
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.status_lag = Histogram(
            "acidtables_operator_status_lag_seconds",
            "Time from a commit to its AcidTable's status showing it (the writer's clock against the operator's)",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=registry,
        )
        self.maintenance_runs = Counter(
            "acidtables_maintenance_runs",
            "Maintenance the operator ran (archive, expire, vacuum), by outcome",
            ("namespace", "table", "kind", "outcome"),
            registry=registry,
        )
        self.maintenance_files = Counter(
            "acidtables_maintenance_files_freed", "Data files vacuum deleted", table, registry=registry
        )
        self.maintenance_bytes = Counter(
            "acidtables_maintenance_bytes_freed", "Bytes of data files vacuum deleted", table, registry=registry
        )
        self.etcd_keys = Gauge("acidtables_table_etcd_keys", "Keys a table holds in etcd", table, registry=registry)
        self.etcd_bytes = Gauge(
            "acidtables_table_etcd_bytes", "Bytes (keys and values) a table holds in etcd", table, registry=registry
        )
        mirror = ("namespace", "table", "format")
        self.mirror_lag_versions = Gauge(
            "acidtables_mirror_lag_versions", "Versions a table's mirror is behind the table", mirror, registry=registry
        )
        self.mirror_lag_seconds = Gauge(
            "acidtables_mirror_lag_seconds",
            "Seconds since the oldest version a table's mirror lacks was committed (0 when caught up)",
            mirror,
            registry=registry,
        )
        self._seen_events: set[str] = set()
        self._known_tables: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        # the operator's own counters from zero, for every value their labels can take
        for kind in RECONCILED_KINDS:
            self.reconcile_errors.labels(kind)
        for job_type in JOB_TYPES:
            self.bytes_rewritten.labels(job_type)
            for result in JOB_RESULTS:
                self.jobs.labels(job_type, result)
                self.job_seconds.labels(job_type, result)

    def table_known(self, table_name: str) -> None:
        """Create a table's counters at zero, for every operation, conflict exception and maintenance
        run (once per table; the operator calls it for each table its change feed or a handler names).
        About 170 series per table, most of them conflicts (operations x exception classes)."""
        try:
            namespace, table = split_name(table_name, method="metrics")
        except InvalidArgumentError:  # not a namespace.table name: its events are counted as they come
            return
        with self._lock:
            if (namespace, table) in self._known_tables:
                return
            self._known_tables.add((namespace, table))
        for operation in sorted(_OPERATIONS):
            for counter in (self.commits, self.retries, self.exhausted, self.aborts):
                counter.labels(namespace, table, operation)
            for exception in CONFLICT_CLASSES:
                self.conflicts.labels(namespace, table, operation, exception)
        for kind, outcome in MAINTENANCE_RUNS:
            self.maintenance_runs.labels(namespace, table, kind, outcome)
        self.maintenance_files.labels(namespace, table)
        self.maintenance_bytes.labels(namespace, table)

    def recorded_event(self, key: str, event: dict[str, Any]) -> None:
        """A conflict, retry, exhaustion or abort record, or a commit's duration (each taken once per key:
        a resync repeats them). Commits themselves are counted from the log (`committed`), not here."""
        kind = str(event.get("kind"))
        name = self._EVENT_COUNTERS.get(kind)
        if name is None and kind != "committed":
            return
        with self._lock:
            if key in self._seen_events:
                return
            self._seen_events.add(key)
        try:
            namespace, table = split_name(str(event.get("table", "")), method="metrics")
        except InvalidArgumentError:
            namespace, table = "", str(event.get("table", ""))
        operation = _operation_label(str(event.get("operation", "")))
        if kind == "committed":
            # a batch of one writer's commit durations on this table (Coordinator.record_commit_duration)
            durations = event.get("durations")
            for item in durations if isinstance(durations, list) else ():
                if isinstance(item, list) and len(item) == 2 and isinstance(item[1], int | float) and item[1] >= 0:
                    label = _operation_label(str(item[0]))
                    self.commit_seconds.labels(namespace, table, label).observe(float(item[1]))
            return
        if name == "conflicts":
            self.conflicts.labels(namespace, table, operation, _exception_label(event.get("exception"))).inc()
        elif name is not None:
            getattr(self, name).labels(namespace, table, operation).inc()

    def forget_event(self, key: str) -> None:
        """The record's lease ended: it can no longer come back, so stop remembering its key."""
        with self._lock:
            self._seen_events.discard(key)

    def committed(self, table_name: str, operation: str) -> None:
        """One commit read from the log. Its duration comes separately, from the writer's `committed`
        record (`recorded_event`): the log record is written by the compare-and-swap it would have to
        time, so its `commit_micros` lacks that round trip, which on an uncontended commit is nearly all
        of it (issue 25: 0.00011 s for 11 commits)."""
        namespace, table = split_name(table_name, method="metrics")
        self.commits.labels(namespace, table, _operation_label(operation)).inc()

    def table_state(self, table_name: str, status: dict[str, Any], oldest_in_flight_seconds: float) -> None:
        namespace, table = split_name(table_name, method="metrics")
        self.version.labels(namespace, table).set(status["version"])
        self.files.labels(namespace, table).set(status["files"])
        self.small_files.labels(namespace, table).set(status["smallFiles"])
        self.bytes.labels(namespace, table).set(status["bytes"])
        self.in_flight.labels(namespace, table).set(status["inFlight"])
        self.oldest_in_flight.labels(namespace, table).set(oldest_in_flight_seconds)

    def maintained(self, table_name: str, kind: str, outcome: str, files: int = 0, size: int = 0) -> None:
        namespace, table = split_name(table_name, method="metrics")
        self.maintenance_runs.labels(namespace, table, kind, outcome).inc()
        self.maintenance_files.labels(namespace, table).inc(files)
        self.maintenance_bytes.labels(namespace, table).inc(size)

    def table_etcd(self, table_name: str, keys: int, size: int) -> None:
        namespace, table = split_name(table_name, method="metrics")
        self.etcd_keys.labels(namespace, table).set(keys)
        self.etcd_bytes.labels(namespace, table).set(size)

    def mirror_lag(self, table_name: str, format_: str, versions: int, seconds: float) -> None:
        namespace, table = split_name(table_name, method="metrics")
        self.mirror_lag_versions.labels(namespace, table, format_).set(versions)
        self.mirror_lag_seconds.labels(namespace, table, format_).set(seconds)

    def job_finished(self, kind: str, result: str, seconds: float | None, bytes_rewritten: int) -> None:
        self.jobs.labels(kind, result).inc()
        if seconds is not None:
            self.job_seconds.labels(kind, result).observe(seconds)
        self.bytes_rewritten.labels(kind).inc(bytes_rewritten)
