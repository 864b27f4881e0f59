"""The stream benchmark (issue 42): Structured Streaming into and out of acidtables tables, against
Spark's own Parquet file sink where there is one to compare with.

`python -m bench stream [--quick]` calls `run()` (the suite runs only when named: its memory runs take
two hours). One embedded etcd serves the whole run; one local Spark session (local[2]) serves sink,
compaction and catchup and is stopped before the memory runs, which start Spark drivers of their own:

- sink: one event stream (the rate source, 2,000 rows a second, five columns, a derived day `dt` over
  four days), trigger every second, into Spark's Parquet file sink (`writeStream.format("parquet")
  .partitionBy("dt")`), through the data source's sink (`writeStream.format("acidtables")`) and through
  `SparkTable.write_stream`, one after the other in rounds whose order rotates, each run on a fresh
  checkpoint and output. Time per micro-batch from each batch's progress (`triggerExecution`, and
  `addBatch`, the sink's own part) after warm-up batches. Goal: each acidtables path <= 1.2 x Parquet.
- compaction: micro-batches of 2,000 rows back to back into a table through the data source's sink,
  with and without minor compactions committing concurrently (the operator's job code,
  `acidtables.jobs.compact.run_compaction`, one job after another in a thread of this driver); the rows
  a second that land in the table, failed batches (the query ended by an error, then restarted from its
  checkpoint) and the commits' retries from their commit records. Goal: 0 failed batches.
- catchup: a table of 10,000 one-file versions made through core, then a Trigger.AvailableNow query
  (maxFilesPerTrigger at its default, 1,000) into foreachBatch counting rows, from the default start
  (the snapshot) and from version 0 (every commit, from the log and its archive). Goal: every row
  delivered within 60 s of start.
- memory: 10,000 micro-batches of each of the data source's sink, SparkTable.write_stream and the
  source, each in a Spark driver process of its own (bench/stream_memory.py). Goal: each process kind's
  resident memory after the last batch <= 1.2 x after 100. With BENCH_STREAM_MEMORY_COMPACT=1, a sink's
  table is compacted while it runs (CompactionLoop in this process's own Spark driver, as the operator's
  jobs run beside a stream, not in it), so its live files stay few. The roles parquet-sink and
  parquet-source are the baselines (Spark's own Parquet file sink and file source, the same micro-batches),
  reported with each acidtables role's JVM growth over its baseline's; BENCH_STREAM_MEMORY_ROLES picks
  the roles (default: every one, one after the other).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from acidtables import Catalog, Table
from acidtables.core.log.operations import Operation
from acidtables.core.log.records import CommitRecord
from acidtables.jobs.compact import run_compaction
from acidtables.spark import SparkTable

from .core import Env, bench_env, log
from .report import Figure, Goal, Report, machine_info, now_iso
from .spark_setup import spark_session
from .stream_memory import JVM_OPTIONS_VARIABLE, PARQUET_ROLES, ROLES, SINK_ROWS_PER_BATCH, measure
from .stream_setup import (
    CATCHUP_SCHEMA,
    QUERY_TIMEOUT_SECONDS,
    SCHEMA,
    batched_events,
    build_versions,
    completed_batches,
    durations,
    expected_id_sum,
    median,
    paced_events,
    progress,
    quantile,
    run_batches,
    source_options,
)

BENCHMARKS = ("sink", "compaction", "catchup", "memory")
SINK_GOAL = Goal("<= 1.2 x the Parquet sink", 1.2, at_least=False)
NO_FAILURES_GOAL = Goal("0 failed batches", 0.0, at_least=False)
CATCHUP_SECONDS = 60.0
CATCHUP_GOAL = Goal(f"<= {CATCHUP_SECONDS:g} s", 1.0, at_least=False)
#: 10,000 batches against 100: a leak of 2 KB a batch in a 100 MiB Python process would cross it
MEMORY_GOAL = Goal("<= 1.2 x after 100 batches", 1.2, at_least=False)
#: the sinks, Spark's own first (the baseline)
SINKS = ("Parquet file sink", "data source sink", "SparkTable.write_stream")
TRIGGER = "1 second"


@dataclass(frozen=True)
class Sizes:
    #: the sink benchmark's rate source
    rows_per_second: int
    sink_rounds: int
    #: micro-batches of each run left out (the query's first batch plans and compiles more)
    warmup_batches: int
    measured_batches: int
    #: rows of each back-to-back micro-batch of the compaction benchmark, and how long each run lasts
    compaction_rows_per_batch: int
    compaction_seconds: float
    #: (without, with) pairs, alternating which goes first
    compaction_rounds: int
    catchup_versions: int
    catchup_rows_per_version: int
    catchup_repeats: int
    #: completed micro-batches at which memory is sampled; the first is the baseline, the last the goal's
    memory_stops: tuple[int, ...]
    #: each memory run stops here if its last stop is not reached (and says so)
    memory_max_seconds: float


FULL = Sizes(
    rows_per_second=2_000,
    sink_rounds=3,
    warmup_batches=3,
    measured_batches=20,
    compaction_rows_per_batch=2_000,
    compaction_seconds=90.0,
    compaction_rounds=2,
    catchup_versions=10_000,
    catchup_rows_per_version=10,
    catchup_repeats=3,
    memory_stops=(100, 200, 500, 1_000, 2_000, 5_000, 10_000),
    memory_max_seconds=90 * 60.0,
)
QUICK = Sizes(
    rows_per_second=2_000,
    sink_rounds=2,
    warmup_batches=3,
    measured_batches=8,
    compaction_rows_per_batch=2_000,
    compaction_seconds=30.0,
    compaction_rounds=1,
    catchup_versions=2_000,
    catchup_rows_per_version=10,
    catchup_repeats=1,
    memory_stops=(100, 200, 500, 1_000),
    memory_max_seconds=20 * 60.0,
)


@dataclass(frozen=True)
class StreamBench:
    """What every stream benchmark needs: etcd and the warehouse, a catalog, Spark, sizes and the report."""

    env: Env
    catalog: Catalog
    session: SparkSession
    sizes: Sizes
    report: Report

    @property
    def options(self) -> dict[str, str]:
        return source_options(self.env.settings)

    def table(self, name: str, schema: str = SCHEMA) -> Table:
        """A new table partitioned by dt; a random suffix, so nothing is shared between runs."""
        return self.catalog.create_table(f"bench.{name}_{uuid.uuid4().hex[:6]}", schema=schema, partition_by=["dt"])

    def scratch(self, name: str) -> str:
        """A directory outside every table (checkpoints, the Parquet sink's output)."""
        return str(self.env.root / "stream" / f"{name}-{uuid.uuid4().hex[:6]}")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# --- sink: time per micro-batch against Spark's Parquet file sink ---------------------------------------


def _start_sink(bench: StreamBench, kind: str, events: DataFrame, checkpoint: str) -> StreamingQuery:
    if kind == SINKS[0]:
        return (
            events.writeStream.format("parquet")
            .partitionBy("dt")
            .option("path", bench.scratch("parquet-sink"))
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .start()
        )
    table = bench.table("sink")
    if kind == SINKS[1]:
        return (
            events.writeStream.format("acidtables")
            .options(**bench.options)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=TRIGGER)
            .start(table.name)
        )
    return SparkTable(bench.session, table).write_stream(events, checkpoint, trigger={"processingTime": TRIGGER})


