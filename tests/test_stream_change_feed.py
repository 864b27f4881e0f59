"""The change feed as a stream (issue 42, item 4): `readStream.option("readChangeFeed", "true")` streams each
data commit's row changes in Delta's names (`_change_type` insert / update_preimage / update_postimage
/ delete, `_commit_version`, `_commit_timestamp`), on every conflict policy, from real Spark jobs
(UPDATE, DELETE, MERGE, overwrite, compaction) and real Structured Streaming queries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from tests.helpers.tables import source_options

from acidtables import Catalog
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
QUERY_SECONDS = 180
Change = tuple[int, str, int, str, float]  # version, change type, id, dt, amount


def changes(spark: SparkSession, catalog: Catalog, name: str, checkpoint: Path, **options: str) -> list[Change]:
    """Every change row one AvailableNow run of the change feed delivers, with its version and type."""
    seen: list[Change] = []

    def collect(batch: DataFrame, _: int) -> None:
        for r in batch.collect():
            seen.append((r._commit_version, r._change_type, r.id, r.dt, r.amount))

    query = (
        spark.readStream.format("acidtables")
        .options(**source_options(catalog))
        .option("readChangeFeed", "true")
        .options(**options)
        .load(name)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_SECONDS)
    return sorted(seen)


def frame(spark: SparkSession, rows: list[tuple[int, str, float]]) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA)


FLAVOURS = [
    pytest.param({}, id="delta"),
    pytest.param({"row_level_concurrency": True}, id="delta-deletion-vectors"),
    pytest.param({"conflict_policy": "maxcompute-transactional"}, id="maxcompute-transactional"),
    pytest.param({"primary_key": ["id"]}, id="maxcompute-primary-key"),
]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_each_operation_streams_delta_change_types(
    spark: SparkSession, catalog: Catalog, tmp_path: Path, flavour: dict[str, Any]
) -> None:
    t = SparkTable(spark, catalog.create_table("cf.orders", schema=SCHEMA, partition_by=["dt"], **flavour))
    v1 = t.insert_into(frame(spark, [(1, "a", 1.0), (2, "a", 2.0), (3, "b", 3.0)])).version
    v2 = t.update("id = 2", {"amount": "20.0"}).version
    v3 = t.delete("id = 3").version
    t.compact("major")  # no data change: no change rows
    v4 = t.insert_into(frame(spark, [(4, "b", 4.0)])).version
    assert changes(spark, catalog, "cf.orders", tmp_path / "cp", startingVersion="1") == [
        (v1, "insert", 1, "a", 1.0),
        (v1, "insert", 2, "a", 2.0),
        (v1, "insert", 3, "b", 3.0),
        (v2, "update_postimage", 2, "a", 20.0),
        (v2, "update_preimage", 2, "a", 2.0),
        (v3, "delete", 3, "b", 3.0),
        (v4, "insert", 4, "b", 4.0),
    ]


def test_a_primary_key_upsert_of_an_existing_key_is_an_update(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    t = SparkTable(spark, catalog.create_table("cf.pk", schema=SCHEMA, partition_by=["dt"], primary_key=["id"]))
    t.insert_into(frame(spark, [(1, "a", 1.0), (2, "a", 2.0)]))
    v2 = t.insert_into(frame(spark, [(1, "a", 10.0), (2, "a", 2.0), (5, "a", 5.0)])).version
    source = frame(spark, [(1, "a", 0.0), (6, "a", 6.0)])
    v3 = (
        t.merge(source, "t.id = s.id AND t.dt = s.dt")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
        .version
    )
    assert changes(spark, catalog, "cf.pk", tmp_path / "cp", startingVersion=str(v2)) == [
        (v2, "insert", 5, "a", 5.0),  # id 2 written again with the same values: no change
        (v2, "update_postimage", 1, "a", 10.0),
        (v2, "update_preimage", 1, "a", 1.0),
        (v3, "delete", 1, "a", 10.0),
        (v3, "insert", 6, "a", 6.0),
    ]


def test_a_primary_key_feed_whose_oldest_kept_commit_has_no_kept_predecessor_goes_on_after_it(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    """A primary-key commit's changes need the version before it; when retention keeps the commit but not
    its predecessor, that commit's changes are lost too: failOnDataLoss says so, =false goes on after it."""
    t = SparkTable(spark, catalog.create_table("cf.pkx", schema=SCHEMA, partition_by=["dt"], primary_key=["id"]))
    t.insert_into(frame(spark, [(1, "a", 1.0)]))
    checkpoint = tmp_path / "cp"
    changes(spark, catalog, "cf.pkx", checkpoint)  # the snapshot, delivered
    t.insert_into(frame(spark, [(1, "a", 2.0)]))
    kept = t.insert_into(frame(spark, [(1, "a", 3.0)])).version
    after = t.insert_into(frame(spark, [(2, "a", 4.0)])).version
    t.table.expire(retain_versions=2, retain_duration="0s", force=True)
    with pytest.raises(StreamingQueryException, match=f"needs versions {kept - 1}..{kept} next, which expired"):
        changes(spark, catalog, "cf.pkx", checkpoint)
    assert changes(spark, catalog, "cf.pkx", checkpoint, failOnDataLoss="false") == [(after, "insert", 2, "a", 4.0)]


