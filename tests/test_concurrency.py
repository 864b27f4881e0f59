"""Many writer processes on one table at once: the commit protocol under real contention.

Every writer is its own spawned process with its own Catalog, so nothing is shared but etcd and the
disk. The checks read etcd's keys and the files on disk directly: versions dense and unique, every
committed file visible exactly once, nothing left in flight, and a strict serial replay of the log that
reproduces the snapshot at every version (invariant G5).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import (
    CatalogSpec,
    committed_records,
    etcd_client,
    inflight_txns,
    log_versions,
    replay_violations,
)
from tests.helpers.timers import SkippingTimer
from tests.helpers.workers import (
    MIX,
    WorkerResult,
    WorkerSpec,
    blind_appends,
    conflict_counts,
    mixed_operations,
    run_workers,
)
from tests.jobs import stage

from acidtables import Catalog, Table, Transaction
from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.operations import REWRITES
from acidtables.core.log.services import Services

APPEND_WORKERS = 8
APPENDS_PER_WORKER = 200
MIXED_WORKERS = 4
MIXED_OPERATIONS = 60


@pytest.fixture
def spec(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> CatalogSpec:
    return CatalogSpec(etcd_server.endpoint, etcd_prefix, str(tmp_path / "warehouse"))


@pytest.fixture
def reader(spec: CatalogSpec) -> Iterator[Catalog]:
    """A catalog that took no part in the writes: its snapshots come from etcd, checkpoints and the log."""
    catalog = spec.open()
    yield catalog
    catalog.close()


def _etcd_keys(etcd_server: EmbeddedEtcd, spec: CatalogSpec, table: Table) -> tuple[list[int], list[str]]:
    """(versions under the log prefix, txn ids under the in-flight prefix), read straight from etcd."""
    client = etcd_client(etcd_server.host, etcd_server.client_port)
    try:
        versions = log_versions(client, spec.prefix, table.table_id, table.location)
        return versions, inflight_txns(client, spec.prefix, table.table_id)
    finally:
        client.close()


@pytest.mark.slow  # 8 processes, 1,600 commits
def test_parallel_blind_appends_all_commit_with_dense_unique_versions(
    catalog: Catalog, spec: CatalogSpec, reader: Catalog, etcd_server: EmbeddedEtcd
) -> None:
    table = catalog.create_table("ns.appends", schema="id BIGINT, dt STRING")
    specs = [WorkerSpec(spec, table.name, w, APPENDS_PER_WORKER) for w in range(APPEND_WORKERS)]

    results = run_workers(blind_appends, specs, timeout_seconds=240)

    total = APPEND_WORKERS * APPENDS_PER_WORKER
    commits = [c for r in results for c in r.commits]
    errors = [e for r in results for e in r.errors]
    retries = sorted(c.retries for c in commits)
    # blind appends never conflict, so every one of them must land within the default retry bound
    assert errors == [], f"{len(errors)} of {total} appends gave up; retries of the rest: top 10 {retries[-10:]}"
    assert sorted(c.version for c in commits) == list(range(1, total + 1))
    # the commit's own etcd transaction clears its in-flight registration
    assert [t for r in results for t in r.still_in_flight] == []
    versions, inflight = _etcd_keys(etcd_server, spec, table)
    assert versions == list(range(total + 1))
    assert inflight == []
    logged = {r.version: r.txn_id for r in committed_records(reader, table)}
    assert [c for c in commits if logged[c.version] != c.txn_id] == []
    # a fresh reader loads the newest version from the checkpoint written at version 1600
    snapshot = reader.table(table.name).snapshot()
    assert snapshot.version == total
    expected = sorted(os.path.relpath(p, table.location) for c in commits for p in c.added)
    assert sorted(f.path for f in snapshot.files) == expected
    assert [p for p in expected if not os.path.isfile(os.path.join(table.location, p))] == []


def _check_mixed_run(
    table: Table, reader: Catalog, spec: CatalogSpec, etcd_server: EmbeddedEtcd, results: list[WorkerResult]
) -> None:
    commits = [c for r in results for c in r.commits]
    conflicts = [c for r in results for c in r.conflicts]
    assert [e for r in results for e in r.errors] == []
    # every operation ended one of three ways; none vanished
    ended = sum(len(r.commits) + len(r.conflicts) + r.nothing_to_do for r in results)
    assert ended == MIXED_WORKERS * MIXED_OPERATIONS, dict(conflict_counts(results))
    # the workload really mixed: every kind of operation landed at least once
    assert {c.operation for c in commits} == set(MIX)
    assert [t for r in results for t in r.still_in_flight] == []
    reading = reader.table(table.name)
    # first load of a fresh reader: from the newest checkpoint plus the log after it
    latest = set(reading.snapshot().files_by_path)
    records = committed_records(reader, table)
    assert [r.version for r in records] == list(range(len(commits) + 1))
    by_version = {r.version: r for r in records}
    assert [
        c for c in commits if (by_version[c.version].txn_id, by_version[c.version].operation) != (c.txn_id, c.operation)
    ] == []
    # G2: a job that lost left nothing in the log and nothing on disk
    logged = {r.txn_id for r in records}
    assert [c.txn_id for c in conflicts if c.txn_id in logged] == []
    assert [c.staging_dir for c in conflicts if os.path.exists(c.staging_dir)] == []
    # G5: a strict serial replay gives every version's snapshot (loaded incrementally, oldest first)
    assert replay_violations(records, lambda v: set(reading.snapshot(version=v).files_by_path)) == []
    assert latest == set(reading.snapshot(version=records[-1].version).files_by_path)
    # a compaction keeps its data: its output comes from exactly the files it removes, row for row
    for r in records:
        if r.operation in REWRITES:
            assert [set(f.lineage) for f in r.adds] == [{f.path for f in r.removes}]
            assert sum(f.rows for f in r.adds) == sum(f.rows for f in r.removes)
    assert [p for p in latest if not os.path.isfile(os.path.join(table.location, p))] == []
    versions, inflight = _etcd_keys(etcd_server, spec, table)
    assert versions == list(range(len(records)))
    assert inflight == []


@pytest.mark.slow  # 4 processes, 240 mixed operations
@pytest.mark.parametrize(("conflict_policy", "seed"), [("delta", 1), ("maxcompute-transactional", 2)])
def test_mixed_concurrent_operations_replay_serially_to_every_snapshot(
    catalog: Catalog,
    spec: CatalogSpec,
    reader: Catalog,
    etcd_server: EmbeddedEtcd,
    conflict_policy: str,
    seed: int,
) -> None:
    table = catalog.create_table(
        "ns.mixed", schema="id BIGINT, dt STRING", partition_by=["dt"], conflict_policy=conflict_policy
    )
    specs = [WorkerSpec(spec, table.name, w, MIXED_OPERATIONS, seed) for w in range(MIXED_WORKERS)]

    results = run_workers(mixed_operations, specs, timeout_seconds=120)

    _check_mixed_run(table, reader, spec, etcd_server, results)


class CountingCoordinator(Coordinator):
    """The real coordinator, counting its compare-and-swaps and rebase reads, and able to let another
    commit land just before a chosen compare-and-swap (a deterministic interleaving)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.swaps = 0
        self.rebase_reads = 0
        self.before_swap: dict[int, Callable[[], object]] = {}

    def compare_and_swap(self, *args: Any, **kwargs: Any) -> Any:
        self.swaps += 1
        if self.swaps in self.before_swap:
            self.before_swap.pop(self.swaps)()
        return super().compare_and_swap(*args, **kwargs)

    def read_head_and_log(self, *args: Any, **kwargs: Any) -> Any:
        self.rebase_reads += 1
        return super().read_head_and_log(*args, **kwargs)