def _sink_run(bench: StreamBench, kind: str, batches: int) -> list[dict[str, Any]]:
    """One run of `kind` on a fresh checkpoint and output, `batches` micro-batches; every batch's progress."""
    query = _start_sink(bench, kind, paced_events(bench.session, bench.sizes.rows_per_second), bench.scratch("cp"))
    run_batches(query, batches)
    return progress(query)


def bench_sink(bench: StreamBench) -> None:
    sizes = bench.sizes
    log(f"sink: warm-up, {sizes.warmup_batches} batches of each sink (load {_load()})")
    for kind in SINKS:
        _sink_run(bench, kind, sizes.warmup_batches)
    measured: dict[str, list[list[dict[str, Any]]]] = {kind: [] for kind in SINKS}
    for round_ in range(sizes.sink_rounds):
        # rotate the order: a trend in the machine's load does not favour one sink
        order = SINKS[round_ % len(SINKS) :] + SINKS[: round_ % len(SINKS)]
        for kind in order:
            found = _sink_run(bench, kind, sizes.warmup_batches + sizes.measured_batches)
            kept = [b for b in found if int(b["batchId"]) >= sizes.warmup_batches and b["numInputRows"] > 0]
            measured[kind].append(kept)
            trigger = durations(kept, "triggerExecution")
            log(
                f"sink round {round_ + 1}/{sizes.sink_rounds}, {kind}: {len(kept)} batches of "
                f"{median([float(b['numInputRows']) for b in kept]):.0f} rows, median {median(trigger) * 1000:.0f} ms, "
                f"p95 {quantile(trigger, 0.95) * 1000:.0f} ms (load {_load()})"
            )
    _sink_figures(bench, measured)