def test_a_merge_that_only_updated_streams_updates_and_a_mixed_one_deletes_and_inserts(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    t = SparkTable(spark, catalog.create_table("cf.m", schema=SCHEMA, partition_by=["dt"]))
    t.insert_into(frame(spark, [(1, "a", 1.0), (2, "a", 2.0)]))
    only_updates = (
        t.merge(frame(spark, [(1, "a", 10.0)]), "t.id = s.id").when_matched_update({"amount": "s.amount"}).execute()
    )
    mixed = (
        t.merge(frame(spark, [(2, "a", 20.0), (3, "a", 3.0)]), "t.id = s.id")
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert_all()
        .execute()
    )
    got = changes(spark, catalog, "cf.m", tmp_path / "cp", startingVersion=str(only_updates.version))
    assert got == [
        (only_updates.version, "update_postimage", 1, "a", 10.0),
        (only_updates.version, "update_preimage", 1, "a", 1.0),
        (mixed.version, "delete", 2, "a", 2.0),  # the files alone do not tell an update from an insert
        (mixed.version, "insert", 2, "a", 20.0),
        (mixed.version, "insert", 3, "a", 3.0),
    ]


def test_the_feed_starts_with_the_snapshot_as_inserts_and_an_overwrite_is_deletes_and_inserts(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    t = SparkTable(spark, catalog.create_table("cf.s", schema=SCHEMA, partition_by=["dt"]))
    t.insert_into(frame(spark, [(1, "a", 1.0)]))
    v2 = t.insert_into(frame(spark, [(2, "b", 2.0)])).version
    first = changes(spark, catalog, "cf.s", tmp_path / "cp")
    assert first == [(v2, "insert", 1, "a", 1.0), (v2, "insert", 2, "b", 2.0)]  # at the snapshot's version
    v3 = t.insert_overwrite(frame(spark, [(9, "b", 9.0)]), partition={"dt": "b"}).version
    assert changes(spark, catalog, "cf.s", tmp_path / "cp") == [
        (v3, "delete", 2, "b", 2.0),
        (v3, "insert", 9, "b", 9.0),
    ]


def test_the_feed_has_the_change_columns_and_the_commit_time(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    t = SparkTable(spark, catalog.create_table("cf.t", schema=SCHEMA))
    info = t.insert_into(frame(spark, [(1, "a", 1.0)]))
    feed = (
        spark.readStream.format("acidtables")
        .options(**source_options(catalog))
        .option("readChangeFeed", "true")
        .option("startingVersion", "1")
        .load("cf.t")
    )
    assert feed.columns == ["id", "dt", "amount", "_change_type", "_commit_version", "_commit_timestamp"]
    rows: list[Any] = []
    query = (
        feed.writeStream.foreachBatch(lambda batch, _: rows.extend(batch.collect()))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_SECONDS)
    [row] = rows
    assert info.time_version is not None
    assert row._commit_timestamp.replace(tzinfo=None) == info.time_version.astimezone().replace(tzinfo=None)
