"""The Spark benchmark: what acidtables costs around Spark's own Parquet work, against baselines run
in the same session on the same data.

`python -m bench spark [--quick]` (and `python -m bench`, after core) calls `run()`. One embedded etcd
and one local Spark session (`local_session`, local[2]) serve the whole run; both are stopped at the
end whatever happens. Every table is filled from one generated data set (`frame`), cached and counted
before anything is timed, so Spark's generation is never part of a figure:

- insert: `SparkTable.insert_into` of the rows into a fresh table against plain
  `df.write.partitionBy("dt").parquet(...)`, interleaved rounds. Goal: library <= 1.15 x plain.
- update: `update("id % 100 = 0", {"amount": "amount + 1"})` (1 % of the rows) on a primary-key table
  (merge-on-read) against the same on a copy-on-write table (no key, no deletion vectors), and, for
  comparison, on a table with deletion vectors. No goal.
- small_files: 500 small inserts (500 commits: of 4,000 rows, which is the same data set, and of 200),
  then full reads before and after `compact("major")`, on a plain and on a primary-key table, and
  Spark alone on the same files. Goal: the read after >= 5 x faster.
- sql: acidtables.spark.sql's parse per statement, and an UPDATE and a read through sql() against the same
  through SparkTable (bench/sql.py). No goal.
- retry: two overlapping blind appends of a realistic job; the loser's commit rebases at metadata
  level (retries == 1) instead of re-running the job. Goal: that commit < 5 % of the job's write time.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from acidtables import Catalog, Table
from acidtables.core import HIVE_NULL
from acidtables.core.log.records import CommitInfo, DataFile, FileKind
from acidtables.spark import Prepared, SparkTable
from acidtables.spark.files import footer, without_file_scheme
from acidtables.spark.schema import OP_COLUMN, SEQ_COLUMN, UPSERT, conform, file_struct, typed_partition_value

from .core import bench_env, log
from .report import Figure, Goal, Report, machine_info, now_iso
from .spark_setup import FULL, QUICK, Bench, cached, frame, spark_session, timed
from .sql import bench_sql

BENCHMARKS = ("insert", "update", "small_files", "retry", "sql")
INSERT_GOAL = Goal("library <= 1.15 x plain parquet", 1.15, at_least=False)
COMPACT_GOAL = Goal("after major >= 5 x faster", 5.0, at_least=True)
RETRY_GOAL = Goal("< 5 % of the job's write time", 0.05, at_least=False)

UPDATE_CONDITION = "id % 100 = 0"
UPDATE_ASSIGNMENTS = {"amount": "amount + 1"}
#: what the small-file tables are compacted to: every partition becomes one file
COMPACT_TARGET_BYTES = 128 << 20


def _prepared(result: object) -> Prepared:
    """What an operation called with commit=False returns (this narrows the type for the checker)."""
    if not isinstance(result, Prepared):
        raise TypeError(f"expected a Prepared operation from commit=False, found {type(result).__name__}")
    return result


def _insert(t: SparkTable, df: DataFrame) -> CommitInfo:
    info = t.insert_into(df)
    if not isinstance(info, CommitInfo):
        raise TypeError(f"expected the CommitInfo of insert_into, found {type(info).__name__}")
    return info


def _prepare_insert(t: SparkTable, df: DataFrame) -> Prepared:
    return _prepared(t.insert_into(df, commit=False))


def _compact_major(t: SparkTable) -> list[CommitInfo]:
    """Every partition into files of up to COMPACT_TARGET_BYTES (here: one each); one commit per group."""
    done = t.compact("major", target_file_bytes=COMPACT_TARGET_BYTES)
    if not isinstance(done, list):
        raise TypeError(f"expected the commits of compact(), found {type(done).__name__}")
    return done


def _write_plain(df: DataFrame, path: str) -> None:
    """The baseline: Spark's own partitioned Parquet write, nothing around it."""
    df.write.mode("overwrite").partitionBy("dt").parquet(path)


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else 0.0


def _range_note(seconds: Sequence[float]) -> str:
    return f"median of {len(seconds)}: {min(seconds):.2f}-{max(seconds):.2f} s"


# --- warm-up ------------------------------------------------------------------------------------------