def _sink_figures(bench: StreamBench, measured: dict[str, list[list[dict[str, Any]]]]) -> None:
    base = SINKS[0]
    details: dict[str, Any] = {"trigger": TRIGGER, "rows_per_second": bench.sizes.rows_per_second}
    for key, what in (("triggerExecution", "time per micro-batch"), ("addBatch", "of which addBatch (the sink)")):
        per_round = {kind: [durations(r, key) for r in rounds] for kind, rounds in measured.items()}
        for kind in SINKS:
            every = [s for r in per_round[kind] for s in r]
            is_base = kind == base
            ratios = [median(a) / median(b) for a, b in zip(per_round[kind], per_round[base], strict=True)]
            p95 = quantile(every, 0.95)
            base_p95 = quantile([s for r in per_round[base] for s in r], 0.95)
            bench.report.add(
                Figure(
                    "sink",
                    f"{kind}: {what}, median",
                    median(every),
                    "s",
                    baseline=None if is_base else "Parquet sink",
                    ratio=None if is_base else median(ratios),
                    goal=SINK_GOAL if key == "triggerExecution" and not is_base else None,
                    note=f"{len(every)} batches in {len(ratios)} rounds"
                    + ("" if is_base else f"; ratio: median of per-round ratios ({min(ratios):.2f}-{max(ratios):.2f})"),
                )
            )
            bench.report.add(
                Figure(
                    "sink",
                    f"{kind}: {what}, p95",
                    p95,
                    "s",
                    baseline=None if is_base else "Parquet sink p95",
                    ratio=None if is_base else (p95 / base_p95 if base_p95 else None),
                )
            )
    for kind, rounds in measured.items():
        details[kind] = [
            [
                {
                    "batch": b["batchId"],
                    "rows": b["numInputRows"],
                    "duration_ms": b["durationMs"],
                }
                for b in r
            ]
            for r in rounds
        ]
    bench.report.details["sink"] = details


# --- compaction: a stream's throughput with minor compactions committing beside it ---------------------


class CompactionLoop:
    """Minor compactions one after another in a thread of this driver, each run as the operator's
    CompactionJob pod runs it (`run_compaction`, a new job id each: its groups commit one by one, a
    group that loses to a concurrent commit is skipped and counted)."""

    def __init__(self, spark: SparkSession, table: Table) -> None:
        self.spark = spark
        self.table = table
        self.runs: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-compaction", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=QUERY_TIMEOUT_SECONDS)

    def _loop(self) -> None:
        table = SparkTable(self.spark, self.table)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                outcome = run_compaction(table, "minor", job_id=uuid.uuid4().hex)
            except Exception as exc:  # a finding of the benchmark, not its crash: shown in the figures
                self.errors.append(f"{type(exc).__name__}: {exc}"[:500])
                self._stop.wait(1.0)
                continue
            self.runs.append({"seconds": time.perf_counter() - t0, **outcome.to_json()})
            if not outcome.committed_versions:  # nothing to compact yet
                self._stop.wait(0.5)


def _first_line(error: object) -> str:
    return str(error).strip().splitlines()[0][:500] if str(error).strip() else repr(error)


