"""Many writer processes on one table at once: the commit protocol under real contention.

Every writer is its own spawned process with its own Catalog, so nothing is shared but etcd and the
disk. The checks read etcd's keys and the files on disk directly: versions dense and unique, every
committed file visible exactly once, nothing left in flight, and a strict serial replay of the log that
reproduces the snapshot at every version (invariant G5).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

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

from acidtables import Catalog, Table
from acidtables.core.embedded import EmbeddedEtcd
from acidtables.core.etcd import Coordinator
from acidtables.core.operations import REWRITES
from acidtables.core.services import Services

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
        return log_versions(client, spec.prefix, table.table_id), inflight_txns(client, spec.prefix, table.table_id)
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


def test_a_lost_compare_and_swap_pauses_within_the_backoff_and_then_rebases(catalog: Catalog) -> None:
    """The commit loop's pause goes through the injected timer: bounded by the first backoff step, and
    taken once per lost compare-and-swap."""
    timer = SkippingTimer()
    settings = catalog.settings
    services = Services(settings, Coordinator(settings.etcd, timer=timer), timer=timer)
    with Catalog(settings, services=services) as timed:
        table = timed.create_table("ns.backoff", schema="id BIGINT")
        earlier, later = table.begin("insert_into"), table.begin("insert_into")
        earlier.add_files([stage(earlier, None)])
        later.add_files([stage(later, None)])
        earlier.commit()
        info = later.commit()
    assert info.retries == 1
    assert len(timer.pauses) == 1 and 0 <= timer.pauses[0] <= settings.commit.backoff_seconds
