"""The `acidtables` Structured Streaming source (issue 42, item 3): spark.readStream.format("acidtables").

Real queries in the session's local Spark: Trigger.AvailableNow runs, each ending by itself, with every
micro-batch's rows collected by foreachBatch; a stream that must see a commit land while it runs uses
processAllAvailable. Versions are committed with pyarrow through core (no Spark job) unless the test is
about what a Spark job commits (UPDATE, DELETE, compaction). A few tests call the reader directly, as
Spark's driver-side worker does, to check offsets and the error's fields.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles
from tests.helpers.tables import source_options

from acidtables import Catalog
from acidtables.core import (
    InvalidArgumentError,
    StreamStoppedError,
    Table,
    TableNotFoundError,
    VersionExpiredError,
)
from acidtables.spark import SparkTable
from acidtables.spark.arrow_files import read_schema, write_rows
from acidtables.spark.schema import change_feed_struct, read_struct
from acidtables.spark.source_options import parse_options
from acidtables.spark.stream_source import AcidTablesStreamReader

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
#: a run of a few micro-batches takes a second or two; this only bounds a hung query
QUERY_SECONDS = 120

Row = tuple[Any, ...]
Batches = list[list[Row]]


def append(table: Table, *rows: Row, operation: str = "insert_into") -> int:
    """Commit `rows` (one file per table partition) without Spark; the version committed."""
    with table.begin(operation) as tx:
        meta = tx.metadata
        schema = read_schema(meta)
        data = pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema)
        tx.add_files(write_rows(meta, tx.storage, tx.txn_id, data, overwrite=False))
        return tx.commit().version


def drop_partition(table: Table, dt: str) -> int:
    """A DELETE that removes a whole partition's files and adds none."""
    with table.begin("delete") as tx:
        tx.remove_files(tx.scan(f"dt = '{dt}'"))
        return tx.commit().version


def run(
    spark: SparkSession,
    catalog: Catalog,
    name: str,
    checkpoint: Path,
    *,
    on_batch: Callable[[int], None] | None = None,
    into: Batches | None = None,
    options: Mapping[str, str] | None = None,
    **more_options: str,
) -> Batches:
    """One Trigger.AvailableNow run of the stream of `name` from `checkpoint`: the rows of each micro-batch
    that had any, in batch order (appended to `into` too, which keeps them when the query fails). A
    failed query raises StreamingQueryException."""
    batches: Batches = [] if into is None else into

    def collect(df: Any, batch_id: int) -> None:
        found = sorted(tuple(r) for r in df.collect())
        if found:
            batches.append(found)
        if on_batch is not None:
            on_batch(batch_id)

    reader = spark.readStream.format("acidtables").options(**source_options(catalog), **(options or {}), **more_options)
    writer = reader.load(name).writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    query = writer.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(QUERY_SECONDS), f"the stream of {name} did not end in {QUERY_SECONDS} s"
    finally:
        query.stop()
    return batches


def rows(batches: Batches) -> list[Row]:
    return sorted(row for batch in batches for row in batch)


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0]


@pytest.fixture
def table(catalog: Catalog) -> Table:
    return catalog.create_table("s.events", schema=SCHEMA, partition_by=["dt"])


# --- where a stream starts, and its order -------------------------------------------------------------


def test_a_stream_reads_the_snapshot_then_each_new_version_in_order(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0), (2, "b", 2.0))
    append(table, (3, "a", 3.0))
    checkpoint = tmp_path / "checkpoint"
    first = run(spark, catalog, "s.events", checkpoint)
    assert rows(first) == [(1, "a", 1.0), (2, "b", 2.0), (3, "a", 3.0)]
    append(table, (4, "c", 4.0))
    append(table, (5, "a", 5.0))
    # one file per micro-batch shows the order: version after version
    later = run(spark, catalog, "s.events", checkpoint, maxFilesPerTrigger="1")
    assert later == [[(4, "c", 4.0)], [(5, "a", 5.0)]]


def test_a_restart_from_the_checkpoint_reads_nothing_again_and_loses_nothing(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0))
    checkpoint = tmp_path / "checkpoint"
    assert len(run(spark, catalog, "s.events", checkpoint, maxFilesPerTrigger="2")) == 2
    assert run(spark, catalog, "s.events", checkpoint) == []
    append(table, (4, "a", 4.0))
    assert run(spark, catalog, "s.events", checkpoint) == [[(4, "a", 4.0)]]


