"""Structured Streaming into acidtables: real queries in the local SparkSession, each micro-batch one
commit keyed (query id, batch id)."""

from __future__ import annotations

import contextlib
import io
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from tests.helpers import docs
from tests.helpers.streams import SCHEMA, drop_batch, events, query_id
from tests.helpers.tables import source_options, staged_parquet

from acidtables import Catalog
from acidtables.core import InvalidArgumentError, Operation, TableNotFoundError
from acidtables.spark import SparkTable, use_catalog
from acidtables.spark.arrow_files import read_schema, write_rows
from acidtables.spark.change_feed import CommitChange, change_rows
from acidtables.spark.stream_sink import StreamTransaction


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


def failure_of(query: StreamingQuery) -> str:
    """The first line of the error a query ended with (it must end with one within 240 s)."""
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination(240)
    return str(caught.value)


def run_available(df: DataFrame, catalog: Catalog, table: str, checkpoint: Path, mode: str = "append") -> None:
    query = (
        df.writeStream.format("acidtables")
        .options(**source_options(catalog))
        .option("checkpointLocation", str(checkpoint))
        .outputMode(mode)
        .trigger(availableNow=True)
        .start(table)
    )
    assert query.awaitTermination(240), "the stream did not finish its available input within 240 s"
    assert query.exception() is None, query.exception()


def test_each_micro_batch_is_one_commit_keyed_by_query_and_batch(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    catalog.create_table("st.events", schema=SCHEMA, partition_by=["dt"])
    inbox, checkpoint = tmp_path / "inbox", tmp_path / "checkpoint"
    drop_batch(inbox, "a", [(1, "d1", 1.0), (2, "d2", 2.0)])
    drop_batch(inbox, "b", [(3, "d1", 3.0)])
    run_available(events(spark, inbox), catalog, "st.events", checkpoint)

    table = catalog.table("st.events")
    query = query_id(checkpoint)
    commits = [c for c in table.commits(1) if c.app_ids]
    assert [dict(c.app_ids) for c in commits] == [{query: 0}, {query: 1}]
    read = spark.read.format("acidtables").options(**source_options(catalog)).load("st.events")
    assert rows(read) == [(1, "d1", 1.0), (2, "d2", 2.0), (3, "d1", 3.0)]

    drop_batch(inbox, "c", [(4, "d3", 4.0)])  # a restart goes on from the checkpoint
    run_available(events(spark, inbox), catalog, "st.events", checkpoint)
    assert [dict(c.app_ids) for c in table.commits(1) if c.app_ids][-1] == {query: 2}
    assert len(rows(spark.read.format("acidtables").options(**source_options(catalog)).load("st.events"))) == 4


def test_complete_mode_replaces_the_table_each_batch(spark: SparkSession, catalog: Catalog, tmp_path: Path) -> None:
    catalog.create_table("st.totals", schema="dt STRING, total DOUBLE")
    inbox = tmp_path / "inbox"
    drop_batch(inbox, "a", [(1, "d1", 1.0), (2, "d2", 2.0)])
    drop_batch(inbox, "b", [(3, "d1", 3.0)])
    totals = events(spark, inbox).groupBy("dt").sum("amount").withColumnRenamed("sum(amount)", "total")
    run_available(totals, catalog, "st.totals", tmp_path / "checkpoint", mode="complete")
    read = spark.read.format("acidtables").options(**source_options(catalog)).load("st.totals")
    assert sorted(tuple(r) for r in read.collect()) == [("d1", 4.0), ("d2", 2.0)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"checkpointLocation": None}, "a stream's sink needs option checkpointLocation"),
        ({"versionAsOf": "1"}, "option versionAsOf does not apply to a stream's sink"),
        ({"txnAppId": "x", "txnVersion": "1"}, "batches are already keyed by its query id and batch id"),
        ({"path": None, "table": "st.nowhere"}, "st.nowhere"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    spark: SparkSession, catalog: Catalog, tmp_path: Path, change: dict[str, str | None], message: str
) -> None:
    catalog.create_table("st.events", schema=SCHEMA)
    inbox = tmp_path / "inbox"
    drop_batch(inbox, "a", [(1, "d1", 1.0)])
    writer = events(spark, inbox).writeStream.format("acidtables").options(**source_options(catalog))
    settings: dict[str, str | None] = {"checkpointLocation": str(tmp_path / "checkpoint"), "path": "st.events"}
    settings.update(change)
    for key, value in settings.items():
        if value is not None and key != "path":
            writer = writer.option(key, value)
    writer = writer.trigger(availableNow=True)
    # without the option, Spark itself asks for one unless the session names a checkpoint root
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "session-checkpoints"))
    try:
        query = writer.start(settings["path"]) if settings["path"] else writer.start()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert message in failure_of(query)
    assert catalog.table("st.events").version == 0  # nothing committed
    assert not any(p.suffix == ".parquet" for p in (Path(catalog.table("st.events").metadata.location)).rglob("*"))