def _sustained(bench: StreamBench, with_compaction: bool) -> dict[str, Any]:
    """Back-to-back micro-batches into a fresh table for `compaction_seconds`, with or without the
    compaction loop; a query that fails is counted and restarted from its checkpoint (which replays the
    failed batch), as a supervisor would."""
    sizes = bench.sizes
    table = bench.table("compaction")
    checkpoint = bench.scratch("compaction-cp")
    events = batched_events(bench.session, sizes.compaction_rows_per_batch, partitions=2)

    def start() -> StreamingQuery:
        return (
            events.writeStream.format("acidtables")
            .options(**bench.options)
            .option("checkpointLocation", checkpoint)
            .start(table.name)
        )

    query = start()
    deadline = time.monotonic() + QUERY_TIMEOUT_SECONDS
    while completed_batches(query) < 2:  # past the first batch's planning and compiling
        if not query.isActive or time.monotonic() > deadline:
            raise RuntimeError(f"compaction: the stream did not start: {query.exception()}")
        time.sleep(0.05)
    first = table.snapshot()
    loop = CompactionLoop(bench.session, table)
    failures: list[str] = []
    t0 = time.perf_counter()
    if with_compaction:
        loop.start()
    try:
        while time.perf_counter() - t0 < sizes.compaction_seconds:
            if not query.isActive:
                failures.append(_first_line(query.exception()))
                log(f"compaction: the stream failed ({failures[-1]}); restarting it from its checkpoint")
                query = start()
            time.sleep(0.1)
        last = table.snapshot()
        seconds = time.perf_counter() - t0
    finally:
        query.stop()
        if with_compaction:
            loop.stop()
    records = table.commits(first.version + 1, last.version)
    stream = [r for r in records if r.operation is Operation.INSERT_INTO]
    compactions = [r for r in records if r.operation is Operation.MINOR_COMPACT]
    rows = last.totals().live_rows - first.totals().live_rows
    return {
        "with_compaction": with_compaction,
        "seconds": seconds,
        "rows": rows,
        "rows_per_second": rows / seconds,
        "stream_commits": len(stream),
        "failed_batches": len(failures),
        "failures": failures,
        "stream_retries": _retries(stream),
        "compaction_commits": len(compactions),
        "compaction_retries": _retries(compactions),
        "compaction_runs": len(loop.runs),
        "compaction_groups_skipped": sum(int(r["groupsSkipped"]) for r in loop.runs),
        "compaction_errors": loop.errors,
        "compaction_run_seconds": [r["seconds"] for r in loop.runs],
        "files_at_end": last.totals().files,
    }


def _retries(records: Sequence[CommitRecord]) -> dict[str, int]:
    counts = [r.retries for r in records]
    return {"total": sum(counts), "max": max(counts, default=0), "commits_retried": sum(1 for c in counts if c)}


def bench_compaction(bench: StreamBench) -> None:
    sizes = bench.sizes
    runs: list[dict[str, Any]] = []
    for round_ in range(sizes.compaction_rounds):
        for with_compaction in (False, True) if round_ % 2 == 0 else (True, False):
            label = "with" if with_compaction else "without"
            log(f"compaction round {round_ + 1}/{sizes.compaction_rounds}: {label} compaction (load {_load()})")
            runs.append(_sustained(bench, with_compaction))
            r = runs[-1]
            log(
                f"compaction round {round_ + 1}, {label}: {r['rows_per_second']:,.0f} rows/s, "
                f"{r['stream_commits']} stream commits (retries {r['stream_retries']}), "
                f"{r['failed_batches']} failed batches, {r['compaction_commits']} compaction commits "
                f"({r['compaction_groups_skipped']} groups skipped, errors {len(r['compaction_errors'])}), "
                f"{r['files_at_end']} files at the end"
            )
    without = [r for r in runs if not r["with_compaction"]]
    with_ = [r for r in runs if r["with_compaction"]]
    rate_without = median([r["rows_per_second"] for r in without])
    rate_with = median([r["rows_per_second"] for r in with_])
    rows = sizes.compaction_rows_per_batch
    report = bench.report
    report.add(
        Figure(
            "compaction",
            f"stream of {rows:,}-row batches back to back, no compaction",
            rate_without,
            "rows/s",
            note=f"median of {len(without)} runs of {sizes.compaction_seconds:g} s; files at the end "
            f"{without[-1]['files_at_end']:,}",
        )
    )
    report.add(
        Figure(
            "compaction",
            "the same, minor compactions committing concurrently",
            rate_with,
            "rows/s",
            baseline="no compaction",
            ratio=rate_with / rate_without if rate_without else None,
            note=f"{sum(r['compaction_commits'] for r in with_)} compaction commits in "
            f"{sum(r['compaction_runs'] for r in with_)} jobs; files at the end {with_[-1]['files_at_end']:,}",
        )
    )
    failed = sum(r["failed_batches"] for r in with_)
    report.add(
        Figure(
            "compaction",
            "failed micro-batches with compaction",
            failed,
            "",
            baseline="stream commits",
            ratio=failed / max(1, sum(r["stream_commits"] for r in with_)),
            goal=NO_FAILURES_GOAL,
            note="; ".join(f for r in with_ for f in r["failures"])[:300],
        )
    )
    for what, key in (("stream commits", "stream"), ("compaction commits", "compaction")):
        total = sum(r[f"{key}_commits"] for r in with_)
        retried = sum(r[f"{key}_retries"]["commits_retried"] for r in with_)
        report.add(
            Figure(
                "compaction",
                f"{what} rebased (retries > 0), with compaction",
                retried,
                "",
                note=f"of {total:,}; retries {sum(r[f'{key}_retries']['total'] for r in with_)} in all, "
                f"max {max(r[f'{key}_retries']['max'] for r in with_)} on one commit",
            )
        )
    report.add(
        Figure(
            "compaction",
            "compaction groups skipped (lost to a stream commit)",
            sum(r["compaction_groups_skipped"] for r in with_),
            "",
            note=f"compaction errors: {sum(len(r['compaction_errors']) for r in with_)}",
        )
    )
    report.details["compaction"] = {"compaction": "acidtables.jobs.compact.run_compaction, minor", "runs": runs}


