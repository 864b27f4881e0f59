"""`acidtables read NAME`: a table's rows on stdout, read without Spark (`Table.scan`).

Formats: `table` (aligned columns, for a look at a few rows), `csv` (a header, then RFC 4180 rows; no
ARRAY, MAP or STRUCT columns), `json` (JSON Lines: one object per row, dates and times as ISO 8601,
decimals as strings so no digit is lost, NaN and infinities as the strings "NaN", "Infinity" and
"-Infinity", binary as base64) and `parquet` (one Parquet file, to a pipe or a file, never a terminal).
csv, json and parquet stream batch by batch, so a table larger than memory can be exported; `table` reads
the rows it shows first, to align them.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any, BinaryIO, TextIO, cast

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from acidtables.core import Catalog, TableScan

from .commands import open_table
from .output import UsageError, rfc3339, table

FORMATS = ("table", "csv", "json", "parquet")


def read(
    catalog: Catalog,
    name: str,
    *,
    version: int | None,
    timestamp: str | None,
    where: str | None,
    columns: str | None,
    limit: int | None,
    output_format: str,
    out: TextIO,
) -> None:
    """Write the rows of `name` as `output_format` to `out` (its binary buffer for parquet)."""
    chosen = [c.strip() for c in columns.split(",")] if columns is not None else None
    if chosen is not None and not all(chosen):
        raise UsageError(f"read: --columns {columns!r} has an empty name; give names separated by commas", "")
    scan = open_table(catalog, name, "read").scan(
        where=where, columns=chosen, version=version, timestamp=timestamp, limit=limit
    )
    if output_format == "parquet":
        _write_batches(scan, pq.ParquetWriter, _binary(out, terminal=False))
        return
    if output_format == "csv":
        nested = [f.name for f in scan.schema if pa.types.is_nested(f.type)]
        if nested:
            raise UsageError(
                f"read: --format csv cannot hold the nested column(s) {', '.join(nested)} (ARRAY, MAP, STRUCT); "
                "use --format json or parquet, or --columns without them",
                "",
            )
        _write_batches(scan, pacsv.CSVWriter, _binary(out, terminal=True))
        return
    if output_format == "json":
        for row in _rows(scan.to_batches()):
            out.write(json.dumps({k: _json_value(v) for k, v in row.items()}, ensure_ascii=False) + "\n")
        out.flush()
        return
    data = scan.to_arrow()
    out.write(table(data.column_names, [list(r.values()) for r in data.to_pylist()]) + "\n")
    count = data.num_rows
    out.write(f"({count} row{'s' if count != 1 else ''}, version {scan.version})\n")
    out.flush()


def _write_batches(scan: TableScan, writer_class: Any, binary: BinaryIO) -> None:
    """Stream the rows batch by batch through pyarrow's Parquet or CSV writer."""
    with writer_class(binary, scan.schema) as writer:
        for batch in scan.to_batches():
            writer.write_batch(batch)
    binary.flush()


def _rows(reader: pa.RecordBatchReader) -> Iterator[dict[str, Any]]:
    for batch in reader:
        yield from batch.to_pylist()


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return rfc3339(value) if value.tzinfo is not None else value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")  # JSON has no NaN: Spark's to_json spelling
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, tuple):  # a MAP's entries, as pyarrow hands them: (key, value) pairs
        return [_json_value(v) for v in value]
    return value


def _binary(out: TextIO, *, terminal: bool) -> BinaryIO:
    """stdout's bytes; refused on a terminal unless the output is text (Parquet would garble it)."""
    if not terminal and out.isatty():
        raise UsageError("read: --format parquet goes to a file or a pipe, not a terminal (add `> rows.parquet`)", "")
    out.flush()
    buffer: Any = getattr(out, "buffer", out)
    return cast(BinaryIO, buffer)


__all__ = ["FORMATS", "read"]
