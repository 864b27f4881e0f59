"""Statistics from a Parquet footer claim only what every row group proves (issue 24, item 6).

Read pruning and the row-level conflict check (conflict-rules §13.1 rule 4 with RLC) skip a file whose
statistics exclude a predicate, so statistics narrower than the file's values would lose rows from a
read and miss a conflict. Files are written here by pyarrow with small row groups; its writer, like
Spark's (parquet-mr), leaves min/max out of a row group whose values exceed 4 KiB.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables.core.expressions import Compare, IsNull, might_match
from acidtables.core.log.records import ColumnStats, DataFile
from acidtables.spark.files import footer_stats

LONG = "a" * 5000  # over the 4 KiB a writer keeps min/max for


def _footer(columns: dict[str, pa.Array], row_group_size: int = 2) -> pq.FileMetaData:
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out, row_group_size=row_group_size)
    return pq.ParquetFile(io.BytesIO(out.getvalue())).metadata


def _described(meta: pq.FileMetaData) -> DataFile:
    rows, stats = footer_stats(meta)
    return DataFile(path="data/f.parquet", partition={}, rows=rows, size_bytes=1, stats=stats)


def test_a_row_group_without_min_max_leaves_the_columns_range_unknown() -> None:
    # group 1 holds 'b', 'c' (min/max kept); group 2 holds LONG and 'd' (min/max left out)
    meta = _footer({"v": pa.array(["b", "c", LONG, "d"], pa.string())})
    assert not meta.row_group(1).column(0).statistics.has_min_max  # the premise
    file = _described(meta)
    assert file.stats["v"] == ColumnStats(None, None, 0)  # the null count is still known
    assert might_match(Compare("v", "=", "d"), file.bounds())  # the file holds 'd': never pruned
    assert not might_match(IsNull("v"), file.bounds())


def test_an_all_null_row_group_keeps_the_other_groups_range() -> None:
    # a group without min/max because it holds only NULLs says nothing against the others' range
    meta = _footer({"n": pa.array([1, 5, None, None], pa.int64())})
    file = _described(meta)
    assert file.stats["n"] == ColumnStats(1, 5, 2)
    assert not might_match(Compare("n", "=", 9), file.bounds())
    assert might_match(IsNull("n"), file.bounds())


def test_a_column_of_nulls_only_matches_no_comparison() -> None:
    file = _described(_footer({"n": pa.nulls(3, pa.int64())}))
    assert file.stats["n"] == ColumnStats(None, None, 3)
    assert not might_match(Compare("n", "=", 1), file.bounds())
    assert might_match(IsNull("n"), file.bounds())


def test_a_file_written_without_statistics_has_none() -> None:
    out = io.BytesIO()
    pq.write_table(pa.table({"n": pa.array([1, 2], pa.int64())}), out, write_statistics=False)
    file = _described(pq.ParquetFile(io.BytesIO(out.getvalue())).metadata)
    assert file.stats == {} and might_match(Compare("n", "=", 99), file.bounds())