# --- catchup: a new source on a table of many one-file versions ----------------------------------------


def _catch_up(bench: StreamBench, name: str, extra: dict[str, str]) -> dict[str, Any]:
    """One Trigger.AvailableNow run of a new query on `name` into foreachBatch counting its rows: the
    seconds from start() until the query has delivered every row and ended."""
    seen: dict[str, Any] = {"rows": 0, "id_sum": 0, "batch_done_seconds": []}
    t0 = time.perf_counter()

    def count(df: DataFrame, batch_id: int) -> None:
        found = df.agg(F.count(F.lit(1)).alias("n"), F.sum("id").alias("s")).first()
        if found is not None:
            seen["rows"] += int(found["n"])
            seen["id_sum"] += int(found["s"] or 0)
        seen["batch_done_seconds"].append(time.perf_counter() - t0)

    query = (
        bench.session.readStream.format("acidtables")
        .options(**bench.options, **extra)
        .load(name)
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", bench.scratch("catchup-cp"))
        .trigger(availableNow=True)
        .start()
    )
    finished = query.awaitTermination(int(QUERY_TIMEOUT_SECONDS))
    seconds = time.perf_counter() - t0
    if not finished:
        query.stop()
        raise RuntimeError(f"catchup: the query had not ended after {QUERY_TIMEOUT_SECONDS:g} s")
    if query.exception() is not None:
        raise RuntimeError(f"catchup: the query failed: {query.exception()}")
    batches = progress(query)
    phases = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")
    return {
        **seen,
        "seconds": seconds,
        "batches": len(batches),
        "phase_seconds": {p: sum(durations(batches, p)) for p in phases},
        "trigger_seconds": sum(durations(batches, "triggerExecution")),
    }


#: (label, options) of the catchup runs; the first is the goal's
CATCHUP_STARTS: tuple[tuple[str, dict[str, str]], ...] = (
    ("from the snapshot (the default start)", {}),
    ("from version 0 (every commit, from the log)", {"startingVersion": "0"}),
)


def make_catchup_table(bench: StreamBench) -> tuple[Table, float]:
    sizes = bench.sizes
    table = bench.table("catchup", CATCHUP_SCHEMA)
    log(f"catchup: committing {sizes.catchup_versions:,} one-file versions to {table.name} (load {_load()})")
    seconds = build_versions(table, sizes.catchup_versions, sizes.catchup_rows_per_version)
    # the checkpoints and archive segments those commits asked for, written by this process's background
    # thread: finished before anything is timed against them
    if not bench.catalog.services.flush(timeout_seconds=600):
        raise RuntimeError("the background checkpoints and archiving did not finish within 10 minutes")
    log(f"catchup: {sizes.catchup_versions:,} versions in {seconds:.1f} s")
    return table, seconds