def test_a_checkpoint_inside_the_table_is_refused(spark: SparkSession, catalog: Catalog, tmp_path: Path) -> None:
    catalog.create_table("st.events", schema=SCHEMA)
    inbox = tmp_path / "inbox"
    drop_batch(inbox, "a", [(1, "d1", 1.0)])
    inside = Path(catalog.table("st.events").metadata.location) / "_checkpoint"
    query = (
        events(spark, inbox)
        .writeStream.format("acidtables")
        .options(**source_options(catalog))
        .option("checkpointLocation", str(inside))
        .trigger(availableNow=True)
        .start("st.events")
    )
    assert "lies inside the location of st.events" in failure_of(query)
    assert catalog.table("st.events").version == 0


# --- SparkTable's sink: Spark's Parquet writer, the same keys ------------------------------------------


def test_spark_table_write_stream_appends_and_completes(spark: SparkSession, catalog: Catalog, tmp_path: Path) -> None:
    catalog.create_table("st.events", schema=SCHEMA, partition_by=["dt"])
    catalog.create_table("st.totals", schema="dt STRING, total DOUBLE")
    inbox = tmp_path / "inbox"
    drop_batch(inbox, "a", [(1, "d1", 1.0), (2, "d2", 2.0)])
    drop_batch(inbox, "b", [(3, "d1", 3.0)])
    events_table = SparkTable(spark, catalog.table("st.events"))
    query = events_table.write_stream(events(spark, inbox), str(tmp_path / "cp1"), trigger={"availableNow": True})
    assert query.awaitTermination(240)
    assert rows(events_table.read()) == [(1, "d1", 1.0), (2, "d2", 2.0), (3, "d1", 3.0)]
    assert [c.app_ids for c in catalog.table("st.events").commits(1)] == [
        {query_id(tmp_path / "cp1"): 0},
        {query_id(tmp_path / "cp1"): 1},
    ]
    totals = events(spark, inbox).groupBy("dt").sum("amount").withColumnRenamed("sum(amount)", "total")
    totals_table = SparkTable(spark, catalog.table("st.totals"))
    done = totals_table.write_stream(
        totals, str(tmp_path / "cp2"), output_mode="complete", trigger={"availableNow": True}
    )
    assert done.awaitTermination(240)
    assert sorted(tuple(r) for r in totals_table.read().collect()) == [("d1", 4.0), ("d2", 2.0)]


def test_spark_table_write_stream_refuses_what_it_cannot_do(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    catalog.create_table("st.events", schema=SCHEMA)
    t = SparkTable(spark, catalog.table("st.events"))
    drop_batch(tmp_path / "inbox", "a", [(1, "d1", 1.0)])
    stream = events(spark, tmp_path / "inbox")
    with pytest.raises(InvalidArgumentError, match="expected a streaming DataFrame"):
        t.write_stream(spark.createDataFrame([(1, "d", 1.0)], SCHEMA), str(tmp_path / "cp"))
    with pytest.raises(InvalidArgumentError, match="output_mode='update' is not one of append, complete"):
        t.write_stream(stream, str(tmp_path / "cp"), output_mode="update")
    inside = str(Path(catalog.table("st.events").metadata.location) / "cp")
    with pytest.raises(InvalidArgumentError, match=r"lies inside the location of st\.events"):
        t.write_stream(stream, inside)
    with pytest.raises(InvalidArgumentError, match="does not match the table"):
        t.write_stream(stream.drop("amount"), str(tmp_path / "cp"))
    assert catalog.table("st.events").version == 0
    assert not (tmp_path / "cp").exists()  # no query was started


# --- idempotent batch writes: Delta's txnAppId / txnVersion ---------------------------------------------


def test_a_write_keyed_by_application_and_version_is_applied_once(spark: SparkSession, catalog: Catalog) -> None:
    catalog.create_table("st.events", schema=SCHEMA)
    table = catalog.table("st.events")
    t = SparkTable(spark, table)
    batch = spark.createDataFrame([(1, "d1", 1.0)], SCHEMA)
    first = t.insert_into(batch, txn_app_id="nightly", txn_version=7)
    again = t.insert_into(batch, txn_app_id="nightly", txn_version=7)
    older = t.insert_overwrite(batch, txn_app_id="nightly", txn_version=6)
    assert (again.skipped, again.version, older.skipped, older.version) == (True, first.version, True, first.version)
    assert table.version == first.version  # no version for a repeat
    staged = [p for p in Path(table.metadata.location).rglob("*.parquet")]
    assert len(staged) == 1  # and no file written for it

    def write(version: int, mode: str = "append") -> None:
        batch.write.format("acidtables").options(**source_options(catalog)).option("txnAppId", "nightly").option(
            "txnVersion", version
        ).mode(mode).save("st.events")

    write(7)
    write(5, "overwrite")
    assert table.version == first.version
    write(8)
    assert rows(t.read()) == [(1, "d1", 1.0), (1, "d1", 1.0)]
    assert table.commits(table.version)[0].app_ids == {"nightly": 8}
    assert len(list(Path(table.metadata.location).rglob("*.parquet"))) == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"txnAppId": "a"}, "option txnAppId needs txnVersion too"),
        ({"txnVersion": "1"}, "option txnVersion needs txnAppId too"),
        ({"txnAppId": " ", "txnVersion": "1"}, "option txnAppId=' ' is empty"),
        ({"txnAppId": "a", "txnVersion": "-1"}, "option txnVersion='-1' is not a version of the application"),
    ],
)
def test_bad_idempotency_options_are_refused(
    spark: SparkSession, catalog: Catalog, options: dict[str, str], message: str
) -> None:
    catalog.create_table("st.events", schema=SCHEMA)
    batch = spark.createDataFrame([(1, "d1", 1.0)], SCHEMA)
    with pytest.raises(Exception, match=message):
        batch.write.format("acidtables").options(**source_options(catalog)).options(**options).mode("append").save(
            "st.events"
        )
    t = SparkTable(spark, catalog.table("st.events"))
    with pytest.raises(InvalidArgumentError, match="txn_version must be a whole number"):
        t.insert_into(batch, txn_app_id="a", txn_version=-1)
    with pytest.raises(InvalidArgumentError, match="txn_app_id must name the application"):
        t.insert_into(batch, txn_version=1)
    assert catalog.table("st.events").version == 0


