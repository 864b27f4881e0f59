"""`acidtables demo`: the main job, live. Local Spark and an embedded etcd, nothing to set up.

For each conflict policy it creates a table, runs the Spark pairs of overlapping jobs (E prepares, L
prepares, E commits, L commits; each job is a real Spark write of staged Parquet files), and reports who
won. Then it compacts the small files the way the operator's automatic compaction would, travels back in
time by version and by timestamp, reads the changes incrementally, runs SQL statements beside the
API calls they map onto, streams into and out of a table, and ends with DuckDB querying a table the demo
wrote, without Spark (`Table.scan(...).to_duckdb(...)`). Everything runs in a temporary
directory that is removed at the end, and Spark and etcd are stopped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from acidtables.core import Catalog, Operation
from acidtables.spark import Prepared, SparkTable, local_session, stop_session

from .duckdb_read import duckdb_read
from .scenarios import INITIAL_LOAD, POLICIES, SCHEMA, SPARK_SCENARIOS, TIME_TRAVEL_POLICY, Job, PolicySpec, Scenario
from .sql import sql_tour
from .streams import stream_tour
from .views import Compaction, DemoResult, ScenarioResult, commit_in_order, time_travel

INTERLEAVING = "Each pair overlaps: E and L both run their Spark job (staged, not visible), E commits, then L."

#: automatic compaction starts when a partition holds at least this many small files (operator default)
SMALL_FILES_THRESHOLD = 4


def _rows(spark: Any, dt: str, count: int, value: str, start: int) -> Any:
    return spark.createDataFrame([(start + i, value, dt) for i in range(count)], SCHEMA)


def _job(spark: Any, target: SparkTable, job: Job, ids: Callable[[], int]) -> Prepared:
    dt = job.partition
    op = job.operation
    result: object
    if op is Operation.INSERT_INTO:
        result = target.insert_into(_rows(spark, dt, 2, "inserted", ids()), commit=False)
    elif op is Operation.INSERT_OVERWRITE:
        result = target.insert_overwrite(_rows(spark, dt, 2, "overwritten", ids()), partition={"dt": dt}, commit=False)
    elif op is Operation.UPDATE:
        result = target.update(f"dt = '{dt}'", {"v": "'updated'"}, commit=False)
    elif op is Operation.DELETE:
        result = target.delete(f"dt = '{dt}' AND id % 2 = 0", commit=False)
    elif op is Operation.MINOR_COMPACT:
        result = target.compact("minor", where=f"dt = '{dt}'", target_file_bytes=1 << 20, commit=False)
    else:
        raise NotImplementedError(op.display)
    if not isinstance(result, Prepared):  # commit=False always returns the prepared operation
        raise TypeError(f"{op.display} committed although commit=False")
    return result


def run_scenario(
    spark: Any, target: SparkTable, spec: PolicySpec, scenario: Scenario, ids: Callable[[], int]
) -> ScenarioResult:
    earlier = _job(spark, target, scenario.earlier, ids)
    later = _job(spark, target, scenario.later, ids)
    return commit_in_order(spec, scenario, earlier, later)


def _create(catalog: Catalog, spark: Any, spec: PolicySpec, ids: Iterator[int], name: str | None = None) -> SparkTable:
    created = catalog.create_table(
        name or spec.table_name,
        SCHEMA,
        partition_by=["dt"],
        primary_key=["id"] if spec.primary_key else (),
        conflict_policy=spec.policy,
        isolation_level=spec.isolation_level,
    )
    target = SparkTable(spark, created)
    for partition, files, rows_per_file in INITIAL_LOAD:  # one small file per insert
        for _ in range(files):
            target.insert_into(_rows(spark, partition, rows_per_file, "v0", next(ids)))
    return target


def run_spark_demo(
    policies: Sequence[PolicySpec] = POLICIES, scenarios: Sequence[Scenario] = SPARK_SCENARIOS
) -> DemoResult:
    started = time.monotonic()
    ids = iter(range(0, 10_000_000, 10))
    spark = local_session("acidtables-demo")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with tempfile.TemporaryDirectory(prefix="acidtables-demo-") as home, Catalog.local(home) as catalog:
            results = []
            for spec in policies:
                target = _create(catalog, spark, spec, ids)
                for scenario in scenarios:
                    results.append(run_scenario(spark, target, spec, scenario, lambda: next(ids)))
            travel_table = _create(catalog, spark, TIME_TRAVEL_POLICY, ids, name="demo.events")
            since = travel_table.table.version
            compaction = _trickle_and_compact(spark, travel_table, ids)
            travel = time_travel(travel_table.table, since)
            tour = sql_tour(spark, catalog)
            streams = stream_tour(spark, catalog, Path(home))
            duckdb = duckdb_read(catalog, travel_table.name)
    finally:
        stop_session(spark)
    seconds = time.monotonic() - started
    return DemoResult(INTERLEAVING, tuple(results), travel, compaction, seconds, tour, streams, duckdb)


def _trickle_and_compact(spark: Any, target: SparkTable, ids: Iterator[int]) -> Compaction:
    """A few one-row appends and a delete, then the small files compacted when there are enough of them."""
    for _ in range(3):
        target.insert_into(_rows(spark, "c", 1, "trickle", next(ids)))
    target.delete("dt = 'a' AND id % 2 = 0")
    snapshot = target.table.snapshot()
    small = [f for f in snapshot.files if f.size_bytes < (96 << 20)]
    rows_before = sorted(map(tuple, target.read().collect()))
    infos = target.compact("minor", target_file_bytes=128 << 20) if len(small) >= SMALL_FILES_THRESHOLD else []
    after = target.table.snapshot()
    return Compaction(
        target.name,
        SMALL_FILES_THRESHOLD,
        len(small),
        len(snapshot.files),
        len(after.files),
        len(infos) if isinstance(infos, list) else 0,
        sorted(map(tuple, target.read().collect())) == rows_before,
    )