def bench_catchup(bench: StreamBench, table: Table, build_seconds: float) -> None:
    sizes = bench.sizes
    rows = sizes.catchup_versions * sizes.catchup_rows_per_version
    expected = expected_id_sum(sizes.catchup_versions, sizes.catchup_rows_per_version)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in CATCHUP_STARTS}
    # The session's first stream out of acidtables starts the Python runner of the source and imports
    # pyarrow and acidtables into its workers: a cost of the session, not of catching up, which would
    # fall on whichever start goes first (a quick run without this: 10.4 s for the first start, 7.7 s
    # for the second). One untimed run of each start on a table of a few versions.
    small = bench.table("catchup_warm_up", CATCHUP_SCHEMA)
    build_versions(small, 20, sizes.catchup_rows_per_version)
    for _, extra in CATCHUP_STARTS:
        _catch_up(bench, small.name, extra)
    for repeat in range(sizes.catchup_repeats):
        order = CATCHUP_STARTS if repeat % 2 == 0 else CATCHUP_STARTS[::-1]
        for label, extra in order:
            found = _catch_up(bench, table.name, extra)
            if found["rows"] != rows or found["id_sum"] != expected:
                raise RuntimeError(
                    f"catchup {label}: delivered {found['rows']:,} rows (id sum {found['id_sum']}), "
                    f"expected {rows:,} ({expected})"
                )
            runs[label].append(found)
            log(
                f"catchup {label}: {rows:,} rows in {found['batches']} batches, {found['seconds']:.1f} s "
                f"(load {_load()}); phases {', '.join(f'{k} {v:.1f} s' for k, v in found['phase_seconds'].items())}"
            )
    report = bench.report
    report.add(
        Figure(
            "catchup",
            f"create a table of {sizes.catchup_versions:,} one-file versions (core)",
            build_seconds,
            "s",
            note=f"{sizes.catchup_versions / build_seconds:,.0f} commits/s; not part of the goal",
        )
    )
    for n, (label, _) in enumerate(CATCHUP_STARTS):
        seconds = [r["seconds"] for r in runs[label]]
        last = runs[label][-1]
        report.add(
            Figure(
                "catchup",
                f"AvailableNow, {label}: every row delivered",
                median(seconds),
                "s",
                baseline=f"the {CATCHUP_SECONDS:g} s goal" if n == 0 else None,
                ratio=median(seconds) / CATCHUP_SECONDS if n == 0 else None,
                goal=CATCHUP_GOAL if n == 0 else None,
                note=f"{rows:,} rows, {last['batches']} batches; runs {', '.join(f'{s:.1f}' for s in seconds)} s; "
                f"addBatch {last['phase_seconds']['addBatch']:.1f} s, latestOffset "
                f"{last['phase_seconds']['latestOffset']:.1f} s",
            )
        )
    report.details["catchup"] = {
        "versions": sizes.catchup_versions,
        "rows_per_version": sizes.catchup_rows_per_version,
        "build_seconds": build_seconds,
        "runs": runs,
    }


# --- memory: many micro-batches in drivers of their own -------------------------------------------------

MEMORY_KINDS = (
    ("driver Python", "driver_rss_bytes"),
    ("JVM", "jvm_rss_bytes"),
    ("Python workers", "workers_rss_bytes"),
)
ROLE_LABELS = {
    "sink": "data source sink",
    "table-sink": "SparkTable.write_stream",
    "source": "data source source",
    "parquet-sink": "Spark's Parquet file sink (baseline)",
    "parquet-source": "Spark's Parquet file source (baseline)",
}
#: each acidtables role's baseline: the same stream through Spark's own file sink or source
MEMORY_BASELINES = {"sink": "parquet-sink", "table-sink": "parquet-sink", "source": "parquet-source"}


#: the memory runs to make, a comma-separated subset of ROLES (default all, one after the other): a run of
#: one role can go beside another's, each in a driver of its own (their memory does not depend on the CPU)
MEMORY_ROLES_VARIABLE = "BENCH_STREAM_MEMORY_ROLES"
#: "1": minor compactions run on a sink's table while its memory run goes (a stream's table as the
#: operator's automatic compaction keeps it); otherwise the table gains a file every micro-batch
MEMORY_COMPACT_VARIABLE = "BENCH_STREAM_MEMORY_COMPACT"


