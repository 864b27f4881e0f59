"""A losing job never deletes committed data (conflict-rules G1, G4), as real Spark jobs.

With deletion vectors on, an UPDATE or DELETE re-adds the file it read with a vector hiding rows, so its
record lists a file the table already had among its added files. A job that then loses (a conflict, a
metadata change, an abort) must delete only what it staged itself: the table's files stay, and every
retained version still reads. `run` checks every retained snapshot's files on disk after each pair.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from tests.spark_jobs import Job, dele, make, rows, run, upd

from acidtables import Catalog
from acidtables.errors import ConcurrentAppendException, ConcurrentDeleteReadException, MetadataChangedException
from acidtables.spark import SparkTable

LEVELS = ("Serializable", "WriteSerializable")


def one_file_table(spark: SparkSession, catalog: Catalog, level: str, *, partitioned: bool = False) -> SparkTable:
    t = make(spark, catalog, unpartitioned=not partitioned, row_level_concurrency=True, isolation_level=level)
    t.compact("major", target_file_bytes=1 << 20)  # every row (of each partition) in one file
    return t


def readable_at_every_version(t: SparkTable) -> None:
    for version in range(t.table.version + 1):
        t.read(version=version).collect()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("earlier", "later", "error", "expected"),
    [
        # D-23: the winner's new version of row 1 still matches the loser's predicate
        (upd("id = 1", "-1"), upd("id = 1", "-2"), ConcurrentAppendException, (1, "a", -1.0)),
        (upd("id = 1", "-1"), dele("id = 1"), ConcurrentAppendException, (1, "a", -1.0)),
        # D-23: the winner deleted a row the loser modifies
        (dele("id = 1"), upd("id = 1", "-2"), ConcurrentDeleteReadException, None),
    ],
    ids=["update-update", "update-delete", "delete-update"],
)
def test_a_row_level_loser_keeps_the_file_both_jobs_re_added(
    spark: SparkSession,
    catalog: Catalog,
    level: str,
    earlier: Job,
    later: Job,
    error: type[Exception],
    expected: tuple[int, str, float] | None,
) -> None:
    t = one_file_table(spark, catalog, level)
    (shared,) = t.table.snapshot().files
    exc, _ = run(t, earlier, later)
    assert type(exc) is error, f"expected {error.__name__}, got {exc!r}"
    assert t.table.storage.exists(shared.path), "the loser deleted the file the table had before both jobs"
    seen = rows(t)
    assert [r for r in seen if r[0] == 1] == ([expected] if expected else [])
    assert len(seen) == 8 - (expected is None)
    readable_at_every_version(t)


@pytest.mark.parametrize("level", LEVELS)
def test_a_losing_delete_on_a_partitioned_deletion_vector_table_keeps_the_partition_file(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = one_file_table(spark, catalog, level, partitioned=True)
    before = {f.path for f in t.table.snapshot().files}
    exc, _ = run(t, dele("dt = 'a' AND id = 1"), dele("dt = 'a' AND id = 1"))
    # without row-level concurrency (partitioned) the file-level rule 5 decides: the winner removed the
    # entry the loser read
    assert type(exc) is ConcurrentDeleteReadException
    assert all(t.table.storage.exists(p) for p in before)
    assert [r[0] for r in rows(t)] == [0, 2, 3, 10, 11, 12, 13]
    readable_at_every_version(t)


@pytest.mark.parametrize("level", LEVELS)
def test_a_delete_that_loses_to_a_property_change_keeps_the_file_it_re_added(
    spark: SparkSession, catalog: Catalog, level: str
) -> None:
    t = one_file_table(spark, catalog, level)
    (shared,) = t.table.snapshot().files
    pending = dele("id = 2")(t)
    catalog.alter_table(t.name, properties={"owner": "sales"})
    with pytest.raises(MetadataChangedException):
        pending.commit()
    assert t.table.storage.exists(shared.path)
    assert not t.table.storage.exists(t.table.storage.staging_dir(pending.transaction.txn_id))
    assert len(rows(t)) == 8
    readable_at_every_version(t)


def test_an_aborted_deletion_vector_update_keeps_the_file_and_drops_its_own_rows(
    spark: SparkSession, catalog: Catalog
) -> None:
    t = one_file_table(spark, catalog, "WriteSerializable")
    (shared,) = t.table.snapshot().files
    pending = upd("id = 3", "-3")(t)
    staged = t.table.storage.staging_dir(pending.transaction.txn_id)
    assert t.table.storage.exists(staged)  # the updated row's new file
    pending.abort()
    assert t.table.storage.exists(shared.path)
    assert not t.table.storage.exists(staged)
    assert (3, "a", 3.0) in rows(t)
