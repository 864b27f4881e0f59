"""The streaming part of the Spark demo: a short stream into a table (one commit per micro-batch, keyed
by the query and the batch), the same query restarted with nothing new (no commit), a compaction of
what the stream left, and a stream out of the table that delivers every row once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acidtables.core import Catalog
from acidtables.spark import SparkTable, use_catalog

TABLE = "demo.clicks"
SCHEMA = "id BIGINT, page STRING"
FILES, ROWS_PER_FILE = 3, 10


@dataclass(frozen=True)
class StreamTour:
    table: str
    #: (batch id, the version its commit took), for the stream into the table, first run
    batches_in: tuple[tuple[int, int], ...]
    #: (batch id, rows), for the stream out of the table, first run
    batches_out: tuple[tuple[int, int], ...]
    #: the compaction's version, and the table's files before and after it
    compaction_version: int
    files_before: int
    files_after: int
    #: both queries restarted from their checkpoints after one more input file
    restarted_in: tuple[tuple[int, int], ...]
    restarted_out: tuple[tuple[int, int], ...]
    #: every row the stream in wrote, delivered once by the stream out
    rows_once: bool

    def to_json(self) -> dict[str, Any]:
        return {
            k: [list(v) for v in value] if isinstance(value, tuple) else value for k, value in self.__dict__.items()
        }

    def to_text(self) -> str:
        def commits(batches: tuple[tuple[int, int], ...]) -> str:
            return ", ".join(f"batch {b} -> version {v}" for b, v in batches)

        def deliveries(batches: tuple[tuple[int, int], ...]) -> str:
            return ", ".join(f"batch {b}: {n} rows" for b, n in batches)

        return "\n".join(
            [
                f"A stream into {self.table}, one commit per micro-batch keyed (query id, batch id): "
                f"{commits(self.batches_in)}.",
                f"A stream out of it (maxFilesPerTrigger=1): {deliveries(self.batches_out)}.",
                f"Compaction (version {self.compaction_version}): {self.files_before} small files -> "
                f"{self.files_after}.",
                f"Both restarted from their checkpoints after one more input file: in, {commits(self.restarted_in)}; "
                f"out, {deliveries(self.restarted_out)}, the compaction passed over; every row "
                f"{'once' if self.rows_once else 'NOT once'}.",
            ]
        )


def _write_file(inbox: Path, n: int) -> None:
    inbox.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": n * ROWS_PER_FILE + i, "page": f"/p/{i % 3}"}) for i in range(ROWS_PER_FILE)]
    (inbox / f".{n}.tmp").write_text("\n".join(lines) + "\n")
    (inbox / f".{n}.tmp").rename(inbox / f"{n}.json")


def _stream_in(spark: Any, inbox: Path, checkpoint: Path) -> None:
    query = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
        .writeStream.format("acidtables")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(TABLE)
    )
    query.awaitTermination()


def _stream_out(spark: Any, checkpoint: Path) -> list[tuple[int, list[int]]]:
    delivered: list[tuple[int, list[int]]] = []
    query = (
        spark.readStream.format("acidtables")
        .option("maxFilesPerTrigger", 1)
        .load(TABLE)
        .writeStream.foreachBatch(
            lambda batch, batch_id: delivered.append((batch_id, [r.id for r in batch.select("id").collect()]))
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return delivered


def stream_tour(spark: Any, catalog: Catalog, home: Path) -> StreamTour:
    inbox, checkpoints = home / "inbox", home / "checkpoints"
    use_catalog(spark, catalog)
    try:
        table = catalog.create_table(TABLE, SCHEMA)

        def committed_since(version: int) -> tuple[tuple[int, int], ...]:
            return tuple((batch, c.version) for c in table.commits(version + 1) for batch in c.app_ids.values())

        for n in range(FILES):
            _write_file(inbox, n)
        _stream_in(spark, inbox, checkpoints / "in")
        batches_in = committed_since(0)
        out = _stream_out(spark, checkpoints / "out")
        files_before = len(table.snapshot().files)
        [compacted] = SparkTable(spark, table).compact("minor")
        files_after = len(table.snapshot().files)
        _write_file(inbox, FILES)
        _stream_in(spark, inbox, checkpoints / "in")
        restarted_in = committed_since(compacted.version)
        restarted_out = _stream_out(spark, checkpoints / "out")
    finally:
        use_catalog(spark, None)
    ids = sorted(i for _, batch in out + restarted_out for i in batch)
    return StreamTour(
        TABLE,
        batches_in,
        tuple((b, len(rows)) for b, rows in out),
        compacted.version,
        files_before,
        files_after,
        restarted_in,
        tuple((b, len(rows)) for b, rows in restarted_out),
        ids == list(range((FILES + 1) * ROWS_PER_FILE)),
    )


__all__ = ["StreamTour", "stream_tour"]
