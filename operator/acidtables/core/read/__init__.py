"""Rows without Spark: a table's data files read into Arrow exactly as a Spark read of the same version
returns them (`scan.TableScan`), for pandas, Polars, DuckDB and any engine that takes Arrow."""

from acidtables.core.read.arrow_schema import TIMESTAMP_ZONE, arrow_type, read_schema
from acidtables.core.read.data_files import named_as, partition_scalar, partition_text, read_file
from acidtables.core.read.merge import merge_on_read, newest_per_key
from acidtables.core.read.row_filter import row_filter
from acidtables.core.read.scan import TableScan

__all__ = [
    "TIMESTAMP_ZONE",
    "TableScan",
    "arrow_type",
    "merge_on_read",
    "named_as",
    "newest_per_key",
    "partition_scalar",
    "partition_text",
    "read_file",
    "read_schema",
    "row_filter",
]