# --- a job deployed together with its table -------------------------------------------------------------


def test_wait_for_table_returns_the_table_once_it_is_created(catalog: Catalog) -> None:
    with pytest.raises(TableNotFoundError, match=r"no table st\.later after 0 s"):
        catalog.wait_for_table("st.later", timeout_seconds=0)
    creator = threading.Timer(0.3, lambda: catalog.create_table("st.later", schema=SCHEMA))
    creator.start()  # the operator, a moment after the job's pod started
    try:
        table = catalog.wait_for_table("st.later", timeout_seconds=30)
    finally:
        creator.join()
    assert table.name == "st.later" and table.version == 0
    with pytest.raises(InvalidArgumentError, match="timeout_seconds must be 0 or more"):
        catalog.wait_for_table("st.later", timeout_seconds=-1)


def test_the_streaming_pages_example_runs_as_written(spark: SparkSession, catalog: Catalog, tmp_path: Path) -> None:
    block = docs.block("docs/streaming.md", "python")
    use_catalog(spark, catalog)  # what local_session(catalog=catalog) does
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(block.code, block.name, "exec"), {"spark": spark, "catalog": catalog, "home": str(tmp_path)})
    finally:
        use_catalog(spark, None)
    shown = docs.block("docs/streaming.md", "text").code
    assert printed.getvalue() == shown, printed.getvalue()


def test_the_demos_stream_part_commits_each_batch_once_and_delivers_each_row_once(
    spark: SparkSession, catalog: Catalog, tmp_path: Path
) -> None:
    from acidtables.cli.demo.streams import stream_tour

    tour = stream_tour(spark, catalog, tmp_path)
    assert tour.batches_in == ((0, 1), (1, 2), (2, 3))
    assert tour.batches_out == ((0, 10), (1, 10), (2, 10))
    assert (tour.compaction_version, tour.files_before, tour.files_after) == (4, 3, 1)
    assert tour.restarted_in == ((3, 5),) and tour.restarted_out == ((3, 10),)
    assert tour.rows_once
    assert "every row once" in tour.to_text() and tour.to_json()["batches_in"][0] == [0, 1]


# --- aborts after a commit whose answer was lost ------------------------------------------------------


def test_an_abort_after_a_commit_that_landed_keeps_its_files(catalog: Catalog) -> None:
    """Spark aborts a write whose commit raised; a commit whose answer was lost may have landed, and then
    its files are the table's: the abort must not delete them (only a transaction that did not land)."""
    table = catalog.create_table("st.aborts", schema=SCHEMA)
    landed, lost = table.begin("insert_into"), table.begin("insert_into")
    for tx in (landed, lost):
        tx.add_files([staged_parquet(tx)])
    info = landed.commit()
    table.resume(landed.txn_id, "insert_into", read_version=0, head_revision=0).abort()
    table.resume(lost.txn_id, "insert_into", read_version=0, head_revision=0).abort()
    assert table.find_commit(landed.txn_id) == info.version
    assert all(Path(table.storage.absolute(f.path)).exists() for f in table.snapshot().files)
    assert not Path(lost.staging_dir).exists()


