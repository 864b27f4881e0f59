"""Structured Streaming into acidtables: real queries in the local SparkSession, each micro-batch one
commit keyed (query id, batch id)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from tests.helpers.tables import source_options

from acidtables import Catalog

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.select("id", "dt", "amount").collect())


def drop_batch(inbox: Path, name: str, records: list[tuple[int, str, float]]) -> None:
    """A new file for the file source: one micro-batch of its own (maxFilesPerTrigger=1)."""
    inbox.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "dt": dt, "amount": amount}) for i, dt, amount in records]
    (inbox / f".{name}.tmp").write_text("\n".join(lines) + "\n")
    (inbox / f".{name}.tmp").rename(inbox / f"{name}.json")  # whole, or not there


def events(spark: SparkSession, inbox: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))


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
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    commits = [c for c in table.commits(1) if c.app_ids]
    assert [dict(c.app_ids) for c in commits] == [{query_id: 0}, {query_id: 1}]
    read = spark.read.format("acidtables").options(**source_options(catalog)).load("st.events")
    assert rows(read) == [(1, "d1", 1.0), (2, "d2", 2.0), (3, "d1", 3.0)]

    drop_batch(inbox, "c", [(4, "d3", 4.0)])  # a restart goes on from the checkpoint
    run_available(events(spark, inbox), catalog, "st.events", checkpoint)
    assert [dict(c.app_ids) for c in table.commits(1) if c.app_ids][-1] == {query_id: 2}
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
