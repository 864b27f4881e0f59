"""Streaming queries for the tests: a file source whose every file is one micro-batch, and the query
the crash tests run in a driver of their own (`stream_driver`) and restart in the test's session."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from acidtables import Catalog
from acidtables.spark import SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
Event = tuple[int, str, float]
#: the application id the foreachBatch pattern writes with (Delta's docs use a fixed name per pipeline)
FOREACH_APP = "events-pipeline"


def drop_batch(inbox: Path, name: str, records: Sequence[Event]) -> None:
    """A new file for the file source, there whole or not at all: one micro-batch of its own."""
    inbox.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "dt": dt, "amount": amount}) for i, dt, amount in records]
    (inbox / f".{name}.tmp").write_text("\n".join(lines) + "\n")
    (inbox / f".{name}.tmp").rename(inbox / f"{name}.json")


def events(spark: SparkSession, inbox: Path | str) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inbox))


def start_events_query(
    spark: SparkSession,
    catalog: Catalog,
    table: str,
    inbox: Path | str,
    checkpoint: Path | str,
    sink: str,
    options: Mapping[str, str],
) -> StreamingQuery:
    """The inbox's files into `table`, one micro-batch each, until none is left (AvailableNow): through
    the data source's sink (`sink="source"`), SparkTable.write_stream (`sink="table"`), or Delta's
    documented foreachBatch pattern, each batch an idempotent data source write (`sink="foreach"`)."""
    if sink == "table":
        return SparkTable(spark, catalog.table(table)).write_stream(
            events(spark, inbox), str(checkpoint), trigger={"availableNow": True}
        )
    if sink == "foreach":

        def write_batch(batch: DataFrame, batch_id: int) -> None:
            batch.write.format("acidtables").options(**options).option("txnAppId", FOREACH_APP).option(
                "txnVersion", batch_id
            ).mode("append").save(table)

        return (
            events(spark, inbox)
            .writeStream.foreachBatch(write_batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
    return (
        events(spark, inbox)
        .writeStream.format("acidtables")
        .options(**options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(table)
    )


def query_id(checkpoint: Path) -> str:
    """The id Spark keeps in a checkpoint, read as a user would."""
    return str(json.loads((checkpoint / "metadata").read_text())["id"])