def test_a_transaction_carried_to_a_table_of_the_same_name_but_another_id_is_refused(catalog: Catalog) -> None:
    """A micro-batch (or a batch write) carries the table id it was begun on: a table dropped and created
    again under its name while the batch ran is another table, and the batch commits nothing to it."""
    table = catalog.create_table("st.carried", schema=SCHEMA)
    tx = table.begin("insert_into")
    carried = StreamTransaction.of(tx)
    assert carried.table_id == table.metadata.table_id
    elsewhere = replace(carried, table_id="0" * 32)
    with pytest.raises(TableNotFoundError, match=r"st\.carried was dropped while transaction .* created again"):
        elsewhere.resume(table)
    resumed = carried.resume(table)
    resumed.add_files([staged_parquet(resumed)])
    assert resumed.commit().version == 1


def rewrite_changes(table: Any, before: pa.Table, after: pa.Table) -> list[dict[str, Any]]:
    """The change rows of an UPDATE that rewrote the file of `before` as `after` (insert, then rewrite)."""
    with table.begin("insert_into") as tx:
        first = write_rows(tx.metadata, tx.storage, tx.txn_id, before, overwrite=False)
        tx.add_files(first)
        tx.commit()
    with table.begin("update") as tx:
        second = write_rows(tx.metadata, tx.storage, tx.txn_id, after, overwrite=True)
        tx.remove_files(first)
        tx.add_files(second)
        info = tx.commit()
    change = CommitChange(info.version, 1, Operation.UPDATE, tuple(second), tuple(first))
    rows: list[dict[str, Any]] = change_rows(table.metadata, table.storage, change).to_pylist()
    return rows


def test_a_rewritten_row_holding_nan_is_no_change(catalog: Catalog) -> None:
    table = catalog.create_table("st.nan", schema=SCHEMA)
    rows = pa.table({"id": [1, 2], "dt": ["a", "a"], "amount": [float("nan"), 2.0]})
    changed = rows.set_column(2, "amount", pa.array([float("nan"), 20.0]))  # a rewrite that changed id 2 only
    out = rewrite_changes(table, rows, changed)
    assert [(r["_change_type"], r["id"], r["amount"]) for r in out] == [
        ("update_preimage", 2, 2.0),
        ("update_postimage", 2, 20.0),
    ]


def test_a_rewritten_row_with_nested_maps_is_no_change_unless_it_changed(catalog: Catalog) -> None:
    """Arrow gives a map as (key, value) tuples: a map of arrays must still compare (no unhashable
    list), and a NaN inside a map must equal itself, so only the row that changed is an update."""
    table = catalog.create_table("st.maps", schema="id BIGINT, tags MAP<STRING, ARRAY<BIGINT>>, m MAP<STRING, DOUBLE>")
    schema = read_schema(table.metadata)
    before = pa.Table.from_pylist(
        [{"id": 1, "tags": [("a", [1, 2])], "m": [("x", float("nan"))]}, {"id": 2, "tags": [("b", [3])], "m": []}],
        schema=schema,
    )
    # a rewrite that changed id 2's array only
    after = before.set_column(1, "tags", pa.array([[("a", [1, 2])], [("b", [4])]], schema.field("tags").type))
    out = rewrite_changes(table, before, after)
    assert [(r["_change_type"], r["id"], r["tags"]) for r in out] == [
        ("update_preimage", 2, [("b", [3])]),
        ("update_postimage", 2, [("b", [4])]),
    ]


def test_a_checkpoint_whose_query_id_cannot_be_read_is_named_with_why(tmp_path: Path) -> None:
    from acidtables.core import AcidTablesError
    from acidtables.spark.stream_sink import query_id as sink_query_id

    missing, unreadable, garbled, found = (tmp_path / name for name in ("missing", "unreadable", "garbled", "found"))
    for checkpoint in (missing, unreadable, garbled, found):
        checkpoint.mkdir()
    (unreadable / "metadata").mkdir()  # a directory where Spark keeps a file: reading it fails
    (garbled / "metadata").write_text('{"id": ')
    (found / "metadata").write_text('{"id": "q-1"}')
    for checkpoint, reason in [
        (missing, "holds no query id; Spark writes it when a query starts"),
        (unreadable, "cannot be read (["),
        (garbled, "is not JSON ("),
    ]:
        with pytest.raises(AcidTablesError) as caught:
            sink_query_id(str(checkpoint))
        assert f"{checkpoint}/metadata" in str(caught.value)
        assert reason in str(caught.value)
    assert sink_query_id(str(found)) == "q-1"
