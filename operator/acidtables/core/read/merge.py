"""Merge-on-read of a primary-key table's partition, on Arrow tables.

Per key the newest row wins and a tombstone hides its key: newest sequence (a row's own `_acid_seq`, kept
by compactions, or else the version that added its file), then the greater file path, then the later
row. Spark's reader (`acidtables.spark.scan.newest_per_key`) orders by the same three, so both readers
pick the same row even where a data source's tasks each wrote one for a key in one version.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy
import pyarrow as pa
import pyarrow.compute as pc

from acidtables.core.read.data_files import FILE, ROW, VERSION
from acidtables.core.schema.file_schema import DELETE, OP_COLUMN, SEQ_COLUMN

_ORDER, _POSITION = "_acid_order", "_acid_position"


def newest_per_key(data: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """Per key, the newest row, tombstones included (`data`: one table partition, with the helper
    columns of `data_files.read_file(helpers=True)`)."""
    if data.num_rows == 0:
        return data
    order = pc.coalesce(data[SEQ_COLUMN], data[VERSION])
    ordered = data.append_column(_ORDER, order).sort_by(
        [
            *[(k, "ascending") for k in primary_key],
            (_ORDER, "descending"),
            (FILE, "descending"),
            (ROW, "descending"),
        ]
    )
    ordered = ordered.append_column(_POSITION, pa.array(numpy.arange(ordered.num_rows, dtype=numpy.int64)))
    # the first row of each key's run: one hash aggregation instead of a Python loop over the keys
    firsts = ordered.group_by(list(primary_key), use_threads=False).aggregate([(_POSITION, "min")])
    newest = ordered.take(firsts[f"{_POSITION}_min"])
    return newest.drop_columns([_ORDER, _POSITION])


def merge_on_read(data: pa.Table, primary_key: Sequence[str]) -> pa.Table:
    """What a reader sees of one partition: the newest row per key, tombstones dropped."""
    newest = newest_per_key(data, primary_key)
    return newest.filter(pc.not_equal(newest[OP_COLUMN], DELETE))


__all__ = ["merge_on_read", "newest_per_key"]
