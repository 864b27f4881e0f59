"""SparkTable's stream sink: each micro-batch written by Spark's own Parquet writer, committed once.

    query = SparkTable(spark, table).write_stream(events, "s3a://bucket/checkpoints/events")

This is Delta's documented `foreachBatch` pattern with the application transaction filled in: each
micro-batch is an `insert_into` (or, in complete mode, an `insert_overwrite`) keyed by the query's id
(from its checkpoint, the same for every run) and the batch id. A batch Spark replays after a crash
between the commit and its own commit log is skipped before anything is written; two runs of one query
writing the same batch at once meet as ConcurrentTransactionException. Unlike the data source's sink,
the rows go through Spark's native Parquet writer (and its source reads are judged, as in any
SparkTable write), which is what large streams want.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

from acidtables.core import InvalidArgumentError, Table

from . import writes
from .schema import check_schema
from .stream_sink import check_checkpoint_outside, query_id

logger = logging.getLogger(__name__)

OUTPUT_MODES = ("append", "complete")


class BatchCommitter:
    """The function Spark calls with each micro-batch (foreachBatch), on the driver."""

    def __init__(self, table: Table, checkpoint_location: str, output_mode: str) -> None:
        self.table = table
        self.checkpoint_location = checkpoint_location
        self.output_mode = output_mode
        self._query_id: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self._query_id is None:  # Spark has written it by the first batch
            self._query_id = query_id(self.checkpoint_location)
        if self.output_mode == "complete":
            prepared = writes.insert_overwrite(self.table, batch, txn_app_id=self._query_id, txn_version=batch_id)
        else:
            prepared = writes.insert_into(self.table, batch, txn_app_id=self._query_id, txn_version=batch_id)
            if not prepared.summary.get("files_written") and "already_applied_at" not in prepared.summary:
                # no rows, no version (as the data source's sink); complete mode still empties the table.
                # Told by what the write staged, not asked first (batch.isEmpty() is a Spark job of its
                # own on every batch, and a third of an append's time per micro-batch)
                prepared.abort()
                return
        info = prepared.commit()
        if info.skipped:
            logger.warning(
                "%s: micro-batch %d of query %s was committed before, at version %d (a replay after a restart)",
                self.table.name,
                batch_id,
                self._query_id,
                info.version,
            )


def write_stream(
    table: Table,
    df: DataFrame,
    checkpoint_location: str,
    *,
    output_mode: str = "append",
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start a streaming query writing `df` into `table`; `trigger` takes DataStreamWriter.trigger's
    keywords (`{"processingTime": "5 seconds"}`, `{"availableNow": True}`)."""
    method = "write_stream"
    if not isinstance(df, DataFrame) or not df.isStreaming:
        raise InvalidArgumentError(
            f"{method}(): expected a streaming DataFrame (spark.readStream...); for a batch DataFrame use insert_into"
        )
    if output_mode not in OUTPUT_MODES:
        raise InvalidArgumentError(
            f"{method}(): output_mode={output_mode!r} is not one of {', '.join(OUTPUT_MODES)} (update mode would need "
            "a MERGE per batch: write it with foreachBatch and SparkTable.merge)"
        )
    if not isinstance(checkpoint_location, str) or not checkpoint_location.strip():
        raise InvalidArgumentError(f"{method}(): checkpoint_location must name a directory outside every table")
    check_checkpoint_outside(table, checkpoint_location)
    check_schema(table.metadata, df.schema, call=f"{method}({table.name!r})", hint="alter_table()")
    writer = (
        df.writeStream.foreachBatch(BatchCommitter(table, checkpoint_location, output_mode))
        .option("checkpointLocation", checkpoint_location)
        .outputMode(output_mode)
    )
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name is not None:
        writer = writer.queryName(query_name)
    return writer.start()


__all__ = ["BatchCommitter", "write_stream"]