def warm_up(bench: Bench) -> None:
    """Run every code path once on a few rows: the JVM compiles as it goes, and the first Spark job of a
    session (and the first Python worker) costs seconds that belong to no benchmark."""
    t0 = time.perf_counter()
    df = cached(frame(bench.session, 20_000, block=1_000))
    try:
        df.write.mode("overwrite").partitionBy("dt").parquet(bench.scratch("warm-up"))
        for options in ({}, {"primary_key": ["id"]}, {"row_level_concurrency": True}):
            t = bench.table("warm_up", **options)
            t.insert_into(df)
            t.insert_into(df.withColumn("id", F.col("id") + 20_000))
            t.update(UPDATE_CONDITION, UPDATE_ASSIGNMENTS)
            t.read().count()
            t.compact("major", target_file_bytes=COMPACT_TARGET_BYTES)
            _read_all_columns(t.read())
    finally:
        df.unpersist()
    log(f"spark: warm-up done in {time.perf_counter() - t0:.0f} s")


# --- insert: insert_into against plain df.write.parquet ------------------------------------------------


def bench_insert(bench: Bench, data: DataFrame) -> None:
    rounds = bench.sizes.insert_rounds
    plain: list[float] = []
    library: list[float] = []
    files: list[int] = []
    # The first full-size write of a session is the slowest (1.5-2.9 s against 0.9-1.9 s after, in
    # runs without this), which would favour whichever side goes second in round 1: one untimed write.
    _write_plain(data, bench.scratch("insert-warm-up"))
    for round_ in range(rounds):
        target = bench.scratch(f"insert-{round_}")
        t = bench.table(f"insert_{round_}")  # a fresh table each round: 0 files before
        steps: list[tuple[list[float], Callable[[], Any]]] = [
            (plain, partial(_write_plain, data, target)),
            (library, partial(_insert, t, data)),
        ]
        # alternate which goes first, so a trend in the machine's load does not favour one side
        for samples, step in steps if round_ % 2 == 0 else steps[::-1]:
            seconds, result = timed(step)
            samples.append(seconds)
            if result is not None:
                files.append(result.files_added)
        log(
            f"insert round {round_ + 1}/{rounds}: plain parquet {plain[-1]:.2f} s, insert_into {library[-1]:.2f} s "
            f"({library[-1] / plain[-1]:.2f}x), {files[-1]} files"
        )
    ratios = [lib / base for lib, base in zip(library, plain, strict=True)]
    rows = bench.sizes.rows
    bench.report.add(
        Figure(
            "insert",
            f"plain df.write.partitionBy('dt').parquet, {rows:,} rows",
            median(plain),
            "s",
            note=_range_note(plain),
        )
    )
    bench.report.add(
        Figure(
            "insert",
            f"SparkTable.insert_into, {rows:,} rows, fresh table",
            median(library),
            "s",
            baseline="plain parquet",
            ratio=median(ratios),
            goal=INSERT_GOAL,
            note=f"ratio: median of per-round ratios ({min(ratios):.2f}-{max(ratios):.2f}); {files[0]} files",
        )
    )
    bench.report.details["insert"] = {
        "rows": rows,
        "plain_seconds": plain,
        "insert_into_seconds": library,
        "ratios": ratios,
        "files_written": files,
    }


# --- update: 1 % of the rows, three shapes -------------------------------------------------------------

#: (label, table options): the shapes modify.py picks from the table's settings
UPDATE_SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("merge-on-read (primary key)", {"primary_key": ["id"]}),
    ("copy-on-write (no key, no deletion vectors)", {"row_level_concurrency": False}),
    ("deletion vectors (row_level_concurrency)", {"row_level_concurrency": True}),
)


