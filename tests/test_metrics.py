"""Commit metrics, fed by real commits against the test etcd.

Each test runs its transactions in an explicit order (E begins, L begins, E commits, L commits) so the
conflict or rebase it counts is certain, and reads the counters from a fresh registry.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.helpers.tables import etcd_client, staged_parquet

from acidtables import Catalog, Table, Transaction
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings
from acidtables.errors import CommitRetriesExhausted, TransactionConflictException
from acidtables.metrics import ClusterMetrics, CommitMetrics, EtcdEventCollector


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> Iterator[CommitMetrics]:
    installed = CommitMetrics(registry).install()
    try:
        yield installed
    finally:
        installed.uninstall()


@pytest.fixture
def pk_table(catalog: Catalog) -> Table:
    return catalog.create_table("s.t", schema="id BIGINT, dt STRING", partition_by=["dt"], primary_key=["id"])


def _stage(tx: Transaction, dt: str) -> None:
    tx.add_files([staged_parquet(tx, {"dt": dt})])


def _commits(registry: CollectorRegistry, outcome: str, operation: str = "insert_into") -> float | None:
    return registry.get_sample_value(
        "acidtables_commits_total", {"namespace": "s", "table": "t", "operation": operation, "outcome": outcome}
    )


def _lose_insert_to_insert(table: Table) -> None:
    """seed 000 II->II: on a primary-key table the later INSERT INTO into the same partition fails."""
    earlier, later = table.begin("insert_into"), table.begin("insert_into")
    _stage(earlier, "a")
    _stage(later, "a")
    earlier.commit()
    with pytest.raises(TransactionConflictException):
        later.commit()


def _abort_one(table: Table) -> None:
    tx = table.begin("insert_into")
    _stage(tx, "a")
    tx.abort()


def test_committed_insert_counts_as_committed(
    pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry
) -> None:
    tx = pk_table.begin("insert_into")
    _stage(tx, "a")
    tx.commit()

    assert _commits(registry, "committed") == 1
    assert _commits(registry, "conflict") == 0
    assert (
        registry.get_sample_value(
            "acidtables_commit_duration_seconds_count", {"operation": "insert_into", "outcome": "committed"}
        )
        == 1
    )


def test_a_first_commit_creates_every_conflict_series_of_its_table_and_operation_at_zero(
    pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry
) -> None:
    """Issue 40, item 6: rate() over the conflicts sees the first one as an increase from zero."""
    tx = pk_table.begin("insert_into")
    _stage(tx, "a")
    tx.commit()
    for exception in ("TransactionConflictException", "ConcurrentAppendException", "MetadataChangedException"):
        labels = {"namespace": "s", "table": "t", "operation": "insert_into", "exception": exception}
        assert registry.get_sample_value("acidtables_commit_conflicts_total", labels) == 0


def test_cluster_counters_exist_from_zero_for_the_operator_and_each_known_table(registry: CollectorRegistry) -> None:
    """Issue 40, item 6: the operator's counters before anything happened, and a table's once it is known."""
    cluster = ClusterMetrics(registry)
    assert registry.get_sample_value("acidtables_operator_reconcile_errors_total", {"kind": "CompactionJob"}) == 0
    assert (
        registry.get_sample_value("acidtables_compaction_jobs_total", {"type": "cluster", "result": "Conflicted"}) == 0
    )
    assert registry.get_sample_value("acidtables_compaction_bytes_rewritten_total", {"type": "major"}) == 0
    table = {"namespace": "s", "table": "t"}
    assert registry.get_sample_value("acidtables_cluster_aborts_total", {**table, "operation": "update"}) is None
    cluster.table_known("s.t")
    for name in ("commits", "retries", "exhausted", "aborts"):
        assert registry.get_sample_value(f"acidtables_cluster_{name}_total", {**table, "operation": "update"}) == 0
    conflict = {**table, "operation": "merge", "exception": "ConcurrentDeleteReadException"}
    assert registry.get_sample_value("acidtables_cluster_conflicts_total", conflict) == 0
    for kind, outcome in (("archive", "ok"), ("expire", "refused"), ("vacuum", "ok"), ("maintenance", "error")):
        runs = {**table, "kind": kind, "outcome": outcome}
        assert registry.get_sample_value("acidtables_maintenance_runs_total", runs) == 0
    assert registry.get_sample_value("acidtables_maintenance_bytes_freed_total", table) == 0
    cluster.table_known("s.t")  # known twice: still one series each, still zero
    assert registry.get_sample_value("acidtables_cluster_commits_total", {**table, "operation": "update"}) == 0


def test_conflicting_insert_counts_conflict_by_exception(
    pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry
) -> None:
    _lose_insert_to_insert(pk_table)

    assert _commits(registry, "committed") == 1
    assert _commits(registry, "conflict") == 1
    labels = {"namespace": "s", "table": "t", "operation": "insert_into", "exception": "TransactionConflictException"}
    assert registry.get_sample_value("acidtables_commit_conflicts_total", labels) == 1
    assert (
        registry.get_sample_value(
            "acidtables_commit_duration_seconds_count", {"operation": "insert_into", "outcome": "conflict"}
        )
        == 1
    )


def test_rebased_commit_counts_one_retry(pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry) -> None:
    earlier, later = pk_table.begin("insert_into"), pk_table.begin("insert_into")
    _stage(earlier, "a")
    _stage(later, "b")  # different partitions: the later one is rebased, not failed
    earlier.commit()
    info = later.commit()

    assert info.retries == 1
    assert _commits(registry, "committed") == 2
    retries = registry.get_sample_value(
        "acidtables_commit_retries_total", {"namespace": "s", "table": "t", "operation": "insert_into"}
    )
    assert retries == 1
    backoff = registry.get_sample_value(
        "acidtables_commit_backoff_seconds_total", {"namespace": "s", "table": "t", "operation": "insert_into"}
    )
    assert backoff == 0  # the first retry after a loss goes at once


def test_abort_counts_aborted_without_a_duration(
    pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry
) -> None:
    _abort_one(pk_table)

    assert _commits(registry, "aborted") == 1
    assert _commits(registry, "committed") == 0
    duration = registry.get_sample_value(
        "acidtables_commit_duration_seconds_count", {"operation": "insert_into", "outcome": "aborted"}
    )
    assert duration is None


def test_uninstalled_metrics_stop_counting(pk_table: Table, registry: CollectorRegistry) -> None:
    metrics = CommitMetrics(registry).install().install()  # installing twice must count once
    _abort_one(pk_table)
    metrics.uninstall()
    _abort_one(pk_table)

    assert _commits(registry, "aborted") == 1


def test_labels_carry_no_transaction_ids(pk_table: Table, metrics: CommitMetrics, registry: CollectorRegistry) -> None:
    tx = pk_table.begin("insert_into")
    _stage(tx, "a")
    info = tx.commit()

    exposition = generate_latest(registry).decode()
    assert info.txn_id not in exposition
    assert "acidtables_commits_total{" in exposition


def test_etcd_collector_sees_a_recorded_conflict(
    catalog: Catalog, pk_table: Table, registry: CollectorRegistry
) -> None:
    registry.register(EtcdEventCollector(catalog.services.coordinator))
    _lose_insert_to_insert(pk_table)
    catalog.services.coordinator.flush_events()  # events are written by a thread of their own

    labels = {"namespace": "s", "table": "t", "exception": "TransactionConflictException"}
    assert registry.get_sample_value("acidtables_recent_conflicts", labels) == 1
    assert registry.get_sample_value("acidtables_recent_aborts", {"namespace": "s", "table": "t"}) is None
    assert registry.get_sample_value("acidtables_recent_events_up") == 1


def test_etcd_collector_sees_a_recorded_abort(catalog: Catalog, pk_table: Table, registry: CollectorRegistry) -> None:
    registry.register(EtcdEventCollector(catalog.services.coordinator))
    _abort_one(pk_table)
    _abort_one(pk_table)
    catalog.services.coordinator.flush_events()  # events are written by a thread of their own

    assert registry.get_sample_value("acidtables_recent_aborts", {"namespace": "s", "table": "t"}) == 2


def test_etcd_collector_reports_down_when_etcd_is_unreachable(registry: CollectorRegistry) -> None:
    closed = EtcdSettings((f"http://127.0.0.1:{free_port()}",), unavailable_timeout_seconds=0.5)
    coordinator = Coordinator(closed)
    try:
        registry.register(EtcdEventCollector(coordinator))  # describe() only: no etcd request yet
        assert registry.get_sample_value("acidtables_recent_events_up") == 0
    finally:
        coordinator.close()


def test_retries_and_exhaustion_are_recorded_in_etcd_under_one_shared_lease(
    catalog: Catalog, etcd_server: EmbeddedEtcd
) -> None:
    """What happens inside a writer reaches the operator: every retry and exhaustion is an event in etcd,
    and a process's events share one lease instead of granting one each."""
    table = catalog.create_table("ns.retried", schema="id BIGINT, dt STRING", partition_by=["dt"])

    def append(tx: Transaction) -> Transaction:
        tx.add_files([staged_parquet(tx, {"dt": "a"})])
        return tx

    earlier, later = append(table.begin("insert_into")), append(table.begin("insert_into"))
    earlier.commit()
    assert later.commit().retries == 1
    table.begin("insert_into").abort()  # a second event of the same process

    strict_settings = Settings(catalog.settings.etcd, catalog.settings.warehouse, CommitSettings(max_attempts=1))
    with Catalog(strict_settings) as strict:
        busy = strict.table("ns.retried")
        first, second = append(busy.begin("insert_into")), append(busy.begin("insert_into"))
        first.commit()
        with pytest.raises(CommitRetriesExhausted):
            second.commit()

    catalog.services.coordinator.flush_events()  # events are written by a thread of their own
    # each commit's duration is recorded too, under a lease of its own TTL: this test is about the others
    recorded = [e for e in catalog.services.coordinator.list_events(table.table_id) if e["kind"] != "committed"]
    kinds = [(e["kind"], e["txn_id"]) for e in recorded]
    assert ("retry", later.txn_id) in kinds and ("exhausted", second.txn_id) in kinds
    assert next(e for e in recorded if e["kind"] == "retry")["retries"] == 1
    raw = etcd_client(etcd_server.host, etcd_server.client_port)
    leases = {
        meta.lease_id
        for value, meta in raw.get_prefix(f"{catalog.settings.etcd.prefix}/events/{table.table_id}/")
        if b'"committed"' not in value
    }
    assert len(recorded) == 3  # retry and abort from one catalog, exhaustion from the other
    assert len(leases) == 2 and 0 not in leases  # one lease per catalog (process), not one per event


