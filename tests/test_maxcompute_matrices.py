"""Every cell of the MaxCompute matrices, run as real interleavings: E prepares, L prepares, E commits,
L commits. The expected outcomes are transcribed here from the seed text (in seed order), independently
of the grids in acidtables.core.commit.conflicts, so a typo in either shows up.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest
from tests.jobs import (
    Job,
    JobFactory,
    assert_invariants,
    compact,
    insert_into,
    insert_overwrite,
    live_tokens,
    seed_partition,
    tokens_of,
    truncate,
    update_copy_on_write,
    update_merge_on_read,
)

from acidtables import Catalog, Table
from acidtables.core.log.operations import OpClass
from acidtables.errors import MetadataChangedException, TransactionConflictException

OK, FAIL = "both succeed", "later fails"

# Seed 000 "Conflict detection rules", rows in the seed's order (seed 002 has the same 25 outcomes).
SEED_000 = [
    ("IO/T", "IO/T", OK), ("IO/T", "II", FAIL), ("IO/T", "UD", FAIL), ("IO/T", "MinC", FAIL), ("IO/T", "MajC", FAIL),
    ("II", "IO/T", OK), ("II", "II", FAIL), ("II", "UD", FAIL), ("II", "MinC", OK), ("II", "MajC", FAIL),
    ("UD", "IO/T", OK), ("UD", "II", FAIL), ("UD", "UD", FAIL), ("UD", "MinC", OK), ("UD", "MajC", FAIL),
    ("MinC", "IO/T", OK), ("MinC", "II", OK), ("MinC", "UD", OK), ("MinC", "MinC", FAIL), ("MinC", "MajC", OK),
    ("MajC", "IO/T", OK), ("MajC", "II", OK), ("MajC", "UD", OK), ("MajC", "MinC", FAIL), ("MajC", "MajC", FAIL),
]  # fmt: skip

# Seed 001 "Conflict of concurrent operations" (transactional tables, small-file MERGE = SFM).
SEED_001 = [
    ("IO/T", "IO/T", OK), ("IO/T", "II", OK), ("IO/T", "UD", FAIL), ("IO/T", "SFM", FAIL),
    ("II", "IO/T", OK), ("II", "II", OK), ("II", "UD", FAIL), ("II", "SFM", FAIL),
    ("UD", "IO/T", OK), ("UD", "II", OK), ("UD", "UD", FAIL), ("UD", "SFM", FAIL),
    ("SFM", "IO/T", OK), ("SFM", "II", OK), ("SFM", "UD", FAIL), ("SFM", "SFM", FAIL),
]  # fmt: skip

# D-05: clustering is OK with INSERT INTO in both orders and otherwise behaves like MAJOR COMPACT.
CLUSTERING = [
    ("CLU", "II", OK), ("II", "CLU", OK),
    ("CLU", "IO/T", OK), ("IO/T", "CLU", FAIL),
    ("CLU", "UD", OK), ("UD", "CLU", FAIL),
    ("MinC", "CLU", OK), ("CLU", "MinC", FAIL), ("CLU", "CLU", FAIL), ("CLU", "MajC", FAIL),
]  # fmt: skip

PK_JOBS: dict[str, list[JobFactory]] = {
    "IO/T": [insert_overwrite, truncate],
    "II": [insert_into],
    "UD": [update_merge_on_read, partial(update_merge_on_read, operation="delete")],
    "MinC": [compact],
    "MajC": [partial(compact, operation="major_compact")],
    "CLU": [partial(compact, operation="cluster")],
}
TXN_JOBS: dict[str, list[JobFactory]] = {
    "IO/T": [insert_overwrite, truncate],
    "II": [insert_into],
    "UD": [update_copy_on_write, partial(update_copy_on_write, operation="delete")],
    "SFM": [compact, partial(compact, operation="major_compact")],
}


def cases(matrix: list[tuple[str, str, str]], jobs: dict[str, list[JobFactory]]) -> list[Any]:
    out = []
    for earlier, later, outcome in matrix:
        for e in jobs[earlier]:
            for lj in jobs[later]:
                e_name = getattr(e, "keywords", {}).get("operation", getattr(e, "__name__", "job"))
                l_name = getattr(lj, "keywords", {}).get("operation", getattr(lj, "__name__", "job"))
                out.append(pytest.param(earlier, later, outcome, e, lj, id=f"{earlier}->{later}[{e_name},{l_name}]"))
    return out


def pk_table(catalog: Catalog) -> Table:
    return catalog.create_table(
        "sales.orders", schema="id BIGINT, dt STRING, amount DOUBLE", partition_by=["dt"], primary_key=["id"]
    )


def txn_table(catalog: Catalog) -> Table:
    return catalog.create_table(
        "sales.events", schema="id BIGINT, dt STRING", partition_by=["dt"], conflict_policy="maxcompute-transactional"
    )


def effect(job: Job) -> tuple[Counter[str], Counter[str]]:
    intent = job.tx.intent()
    return (
        Counter(t for f in intent.removes for t in tokens_of(f)),
        Counter(t for f in intent.adds for t in tokens_of(f)),
    )


def expected_tokens(before: Counter[str], earlier: Job, later: Job | None) -> Counter[str]:
    """What the seeds promise the partition holds after E, then (if it committed) L."""
    removed, added = effect(earlier)
    result = before - removed + added
    if later is not None:
        l_removed, l_added = effect(later)
        if later.tx.intent().op_class is OpClass.IO_T:
            result = l_added  # "the later job's result overwrites the earlier job's result"
        elif later.tx.operation.value.endswith("compact") or later.tx.operation.value == "cluster":
            pass  # a compaction changes no data, whatever it was rebased onto
        else:
            result = result - l_removed + l_added
    return result


def run_pair(table: Table, make_e: JobFactory, make_l: JobFactory, e_part: str, l_part: str) -> tuple[Job, Job]:
    earlier = make_e(table, e_part)
    later = make_l(table, l_part)
    return earlier, later


def check_cell(
    table: Table, earlier_class: str, later_class: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    seed_partition(table, "p1")
    before = live_tokens(table.snapshot(), "p1")
    earlier, later = run_pair(table, make_e, make_l, "p1", "p1")
    expected_ok = expected_tokens(before, earlier, later)
    expected_fail = expected_tokens(before, earlier, None)
    won = earlier.tx.commit()
    if outcome == FAIL:
        with pytest.raises(TransactionConflictException) as caught:
            later.tx.commit()
        exc = caught.value
        assert (exc.earlier_op, exc.later_op) == (earlier_class, later_class)
        assert exc.winning_version == won.version
        assert exc.read_version == won.version - 1
        assert exc.scope == "dt=p1"
        assert f"version {won.version}" in str(exc) and "[dt=p1]" in str(exc)
        assert live_tokens(table.snapshot(), "p1") == expected_fail
        assert_invariants(table, failed=[later])
    else:
        info = later.tx.commit()
        assert info.version == won.version + 1
        assert info.retries == 1, "the later job must be rebased at metadata level, once"
        assert live_tokens(table.snapshot(), "p1") == expected_ok
        assert_invariants(table)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(SEED_000, PK_JOBS))
def test_primary_key_table_follows_seed_000(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell(pk_table(catalog), earlier, later, outcome, make_e, make_l)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(SEED_001, TXN_JOBS))
def test_transactional_table_follows_seed_001(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell(txn_table(catalog), earlier, later, outcome, make_e, make_l)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(CLUSTERING, PK_JOBS))
def test_clustering_follows_smart_resolution(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    check_cell(pk_table(catalog), earlier, later, outcome, make_e, make_l)


FAILING_PK = [c for c in SEED_000 if c[2] == FAIL]
FAILING_TXN = [c for c in SEED_001 if c[2] == FAIL]


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(FAILING_PK, PK_JOBS))
def test_failing_cells_commit_both_on_different_partitions(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    table = pk_table(catalog)
    seed_partition(table, "p1")
    seed_partition(table, "p2")
    e, lj = run_pair(table, make_e, make_l, "p1", "p2")
    won = e.tx.commit()
    info = lj.tx.commit()
    assert (info.version, info.retries) == (won.version + 1, 1)
    assert_invariants(table)


@pytest.mark.parametrize(("earlier", "later", "outcome", "make_e", "make_l"), cases(FAILING_TXN, TXN_JOBS))
def test_failing_transactional_cells_commit_both_on_different_partitions(
    catalog: Catalog, earlier: str, later: str, outcome: str, make_e: JobFactory, make_l: JobFactory
) -> None:
    table = txn_table(catalog)
    seed_partition(table, "p1")
    seed_partition(table, "p2")
    e, lj = run_pair(table, make_e, make_l, "p1", "p2")
    won = e.tx.commit()
    assert lj.tx.commit().version == won.version + 1
    assert_invariants(table)


def test_truncate_of_whole_table_fails_a_later_insert_into_any_partition(catalog: Catalog) -> None:
    # D-09: a TRUNCATE without a partition covers every partition, even one created after it read
    table = pk_table(catalog)
    seed_partition(table, "p1")
    earlier = truncate(table, None)
    later = insert_into(table, "new")
    earlier.tx.commit()
    with pytest.raises(TransactionConflictException) as caught:
        later.tx.commit()
    assert (caught.value.earlier_op, caught.value.later_op) == ("IO/T", "II")
    assert_invariants(table, failed=[later])


def test_update_with_partition_predicate_fails_on_an_insert_into_a_partition_it_selects(catalog: Catalog) -> None:
    # the UD job's scope is its predicate, so a partition created after it read still meets it (D-09)
    table = pk_table(catalog)
    seed_partition(table, "2026-01-05")
    later_tx = table.begin("update")
    later_tx.scan("dt >= '2026-01-01'")
    earlier = insert_into(table, "2026-02-01")
    earlier.tx.commit()
    with pytest.raises(TransactionConflictException):
        later_tx.commit()


def test_insert_into_on_unpartitioned_primary_key_table_fails_after_insert_into(catalog: Catalog) -> None:
    table = catalog.create_table("sales.flat", schema="id BIGINT, v STRING", primary_key=["id"])
    earlier, later = insert_into(table, None), insert_into(table, None)
    earlier.tx.commit()
    with pytest.raises(TransactionConflictException) as caught:
        later.tx.commit()
    assert caught.value.scope is None
    assert_invariants(table, failed=[later])


@pytest.mark.parametrize("make_table", [pk_table, txn_table], ids=["maxcompute", "maxcompute-transactional"])
def test_metadata_change_fails_every_overlapping_write(catalog: Catalog, make_table: object) -> None:
    # D-13: deterministic, not only "in extreme cases"
    table = make_table(catalog)  # type: ignore[operator]
    later = insert_into(table, "p1")
    altered = catalog.alter_table(table.name, add_columns="note STRING")
    with pytest.raises(MetadataChangedException) as caught:
        later.tx.commit()
    assert caught.value.winning_version == altered.version
    assert "ALTER" in str(caught.value)
    assert_invariants(table, failed=[later])


def test_major_compact_rebased_onto_a_minor_compact_holding_unread_data_becomes_empty() -> None:
    # D-06: a live file made from MajC's inputs also holds data MajC never read. In a real interleaving
    # that data's writer fails MajC first (II->MajC), so the rebase is checked as the pure function.
    from acidtables.core.commit.conflicts.matrix import rebase_through_lineage
    from acidtables.core.log.operations import Operation, Policy
    from acidtables.core.log.records import CommitRecord, DataFile

    def record(op: Operation, cls: OpClass, removes: list[str], adds: list[DataFile]) -> CommitRecord:
        return CommitRecord(
            txn_id=op.value,
            version=5,
            read_version=3,
            operation=op,
            op_class=cls,
            policy=Policy.MAXCOMPUTE,
            isolation_level=None,
            removes=tuple(DataFile(p) for p in removes),
            adds=tuple(adds),
        )

    minor = record(Operation.MINOR_COMPACT, OpClass.MIN_C, ["f1", "f4"], [DataFile("g", lineage=("f1", "f4"))])
    major = record(Operation.MAJOR_COMPACT, OpClass.MAJ_C, ["f1", "f2"], [DataFile("b", lineage=("f1", "f2"))])
    rebased = rebase_through_lineage(minor, major)
    assert (rebased.adds, rebased.removes) == ((), ())

    covered = record(Operation.MINOR_COMPACT, OpClass.MIN_C, ["f1", "f2"], [DataFile("g", lineage=("f1", "f2"))])
    bigger = record(
        Operation.MAJOR_COMPACT, OpClass.MAJ_C, ["f1", "f2", "f3"], [DataFile("b", lineage=("f1", "f2", "f3"))]
    )
    moved = rebase_through_lineage(covered, bigger)
    assert sorted(f.path for f in moved.removes) == ["f3", "g"]
    assert [f.path for f in moved.adds] == ["b"]
