"""The SQL part of the Spark demo: each statement next to the SparkTable call it maps onto, run on twin
tables, with what each commit recorded and whether the two tables agree afterwards."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acidtables.core import Catalog, CommitInfo
from acidtables.spark import SparkTable, sql

from ..output import table
from .scenarios import SCHEMA

Call = Callable[[SparkTable], object]


def _frame(t: SparkTable, rows: list[tuple[int, str, str]]) -> Any:
    return t.spark.createDataFrame(rows, SCHEMA)


#: (statement with {t} for the table, the API call that does the same, how docs/sql.md spells that call)
STEPS: tuple[tuple[str, Call, str], ...] = (
    (
        "INSERT INTO {t} VALUES (1, 'new', 'a'), (2, 'new', 'b')",
        lambda t: t.insert_into(_frame(t, [(1, "new", "a"), (2, "new", "b")])),
        "insert_into(df)",
    ),
    (
        "UPDATE {t} SET v = 'updated' WHERE dt = 'a'",
        lambda t: t.update("dt = 'a'", {"v": "'updated'"}),
        "update(\"dt = 'a'\", {'v': \"'updated'\"})",
    ),
    (
        "MERGE INTO {t} o USING (SELECT 2 AS id, 'merged' AS v, 'b' AS dt UNION ALL SELECT 3, 'merged', 'b') u "
        "ON o.id = u.id AND o.dt = u.dt WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        lambda t: (
            t.merge(
                t.spark.sql("SELECT 2 AS id, 'merged' AS v, 'b' AS dt UNION ALL SELECT 3, 'merged', 'b'"),
                "t.id = s.id AND t.dt = s.dt",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        ),
        "merge(df, on).when_matched_update_all().when_not_matched_insert_all()",
    ),
    ("DELETE FROM {t} WHERE id = 1", lambda t: t.delete("id = 1"), 'delete("id = 1")'),
    (
        "INSERT OVERWRITE {t} PARTITION (dt = 'a') VALUES (4, 'overwritten')",
        lambda t: t.insert_overwrite(_frame(t, [(4, "overwritten", "a")]), partition={"dt": "a"}),
        "insert_overwrite(df, partition={'dt': 'a'})",
    ),
    ("ALTER TABLE {t} COMPACT MINOR", lambda t: t.compact("minor"), 'compact("minor")'),
    (
        "MERGE INTO {t} o USING (SELECT 3 AS id, 'gone' AS v, 'b' AS dt UNION ALL SELECT 5, 'new', 'b') u "
        "ON o.id = u.id AND o.dt = u.dt WHEN MATCHED AND u.v = 'gone' THEN DELETE WHEN MATCHED THEN UPDATE SET * "
        "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE AND o.dt = 'b' THEN UPDATE SET v = 'stale'",
        lambda t: (
            t.merge(
                t.spark.sql("SELECT 3 AS id, 'gone' AS v, 'b' AS dt UNION ALL SELECT 5, 'new', 'b'"),
                "t.id = s.id AND t.dt = s.dt",
            )
            .when_matched_delete("s.v = 'gone'")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_update({"v": "'stale'"}, "t.dt = 'b'")
            .execute()
        ),
        "merge(...).when_matched_delete(c).when_matched_update_all()...when_not_matched_by_source_update(...)",
    ),
    ("RESTORE TABLE {t} TO VERSION AS OF 1", lambda t: t.restore(version=1), "restore(version=1)"),
)


@dataclass(frozen=True)
class SqlStep:
    statement: str
    api_call: str
    operation: str
    version: int
    #: the SQL table and the API table hold the same rows and their last history entries say the same
    same_as_api: bool


@dataclass(frozen=True)
class SqlTour:
    table: str
    steps: tuple[SqlStep, ...]
    #: rows of `SELECT ... VERSION AS OF 1` (the first insert) and of the head (restored to version 1)
    rows_at_version_1: int
    rows_now: int

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "steps": [s.__dict__ for s in self.steps],
            "rows_at_version_1": self.rows_at_version_1,
            "rows_now": self.rows_now,
        }

    def to_text(self) -> str:
        rows = [(_short(s.statement.format(t=self.table), 64), _short(s.api_call, 48), s.operation, s.version,
                 s.same_as_api) for s in self.steps]  # fmt: skip
        agree = all(s.same_as_api for s in self.steps)
        return "\n".join(
            [
                f"SQL through acidtables.spark.sql on {self.table}, each statement beside its API call on a twin "
                f"table ({'same rows and history entry every time' if agree else 'they DIFFER'}):",
                "",
                table(("STATEMENT", "API CALL", "OPERATION", "VERSION", "SAME AS API"), rows),
                "",
                f"SELECT count(*) FROM {self.table} VERSION AS OF 1 -> {self.rows_at_version_1} rows; "
                f"now -> {self.rows_now}.",
            ]
        )


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _entry(t: SparkTable) -> tuple[str, int, int, bool]:
    [h] = t.table.history(1)
    return h.operation.display, h.rows_added, h.rows_removed, h.time_version is not None


def _rows(t: SparkTable) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in t.read().collect())


def sql_tour(spark: Any, catalog: Catalog) -> SqlTour:
    by_sql_name = "demo.sql_orders"
    sql(spark, f"CREATE TABLE {by_sql_name} (id BIGINT, v STRING, dt STRING) USING acidtables PARTITIONED BY (dt)",
        catalog=catalog)  # fmt: skip
    by_sql = SparkTable(spark, catalog.table(by_sql_name))
    by_api = SparkTable(spark, catalog.create_table("demo.api_orders", SCHEMA, partition_by=["dt"]))
    steps = []
    for statement, call, spelled in STEPS:
        result = sql(spark, statement.format(t=by_sql_name), catalog=catalog)
        call(by_api)
        info = result[-1] if isinstance(result, list) and result else result
        version = info.version if isinstance(info, CommitInfo) else by_sql.table.version
        same = _rows(by_sql) == _rows(by_api) and _entry(by_sql) == _entry(by_api)
        steps.append(SqlStep(statement, spelled, _entry(by_sql)[0], version, same))
    [(then,)] = sql(spark, f"SELECT count(*) FROM {by_sql_name} VERSION AS OF 1", catalog=catalog).collect()
    [(now,)] = sql(spark, f"SELECT count(*) FROM {by_sql_name}", catalog=catalog).collect()
    return SqlTour(by_sql_name, tuple(steps), int(then), int(now))