def test_cluster_commit_duration_is_each_commits_real_duration_in_seconds(
    catalog: Catalog, pk_table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: the operator's histogram summed 0.00011 s for 11 commits, because it read the log
    record's commit_micros, which is stamped before the compare-and-swap that writes it. A commit whose
    compare-and-swap takes a known 0.3 s (a slow etcd) must now count at least that, in seconds."""
    from acidtables.metrics import ClusterMetrics

    coordinator = catalog.services.coordinator
    real_cas = coordinator.compare_and_swap
    delay = 0.3

    def slow_cas(*args: object, **kwargs: object) -> object:
        time.sleep(delay)  # the known delay under test: the etcd round trip of a slow cluster
        return real_cas(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coordinator, "compare_and_swap", slow_cas)
    for _ in range(2):
        tx = pk_table.begin("insert_into")
        _stage(tx, "a")
        tx.commit()
    coordinator.flush_events()
    registry = CollectorRegistry()
    cluster = ClusterMetrics(registry)
    recorded = [e for e in coordinator.list_events(pk_table.table_id) if e.get("kind") == "committed"]
    for number, event in enumerate(recorded):
        cluster.recorded_event(f"key-{number}", event)
        cluster.recorded_event(f"key-{number}", event)  # a resync repeats records: each counts once
    labels = {"namespace": "s", "table": "t", "operation": "insert_into"}
    count = registry.get_sample_value("acidtables_cluster_commit_duration_seconds_count", labels)
    total = registry.get_sample_value("acidtables_cluster_commit_duration_seconds_sum", labels)
    assert count == 2
    assert total is not None and 2 * delay <= total < 2 * delay + 2.0
    # what the log record alone says is not the duration: it lacks the landing round trip
    assert all(r.commit_micros / 1e6 < delay for r in pk_table.commits(1, 2))
