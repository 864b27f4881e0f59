"""What the stream benchmarks share (bench/stream.py and the driver processes of bench/stream_memory.py):
the event streams they write, the data source's options, how a query's micro-batches are read from its
progress, and the many-version table a source catches up on. One module both import, so the driver
processes never import the suite."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from acidtables import Table
from acidtables.core.settings import Settings
from acidtables.spark.arrow_files import read_schema, write_rows

from .core import log

#: the events every stream writes: the rate source's value and time, a derived day, an amount, a note
SCHEMA = "id BIGINT, ts TIMESTAMP, dt STRING, amount DOUBLE, note STRING"
DATES = tuple(f"2026-11-{day:02d}" for day in range(1, 9))
#: days a sink's stream spreads its rows over (by id), so each micro-batch writes a file into each, as
#: a stream of events that arrive up to a few days late does
DAYS = 4
#: the table a source catches up on: one-file versions of these columns
CATCHUP_SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
#: a query that has not reached what a benchmark waits for after this long is taken as stuck
QUERY_TIMEOUT_SECONDS = 900.0


def source_options(settings: Settings) -> dict[str, str]:
    """The `acidtables` data source's options that reach the benchmark's etcd prefix and warehouse."""
    return {
        "etcd.endpoints": ",".join(settings.etcd.endpoints),
        "etcd.prefix": settings.etcd.prefix,
        "warehouse": settings.warehouse,
    }


def shaped(raw: DataFrame, days: int = DAYS) -> DataFrame:
    """The rate sources' (timestamp, value) as the events of SCHEMA, in the table's column order."""
    value = F.col("value")
    dates = F.array(*[F.lit(d) for d in DATES[:days]])
    return raw.select(
        value.alias("id"),
        F.col("timestamp").alias("ts"),
        F.element_at(dates, (value % days + 1).cast("int")).alias("dt"),
        ((value * 7919) % 100_000 / 100.0).alias("amount"),
        F.concat(F.lit("click "), value.cast("string"), F.lit(" user "), (value % 9973).cast("string")).alias("note"),
    )


def paced_events(spark: SparkSession, rows_per_second: int, *, partitions: int = 2) -> DataFrame:
    """A stream of `rows_per_second` events a second (the rate source), as a live feed arrives."""
    raw = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", rows_per_second)
        .option("numPartitions", partitions)
        .load()
    )
    return shaped(raw)


def batched_events(spark: SparkSession, rows_per_batch: int, *, partitions: int = 1, days: int = DAYS) -> DataFrame:
    """A stream of exactly `rows_per_batch` events per micro-batch, whenever Spark asks (the
    rate-micro-batch source): with no trigger interval, micro-batches run back to back. The rate source
    would not do: its offsets are whole seconds, so it gives at most one micro-batch a second."""
    raw = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", partitions)
        .load()
    )
    return shaped(raw, days)


def progress(query: StreamingQuery) -> list[dict[str, Any]]:
    """The query's recent progress as plain dicts, one per micro-batch that ran (the last report of
    each batch id that has `addBatch`: Spark also reports idle triggers, which ran no batch)."""
    by_batch: dict[int, dict[str, Any]] = {}
    for entry in query.recentProgress:
        found = json.loads(entry.json)
        if "addBatch" in found.get("durationMs", {}):
            by_batch[int(found["batchId"])] = found
    return [by_batch[b] for b in sorted(by_batch)]


def completed_batches(query: StreamingQuery) -> int:
    """Micro-batches the query has finished (its batch ids start at 0 on a new checkpoint)."""
    last = query.lastProgress
    return 0 if last is None else int(last["batchId"]) + 1


def run_batches(query: StreamingQuery, batches: int, *, timeout_seconds: float = QUERY_TIMEOUT_SECONDS) -> None:
    """Let `query` finish `batches` micro-batches, then stop it. Polled every 20 ms: with a trigger
    interval the stop lands between two batches, so no batch is cut short (a cut batch aborts its
    transaction and logs Spark's InterruptedException)."""
    deadline = time.monotonic() + timeout_seconds
    try:
        while completed_batches(query) < batches:
            if not query.isActive:
                raise RuntimeError(f"the query ended after {completed_batches(query)} batches: {query.exception()}")
            if time.monotonic() > deadline:
                done = completed_batches(query)
                raise RuntimeError(f"the query ran {done} of {batches} batches in {timeout_seconds:g} s")
            time.sleep(0.02)
    finally:
        query.stop()


def quantile(samples: Sequence[float], q: float) -> float:
    """The `q` quantile (nearest rank) of `samples`; 0 for none."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else 0.0


def build_versions(table: Table, versions: int, rows_per_version: int) -> float:
    """Commit `versions` one-file inserts of `rows_per_version` rows each through core (begin, one
    Parquet file written by the library's Arrow writer into the transaction's staging directory,
    add_files, commit: no Spark job), ids 0, 1, 2, ... in commit order; returns the seconds it took.
    Each file lands in one of DATES (by version), so a source's read spans partitions."""
    schema = read_schema(table.metadata)
    t0 = time.perf_counter()
    for v in range(versions):
        first = v * rows_per_version
        data = pa.table(
            {
                "id": pa.array(range(first, first + rows_per_version), pa.int64()),
                "dt": pa.array([DATES[v % len(DATES)]] * rows_per_version, pa.string()),
                "amount": pa.array([float(v)] * rows_per_version, pa.float64()),
            },
            schema=schema,
        )
        with table.begin("insert_into") as tx:
            tx.add_files(write_rows(tx.metadata, tx.storage, tx.txn_id, data, overwrite=False))
            tx.commit()
        if (v + 1) % 2_000 == 0:
            log(f"{table.name}: {v + 1:,} of {versions:,} versions committed")
    return time.perf_counter() - t0


def expected_id_sum(versions: int, rows_per_version: int) -> int:
    n = versions * rows_per_version
    return n * (n - 1) // 2


def durations(batches: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """Each batch's `durationMs[key]`, in seconds."""
    return [float(b["durationMs"].get(key, 0)) / 1000 for b in batches]
