"""The demos' last step: DuckDB queries a table the demo wrote, through `Table.scan(...).to_duckdb(...)`
(no Spark, no JVM: the scan hands DuckDB the table's files as an Arrow dataset). DuckDB is an optional
extra; where it is not installed the step says how to get it instead of failing the demo."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from acidtables.core import Catalog

from ..output import table

#: the name the scan is registered under in DuckDB
VIEW = "events"
QUERY = (
    f"SELECT dt, count(*) AS row_count, count(DISTINCT v) AS distinct_v, min(id) AS min_id, max(id) AS max_id "
    f"FROM {VIEW} GROUP BY dt ORDER BY dt"
)
INSTALL = "pip install 'acidtables[duckdb]' (make demo installs it)"


@dataclass(frozen=True)
class DuckDBRead:
    table: str
    version: int
    query: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    #: how to get DuckDB, when it is not installed (and nothing was queried)
    missing: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "query": self.query,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "missing": self.missing,
        }

    def to_text(self) -> str:
        source = f"{self.table}.scan(version={self.version}).to_duckdb(connection, {VIEW!r})"
        if self.missing is not None:
            return f"DuckDB is not installed, so the last step (DuckDB querying {source}) is skipped: {self.missing}."
        heading = f"DuckDB querying {self.table} through {source}, no Spark:"
        return "\n".join([heading, f"  {self.query}", table(self.columns, self.rows)])


def duckdb_read(catalog: Catalog, name: str) -> DuckDBRead:
    """Register the newest version of `name` in a new DuckDB connection and run QUERY on it."""
    scan = catalog.table(name).scan()
    try:
        duckdb = importlib.import_module("duckdb")
    except ModuleNotFoundError:
        return DuckDBRead(name, scan.version, QUERY, (), (), missing=INSTALL)
    connection = duckdb.connect()
    try:
        scan.to_duckdb(connection, VIEW)
        relation = connection.sql(QUERY)
        columns = tuple(relation.columns)
        rows = tuple(tuple(row) for row in relation.fetchall())
    finally:
        connection.close()
    return DuckDBRead(name, scan.version, QUERY, columns, rows)


__all__ = ["DuckDBRead", "duckdb_read"]
