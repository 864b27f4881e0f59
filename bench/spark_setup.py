"""What the Spark benchmarks share (bench/spark.py and bench/sql.py): the sizes of a run, the one
generated data set (`frame`), the `Bench` every benchmark gets (etcd, catalog, Spark, report), the
session, and the timer. One module both import, so neither imports the other."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from acidtables import Catalog
from acidtables.spark import SparkTable, local_session, stop_session

from .core import Env
from .report import Report

T = TypeVar("T")

SCHEMA = "id BIGINT, dt STRING, amount DOUBLE, note STRING"
#: the partitions the generated rows are spread over
DATES = tuple(f"2026-11-{day:02d}" for day in range(1, 9))
#: partitions of the cached data set: one Spark task per core, as a job on this machine would run
PARTITIONS = 2


@dataclass(frozen=True)
class Sizes:
    #: rows of the data set every benchmark but retry uses
    rows: int
    #: interleaved rounds of update (medians reported)
    rounds: int
    #: interleaved rounds of insert: a 1-second figure on a shared 2-core machine needs more than 3 for
    #: a stable median (3 rounds gave 0.87 x in one run and 1.32 x in the next, same code)
    insert_rounds: int
    #: small inserts the small_files tables are built from
    small_inserts: int
    #: rows per small insert, one pair of tables (plain, primary key) each; the first is rows /
    #: small_inserts, so that those tables hold the same rows as the others
    small_insert_rows: tuple[int, ...]
    #: timed reads of each kind, before and after compaction
    read_repeats: int
    #: rows of each of the two overlapping jobs in retry
    retry_rows: int
    retry_rounds: int


FULL = Sizes(
    rows=2_000_000,
    rounds=3,
    insert_rounds=7,
    small_inserts=500,
    small_insert_rows=(4_000, 200),
    read_repeats=3,
    retry_rows=200_000,
    retry_rounds=3,
)
QUICK = Sizes(
    rows=200_000,
    rounds=2,
    insert_rounds=3,
    small_inserts=100,
    small_insert_rows=(2_000, 200),
    read_repeats=3,
    retry_rows=50_000,
    retry_rounds=2,
)


@dataclass(frozen=True)
class Bench:
    """What every benchmark needs: etcd and the warehouse, a catalog, Spark, sizes and the report."""

    env: Env
    catalog: Catalog
    session: SparkSession
    sizes: Sizes
    report: Report

    def table(self, name: str, **options: Any) -> SparkTable:
        """A new table; names carry a short random suffix so that nothing is shared between benchmarks."""
        created = self.catalog.create_table(
            f"bench.{name}_{uuid.uuid4().hex[:6]}", schema=SCHEMA, partition_by=["dt"], **options
        )
        return SparkTable(self.session, created)

    def scratch(self, name: str) -> str:
        """A directory for plain Parquet output, outside any table."""
        return str(self.env.root / "plain" / f"{name}-{uuid.uuid4().hex[:6]}")


@contextmanager
def spark_session(conf: dict[str, str] | None = None) -> Iterator[SparkSession]:
    """The local session the library documents for small machines, with `conf`; stopped whatever
    happens."""
    session = local_session("acidtables-bench", conf=conf)
    try:
        yield session
    finally:
        stop_session(session)


def frame(session: SparkSession, rows: int, *, block: int, start: int = 0, partitions: int = PARTITIONS) -> DataFrame:
    """`rows` generated rows: ids from `start`, and `dt` constant over each run of `block` ids, so that
    a small insert of `block` rows lands in one partition, as an insert of recent events does."""
    ids = F.col("id")
    dates = F.array(*[F.lit(d) for d in DATES])
    return session.range(start, start + rows, 1, partitions).select(
        ids,
        F.element_at(dates, (F.floor(ids / block) % len(DATES) + 1).cast("int")).alias("dt"),
        ((ids * 7919) % 100_000 / 100.0).alias("amount"),
        F.concat(F.lit("order "), ids.cast("string"), F.lit(" customer "), (ids % 9973).cast("string")).alias("note"),
    )


def cached(df: DataFrame) -> DataFrame:
    """Generate once, before any timing: cache and count."""
    df = df.cache()
    df.count()
    return df


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result