def bench_update(bench: Bench, data: DataFrame) -> None:
    rounds = bench.sizes.rounds
    loads: dict[str, list[float]] = {label: [] for label, _ in UPDATE_SHAPES}
    updates: dict[str, list[float]] = {label: [] for label, _ in UPDATE_SHAPES}
    summaries: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in UPDATE_SHAPES}
    for round_ in range(rounds):
        # rotate the order: over three rounds each shape runs first, second and third once
        order = UPDATE_SHAPES[round_ % len(UPDATE_SHAPES) :] + UPDATE_SHAPES[: round_ % len(UPDATE_SHAPES)]
        for label, options in order:
            t = bench.table(f"update_{round_}", **options)
            load_seconds, _ = timed(partial(_insert, t, data))
            loads[label].append(load_seconds)

            def update(t: SparkTable = t) -> tuple[Prepared, CommitInfo]:
                prepared = _prepared(t.update(UPDATE_CONDITION, UPDATE_ASSIGNMENTS, commit=False))
                return prepared, prepared.commit()

            seconds, (prepared, info) = timed(update)
            updates[label].append(seconds)
            summaries[label].append(
                {**prepared.summary, "files_added": info.files_added, "files_removed": info.files_removed}
            )
            log(
                f"update round {round_ + 1}/{rounds}, {label}: load {load_seconds:.2f} s, update {seconds:.2f} s, "
                f"{summaries[label][-1]}"
            )
    rows = bench.sizes.rows
    mor, cow, _ = (label for label, _ in UPDATE_SHAPES)
    for label, _ in UPDATE_SHAPES:
        last = summaries[label][-1]
        bench.report.add(
            Figure(
                "update",
                f"update 1 % of {rows:,} rows, {label}",
                median(updates[label]),
                "s",
                baseline="copy-on-write" if label != cow else None,
                ratio=median([u / c for u, c in zip(updates[label], updates[cow], strict=True)])
                if label != cow
                else None,
                note=f"{_range_note(updates[label])}; files added {last['files_added']}, "
                f"removed {last['files_removed']}",
            )
        )
    bench.report.add(
        Figure(
            "update",
            f"  setup: insert_into {rows:,} rows, primary-key table",
            median(loads[mor]),
            "s",
            baseline="plain-table insert_into",
            ratio=median([p / c for p, c in zip(loads[mor], loads[cow], strict=True)]),
            note="upserts: rows are deduplicated by key within the write (a shuffle)",
        )
    )
    bench.report.details["update"] = {
        "rows": rows,
        "condition": UPDATE_CONDITION,
        "assignments": UPDATE_ASSIGNMENTS,
        "update_seconds": updates,
        "load_seconds": loads,
        "summaries": summaries,
    }


# --- small_files: 500 small inserts, a full read, major compaction, the read again ---------------------


def _describe(table: Table, relative_dir: str, kind: FileKind) -> list[DataFile]:
    """The files Spark wrote under `relative_dir`, described for the log as `write_staged` does it:
    partition values from the Hive-style path, rows and statistics from the Parquet footer."""
    storage = table.storage
    meta = table.metadata
    out = []
    for info in sorted(storage.walk(relative_dir), key=lambda i: i.path):
        name = info.path.rsplit("/", 1)[-1]
        if not name.endswith(".parquet") or name.startswith(("_", ".")):
            continue
        partition = {}
        for segment in info.path[len(relative_dir) + 1 :].split("/")[:-1]:
            column, _, raw = segment.partition("=")
            value = unquote(raw)
            partition[column] = typed_partition_value(meta, column, None if value == HIVE_NULL else value)
        rows, stats = footer(storage, info.path)
        out.append(
            DataFile(path=info.path, partition=partition, rows=rows, size_bytes=info.size_bytes, stats=stats, kind=kind)
        )
    return out


def _move_into_own_staging(table: Table, txn_id: str, relative_dir: str, file: DataFile) -> DataFile:
    """`file`, moved from the batch's directory into a write directory of transaction `txn_id`, with its
    partition directories: a transaction adds only files in its own staging directory, as each small
    insert's own Spark job would have written them. A local rename (the benchmarks' warehouse is a local
    directory): microseconds beside a commit."""
    moved = table.storage.new_write_dir(txn_id) + file.path[len(relative_dir) :]
    os.renames(
        without_file_scheme(table.storage.absolute(file.path)), without_file_scheme(table.storage.absolute(moved))
    )
    return dataclasses.replace(file, path=moved)


