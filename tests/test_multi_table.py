"""Multi-table transactions on a real etcd (issue 44): every part judged by its own table's policy, all
tables moving together or none, and reads of several tables at one instant.

Every matrix cell of the MaxCompute and Delta tests is run again with the later job as one part of a
multi-table transaction whose other part is a blind append to a second table: the cell's outcome must
be exactly the single-table one, and the second table must move with it or not at all.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.tables import CatalogSpec, catalog_with, staged_parquet
from tests.jobs import JobFactory, assert_invariants, live_tokens, seed_partition
from tests.test_delta_rules import DeltaJob, job, make_table, rlc_cases, seed, without_rlc_cases
from tests.test_maxcompute_matrices import (
    CLUSTERING,
    FAIL,
    PK_JOBS,
    SEED_000,
    SEED_001,
    TXN_JOBS,
    cases,
    expected_tokens,
    pk_table,
    run_pair,
    txn_table,
)

from acidtables import Catalog, MultiTableTransaction, Table, Transaction
from acidtables.core import events
from acidtables.core.commit.multi_commit import commit_together, max_tables
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.coordination.failures import CommitAnswerLost
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings
from acidtables.errors import (
    CommitOutcomeUnknown,
    ConcurrentAppendException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    CoordinatorRefused,
    CoordinatorUnavailable,
    InvalidArgumentError,
    StorageUnavailableError,
    TableNotFoundError,
    TransactionClosedError,
    TransactionConflictException,
)

# --- helpers ---------------------------------------------------------------------------------------


def companion_table(catalog: Catalog, policy: str = "delta") -> Table:
    return catalog.create_table(f"audit.log_{policy.replace('-', '_')}", schema="id BIGINT, dt STRING",
                                partition_by=["dt"], conflict_policy=policy)  # fmt: skip


def with_companion(catalog: Catalog, part: Transaction, companion: Table) -> tuple[MultiTableTransaction, Transaction]:
    """`part` joined by a blind append to `companion` in one multi-table transaction."""
    group = catalog.transaction()
    group.add(part)
    appended = group.begin(companion.name, "insert_into")
    appended.add_files([staged_parquet(appended, {"dt": "c"})])
    return group, appended


def assert_companion_unchanged(companion: Table, version_before: int, appended: Transaction) -> None:
    assert companion.version == version_before, "the other table moved although the transaction failed"
    assert not os.path.exists(appended.staging_dir), "the other part's staged files were kept"
    assert appended.closed


def assert_moved_together(infos: dict[str, Any], group: MultiTableTransaction) -> None:
    """Every part committed, and each table's log names the one multi-table transaction and its tables."""
    assert group.state == "committed"
    for info in infos.values():
        assert not info.skipped and info.multi_txn_id == group.id
    records = {name: _record(group, name, info.version) for name, info in infos.items()}
    assert {r.multi_txn_id for r in records.values()} == {group.id}
    assert all(set(r.multi_txn_tables) == set(infos) for r in records.values())
    times = {r.time_version for r in records.values() if r.time_version is not None}
    assert len(times) <= 1, f"the parts' time versions differ: {times}"


def _record(group: MultiTableTransaction, name: str, version: int) -> Any:
    part = group.parts[name]
    table = Table(part.services, part.metadata.table_id, name, part.metadata.location)
    (record,) = table.commits(version, version)
    return record


# --- every seed outcome holds for a part -----------------------------------------------------------


def check_cell_as_part(
    catalog: Catalog, table: Table, earlier_class: str, later_class: str, outcome: str,
    make_e: JobFactory, make_l: JobFactory,
) -> None:  # fmt: skip
    companion = companion_table(catalog)
    seed_partition(table, "p1")
    before = live_tokens(table.snapshot(), "p1")
    earlier, later = run_pair(table, make_e, make_l, "p1", "p1")
    expected_ok = expected_tokens(before, earlier, later)
    expected_fail = expected_tokens(before, earlier, None)
    group, appended = with_companion(catalog, later.tx, companion)
    companion_before = companion.version
    won = earlier.tx.commit()
    if outcome == FAIL:
        with pytest.raises(TransactionConflictException) as caught:
            group.commit()
        exc = caught.value
        assert (exc.earlier_op, exc.later_op) == (earlier_class, later_class)
        assert exc.winning_version == won.version and exc.multi_txn_id == group.id
        assert group.id in str(exc) and companion.name in str(exc)
        assert live_tokens(table.snapshot(), "p1") == expected_fail
        assert_invariants(table, failed=[later])
        assert_companion_unchanged(companion, companion_before, appended)
        assert group.state == "aborted"
    else:
        infos = group.commit()
        info = infos[table.name]
        assert (info.version, info.retries) == (won.version + 1, 1), "the part must be rebased once, in place"
        assert live_tokens(table.snapshot(), "p1") == expected_ok
        assert_invariants(table)
        assert infos[companion.name].version == companion_before + 1
        assert_moved_together(infos, group)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(SEED_000, PK_JOBS))