def test_a_micro_batch_that_failed_is_read_again_with_the_same_rows_after_new_commits(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    """Spark replays the micro-batch its offset log holds and its commit log does not: the first one here,
    which pinned the snapshot's version, so the replay reads that version and not the head it finds."""
    append(table, (1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0))
    checkpoint = tmp_path / "checkpoint"

    def fail(batch_id: int) -> None:
        raise RuntimeError(f"the sink failed in micro-batch {batch_id}")

    attempted: Batches = []
    with pytest.raises(StreamingQueryException, match="the sink failed in micro-batch 0"):
        run(spark, catalog, "s.events", checkpoint, on_batch=fail, into=attempted, maxFilesPerTrigger="2")
    # the head's snapshot would start with b and c now
    drop_partition(table, "a")
    again = run(spark, catalog, "s.events", checkpoint, maxFilesPerTrigger="2", ignoreDeletes="true")
    assert again == [attempted[0], [(3, "c", 3.0)]]
    assert attempted[0] == [(1, "a", 1.0), (2, "b", 2.0)]


def test_starting_version_reads_the_changes_from_that_version_without_the_snapshot(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    second = append(table, (2, "a", 2.0))
    append(table, (3, "b", 3.0))
    found = run(spark, catalog, "s.events", tmp_path / "checkpoint", startingVersion=str(second))
    assert rows(found) == [(2, "a", 2.0), (3, "b", 3.0)]


def test_starting_version_latest_reads_only_versions_committed_after_the_start(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    checkpoint = tmp_path / "checkpoint"
    assert run(spark, catalog, "s.events", checkpoint, startingVersion="latest") == []
    append(table, (2, "a", 2.0))
    assert run(spark, catalog, "s.events", checkpoint, startingVersion="latest") == [[(2, "a", 2.0)]]


def test_starting_timestamp_reads_from_the_first_version_committed_at_or_after_it(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    second = append(table, (2, "a", 2.0))
    append(table, (3, "b", 3.0))
    (entry,) = [h for h in table.history() if h.version == second]
    assert entry.time_version is not None
    at = entry.time_version.astimezone(UTC).isoformat()  # exactly the second commit's time: it is included
    found = run(spark, catalog, "s.events", tmp_path / "checkpoint", startingTimestamp=at)
    assert rows(found) == [(2, "a", 2.0), (3, "b", 3.0)]


def test_a_starting_version_after_the_head_is_refused_naming_the_newest(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, catalog, "s.events", tmp_path / "checkpoint", startingVersion="7")
    assert "VersionNotFoundError" in first_line(caught.value)
    assert "s.events has no version 7; the newest is 0" in str(caught.value)


# --- admission control ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "sizes"),
    [
        ({"maxFilesPerTrigger": "2"}, [2, 2, 1]),
        ({"maxBytesPerTrigger": "1"}, [1, 1, 1, 1, 1]),  # soft: the file that crosses it is admitted
        ({"maxFilesPerTrigger": "3", "maxBytesPerTrigger": "1g"}, [3, 2]),
        ({"maxFilesPerTrigger": "3", "maxBytesPerTrigger": "1"}, [1, 1, 1, 1, 1]),
        ({}, [5]),
    ],
    ids=["files", "bytes", "files-under-bytes", "bytes-under-files", "default"],
)
def test_a_micro_batch_admits_files_up_to_the_limits_cutting_inside_a_version(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path, options: dict[str, str], sizes: list[int]
) -> None:
    version = append(table, *[(i, f"p{i}", float(i)) for i in range(5)])  # five files in one version
    found = run(spark, catalog, "s.events", tmp_path / "checkpoint", startingVersion=str(version), options=options)
    assert [len(batch) for batch in found] == sizes
    assert rows(found) == [(i, f"p{i}", float(i)) for i in range(5)]


def test_available_now_never_reads_past_the_head_pinned_when_it_started(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0), (2, "b", 2.0))
    committed: list[int] = []

    def commit_while_running(batch_id: int) -> None:
        if batch_id == 0:
            committed.append(append(table, (3, "c", 3.0)))

    checkpoint = tmp_path / "checkpoint"
    found = run(spark, catalog, "s.events", checkpoint, on_batch=commit_while_running, maxFilesPerTrigger="1")
    assert committed and rows(found) == [(1, "a", 1.0), (2, "b", 2.0)]
    assert run(spark, catalog, "s.events", checkpoint) == [[(3, "c", 3.0)]]


# --- commits passed over, and commits that stop the stream ----------------------------------------------


def test_a_compaction_is_passed_over_without_delivering_its_rows_again(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    append(table, (2, "a", 2.0))
    checkpoint = tmp_path / "checkpoint"
    assert rows(run(spark, catalog, "s.events", checkpoint)) == [(1, "a", 1.0), (2, "a", 2.0)]
    (compaction,) = SparkTable(spark, table).compact()
    assert compaction.time_version is None
    catalog.alter_table("s.events", properties={"note": "a metadata-only commit"})
    append(table, (3, "a", 3.0))
    assert run(spark, catalog, "s.events", checkpoint) == [[(3, "a", 3.0)]]


def test_an_update_stops_the_stream_naming_the_version_after_delivering_the_rows_before_it(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    checkpoint = tmp_path / "checkpoint"
    run(spark, catalog, "s.events", checkpoint)
    append(table, (2, "a", 2.0))
    updated = SparkTable(spark, table).update("id = 1", {"amount": "10.0"}).version
    append(table, (3, "b", 3.0))
    delivered: Batches = []
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, catalog, "s.events", checkpoint, into=delivered)
    line = first_line(caught.value)
    assert "StreamStoppedError: [DELTA_SOURCE_TABLE_IGNORE_CHANGES]" in line, line
    assert f"The stream of s.events stopped at version {updated} (UPDATE)" in line
    assert "skipChangeCommits=true" in line
    # the version before the update was delivered; a restart stops at the update again
    assert delivered == [[(2, "a", 2.0)]]
    with pytest.raises(StreamingQueryException, match=f"stopped at version {updated}"):
        run(spark, catalog, "s.events", checkpoint)
    assert run(spark, catalog, "s.events", checkpoint, skipChangeCommits="true") == [[(3, "b", 3.0)]]


def test_a_commit_that_only_removes_rows_stops_the_stream_unless_ignore_deletes(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0), (2, "b", 2.0))
    checkpoint = tmp_path / "checkpoint"
    run(spark, catalog, "s.events", checkpoint)
    deleted = drop_partition(table, "a")
    append(table, (3, "b", 3.0))
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, catalog, "s.events", checkpoint)
    line = first_line(caught.value)
    assert f"[DELTA_SOURCE_IGNORE_DELETE] The stream of s.events stopped at version {deleted} (DELETE)" in line
    assert "ignoreDeletes=true" in line and "skipChangeCommits=true" in line
    assert run(spark, catalog, "s.events", checkpoint, ignoreDeletes="true") == [[(3, "b", 3.0)]]


def test_ignore_deletes_does_not_pass_over_a_commit_that_rewrites_rows(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    checkpoint = tmp_path / "checkpoint"
    run(spark, catalog, "s.events", checkpoint)
    SparkTable(spark, table).insert_overwrite(spark.createDataFrame([(2, "a", 2.0)], SCHEMA))
    with pytest.raises(StreamingQueryException, match=r"\(INSERT OVERWRITE\).*skipChangeCommits=true"):
        run(spark, catalog, "s.events", checkpoint, ignoreDeletes="true")


# --- schema changes -----------------------------------------------------------------------------------


def test_a_schema_change_stops_the_stream_and_a_restart_continues_with_the_new_schema(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    checkpoint = tmp_path / "checkpoint"
    delivered: Batches = []

    def collect(df: Any, batch_id: int) -> None:
        found = sorted(tuple(r) for r in df.collect())
        if found:
            delivered.append(found)

    def start() -> Any:
        reader = spark.readStream.format("acidtables").options(**source_options(catalog))
        return (
            reader.load("s.events")
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
        append(table, (2, "a", 2.0))
        altered = catalog.alter_table("s.events", add_columns="note STRING").version
        append(table, (3, "a", 3.0, "new"))
        with pytest.raises(StreamingQueryException) as caught:
            query.processAllAvailable()
    finally:
        query.stop()
    line = first_line(caught.value)
    assert f"[DELTA_SCHEMA_CHANGED_WITH_VERSION] The stream of s.events stopped at version {altered} (ALTER)" in line
    assert "to (id BIGINT, dt STRING, amount DOUBLE, note STRING)" in line
    assert rows(delivered) == [(1, "a", 1.0), (2, "a", 2.0)]
    delivered.clear()
    query = start()  # load() reads the new schema
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert delivered == [[(3, "a", 3.0, "new")]]


def test_files_written_under_an_older_schema_read_the_added_column_as_null(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    first = append(table, (1, "a", 1.0))
    catalog.alter_table("s.events", add_columns="note STRING")
    append(table, (2, "a", 2.0, "x"))
    found = run(spark, catalog, "s.events", tmp_path / "checkpoint", startingVersion=str(first))
    assert rows(found) == [(1, "a", 1.0, None), (2, "a", 2.0, "x")]


# --- data loss ----------------------------------------------------------------------------------------


def test_versions_expired_beneath_a_stalled_stream_fail_it_unless_fail_on_data_loss_is_false(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    append(table, (1, "a", 1.0))
    checkpoint = tmp_path / "checkpoint"
    run(spark, catalog, "s.events", checkpoint)
    lost = append(table, (2, "a", 2.0))
    kept = append(table, (3, "b", 3.0))
    assert table.expire(retain_versions=1, retain_duration="0s", force=True).oldest_version_kept == kept
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, catalog, "s.events", checkpoint)
    line = first_line(caught.value)
    assert f"VersionExpiredError: The stream of s.events needs version {lost} next, which expired" in line
    assert f"keeps versions {kept} and newer" in line and "failOnDataLoss=false" in line
    assert run(spark, catalog, "s.events", checkpoint, failOnDataLoss="false") == [[(3, "b", 3.0)]]


def test_a_data_file_gone_from_the_location_fails_the_stream_unless_fail_on_data_loss_is_false(
    spark: SparkSession, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    version = append(table, (1, "a", 1.0), (2, "b", 2.0))
    (victim,) = [f for f in table.snapshot().files if f.partition["dt"] == "a"]
    path = table.storage.absolute(victim.path)
    os.unlink(path)
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(StreamingQueryException) as caught:
        run(spark, catalog, "s.events", checkpoint)
    line = first_line(caught.value)
    assert f"DataFilesMissingError: The stream of s.events needs 1 data file(s) of version(s) {version}" in line
    assert path in line and "failOnDataLoss=false" in line
    assert run(spark, catalog, "s.events", checkpoint, failOnDataLoss="false") == [[(2, "b", 2.0)]]


# --- primary-key tables -------------------------------------------------------------------------------


def test_a_primary_key_table_streams_merged_rows_without_its_internal_columns(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    table = catalog.create_table("s.keyed", schema=SCHEMA, partition_by=["dt"], primary_key=["id"])
    append(table, (1, "a", 1.0), (2, "a", 2.0))
    append(table, (2, "a", 20.0), (3, "b", 3.0))
    checkpoint = tmp_path / "checkpoint"
    # the snapshot is what a reader sees, one row per key: partition a's two files come in one unit
    snapshot = run(spark, catalog, "s.keyed", checkpoint, maxFilesPerTrigger="1")
    assert snapshot == [[(1, "a", 1.0), (2, "a", 20.0)], [(3, "b", 3.0)]]
    # a version's rows merged within the version: the last write of a key wins
    append(table, (3, "b", 30.0), (3, "b", 31.0), (4, "a", 4.0))
    assert run(spark, catalog, "s.keyed", checkpoint) == [[(3, "b", 31.0), (4, "a", 4.0)]]


def test_a_delete_on_a_primary_key_table_stops_the_stream_unless_ignore_deletes(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    table = catalog.create_table("s.keyed", schema=SCHEMA, primary_key=["id"])
    append(table, (1, "a", 1.0), (2, "a", 2.0))
    checkpoint = tmp_path / "checkpoint"
    run(spark, catalog, "s.keyed", checkpoint)
    deleted = SparkTable(spark, table).delete("id = 1").version
    append(table, (5, "a", 5.0))
    with pytest.raises(StreamingQueryException, match=f"DELTA_SOURCE_IGNORE_DELETE.*version {deleted} \\(DELETE\\)"):
        run(spark, catalog, "s.keyed", checkpoint)
    assert run(spark, catalog, "s.keyed", checkpoint, ignoreDeletes="true") == [[(5, "a", 5.0)]]


# --- options ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxFilesPerTrigger": "0"}, "option maxFilesPerTrigger='0' is not a number of files"),
        ({"maxBytesPerTrigger": "lots"}, "option maxBytesPerTrigger='lots' is not a size"),
        ({"versionAsOf": "1"}, "a stream starts where startingVersion or startingTimestamp says"),
    ],
    ids=["zero-files", "bytes-not-a-size", "version-as-of"],
)
def test_a_stream_given_a_bad_option_fails_naming_it(
    spark: SparkSession,
    catalog: Catalog,
    table: Table,
    tmp_path: Path,
    options: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(Exception) as caught:
        run(spark, catalog, "s.events", tmp_path / "checkpoint", options=options)
    assert message in str(caught.value)
    assert "InvalidArgumentError" in str(caught.value)


def test_a_batch_read_given_a_stream_option_is_refused_naming_where_it_belongs(
    spark: SparkSession, catalog: Catalog, table: Table
) -> None:
    reader = spark.read.format("acidtables").options(**source_options(catalog)).option("maxFilesPerTrigger", "5")
    with pytest.raises(Exception, match="option maxFilesPerTrigger does not apply to a read"):
        reader.load("s.events").collect()


# --- the reader as Spark's driver-side worker calls it -----------------------------------------------------


def reader_of(catalog: Catalog, table: Table, **options: str) -> AcidTablesStreamReader:
    parsed = parse_options({**source_options(catalog), "path": table.name, **options}, "stream_read")
    return AcidTablesStreamReader(parsed, None, read_struct(table.metadata))


def test_offsets_are_json_and_a_new_reader_plans_the_same_partitions_for_them(catalog: Catalog, table: Table) -> None:
    append(table, (1, "a", 1.0), (2, "b", 2.0), (3, "c", 3.0))
    append(table, (4, "a", 4.0))
    first = reader_of(catalog, table)
    try:
        start = first.initialOffset()
        assert start == {"table_id": table.metadata.table_id, "version": -1, "index": 0, "snapshot": True}
        end = first.latestOffset(start, ReadMaxFiles(2))
        assert end == {"table_id": table.metadata.table_id, "version": 2, "index": 2, "snapshot": True}
        planned = [p.value for p in first.partitions(start, end)]
        after = first.latestOffset(end, ReadAllAvailable())
        assert after["version"] == 3 and not after["snapshot"]  # the first batch ends with the snapshot
        append(table, (5, "a", 5.0))
    finally:
        first.stop()
    second = reader_of(catalog, table)  # a restart: another worker, another head
    try:
        assert [p.value for p in second.partitions(start, end)] == planned
        read = [r for p in second.partitions(start, end) for b in second.read(p) for r in b.to_pylist()]
        assert sorted(r["id"] for r in read) == [1, 2]
    finally:
        second.stop()


def test_the_stop_error_carries_the_table_version_and_operation(
    spark: SparkSession, catalog: Catalog, table: Table
) -> None:
    append(table, (1, "a", 1.0))
    deleted = drop_partition(table, "a")
    reader = reader_of(catalog, table, startingVersion="1")
    try:
        before = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
        assert before["version"] == deleted  # the batch ends before the delete, with version 1's rows
        with pytest.raises(StreamStoppedError) as caught:
            reader.latestOffset(before, ReadAllAvailable())
    finally:
        reader.stop()
    assert (caught.value.table, caught.value.version, caught.value.operation) == ("s.events", deleted, "DELETE")


def test_a_restore_is_never_streamed_as_new_rows(catalog: Catalog, table: Table) -> None:
    """A RESTORE after a DELETE only adds files back, whose rows the stream delivered already: it stops the
    stream (here after ignoreDeletes passed over the delete), and skipChangeCommits passes over it."""
    append(table, (1, "a", 1.0))
    drop_partition(table, "a")
    restored = table.restore(version=1).version
    skipping = reader_of(catalog, table, startingVersion="1", skipChangeCommits="true")
    try:
        start = skipping.initialOffset()
        end = skipping.latestOffset(start, ReadAllAvailable())
        read = [r["id"] for p in skipping.partitions(start, end) for b in skipping.read(p) for r in b.to_pylist()]
    finally:
        skipping.stop()
    assert read == [1], "a restored row was streamed a second time"
    ignoring = reader_of(catalog, table, startingVersion="1", ignoreDeletes="true")
    try:
        before = ignoring.latestOffset(ignoring.initialOffset(), ReadAllAvailable())
        assert before["version"] == restored  # version 1's row, the delete passed over, then the stop
        with pytest.raises(StreamStoppedError) as caught:
            ignoring.latestOffset(before, ReadAllAvailable())
    finally:
        ignoring.stop()
    assert (caught.value.version, caught.value.operation) == (restored, "RESTORE")


def test_a_table_dropped_under_an_available_now_run_fails_it_instead_of_spinning(
    catalog: Catalog, table: Table
) -> None:
    """Trigger.AvailableNow pins the head; the table dropped during the run leaves no log to read up to it,
    which must fail the next plan with TableNotFoundError, not loop on an empty read forever."""
    for i in range(4):
        append(table, (i, "a", float(i)))
    reader = reader_of(catalog, table, startingVersion="1", maxFilesPerTrigger="1")
    try:
        reader.prepareForTriggerAvailableNow()
        first = reader.latestOffset(reader.initialOffset(), ReadMaxFiles(1))
        assert first["version"] == 2
        catalog.drop_table(table.name)
        with pytest.raises(TableNotFoundError, match=r"s\.events was dropped"):
            reader.latestOffset(first, ReadMaxFiles(1))
    finally:
        reader.stop()


def test_a_checkpoint_of_another_table_is_refused(catalog: Catalog, table: Table) -> None:
    reader = reader_of(catalog, table)
    try:
        with pytest.raises(InvalidArgumentError, match=r"offsets are of table id other, but s\.events is now"):
            reader.latestOffset({"table_id": "other", "version": 1, "index": 0, "snapshot": False}, ReadAllAvailable())
    finally:
        reader.stop()


def test_expired_versions_give_the_oldest_kept_in_the_error(catalog: Catalog, table: Table) -> None:
    append(table, (1, "a", 1.0))
    kept = append(table, (2, "a", 2.0))
    table.expire(retain_versions=1, retain_duration="0s", force=True)
    reader = reader_of(catalog, table, startingVersion="1")
    try:
        with pytest.raises(VersionExpiredError) as caught:
            reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    finally:
        reader.stop()
    assert caught.value.oldest_version == kept


def test_a_change_feed_whose_next_version_deleted_rows_of_expired_versions_says_expired(
    catalog: Catalog, table: Table
) -> None:
    """The oldest kept version's deleted rows are read from files only the expired versions before it
    read (vacuum may have deleted them): the change feed cannot deliver that version, and says it expired
    instead of failing on a missing file."""
    append(table, (1, "a", 1.0))
    deleted = drop_partition(table, "a")
    append(table, (2, "b", 2.0))
    table.expire(retain_versions=2, retain_duration="0s", force=True)
    parsed = parse_options(
        {**source_options(catalog), "path": table.name, "startingVersion": str(deleted), "readChangeFeed": "true"},
        "stream_read",
    )
    reader = AcidTablesStreamReader(parsed, None, change_feed_struct(read_struct(table.metadata)))
    try:
        with pytest.raises(VersionExpiredError) as caught:
            reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    finally:
        reader.stop()
    assert caught.value.oldest_version == deleted + 1


def test_from_options_defers_a_refused_option_to_the_first_driver_side_call(catalog: Catalog, table: Table) -> None:
    raw = {**source_options(catalog), "path": table.name, "versionAsOf": "1"}
    reader = AcidTablesStreamReader.from_options(raw, None, read_struct(table.metadata))
    with pytest.raises(InvalidArgumentError, match="option versionAsOf does not apply to a stream's source"):
        reader.initialOffset()


def test_versions_archived_out_of_etcd_stream_as_before(catalog: Catalog, table: Table) -> None:
    for i in range(4):
        append(table, (i, "a", float(i)))
    assert table.archive(keep_versions=1).versions_archived > 0
    reader = reader_of(catalog, table, startingVersion="1")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        read = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
    finally:
        reader.stop()
    assert sorted(r["id"] for r in read) == [0, 1, 2, 3]
