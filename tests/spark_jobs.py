"""Spark jobs for interleaving tests: each operation prepared through SparkTable with commit=False,
run as E prepares, L prepares, E commits, L commits, with the invariants checked after every pair.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession
from tests.jobs import assert_invariants

from acidtables import Catalog
from acidtables.errors import ConcurrentModificationException
from acidtables.spark import Prepared, SparkTable

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE"
_n = itertools.count()
Job = Callable[[SparkTable], Prepared]


def staged(result: object) -> Prepared:
    """What an operation called with commit=False returned: its Prepared (checked, for the type checker)."""
    assert isinstance(result, Prepared), f"expected a Prepared operation, got {result!r}"
    return result


def next_name() -> str:
    """A fresh table name; tests share one catalog prefix per test, so names only need to differ."""
    return f"jobs.t{next(_n)}"


def rows(t: SparkTable) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in t.read().select("id", "dt", "amount").collect())


def make(spark: SparkSession, catalog: Catalog, unpartitioned: bool = False, **kw: Any) -> SparkTable:
    table = catalog.create_table(next_name(), schema=SCHEMA, partition_by=[] if unpartitioned else ["dt"], **kw)
    t = SparkTable(spark, table)
    for start in (0, 10):  # two files in each partition
        t.insert_into(spark.createDataFrame([(start + i, "a" if i % 2 else "b", float(i)) for i in range(4)], SCHEMA))
    return t


def ins(rows_: list[tuple[int, str, float]]) -> Job:
    return lambda t: t.insert_into(t.spark.createDataFrame(rows_, SCHEMA), commit=False)


def overwrite(dt: str, rows_: list[tuple[int, float]]) -> Job:
    return lambda t: t.insert_overwrite(
        t.spark.createDataFrame(rows_, "id BIGINT, amount DOUBLE"), partition={"dt": dt}, commit=False
    )


def upd(where: str, value: str = "amount + 100") -> Job:
    return lambda t: t.update(where, {"amount": value}, commit=False)


def dele(where: str) -> Job:
    return lambda t: t.delete(where, commit=False)


def comp(kind: str, dt: str | None = None) -> Job:
    where = f"dt = '{dt}'" if dt else None
    return lambda t: t.compact(kind, where=where, target_file_bytes=1 << 20, commit=False)


def run(t: SparkTable, earlier: Job, later: Job) -> tuple[ConcurrentModificationException | None, int]:
    """E prepares, L prepares, E commits, L commits; then G1, G2, G4 and G5 hold, and a losing L left
    nothing staged."""
    e, lj = earlier(t), later(t)
    won = e.commit()
    try:
        info = lj.commit()
    except ConcurrentModificationException as exc:
        assert exc.winning_version == won.version
        storage = t.table.storage
        assert not storage.exists(storage.staging_dir(lj.transaction.txn_id)), "the loser left staged files"
        assert_invariants(t.table)
        return exc, won.version
    if info.skipped:  # it changed nothing, at Serializable: no version (Delta's skipRecordingEmptyCommits)
        assert info.version == lj.read_version and t.table.version == won.version
    else:
        assert (info.version, info.retries) == (won.version + 1, 1)
    assert_invariants(t.table)
    return None, won.version


def expect(
    t: SparkTable,
    earlier: Job,
    later: Job,
    error: type[Exception] | None,
    check: Callable[[list[tuple[Any, ...]]], bool],
) -> None:
    exc, _ = run(t, earlier, later)
    if error is None:
        assert exc is None, f"later failed: {exc}"
    else:
        assert type(exc) is error, f"expected {error.__name__}, got {exc!r}"
    seen = rows(t)
    assert check(seen), f"a reader sees {seen}"