def ingest_small(bench: Bench, t: SparkTable, per_insert: int) -> dict[str, Any]:
    """`small_inserts` inserts of `per_insert` rows each, one commit per insert.

    Writing them as that many `SparkTable.insert_into` calls would take a Spark job each (measured
    here: 0.37 s for 4,000 rows, 0.22 s for 200, so 2-3 minutes per table). Instead one Spark job writes
    all the files (one task per insert, so one file each, in one partition), and each file is then
    committed as its own `insert_into` transaction through core: begin, add_files, commit. The log and
    the files are what the small inserts would have left; only the Spark jobs are batched. The rows are
    prepared as `writes.prepare_rows` prepares them (the table's column order; on a primary-key table
    the upsert columns).
    """
    sizes = bench.sizes
    table = t.table
    meta = table.metadata
    rows = conform(
        frame(bench.session, sizes.small_inserts * per_insert, block=per_insert, partitions=sizes.small_inserts),
        meta,
        method="insert_into",
    )
    kind = FileKind.DATA
    if meta.primary_key:
        rows = rows.withColumn(OP_COLUMN, F.lit(UPSERT)).withColumn(SEQ_COLUMN, F.lit(None).cast("long"))
        kind = FileKind.CHANGES
    # where write_staged would put them (its layout is what lets a read scan them as one partitioned table)
    relative_dir = table.storage.new_write_dir(f"bench-small-inserts-{uuid.uuid4().hex}")
    write_seconds, _ = timed(
        lambda: (
            rows.write.mode("errorifexists")
            .option("compression", "snappy")
            .partitionBy(*meta.partition_by)
            .parquet(table.storage.absolute(relative_dir))
        )
    )
    files = _describe(table, relative_dir, kind)
    if len(files) != sizes.small_inserts:
        raise RuntimeError(f"expected one file per small insert ({sizes.small_inserts}), Spark wrote {len(files)}")
    t0 = time.perf_counter()
    for file in files:
        tx = table.begin("insert_into")
        tx.add_files([_move_into_own_staging(table, tx.txn_id, relative_dir, file)])
        tx.commit()
    commit_seconds = time.perf_counter() - t0
    return {
        "inserts": len(files),
        "rows_per_insert": per_insert,
        "file_bytes_median": median([f.size_bytes for f in files]),
        "spark_write_seconds": write_seconds,
        "commit_seconds": commit_seconds,
        "commits_per_second": len(files) / commit_seconds,
    }


def _read_all_columns(df: DataFrame) -> tuple[Any, ...]:
    """An aggregate that needs every column of every row."""
    row = df.agg(
        F.count(F.lit(1)),
        F.sum("id"),
        F.sum("amount"),
        F.sum(F.length("note")),
        F.countDistinct("dt"),
    ).first()
    assert row is not None  # an aggregate without grouping always has one row
    return tuple(row)


def _same_values(got: Sequence[Any], expected: Sequence[Any]) -> bool:
    """Equal, except that a sum of doubles may differ in its last bits with the order rows come in."""
    return len(got) == len(expected) and all(
        math.isclose(g, e, rel_tol=1e-9) if isinstance(e, float) else g == e for g, e in zip(got, expected, strict=True)
    )


def _timed_reads(t: SparkTable, version: int) -> dict[str, Any]:
    """Full reads at `version`, each from a fresh `read()` (whose construction lists the files and is
    timed with it): `count()`, an aggregate over all columns, and `read()` alone, to show its share."""
    count_seconds, count = timed(lambda: t.read(version=version).count())
    agg_seconds, values = timed(lambda: _read_all_columns(t.read(version=version)))
    plan_seconds, _ = timed(lambda: t.read(version=version))
    return {"plan": plan_seconds, "count": count_seconds, "all_columns": agg_seconds, "rows": count, "values": values}


def _spark_alone(session: SparkSession, t: SparkTable, version: int) -> float:
    """The same files read by Spark with nothing around it: no partition values from the log, no
    merge-on-read. What compaction buys Spark itself."""
    snapshot = t.table.snapshot(version)
    paths = [t.table.storage.absolute(f.path) for f in snapshot.files]
    seconds, _ = timed(
        lambda: (
            session.read.schema(file_struct(snapshot.metadata))
            .parquet(*paths)
            .agg(F.count(F.lit(1)), F.sum("id"), F.sum("amount"), F.sum(F.length("note")))
            .first()
        )
    )
    return seconds