def test_a_primary_key_part_follows_seed_000(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell_as_part(catalog, pk_table(catalog), earlier, later, outcome, make_e, make_l)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(SEED_001, TXN_JOBS))
def test_a_transactional_part_follows_seed_001(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell_as_part(catalog, txn_table(catalog), earlier, later, outcome, make_e, make_l)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(CLUSTERING, PK_JOBS))
def test_a_primary_key_part_follows_clustering_resolution(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell_as_part(catalog, pk_table(catalog), earlier, later, outcome, make_e, make_l)


def run_delta_part(catalog: Catalog, table: Table, earlier: DeltaJob, later: DeltaJob, expected: type | None) -> None:
    companion = companion_table(catalog, "maxcompute-transactional")
    group, appended = with_companion(catalog, later.tx, companion)
    companion_before = companion.version
    base = live_tokens(table.snapshot())
    won = earlier.tx.commit()
    after_e = base - earlier.removed + earlier.added
    if expected is None:
        infos = group.commit()
        assert (infos[table.name].version, infos[table.name].retries) == (won.version + 1, 1)
        assert live_tokens(table.snapshot()) == after_e - later.removed + later.added
        assert infos[companion.name].version == companion_before + 1
        assert_moved_together(infos, group)
    else:
        with pytest.raises(ConcurrentModificationException) as caught:
            group.commit()
        assert type(caught.value) is expected, f"raised {type(caught.value).__name__}: {caught.value}"
        assert caught.value.winning_version == won.version and caught.value.multi_txn_id == group.id
        assert live_tokens(table.snapshot()) == after_e
        assert_companion_unchanged(companion, companion_before, appended)
    assert_invariants(table)


@pytest.mark.parametrize(("setting", "level", "earlier", "later", "expected"), without_rlc_cases())
def test_a_delta_part_follows_the_matrix_without_row_level_concurrency(
    catalog: Catalog, setting: str, level: str, earlier: str, later: str, expected: type | None
) -> None:
    table = make_table(catalog, setting, level)
    seed(table)
    run_delta_part(catalog, table, job(table, earlier), job(table, later), expected)


@pytest.mark.parametrize(("level", "earlier", "later", "e_kw", "l_kw", "expected"), rlc_cases())
def test_a_delta_part_follows_the_matrix_with_row_level_concurrency(
    catalog: Catalog, level: str, earlier: str, later: str, e_kw: dict[str, int], l_kw: dict[str, int],
    expected: type | None,
) -> None:  # fmt: skip
    table = make_table(catalog, "rlc", level)
    seed(table)
    e = job(table, earlier, row_id=None if earlier == "OPT" else e_kw.get("row_id"))
    run_delta_part(catalog, table, e, job(table, later, row_id=l_kw.get("row_id")), expected)


# --- several parts moving at once ------------------------------------------------------------------

POLICIES = ["delta", "maxcompute-transactional", "maxcompute"]


def _table(catalog: Catalog, name: str, policy: str) -> Table:
    return catalog.create_table(
        name,
        schema="id BIGINT, dt STRING",
        partition_by=["dt"],
        conflict_policy=None if policy == "maxcompute" else policy,
        primary_key=["id"] if policy == "maxcompute" else (),
    )


def _append(tx: Transaction, dt: str) -> None:
    tx.add_files([staged_parquet(tx, {"dt": dt})])


@pytest.mark.parametrize("policies", [POLICIES, ["delta", "delta"], ["maxcompute-transactional"] * 2])
def test_every_part_is_rebased_onto_its_own_tables_winners_in_one_retry(catalog: Catalog, policies: list[str]) -> None:
    tables = [_table(catalog, f"s.t{i}", p) for i, p in enumerate(policies)]
    group = catalog.transaction()
    for i, table in enumerate(tables):
        _append(group.begin(table.name, "insert_into"), f"own{i}")
    # every table gets a concurrent commit the rules let through (appends to other partitions; a
    # primary-key table's II->II conflicts only in the same partition)
    for i, table in enumerate(tables):
        with table.begin("insert_into") as other:
            _append(other, f"other{i}")
            other.commit()
    infos = group.commit()
    assert [infos[t.name].version for t in tables] == [2] * len(tables)
    assert {info.retries for info in infos.values()} == {1}, "one lost compare, one rebase of every part, one retry"
    assert_moved_together(infos, group)
    for i, table in enumerate(tables):
        assert {f.partition["dt"] for f in table.snapshot().files} == {f"own{i}", f"other{i}"}
        assert_invariants(table)


def test_a_part_that_must_fail_fails_the_whole_with_its_tables_exception(catalog: Catalog) -> None:
    # the delta part alone would be rebased; the primary-key part meets II->II in its partition
    delta, keyed = _table(catalog, "s.delta", "delta"), _table(catalog, "s.keyed", "maxcompute")
    group = catalog.transaction()
    delta_part, keyed_part = group.begin(delta.name, "insert_into"), group.begin(keyed.name, "insert_into")
    _append(delta_part, "a")
    _append(keyed_part, "a")
    for table in (delta, keyed):
        with table.begin("insert_into") as other:
            _append(other, "a")
            other.commit()
    with pytest.raises(TransactionConflictException) as caught:
        group.commit()
    assert caught.value.table == keyed.name and (caught.value.earlier_op, caught.value.later_op) == ("II", "II")
    assert f"multi-table transaction {group.id} over s.delta, s.keyed, and none of them changed" in str(caught.value)
    assert (delta.version, keyed.version) == (1, 1), "the part that could have been rebased was committed"
    for part in (delta_part, keyed_part):
        assert not os.path.exists(part.staging_dir) and part.closed
    assert group.state == "aborted" and not delta.in_flight() and not keyed.in_flight()


def test_two_multi_table_transactions_on_the_same_tables_serialize(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    first, second = catalog.transaction(), catalog.transaction()
    for group, dt in ((first, "x"), (second, "y")):
        _append(group.begin(a.name, "insert_into"), dt)
        _append(group.begin(b.name, "insert_into"), dt)
    won = first.commit()
    lost_then_rebased = second.commit()
    assert [won[n].version for n in (a.name, b.name)] == [1, 1]
    assert [lost_then_rebased[n].version for n in (a.name, b.name)] == [2, 2]
    assert {i.retries for i in lost_then_rebased.values()} == {1}


def test_a_conflict_between_two_multi_table_transactions_fails_only_the_later(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    with a.begin("insert_into") as seed_tx:
        _append(seed_tx, "x")
        seed_tx.commit()
    first, second = catalog.transaction(), catalog.transaction()
    for group in (first, second):
        deleting = group.begin(a.name, "delete")
        deleting.remove_files(deleting.scan("dt = 'x'"))
        _append(group.begin(b.name, "insert_into"), "y")
    first.commit()
    with pytest.raises(ConcurrentModificationException) as caught:
        second.commit()
    assert caught.value.table == a.name and caught.value.multi_txn_id == second.id
    assert (a.version, b.version) == (2, 1)


# --- idempotency, empty parts ------------------------------------------------------------------------


def test_a_repeated_multi_table_job_with_application_ids_commits_nothing_the_second_time(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "maxcompute-transactional")

    def run_job() -> tuple[dict[str, Any], list[Transaction]]:
        with catalog.transaction() as group:
            for table in (a, b):
                part = group.begin(table.name, "insert_into")
                part.set_app_transaction("nightly-load", 7)
                _append(part, "d")
        return dict(group.committed), list(group.parts.values())

    first, _ = run_job()
    again, parts = run_job()
    assert [first[n].skipped for n in (a.name, b.name)] == [False, False]
    assert [again[n].skipped for n in (a.name, b.name)] == [True, True]
    assert [again[n].version for n in (a.name, b.name)] == [1, 1] and (a.version, b.version) == (1, 1)
    assert all(not os.path.exists(p.staging_dir) for p in parts), "a skipped part kept its staged files"


def test_a_part_its_table_already_applied_is_skipped_and_the_rest_commits(catalog: Catalog) -> None:
    # application ids are per table (Delta's txn action): a part whose table has the app version is
    # skipped as it would be alone; the other part is new on its table and commits
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    with a.begin("insert_into") as alone:
        alone.set_app_transaction("loader", 3)
        _append(alone, "d")
        alone.commit()
    group = catalog.transaction()
    for table in (a, b):
        part = group.begin(table.name, "insert_into")
        part.set_app_transaction("loader", 3)
        _append(part, "d")
    infos = group.commit()
    assert (infos[a.name].skipped, infos[b.name].skipped) == (True, False)
    assert (a.version, b.version) == (1, 1)


def test_a_part_that_changes_nothing_adds_no_version_and_the_rest_commits(catalog: Catalog) -> None:
    a = catalog.create_table("s.a", schema="id BIGINT", isolation_level="Serializable")
    b = _table(catalog, "s.b", "delta")
    group = catalog.transaction()
    group.begin(a.name, "delete").scan("id = 42")  # matched nothing: removes and adds no file
    _append(group.begin(b.name, "insert_into"), "d")
    infos = group.commit()
    assert infos[a.name].skipped and not infos[b.name].skipped
    assert (a.version, b.version) == (0, 1)


# --- the API's edges ---------------------------------------------------------------------------------


def test_leaving_the_block_commits_and_an_exception_aborts_every_part(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    with catalog.transaction() as group:
        _append(group.begin(a.name, "insert_into"), "x")
        _append(group.begin(b.name, "insert_into"), "x")
    assert group.state == "committed" and (a.version, b.version) == (1, 1)
    with pytest.raises(RuntimeError, match="job failed"), catalog.transaction() as failing:
        parts = [failing.begin(t.name, "insert_into") for t in (a, b)]
        for part in parts:
            _append(part, "y")
        raise RuntimeError("job failed")
    assert failing.state == "aborted" and (a.version, b.version) == (1, 1)
    assert all(p.closed and not os.path.exists(p.staging_dir) for p in parts)


def test_a_part_commits_only_with_the_others_and_aborting_it_aborts_them_all(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    group = catalog.transaction()
    first, second = group.begin(a.name, "insert_into"), group.begin(b.name, "insert_into")
    _append(first, "x")
    with pytest.raises(InvalidArgumentError, match=f"one part of multi-table transaction {group.id}"):
        first.commit()
    with pytest.raises(InvalidArgumentError, match=r"already has a part on s\.a"):
        group.begin(a.name, "update")
    second.abort()
    assert group.state == "aborted" and first.closed and not os.path.exists(first.staging_dir)
    with pytest.raises(TransactionClosedError, match="already aborted"):
        group.commit()
    with pytest.raises(TransactionClosedError):
        group.begin(a.name, "insert_into")
    assert (a.version, b.version) == (0, 0)


def test_abort_reaches_every_part_even_when_one_part_fails_to(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    group = catalog.transaction()
    first, second = group.begin(a.name, "insert_into"), group.begin(b.name, "insert_into")
    for part in (first, second):
        _append(part, "x")

    def unreachable(keep: Any) -> None:
        raise StorageUnavailableError("the object store did not answer")

    monkeypatch.setattr(first, "discard_staged", unreachable)
    with pytest.raises(StorageUnavailableError):
        group.abort()
    assert group.state == "aborted" and first.closed and second.closed
    assert not os.path.exists(second.staging_dir), "the second part was left staged"


def test_add_refuses_a_closed_or_foreign_transaction(
    catalog: Catalog, etcd_server: EmbeddedEtcd, tmp_path: Path
) -> None:
    a = _table(catalog, "s.a", "delta")
    done = a.begin("insert_into")
    done.abort()
    with pytest.raises(TransactionClosedError):
        catalog.transaction().add(done)
    with CatalogSpec(etcd_server.endpoint, catalog.services.settings.etcd.prefix, str(tmp_path)).open() as other:
        foreign = other.table(a.name).begin("insert_into")
        with pytest.raises(InvalidArgumentError, match="another Catalog"):
            catalog.transaction().add(foreign)
        foreign.abort()


def test_an_empty_multi_table_transaction_commits_nothing(catalog: Catalog) -> None:
    with catalog.transaction() as group:
        pass
    assert group.state == "committed" and group.committed == {}


def test_a_part_prepared_for_another_multi_table_transaction_is_refused(catalog: Catalog) -> None:
    """commit_together writes each part's intent as it is: one prepared for another group would name the
    wrong transaction in its table's history, so it is refused before anything is sent."""
    table = _table(catalog, "s.t0", "delta")
    tx = table.begin("insert_into")
    _append(tx, "x")
    part = tx.pending_commit("mtx-other", (table.name,))
    with pytest.raises(
        InvalidArgumentError, match=r"part 0 of multi-table transaction mtx-mine .* prepared for mtx-other"
    ):
        commit_together(catalog.services, [part], multi_txn_id="mtx-mine")
    assert table.version == 0


# --- limits --------------------------------------------------------------------------------------------


def _catalog(etcd_server: EmbeddedEtcd, prefix: str, warehouse: Path, **etcd: int) -> Catalog:
    settings = EtcdSettings((etcd_server.endpoint,), prefix=prefix, **etcd)  # type: ignore[arg-type]
    return Catalog(Settings(etcd=settings, warehouse=str(warehouse), commit=CommitSettings()))


def test_the_table_limit_is_checked_before_anything_is_staged(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    with _catalog(etcd_server, etcd_prefix, tmp_path, max_txn_ops=10) as catalog:
        tables = [_table(catalog, f"s.t{i}", "delta") for i in range(3)]
        group = catalog.transaction()
        assert group.max_tables == 2 == max_tables(catalog.services.settings.etcd)
        for table in tables[:2]:
            _append(group.begin(table.name, "insert_into"), "x")
        with pytest.raises(InvalidArgumentError, match=r"already holds 2 tables.*--max-txn-ops=10 allows 2") as caught:
            group.begin(tables[2].name, "insert_into")
        assert "ACIDTABLES_ETCD_MAX_TXN_OPS" in str(caught.value)
        assert not tables[2].in_flight() and group.state == "open"
        assert not os.path.exists(os.path.join(tables[2].location, "data"))
        group.commit()
        assert [t.version for t in tables] == [1, 1, 0]


def test_the_default_limit_fits_etcds_default_and_one_more_table_is_refused_by_etcd_itself(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    # the embedded etcd runs with --max-txn-ops 128 (its default): 25 tables (5 operations each at most)
    # fit; a setting that claims more lets 33 through to etcd, 132 operations even with no in-flight
    # registration to delete (4 each), which etcd refuses, and nothing lands
    with _catalog(etcd_server, etcd_prefix, tmp_path) as catalog:
        assert catalog.transaction().max_tables == 25
        tables = [_table(catalog, f"s.t{i}", "delta") for i in range(33)]
        with catalog.transaction() as group:
            for table in tables[:25]:
                _append(group.begin(table.name, "insert_into"), "x")
        assert [t.version for t in tables] == [1] * 25 + [0] * 8
    with _catalog(etcd_server, etcd_prefix, tmp_path, max_txn_ops=165) as catalog:
        group = catalog.transaction()
        parts = [group.begin(t.name, "insert_into") for t in tables]
        for part in parts:
            _append(part, "y")
        with pytest.raises(CoordinatorRefused, match=r"too many operations.*ACIDTABLES_ETCD_MAX_TXN_OPS=165"):
            group.commit()
        assert [catalog.table(t.name).version for t in tables] == [1] * 25 + [0] * 8
        assert all(not os.path.exists(p.staging_dir) for p in parts)


def test_large_parts_go_to_commit_files_so_the_request_fits(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    # a request limit of 32 KiB gives each of two parts 14 KiB inline: a part of 150 files (about 30 KiB) is
    # larger, so its record goes to a commit file and etcd gets a pointer
    with _catalog(etcd_server, etcd_prefix, tmp_path, max_request_bytes=32 * 1024) as catalog:
        a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
        with catalog.transaction() as group:
            big = group.begin(a.name, "insert_into")
            big.add_files([staged_parquet(big, {"dt": f"d{i}"}) for i in range(150)])
            _append(group.begin(b.name, "insert_into"), "x")
        entries = catalog.services.coordinator.read_log(a.table_id, 0)
        assert "commit_file" in entries[0], "the large part's record stayed inline"
        assert "commit_file" not in catalog.services.coordinator.read_log(b.table_id, 0)[0]
        assert len(a.snapshot().files) == 150 and b.version == 1


# --- reads of several tables at one instant ----------------------------------------------------------


def test_snapshots_never_see_a_multi_table_commit_in_part(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    commits = 30
    done, read_once = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(commits):
                with catalog.transaction() as group:
                    _append(group.begin(a.name, "insert_into"), f"x{i}")
                    _append(group.begin(b.name, "insert_into"), f"x{i}")
                # let the reader read at least once between commits (it reads during them too)
                read_once.clear()
                if not read_once.wait(timeout=10):
                    raise TimeoutError("the reader stopped reading")
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen: set[int] = set()
    while not done.is_set():
        pinned = catalog.snapshots([a.name, b.name])
        assert pinned[a.name].version == pinned[b.name].version, f"one part seen without the other: {pinned}"
        seen.add(pinned[a.name].version)
        read_once.set()
    thread.join()
    assert not failures, failures
    pinned = catalog.snapshots([b.name, a.name])
    assert list(pinned) == [b.name, a.name] and {s.version for s in pinned.values()} == {commits}
    assert len(seen) > commits // 2, f"the reader saw only versions {sorted(seen)}"


def test_snapshots_by_timestamp_are_consistent_across_tables(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    times = []
    for i in range(3):
        with catalog.transaction() as group:
            _append(group.begin(a.name, "insert_into"), f"x{i}")
            _append(group.begin(b.name, "insert_into"), f"x{i}")
        times.append(group.committed[a.name].time_version)
        # a commit of one table between the multi-table ones
        with b.begin("insert_into") as alone:
            _append(alone, f"alone{i}")
            alone.commit()
    for i, at in enumerate(times):
        pinned = catalog.snapshots([a.name, b.name], timestamp=at)
        assert (pinned[a.name].version, pinned[b.name].version) == (i + 1, 2 * i + 1)
    now = catalog.snapshots([a.name, b.name], timestamp=datetime.now(UTC))
    assert (now[a.name].version, now[b.name].version) == (3, 6)


def test_time_travel_carries_a_part_that_changes_no_data_only_with_the_rest_of_its_transaction(
    catalog: Catalog,
) -> None:
    """An ALTER has no time version, and time travel carries a version forward over such commits. As one
    part of a multi-table transaction whose other part inserts, it must be seen exactly when that insert
    is: not as of a time before the transaction, as an ALTER alone still is."""
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    inserted: list[datetime] = []
    for table in (a, b):
        with table.begin("insert_into") as tx:
            _append(tx, "x")
            when = tx.commit().time_version
            assert when is not None  # a data change has a time version
            inserted.append(when)
    before = max(inserted)
    with b.begin("alter") as alone:  # after `before`, alone: carried forward as it always was
        alone.update_metadata(add_columns="note STRING")
        alone.commit()
    with catalog.transaction() as group:
        _append(group.begin(a.name, "insert_into"), "y")
        group.begin(b.name, "alter").update_metadata(add_columns="region STRING")
    assert (group.committed[a.name].version, group.committed[b.name].version) == (2, 3)
    pinned = catalog.snapshots([a.name, b.name], timestamp=before)
    assert (pinned[a.name].version, pinned[b.name].version) == (1, 2), "the transaction was seen in part"
    assert "region" not in [c.name for c in pinned[b.name].metadata.columns]
    group_time = group.committed[a.name].time_version
    assert group_time is not None
    at = catalog.snapshots([a.name, b.name], timestamp=group_time)
    assert (at[a.name].version, at[b.name].version) == (2, 3)
    assert b.version_at(before) == 2 and b.version_at(group_time) == 3


def test_snapshots_refuse_bad_input(catalog: Catalog) -> None:
    _table(catalog, "s.a", "delta")
    with pytest.raises(InvalidArgumentError, match="list of table names"):
        catalog.snapshots("s.a")
    with pytest.raises(InvalidArgumentError, match="list of table names"):
        catalog.snapshots([])
    with pytest.raises(TableNotFoundError, match=r"s\.missing"):
        catalog.snapshots(["s.a", "s.missing"])


def test_history_names_the_multi_table_transaction(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    with catalog.transaction() as group:
        _append(group.begin(a.name, "insert_into"), "x")
        _append(group.begin(b.name, "insert_into"), "x")
    for table in (a, b):
        (entry,) = table.history(limit=1)
        assert entry.multi_txn_id == group.id and set(entry.multi_txn_tables) == {a.name, b.name}
        assert entry.to_json()["multi_txn_id"] == group.id
    with a.begin("insert_into") as alone:
        _append(alone, "y")
        alone.commit()
    assert a.history(limit=1)[0].multi_txn_id is None


def test_every_part_is_reported_as_a_commit_of_its_table(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    seen: list[Any] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        with catalog.transaction() as group:
            _append(group.begin(a.name, "insert_into"), "x")
            _append(group.begin(b.name, "insert_into"), "x")
    finally:
        unsubscribe()
    committed = Counter(f"{e.namespace}.{e.table}" for e in seen if e.kind == "committed")
    assert committed == Counter({a.name: 1, b.name: 1})
    assert {e.txn_id for e in seen if e.kind == "committed"} == {p.txn_id for p in group.parts.values()}


def test_an_append_part_under_serializable_meets_a_concurrent_append_to_what_it_read(catalog: Catalog) -> None:
    # Delta Serializable: an INSERT that read the table conflicts with a concurrent append there; as a
    # part, the same exception, and the other table does not move
    a = catalog.create_table("s.a", schema="id BIGINT, dt STRING", partition_by=["dt"], isolation_level="Serializable")
    b = _table(catalog, "s.b", "delta")
    group = catalog.transaction()
    reading = group.begin(a.name, "insert_into")
    reading.scan("dt = 'x'")
    _append(reading, "x")
    _append(group.begin(b.name, "insert_into"), "x")
    with a.begin("insert_into") as other:
        _append(other, "x")
        other.commit()
    with pytest.raises(ConcurrentAppendException):
        group.commit()
    assert (a.version, b.version) == (1, 0)


def test_the_same_application_id_in_two_concurrent_multi_table_transactions_conflicts(catalog: Catalog) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    groups = [catalog.transaction(), catalog.transaction()]
    for group in groups:
        for table in (a, b):
            part = group.begin(table.name, "insert_into")
            part.set_app_transaction("stream-q", 1)
            _append(part, "x")
    groups[0].commit()
    with pytest.raises(ConcurrentTransactionException):
        groups[1].commit()
    assert (a.version, b.version) == (1, 1)


# --- lost answers ----------------------------------------------------------------------------------


class _LosingAnswers:
    """The coordinator's multi-table compare-and-swap, losing the answer of its first call: after
    etcd applied the request (`applied`), or before it was sent. The lookups after it are real."""

    def __init__(self, coordinator: Any, *, applied: bool) -> None:
        self.real = coordinator.compare_and_swap_many
        self.applied = applied
        self.calls = 0

    def __call__(self, requests: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            if self.applied:
                self.real(requests)
            raise CommitAnswerLost("connection reset by peer")
        return self.real(requests)


@pytest.mark.parametrize("applied", [True, False], ids=["landed", "never-sent"])
def test_a_lost_answer_is_resolved_by_looking_the_parts_up_never_committing_twice(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "maxcompute-transactional")
    losing = _LosingAnswers(catalog.services.coordinator, applied=applied)
    monkeypatch.setattr(catalog.services.coordinator, "compare_and_swap_many", losing)
    with catalog.transaction() as group:
        _append(group.begin(a.name, "insert_into"), "x")
        _append(group.begin(b.name, "insert_into"), "x")
    assert losing.calls == (1 if applied else 2), "a commit that landed was sent again, or one that did not was not"
    assert (a.version, b.version) == (1, 1)
    assert {info.version for info in group.committed.values()} == {1}
    assert_moved_together(dict(group.committed), group)
    for table in (a, b):
        assert_invariants(table)


def test_a_lost_answer_etcd_does_not_answer_about_leaves_the_outcome_unknown_and_the_files(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    coordinator = catalog.services.coordinator
    losing = _LosingAnswers(coordinator, applied=True)
    monkeypatch.setattr(coordinator, "compare_and_swap_many", losing)

    def unreachable(*args: Any, **kwargs: Any) -> Any:
        raise CoordinatorUnavailable("etcd did not answer")

    monkeypatch.setattr(coordinator, "find_txn", unreachable)
    group = catalog.transaction()
    parts = [group.begin(t.name, "insert_into") for t in (a, b)]
    for part in parts:
        _append(part, "x")
    with pytest.raises(CommitOutcomeUnknown) as caught:
        group.commit()
    assert group.state == "of unknown outcome"
    assert all(os.path.isdir(p.staging_dir) for p in parts), "the staged files of a commit that may have landed"
    monkeypatch.undo()
    # the error names every table's own txn id and the group: once etcd answers, any part's table says
    # what happened to all of them
    unknown = caught.value
    assert unknown.txn_id == parts[0].txn_id
    assert unknown.txn_ids == {a.name: parts[0].txn_id, b.name: parts[1].txn_id}
    assert unknown.multi_txn_id == group.id and group.id in str(unknown) and parts[1].txn_id in str(unknown)
    assert a.find_commit(unknown.txn_ids[a.name]) == 1 and b.find_commit(unknown.txn_ids[b.name]) == 1
    assert_invariants(a)


def test_a_request_etcd_applies_late_is_found_by_a_later_lookup_and_the_commit_stands(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer is lost while the request is still in raft; the parts are looked up one after another and
    etcd applies it between the two lookups: one found part means every part landed (the others are
    looked up again), never damage, and no staged file of the landed commit is deleted."""
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    coordinator = catalog.services.coordinator
    real_many, real_find = coordinator.compare_and_swap_many, coordinator.find_txn
    held: list[Any] = []
    lookups: list[int | None] = []

    def answer_lost(requests: Any) -> Any:
        if held:
            return real_many(requests)
        held.append(requests)
        raise CommitAnswerLost("deadline exceeded")

    def find_txn(table_id: str, txn_id: str) -> int | None:
        found = real_find(table_id, txn_id)
        lookups.append(found)
        if len(lookups) == 1:
            real_many(held[0])  # etcd applies the request right after the first part was looked up
        return found

    monkeypatch.setattr(coordinator, "compare_and_swap_many", answer_lost)
    monkeypatch.setattr(coordinator, "find_txn", find_txn)
    group = catalog.transaction()
    parts = [group.begin(t.name, "insert_into") for t in (a, b)]
    for part in parts:
        _append(part, "x")
    infos = group.commit()
    assert lookups[:2] == [None, 1], "the interleaving under test: the first lookup missed, the second found it"
    assert len(held) == 1, "a commit that landed was sent again"
    assert {info.version for info in infos.values()} == {1}
    assert_moved_together(infos, group)
    for table in (a, b):
        assert table.scan().to_arrow().num_rows == 1
        assert_invariants(table)


@pytest.mark.parametrize("applied", [True, False], ids=["applied", "not-applied"])
def test_an_interrupt_while_the_answer_is_awaited_keeps_every_staged_file(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    """KeyboardInterrupt (or a signal handler's SystemExit) once the request may have reached etcd: every
    part or none landed, so nothing is deleted (cleanup checks the log first) and the state says unknown.
    A conflict, by contrast, is an answer: test_a_part_that_must_fail_fails_the_whole... deletes them."""
    a, b = _table(catalog, "s.a", "delta"), _table(catalog, "s.b", "delta")
    coordinator = catalog.services.coordinator
    real_many = coordinator.compare_and_swap_many

    def interrupted(requests: Any) -> Any:
        if applied:
            real_many(requests)
        raise KeyboardInterrupt

    monkeypatch.setattr(coordinator, "compare_and_swap_many", interrupted)
    group = catalog.transaction()
    parts = [group.begin(t.name, "insert_into") for t in (a, b)]
    for part in parts:
        _append(part, "x")
    with pytest.raises(KeyboardInterrupt):
        group.commit()
    monkeypatch.undo()
    assert group.state == "of unknown outcome"
    assert all(part.closed for part in parts)
    assert all(os.path.isdir(part.staging_dir) for part in parts), "staged files of a commit that may have landed"
    assert (a.version, b.version) == ((1, 1) if applied else (0, 0))
    for table in (a, b):
        assert table.scan().to_arrow().num_rows == (1 if applied else 0)
        assert_invariants(table)


# --- archiving and checkpoints, per table ----------------------------------------------------------------


def test_archiving_and_checkpoints_follow_each_tables_own_versions(catalog: Catalog) -> None:
    """A table in multi-table commits reaches its checkpoint interval and log window on its own versions:
    one table also committing alone gets there sooner, and both stay readable at every version."""
    with catalog_with(catalog, checkpoint_interval=5, log_window_versions=8) as busy:
        a, b = _table(busy, "s.a", "delta"), _table(busy, "s.b", "delta")
        for i in range(12):
            with busy.transaction() as group:
                _append(group.begin(a.name, "insert_into"), f"x{i}")
                _append(group.begin(b.name, "insert_into"), f"x{i}")
            with a.begin("insert_into") as alone:  # a moves twice as fast as b
                _append(alone, f"alone{i}")
                alone.commit()
        assert busy.services.flush(), "the background checkpoints and archiving did not finish"
        assert (a.version, b.version) == (24, 12)
        for table, version in ((a, 24), (b, 12)):
            checkpoints = [v for v, _ in busy.services.log(table.table_id, table.location).registered_checkpoints()[0]]
            assert checkpoints and max(checkpoints) == version - version % 5, (table.name, checkpoints)
            assert busy.services.coordinator.archive_marker(table.table_id).upto > 0, f"{table.name} never archived"
            for v in range(version + 1):
                assert len(table.snapshot(version=v).files) == v, (table.name, v)
            assert_invariants(table)
        # every multi-table version of a is paired with the one of b that carries the same id
        ids_a = {r.multi_txn_id: r.version for r in a.commits() if r.multi_txn_id}
        ids_b = {r.multi_txn_id: r.version for r in b.commits() if r.multi_txn_id}
        assert set(ids_a) == set(ids_b) and len(ids_a) == 12
        assert sorted(ids_b.values()) == list(range(1, 13))
