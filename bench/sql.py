"""The SQL entry point's cost (`python -m bench spark --only sql`): what acidtables.spark.sql adds to
the API call a statement maps onto.

- parse: sqlglot's parse of each statement kind acidtables runs (the extended Spark dialect), alone, in
  microseconds: the per-statement price of a real parser in Python.
- statement vs API: the same UPDATE (1 % of the rows) and the same filtered read, through `sql()` and
  through SparkTable, interleaved rounds on twin tables. The difference is the parse, the catalog
  lookups, pinning the snapshot and Spark analysing the rewritten statement. No goal: the figure says
  what it costs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial

from pyspark.sql import DataFrame

from acidtables.spark import sql
from acidtables.spark.statements.dialect import parse_statement

from .report import Figure
from .spark_setup import Bench, frame, timed

#: one statement of each kind; {t} is a table name
STATEMENTS = {
    "SELECT ... VERSION AS OF": "SELECT dt, sum(amount) FROM {t} VERSION AS OF 3 WHERE id > 10 GROUP BY dt",
    "INSERT INTO ... SELECT": "INSERT INTO {t} PARTITION (dt = '2026-11-01') SELECT id, amount, note FROM src",
    "UPDATE": "UPDATE {t} SET amount = amount + 1 WHERE id % 100 = 0",
    "DELETE": "DELETE FROM {t} WHERE dt = '2026-11-02' AND amount < 0",
    "MERGE": "MERGE INTO {t} o USING src s ON o.id = s.id AND o.dt = s.dt WHEN MATCHED AND s.gone THEN DELETE "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
    "ALTER TABLE ... COMPACT": "ALTER TABLE {t} PARTITION (dt = '2026-11-01') COMPACT MAJOR",
    "OPTIMIZE ... ZORDER BY": "OPTIMIZE {t} WHERE dt = '2026-11-01' ZORDER BY (id, amount)",
    "CREATE TABLE": "CREATE TABLE {t} (id BIGINT NOT NULL, dt STRING, amount DOUBLE, PRIMARY KEY (id)) "
    "USING acidtables PARTITIONED BY (dt)",
}
PARSES = 300
ROWS = 100_000
ROUNDS = 5


def _median_us(statement: str) -> float:
    return statistics.median(timed(partial(parse_statement, statement))[0] * 1e6 for _ in range(PARSES))


def bench_sql(bench: Bench) -> None:
    parse = {kind: _median_us(text.format(t="bench.orders")) for kind, text in STATEMENTS.items()}
    slowest = max(parse, key=lambda k: parse[k])
    bench.report.add(
        Figure(
            "sql",
            f"parse one statement (median of {len(parse)} kinds x {PARSES})",
            statistics.median(parse.values()),
            "us",
            note=f"slowest {slowest} {parse[slowest]:.0f} us, fastest {min(parse.values()):.0f} us",
        )
    )
    data: DataFrame = frame(bench.session, ROWS, block=ROWS // 8).cache()
    data.count()
    try:
        by_sql, by_api = bench.table("sql_statement"), bench.table("sql_api")
        for t in (by_sql, by_api):
            t.insert_into(data)
        timings: dict[str, list[float]] = {"update sql": [], "update api": [], "read sql": [], "read api": []}
        catalog = bench.catalog
        for round_ in range(ROUNDS):
            steps: list[tuple[str, Callable[[], object]]] = [
                ("update sql", partial(sql, bench.session, f"UPDATE {by_sql.name} SET amount = amount + 1 "
                                       "WHERE id % 100 = 0", catalog=catalog)),
                ("update api", partial(by_api.update, "id % 100 = 0", {"amount": "amount + 1"})),
                ("read sql", lambda: sql(bench.session, f"SELECT * FROM {by_sql.name} WHERE dt = '2026-11-03'",
                                         catalog=catalog).collect()),
                ("read api", lambda: by_api.read(where="dt = '2026-11-03'").collect()),
            ]  # fmt: skip
            for label, step in steps[round_ % 2 :] + steps[: round_ % 2]:
                timings[label].append(timed(step)[0])
        for what in ("update", "read"):
            through_sql, through_api = timings[f"{what} sql"], timings[f"{what} api"]
            bench.report.add(
                Figure(
                    "sql",
                    f"{what} through sql() ({ROWS:,} rows)",
                    statistics.median(through_sql),
                    "s",
                    baseline=f"the same {what} through SparkTable",
                    ratio=statistics.median([s / a for s, a in zip(through_sql, through_api, strict=True)]),
                    note=f"median of {ROUNDS}; API {statistics.median(through_api):.3f} s",
                )
            )
        bench.report.details["sql"] = {"parse_us": parse, "seconds": timings, "rows": ROWS}
    finally:
        data.unpersist()