def small_files_case(bench: Bench, label: str, options: dict[str, Any], per_insert: int) -> dict[str, Any]:
    """Build one table from small inserts, compact it, and time full reads of both versions."""
    sizes = bench.sizes
    rows = sizes.small_inserts * per_insert
    name = f"{label}, {sizes.small_inserts} inserts of {per_insert:,} rows"
    t = bench.table("small_files", **options)
    log(f"small_files: {name}")
    ingest = ingest_small(bench, t, per_insert)
    before = t.table.version
    active_before = len(t.table.snapshot().files)
    compact_seconds, commits = timed(partial(_compact_major, t))
    after = t.table.version
    active_after = len(t.table.snapshot().files)
    log(
        f"small_files: {name}: {ingest['commits_per_second']:.0f} commits/s; major compaction of "
        f"{active_before} files into {active_after} in {compact_seconds:.1f} s ({len(commits)} commits)"
    )
    # Both versions stay readable (compaction removes files from the log, cleanup deletes them later),
    # so reads before and after alternate, and a burst of load hits both alike.
    samples: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    _timed_reads(t, before)  # the first read of a table plans more (Python worker, broadcast sizes)
    _timed_reads(t, after)
    for _ in range(sizes.read_repeats):
        for when, version in (("before", before), ("after", after)):
            sample = _timed_reads(t, version)
            sample["spark_alone"] = _spark_alone(bench.session, t, version)
            samples[when].append(sample)
    expected = samples["before"][0]["values"]
    for sample in samples["before"] + samples["after"]:
        if sample["rows"] != rows or not _same_values(sample["values"], expected):
            raise RuntimeError(
                f"small_files: {name}: a read saw {sample['values']} in {sample['rows']} rows, "
                f"the first read before compaction {expected}"
            )
    keys = ("plan", "count", "all_columns", "spark_alone")
    per = {when: {key: [s[key] for s in samples[when]] for key in keys} for when in samples}
    report = bench.report
    report.add(
        Figure(
            "small_files",
            f"{name}: commits",
            ingest["commits_per_second"],
            "commits/s",
            note=f"one file each ({ingest['file_bytes_median'] / 1024:.0f} KiB median); the Spark job that "
            f"wrote them all: {ingest['spark_write_seconds']:.1f} s",
        )
    )
    report.add(
        Figure(
            "small_files",
            f"{name}: compact('major')",
            compact_seconds,
            "s",
            note=f"{active_before} files -> {active_after}, {len(commits)} commits",
        )
    )
    lines = (
        ("count", "read().count()", COMPACT_GOAL),
        ("all_columns", "read().agg(all columns)", COMPACT_GOAL),
        ("spark_alone", "Spark alone on the same files, agg", None),
    )
    for key, what, goal in lines:
        ratios = [b / a for b, a in zip(per["before"][key], per["after"][key], strict=True)]
        for when, files in (("before", active_before), ("after", active_after)):
            is_after = when == "after"
            note = _range_note(per[when][key])
            if key != "spark_alone":
                note += f"; read() itself {median(per[when]['plan']):.2f} s"
            report.add(
                Figure(
                    "small_files",
                    f"{name}: {what}, {when} major ({files} files)",
                    median(per[when][key]),
                    "s",
                    # the ratio is the speed-up: time before / time after, median of the pairs
                    baseline="before (speed-up)" if is_after else None,
                    ratio=median(ratios) if is_after else None,
                    goal=goal if is_after else None,
                    note=note,
                )
            )
    log(
        f"small_files: {name}: agg over all columns {median(per['before']['all_columns']):.2f} s before, "
        f"{median(per['after']['all_columns']):.2f} s after; count {median(per['before']['count']):.2f} s "
        f"before, {median(per['after']['count']):.2f} s after"
    )
    return {
        "rows": rows,
        "ingest": ingest,
        "versions": {"before": before, "after": after},
        "active_files": {"before": active_before, "after": active_after},
        "compact_seconds": compact_seconds,
        "compact_commits": len(commits),
        "read_seconds": per,
        "checked_values": list(expected),
    }


def bench_small_files(bench: Bench) -> None:
    details: dict[str, Any] = {}
    for per_insert in bench.sizes.small_insert_rows:
        for label, options in (("plain table", {}), ("primary-key table", {"primary_key": ["id"]})):
            details[f"{label}, {per_insert} rows per insert"] = small_files_case(bench, label, options, per_insert)
    bench.report.details["small_files"] = details


# --- retry: a metadata-level rebase against re-running the job -----------------------------------------