def _measured_with_compaction(env: Env, catalog: Catalog, role: str, table: str, sizes: Sizes) -> dict[str, Any]:
    """A sink's memory run while minor compactions run on its table from this process (a Spark driver of
    its own, as the operator's jobs are): what the run measured, and what the compactions did."""
    with spark_session() as session:
        loop = CompactionLoop(session, catalog.table(table))
        loop.start()
        try:
            found = measure(env.settings, role, table, env.root, sizes.memory_stops, sizes.memory_max_seconds)
        finally:
            loop.stop()
    found["compaction"] = {
        "runs": len(loop.runs),
        "committed_versions": sum(len(r.get("committedVersions", ())) for r in loop.runs),
        "errors": loop.errors[:5],
        "live_files_at_end": len(catalog.table(table).snapshot().files),
    }
    return found


def bench_memory(env: Env, catalog: Catalog, sizes: Sizes, report: Report, source_table: Table) -> None:
    details: dict[str, Any] = {}
    chosen = [r.strip() for r in os.environ.get(MEMORY_ROLES_VARIABLE, ",".join(ROLES)).split(",") if r.strip()]
    unknown = [r for r in chosen if r not in ROLES]
    if unknown:
        raise SystemExit(f"{MEMORY_ROLES_VARIABLE}: no role {', '.join(unknown)}; the roles are {', '.join(ROLES)}")
    source_stops = tuple(s for s in sizes.memory_stops if s <= source_table.version) or (source_table.version,)
    for role in chosen:
        if role == "source":
            table = source_table.name
            stops = source_stops
        elif role == "parquet-source":
            table = str(_linked_files(source_table, env.root / f"memory-parquet-source-{uuid.uuid4().hex[:6]}"))
            stops = source_stops
        elif role == "parquet-sink":
            table = str(env.root / f"memory-parquet-sink-{uuid.uuid4().hex[:6]}")
            stops = sizes.memory_stops
        else:
            table = catalog.create_table(
                f"bench.memory_{role.replace('-', '_')}_{uuid.uuid4().hex[:6]}", schema=SCHEMA, partition_by=["dt"]
            ).name
            stops = sizes.memory_stops
        compacted = role in ("sink", "table-sink") and os.environ.get(MEMORY_COMPACT_VARIABLE) == "1"
        log(
            f"memory {role}: a driver of its own, {stops[-1]:,} micro-batches into/from {table}"
            f"{', compacted meanwhile' if compacted else ''} (load {_load()})"
        )
        if compacted:
            found = _measured_with_compaction(env, catalog, role, table, sizes)
            log(f"memory {role}: compactions {found['compaction']}")
        else:
            found = measure(env.settings, role, table, env.root, stops, sizes.memory_max_seconds)
        details[role] = found
        _memory_figures(report, role, found, " (table compacted)" if compacted else "")
    _against_baselines(report, details)
    report.details["memory"] = {
        "sink_rows_per_batch": SINK_ROWS_PER_BATCH,
        "jvm_options": os.environ.get(JVM_OPTIONS_VARIABLE, "").strip(),
        **details,
    }


def _linked_files(table: Table, directory: Path) -> Path:
    """A directory of hard links to `table`'s files, for Spark's file source: the same files the
    acidtables source reads, their modification times (the file source's order) those of the commits."""
    directory.mkdir(parents=True)
    for data_file in table.snapshot().files:
        source = Path(table.storage.absolute(data_file.path))
        os.link(source, directory / source.name)
    return directory


def _growth(found: dict[str, Any], key: str) -> float:
    first, last = found["samples"][0], found["samples"][-1]
    return float(last[key]) / float(first[key]) if first[key] else float("nan")


def _against_baselines(report: Report, details: dict[str, Any]) -> None:
    """Each role's JVM growth over its baseline's in this run: what acidtables adds to what Spark and its
    JVM grow by themselves over the same number of micro-batches."""
    for role, baseline in MEMORY_BASELINES.items():
        if role not in details or baseline not in details:
            continue
        ours, theirs = _growth(details[role], "jvm_rss_bytes"), _growth(details[baseline], "jvm_rss_bytes")
        report.add(
            Figure(
                "memory",
                f"{ROLE_LABELS[role]}: JVM RSS growth against {ROLE_LABELS[baseline]}'s",
                ours,
                "x",
                baseline=f"{theirs:.2f}x",
                ratio=ours / theirs,
                note="each the RSS after the last stop over after the first, in this run",
            )
        )