def test_the_first_lost_compare_and_swap_retries_at_once_and_a_second_in_a_row_backs_off(catalog: Catalog) -> None:
    """A lost compare-and-swap brings back the commits that beat it, so the loser rebases and tries
    again at once: no pause, no read. Losing again in a row pauses within the first backoff step, then
    reads what landed meanwhile."""
    timer = SkippingTimer()
    settings = catalog.settings
    coordinator = CountingCoordinator(settings.etcd, timer=timer)
    services = Services(settings, coordinator, timer=timer)
    with Catalog(settings, services=services) as timed:
        table = timed.create_table("ns.backoff", schema="id BIGINT")

        def append() -> Transaction:
            tx = table.begin("insert_into")
            tx.add_files([stage(tx, None)])
            return tx

        earlier, later = append(), append()
        earlier.commit()
        swaps = coordinator.swaps
        info = later.commit()
        assert (info.retries, timer.pauses) == (1, [])  # rebased, retried at once
        assert (coordinator.swaps - swaps, coordinator.rebase_reads) == (2, 0)  # two round trips, no read

        crowded, first, second = append(), append(), append()
        first.commit()
        swaps = coordinator.swaps
        coordinator.before_swap[swaps + 2] = second.commit  # lands just before crowded's retry
        info = crowded.commit()
    assert info.retries == 2
    assert len(timer.pauses) == 1 and 0 <= timer.pauses[0] <= settings.commit.backoff_seconds
    assert coordinator.rebase_reads == 1  # after the pause only