def bench_retry(bench: Bench) -> None:
    sizes = bench.sizes
    n = sizes.retry_rows
    # two jobs of n rows each, into different partitions (dates 1-4 and 5-8), like two daily loads
    early_df = cached(frame(bench.session, n, block=n // 4))
    late_df = cached(frame(bench.session, n, block=n // 4, start=4 * (n // 4)))
    samples: dict[str, list[float]] = {"write": [], "rebase_commit": [], "rerun_write": [], "rerun_commit": []}
    try:
        for round_ in range(sizes.retry_rounds):
            t = bench.table(f"retry_{round_}")
            # L prepares (the job's write time), E runs and commits, then L commits: its read version is
            # stale, the compare-and-swap loses once and L rebases onto E (blind appends do not conflict)
            write_seconds, late = timed(partial(_prepare_insert, t, late_df))
            t.insert_into(early_df)
            rebase_seconds, info = timed(late.commit)
            if info.retries != 1:
                raise RuntimeError(f"retry: the late commit was rebased {info.retries} times, expected 1")
            # what a loser without a metadata-level rebase does: run its whole job again
            rerun_write, again = timed(partial(_prepare_insert, t, late_df))
            rerun_commit, rerun_info = timed(again.commit)
            if rerun_info.retries != 0:
                raise RuntimeError(f"retry: the re-run was rebased {rerun_info.retries} times, expected 0")
            for key, value in zip(samples, (write_seconds, rebase_seconds, rerun_write, rerun_commit), strict=True):
                samples[key].append(value)
            log(
                f"retry round {round_ + 1}/{sizes.retry_rounds}: job write {write_seconds:.2f} s, commit after "
                f"losing {rebase_seconds * 1000:.1f} ms ({rebase_seconds / write_seconds:.2%}), re-run "
                f"{rerun_write + rerun_commit:.2f} s (commit {rerun_commit * 1000:.1f} ms)"
            )
    finally:
        early_df.unpersist()
        late_df.unpersist()
    rerun = [w + c for w, c in zip(samples["rerun_write"], samples["rerun_commit"], strict=True)]
    to_write = [r / w for r, w in zip(samples["rebase_commit"], samples["write"], strict=True)]
    to_rerun = [r / x for r, x in zip(samples["rebase_commit"], rerun, strict=True)]
    report = bench.report
    report.add(
        Figure(
            "retry",
            f"job write time (insert_into {n:,} rows, prepare)",
            median(samples["write"]),
            "s",
            note=_range_note(samples["write"]),
        )
    )
    report.add(
        Figure(
            "retry",
            "commit after losing (metadata rebase, retries=1)",
            median(samples["rebase_commit"]),
            "s",
            baseline="job write time",
            ratio=median(to_write),
            goal=RETRY_GOAL,
            note=f"{median(to_write):.1%} of the write time (rounds {min(to_write):.1%}-{max(to_write):.1%}): lost "
            "compare-and-swap, log read and judged, jittered backoff, compare-and-swap again",
        )
    )
    report.add(
        Figure(
            "retry",
            "commit without a conflict",
            median(samples["rerun_commit"]),
            "s",
            note="the re-run's commit: one compare-and-swap",
        )
    )
    report.add(
        Figure(
            "retry",
            "re-running the losing job (prepare+commit)",
            median(rerun),
            "s",
            note=f"commit after losing = {median(to_rerun):.2%} of this",
        )
    )
    report.details["retry"] = {"rows_per_job": n, "seconds": samples, "ratio_to_write": to_write}


# --- the suite -----------------------------------------------------------------------------------------


def run(*, quick: bool = False, only: Sequence[str] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="spark", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = dict(sizes.__dict__)
    with bench_env() as env, spark_session() as session:
        catalog = Catalog(env.settings)
        try:
            report.machine["spark"] = session.version
            report.machine["spark_master"] = session.sparkContext.master
            report.machine["spark_driver_memory"] = session.conf.get("spark.driver.memory", "")
            bench = Bench(env, catalog, session, sizes, report)
            warm_up(bench)
            if "insert" in only or "update" in only:
                data = cached(frame(session, sizes.rows, block=sizes.small_insert_rows[0]))
                try:
                    if "insert" in only:
                        bench_insert(bench, data)
                    if "update" in only:
                        bench_update(bench, data)
                finally:
                    data.unpersist()
            if "small_files" in only:
                bench_small_files(bench)
            if "retry" in only:
                bench_retry(bench)
            if "sql" in only:
                bench_sql(bench)
        finally:
            catalog.close()
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