def _memory_figures(report: Report, role: str, found: dict[str, Any], suffix: str = "") -> None:
    samples = found["samples"]
    first, last = samples[0], samples[-1]
    label = ROLE_LABELS[role] + suffix
    n = last["batches"]
    rate = (n - first["batches"]) / (last["seconds"] - first["seconds"]) if last["seconds"] > first["seconds"] else 0
    report.add(
        Figure(
            "memory",
            f"{label}: {n:,} micro-batches back to back",
            last["seconds"],
            "s",
            note=f"{rate:.1f} batches/s after the first {first['batches']}; stopped by {found['stopped_by']}",
        )
    )
    mib = 2**20
    for kind, key in MEMORY_KINDS:
        extra = ""
        if key == "workers_rss_bytes":
            extra = (
                f"; {first['workers']} -> {last['workers']} processes, the largest "
                f"{first['largest_worker_rss_bytes'] / mib:.0f} -> {last['largest_worker_rss_bytes'] / mib:.0f} MiB"
            )
        elif key == "jvm_rss_bytes":
            extra = (
                f"; heap committed {first['jvm_heap_committed_bytes'] / mib:.0f} -> "
                f"{last['jvm_heap_committed_bytes'] / mib:.0f} MiB, non-heap "
                f"{first['jvm_non_heap_bytes'] / mib:.0f} -> {last['jvm_non_heap_bytes'] / mib:.0f} MiB"
            )
        pss = key.replace("rss", "pss")
        report.add(
            Figure(
                "memory",
                f"{label}: {kind} RSS after {n:,}",
                last[key] / mib,
                "MiB",
                baseline=f"after {first['batches']:,}",
                ratio=last[key] / first[key] if first[key] else None,
                goal=None if role in PARQUET_ROLES else MEMORY_GOAL,
                note=f"{first[key] / mib:.0f} MiB after {first['batches']:,}; Pss {first[pss] / mib:.0f} -> "
                f"{last[pss] / mib:.0f} MiB{extra}",
            )
        )
    heap = "jvm_heap_after_gc_bytes"
    report.add(
        Figure(
            "memory",
            f"{label}: JVM heap in use after a full GC, after {n:,}",
            last[heap] / mib,
            "MiB",
            baseline=f"after {first['batches']:,}",
            ratio=last[heap] / first[heap] if first[heap] else None,
            note=f"{first[heap] / mib:.0f} MiB after {first['batches']:,}; JVM threads "
            f"{first['jvm_threads']} -> {last['jvm_threads']}",
        )
    )


# --- the suite -----------------------------------------------------------------------------------------


def run(*, quick: bool = False, only: Sequence[str] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="stream", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = dict(sizes.__dict__)
    loads: dict[str, str] = {"start": _load()}
    with bench_env() as env:
        catalog = Catalog(env.settings)
        try:
            catchup_table: Table | None = None
            steps: list[tuple[str, Callable[[StreamBench], None]]] = [
                ("sink", bench_sink),
                ("compaction", bench_compaction),
            ]
            if any(b in only for b in ("sink", "compaction", "catchup")):
                with spark_session() as session:
                    report.machine["spark"] = session.version
                    report.machine["spark_master"] = session.sparkContext.master
                    bench = StreamBench(env, catalog, session, sizes, report)
                    for name, step in steps:
                        if name in only:
                            loads[name] = _load()
                            step(bench)
                    if "catchup" in only:
                        loads["catchup"] = _load()
                        catchup_table, build_seconds = make_catchup_table(bench)
                        bench_catchup(bench, catchup_table, build_seconds)
            if "memory" in only:
                loads["memory"] = _load()
                if catchup_table is None:  # the source's memory run reads the catchup table
                    catchup_table = catalog.create_table(
                        f"bench.catchup_{uuid.uuid4().hex[:6]}", schema=CATCHUP_SCHEMA, partition_by=["dt"]
                    )
                    build_versions(catchup_table, sizes.catchup_versions, sizes.catchup_rows_per_version)
                    catalog.services.flush(timeout_seconds=600)
                bench_memory(env, catalog, sizes, report, catchup_table)
        finally:
            catalog.close()
    loads["end"] = _load()
    report.details["load_average_at_each_benchmark"] = loads
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
