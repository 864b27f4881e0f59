"""The seeds' pairs of overlapping jobs, run as real Spark jobs end to end: E prepares (its Spark job
writes staged files), L prepares, E commits, L commits. Each test checks both outcomes and the rows a
reader sees afterwards. At least one pair per matrix row of every policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark_jobs import SCHEMA, Job, comp, dele, expect, ins, make, next_name, overwrite, rows, run, upd

from acidtables import Catalog
from acidtables.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    InvalidArgumentError,
    MetadataChangedException,
    TransactionConflictException,
)
from acidtables.spark import SparkTable
from acidtables.spark.compaction import commit_group, staged_groups

# --- maxcompute (primary key): one pair per row of seed 000 -------------------------------------------

PK: list[Any] = [
    # IO/T row: later INSERT INTO fails; the overwrite's rows are what a reader sees in dt=a
    pytest.param(
        overwrite("a", [(90, 9.0)]),
        ins([(91, "a", 1.0)]),
        TransactionConflictException,
        lambda r: [x for x in r if x[1] == "a"] == [(90, "a", 9.0)],
        id="IO/T->II",
    ),
    # II row: a later MINOR COMPACT of the same partition still completes
    pytest.param(
        ins([(92, "a", 2.0)]),
        comp("minor", "a"),
        None,
        lambda r: (92, "a", 2.0) in r and len([x for x in r if x[1] == "a"]) == 5,
        id="II->MinC",
    ),
    # UD row: a later UPDATE of the same partition fails, the earlier update is visible
    pytest.param(
        upd("dt = 'a'"),
        upd("dt = 'a'", "0"),
        TransactionConflictException,
        lambda r: all(x[2] >= 100 for x in r if x[1] == "a"),
        id="UD->UD",
    ),
    # MinC row: a later UPDATE succeeds and its new values win over the compacted rows (D-07)
    pytest.param(
        comp("minor", "b"),
        upd("dt = 'b'", "-1"),
        None,
        lambda r: all(x[2] == -1 for x in r if x[1] == "b"),
        id="MinC->UD",
    ),
    # MajC row: a later MINOR COMPACT fails; the data is unchanged
    pytest.param(
        comp("major", "b"), comp("minor", "b"), TransactionConflictException, lambda r: len(r) == 8, id="MajC->MinC"
    ),
    # the case: a MAJOR COMPACT that ends after an INSERT INTO fails
    pytest.param(
        ins([(93, "b", 3.0)]),
        comp("major", "b"),
        TransactionConflictException,
        lambda r: (93, "b", 3.0) in r,
        id="II->MajC",
    ),
]


@pytest.mark.parametrize(("earlier", "later", "error", "check"), PK)
def test_primary_key_table_pairs(
    spark: SparkSession,
    catalog: Catalog,
    earlier: Job,
    later: Job,
    error: type[Exception] | None,
    check: Callable[[list[Any]], bool],
) -> None:
    expect(make(spark, catalog, primary_key=["id"]), earlier, later, error, check)


# --- maxcompute-transactional: one pair per row of seed 001 --------------------------------------------

TXN: list[Any] = [
    pytest.param(
        overwrite("a", [(90, 9.0)]),
        ins([(91, "a", 1.0)]),
        None,
        lambda r: [x for x in r if x[1] == "a"] == [(90, "a", 9.0), (91, "a", 1.0)],
        id="IO/T->II",
    ),
    pytest.param(
        ins([(92, "a", 2.0)]),
        ins([(93, "a", 3.0)]),
        None,
        lambda r: (92, "a", 2.0) in r and (93, "a", 3.0) in r,
        id="II->II",
    ),
    pytest.param(
        upd("dt = 'a'"),
        dele("dt = 'a'"),
        TransactionConflictException,
        lambda r: len([x for x in r if x[1] == "a"]) == 4,
        id="UD->UD",
    ),
    pytest.param(
        comp("minor", "b"), upd("dt = 'b'"), TransactionConflictException, lambda r: len(r) == 8, id="SFM->UD"
    ),
]


@pytest.mark.parametrize(("earlier", "later", "error", "check"), TXN)
def test_transactional_table_pairs(
    spark: SparkSession,
    catalog: Catalog,
    earlier: Job,
    later: Job,
    error: type[Exception] | None,
    check: Callable[[list[Any]], bool],
) -> None:
    expect(make(spark, catalog, conflict_policy="maxcompute-transactional"), earlier, later, error, check)


# --- delta: one pair per row of conflict-rules §8.1, both isolation levels ------------------------------

DELTA: list[Any] = []
for level in ("Serializable", "WriteSerializable"):
    DELTA += [
        pytest.param(
            level,
            ins([(90, "a", 1.0)]),
            ins([(91, "a", 1.0)]),
            None,
            lambda r: len(r) == 10,
            id=f"{level}-INSERT-INSERT",
        ),
        pytest.param(
            level,
            ins([(90, "a", 1.0)]),
            upd("dt = 'a'"),
            ConcurrentAppendException if level == "Serializable" else None,
            lambda r: (90, "a", 1.0) in r or (90, "a", 101.0) in r,
            id=f"{level}-INSERT-UPDATE",
        ),
        pytest.param(
            level,
            upd("dt = 'a'"),
            dele("dt = 'a' AND id = 1"),
            ConcurrentAppendException,
            lambda r: len(r) == 8,
            id=f"{level}-UPDATE-DELETE",
        ),
        pytest.param(
            level, comp("minor", "a"), ins([(90, "a", 1.0)]), None, lambda r: len(r) == 9, id=f"{level}-OPTIMIZE-INSERT"
        ),
        pytest.param(
            level,
            comp("minor", "a"),
            upd("dt = 'a'"),
            ConcurrentDeleteReadException,
            lambda r: len(r) == 8,
            id=f"{level}-OPTIMIZE-UPDATE",
        ),
        pytest.param(
            level,
            upd("dt = 'a'"),
            upd("dt = 'b'"),
            None,
            lambda r: all(x[2] >= 100 for x in r),
            id=f"{level}-UPDATE-UPDATE-other-partition",
        ),
    ]


@pytest.mark.parametrize(("level", "earlier", "later", "error", "check"), DELTA)
def test_delta_table_pairs(
    spark: SparkSession,
    catalog: Catalog,
    level: str,
    earlier: Job,
    later: Job,
    error: type[Exception] | None,
    check: Callable[[list[Any]], bool],
) -> None:
    expect(make(spark, catalog, isolation_level=level), earlier, later, error, check)


@pytest.mark.parametrize("row_level", [True, False], ids=["row-level", "file-level"])
def test_two_deletes_of_different_rows_of_one_file(spark: SparkSession, catalog: Catalog, row_level: bool) -> None:
    t = make(spark, catalog, unpartitioned=True, row_level_concurrency=row_level)
    t.compact("major", target_file_bytes=1 << 20)  # one file holding every row
    assert len(t.table.snapshot().files) == 1
    exc, _ = run(t, dele("id = 1"), dele("id = 12"))
    if row_level:
        assert exc is None
        assert [x[0] for x in rows(t)] == [0, 2, 3, 10, 11, 13]
    else:
        assert isinstance(exc, ConcurrentAppendException | ConcurrentDeleteReadException)
        assert [x[0] for x in rows(t)] == [0, 2, 3, 10, 11, 12, 13]


def test_optimize_and_update_both_commit_with_deletion_vectors(spark: SparkSession, catalog: Catalog) -> None:
    # seed 004: with deletion vectors, OPTIMIZE and UPDATE do not conflict; the update follows its rows
    t = make(spark, catalog, unpartitioned=True, row_level_concurrency=True)
    exc, _ = run(t, comp("minor"), upd("id = 2", "-5"))
    assert exc is None
    assert (2, "b", -5.0) in rows(t) and len(rows(t)) == 8


def test_a_commit_after_alter_fails_with_metadata_changed(spark: SparkSession, catalog: Catalog) -> None:
    t = make(spark, catalog)
    pending = ins([(90, "a", 1.0)])(t)
    catalog.alter_table(t.name, add_columns="note STRING")
    with pytest.raises(MetadataChangedException):
        pending.commit()
    assert (90, "a", 1.0) not in rows(t)


def test_compaction_groups_commit_one_by_one_and_a_losing_group_is_skipped(
    spark: SparkSession, catalog: Catalog
) -> None:
    """Partial progress: each group is its own transaction. A group that loses to a concurrent UPDATE
    is skipped and leaves nothing; a group whose files changed after planning is not even staged; a
    group next to a concurrent append commits, and the append keeps its row (the seeds: both succeed)."""
    table = catalog.create_table(next_name(), schema=SCHEMA, partition_by=["dt"])
    t = SparkTable(spark, table)
    for start in (0, 10):
        t.insert_into(spark.createDataFrame([(start + i, dt, float(i)) for i, dt in enumerate("abc")], SCHEMA))
    with pytest.raises(InvalidArgumentError, match="use 'minor' or 'major'"):
        staged_groups(spark, table, "medium")  # checked at the call, not at the first group
    groups = staged_groups(spark, table, "major", target_file_bytes=1 << 20)  # plans all three partitions
    first = next(groups)  # stages a's group; nothing committed yet
    assert first.summary["partition"] == {"dt": "a"}
    t.update("dt = 'a'", {"amount": "amount + 100"})  # wins over the staged group of a
    t.insert_into(spark.createDataFrame([(20, "b", 9.0)], SCHEMA))  # an append next to b's group
    t.update("dt = 'c'", {"amount": "-1"})  # changes c's files after the plan was made

    assert commit_group(table, first) is None
    assert not table.storage.exists(table.storage.staging_dir(first.transaction.txn_id))
    rest = [commit_group(table, g) for g in groups]
    assert len(rest) == 1 and rest[0] is not None  # b's group; c's was never staged
    assert table.history(limit=1)[0].version == rest[0].version == table.version

    assert rows(t) == [
        (0, "a", 100.0),
        (1, "b", 1.0),
        (2, "c", -1.0),
        (10, "a", 100.0),
        (11, "b", 1.0),
        (12, "c", -1.0),
        (20, "b", 9.0),
    ]
    files = table.snapshot().files
    b_files = [f for f in files if f.partition["dt"] == "b"]
    assert len(b_files) == 2 and len([f for f in b_files if f.lineage]) == 1  # b's two files now one, + the append
    assert not any(f.lineage for f in files if f.partition["dt"] in ("a", "c"))
