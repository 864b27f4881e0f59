"""Tables of many live files (issue 32): what a commit, a cold snapshot, a one-partition plan and a
Spark read of one partition cost as the number of live files grows, and the operator's memory with ten
such tables.

`scale`: a table of 1,000 files (the baseline), and a table of `partitions` partitions grown through
the public API in commits of `per_commit` files, measured at each size in `stops` on the way. Every
file is a hard link of one real Parquet file (so a million files take no disk), staged in its own
transaction's directory: the commit's proofs stat and read every one as they would any file. Cold
figures come from a new Python process each (its own interpreter, imports and Catalog): the time from
`catalog.table()` to the answer, and the process's peak resident memory (VmHWM, imports included), as a
Spark driver or the operator would pay them. The Spark reads run in this process's local session,
each through a new Catalog (nothing cached): from the call to the first row, which bounds when the
first task started.

`ten-tables`: ten tables of the largest size, and one new process doing what the operator does for each
per reconcile (the AcidTable status, automatic compaction's per-partition figures), twice over: its
peak memory.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from acidtables import Catalog, Table
from acidtables.core import Settings

from .core import bench_env, log
from .report import Figure, Report, machine_info, now_iso

BENCHMARKS = ("scale", "ten-tables")


@dataclass(frozen=True)
class Sizes:
    #: the sizes the large table is measured at, on its way up
    stops: tuple[int, ...]
    partitions: int
    per_commit: int
    #: one-file commits timed at each size (the median counts)
    single_commits: int = 21
    tables: int = 10


FULL = Sizes(stops=(100_000, 1_000_000), partitions=1_000, per_commit=10_000)
QUICK = Sizes(stops=(10_000, 100_000), partitions=100, per_commit=10_000)
BASELINE_FILES = 1_000
ROWS_PER_FILE = 10
PARTITION = "p0001"


class Files:
    """Hard links of a small Parquet file (an `id` column; the partition value is in the directory)."""

    #: links per template file: ext4 allows 65,000 to one inode
    LINKS_PER_TEMPLATE = 60_000

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        out = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(range(ROWS_PER_FILE), pa.int64())}), out)
        self.directory = directory
        self.data = out.getvalue()
        self.size = len(self.data)
        self.linked = 0
        self.template = directory / "template-0.parquet"
        self.template.write_bytes(self.data)

    def _link(self, path: Path) -> None:
        if self.linked and self.linked % self.LINKS_PER_TEMPLATE == 0:
            self.template = self.directory / f"template-{self.linked // self.LINKS_PER_TEMPLATE}.parquet"
            self.template.write_bytes(self.data)
        os.link(self.template, path)
        self.linked += 1

    def commit(self, table: Table, partitions: list[str]) -> float:
        """One insert_into of a file per entry of `partitions`; its commit() seconds."""
        tx = table.begin("insert_into")
        entries = []
        for n, partition in enumerate(partitions):
            directory = Path(tx.staging_dir) / f"dt={partition}"
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"part-{n:06d}.parquet"
            self._link(path)
            entries.append(
                {"path": str(path), "partition": {"dt": partition}, "rows": ROWS_PER_FILE, "size_bytes": self.size}
            )
        tx.add_files(entries)
        t0 = time.perf_counter()
        tx.commit()
        return time.perf_counter() - t0

    def grow(self, table: Table, upto: int, partitions: int, per_commit: int) -> list[float]:
        """Grow `table` to `upto` live files spread evenly over `partitions`; each commit's seconds."""
        names = [f"p{i:04d}" for i in range(partitions)]
        done = len(table.snapshot().files_by_path)
        seconds = []
        while done < upto:
            batch = min(per_commit, upto - done)
            seconds.append(self.commit(table, [names[(done + i) % partitions] for i in range(batch)]))
            done += batch
            if len(seconds) % 20 == 0:
                log(f"{table.name}: {done:,} live files, last {batch:,}-file commit {seconds[-1]:.2f} s")
        return seconds

    def one_file_commits(self, table: Table, count: int) -> tuple[float, float]:
        """The median seconds of `count` one-file commits (begin, stage, add_files, commit), and the first's."""
        samples = []
        for _ in range(count):
            t0 = time.perf_counter()
            self.commit(table, [PARTITION])
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples), samples[0]


_COLD = """
import json, sys, time
from acidtables import Catalog
from acidtables.core import parse_predicate
names, version, mode = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
with Catalog.connect() as catalog:
    t0 = time.perf_counter()
    if mode == "operator":  # what the operator reads per reconcile, for every table, twice over
        from acidtables.core import LiveRowCounter, partition_files
        from acidtables.operator.status import table_status
        counter = LiveRowCounter()
        for _ in range(2):
            for name in names:
                table = catalog.table(name)
                table_status(table, counter=counter)
                partition_files(table.snapshot(), 32 << 20)
        files = sum(catalog.table(name).snapshot().totals().files for name in names)
    else:
        table = catalog.table(names[0])
        snapshot = table.snapshot(version)
        if mode == "*":  # every entry decoded, as a caller that walks the whole table pays
            files = len(snapshot.files)
        elif mode == "head":
            files = len(snapshot.files_by_path)
        else:  # one partition, planned as SparkTable.read(where=...) plans it
            predicate = parse_predicate(f"dt = '{mode}'", snapshot.metadata.column_types)
            files = len(snapshot.prune(predicate))
    seconds = time.perf_counter() - t0
# the peak of this process's own memory: ru_maxrss would keep the forking parent's (Linux carries it
# across exec), VmHWM is this address space's high-water mark
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "files": files, "peak_bytes": peak}))
"""


def cold(settings: Settings, names: list[str], mode: str = "head", version: int | None = None) -> dict[str, Any]:
    """`mode` in a new process: "head" (a snapshot and its size), "*" (every file decoded), a partition
    value (a plan of that partition) or "operator" (the operator's reads of every table in `names`)."""
    env = {
        **os.environ,
        "ACIDTABLES_ETCD_ENDPOINTS": ",".join(settings.etcd.endpoints),
        "ACIDTABLES_ETCD_PREFIX": settings.etcd.prefix,
        "ACIDTABLES_WAREHOUSE": settings.warehouse,
    }
    done = subprocess.run(
        [sys.executable, "-c", _COLD, json.dumps(names), json.dumps(version), json.dumps(mode)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the cold reader failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _first_task(spark: SparkSession, read: Callable[[], DataFrame]) -> tuple[float, float]:
    """Seconds from calling `read` to the first task of the job it starts (from Spark's status
    tracker), and to the first row."""
    context = spark.sparkContext
    tracker = context.statusTracker()
    group = f"bench-{uuid.uuid4().hex}"
    started: list[float] = []
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set() and not started:
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    found = tracker.getStageInfo(stage)
                    if found and (found.numActiveTasks or found.numCompletedTasks):
                        started.append(time.perf_counter())
                        return
            finished.wait(0.005)

    context.setJobGroup(group, "a timed read")
    watcher = threading.Thread(target=watch, daemon=True)
    try:
        watcher.start()
        t0 = time.perf_counter()
        read().limit(1).collect()
        first_row = time.perf_counter() - t0
    finally:
        finished.set()
        watcher.join()
    return (started[0] - t0 if started else first_row), first_row


def spark_reads(settings: Settings, name: str) -> dict[str, float]:
    """A read of one partition by SparkTable and by the data source, each through a new Catalog (so the
    snapshot is loaded cold, from the checkpoint): seconds from the call to the first task, and to the
    first row."""
    from acidtables.spark import SparkTable

    from .spark_setup import spark_session

    out: dict[str, float] = {}
    where = f"dt = '{PARTITION}'"
    options = {
        "etcd.endpoints": ",".join(settings.etcd.endpoints),
        "etcd.prefix": settings.etcd.prefix,
        "warehouse": settings.warehouse,
    }
    # the status tracker answers from Spark's status store, which by default is written at most every
    # 100 ms a stage: every event is written here, so the first task is seen when it starts
    with spark_session({"spark.ui.liveUpdate.period": "0ms"}) as spark:
        for attempt in ("warm-up", "measured"):  # the first read pays the JVM's warm-up
            with Catalog(settings) as catalog:
                table_read = _first_task(spark, lambda: SparkTable(spark, catalog.table(name)).read(where=where))
            source_read = _first_task(
                spark, lambda: spark.read.format("acidtables").options(**options).load(name).where(where)
            )
            if attempt == "measured":
                out = {
                    "SparkTable, first task": table_read[0],
                    "SparkTable, first row": table_read[1],
                    "data source, first task": source_read[0],
                    "data source, first row": source_read[1],
                }
    return out


def _figures_at(report: Report, label: str, settings: Settings, name: str, partitions: int) -> dict[str, Any]:
    head = cold(settings, [name])
    plan = cold(settings, [name], PARTITION)
    report.add(
        Figure("scale", f"{label}: cold snapshot, new process", head["seconds"], "s", note="issue 32: <= 3 s at 1M")
    )
    report.add(
        Figure("scale", f"{label}:   that process's peak memory", head["peak_bytes"] / 2**20, "MiB", note="<= 1 GiB")
    )
    report.add(
        Figure(
            "scale",
            f"{label}: cold plan of one partition of {partitions:,} ({plan['files']:,} files)",
            plan["seconds"],
            "s",
            note="issue 32: <= 0.3 s",
        )
    )
    report.add(Figure("scale", f"{label}:   that process's peak memory", plan["peak_bytes"] / 2**20, "MiB"))
    return {"head": head, "plan": plan}


def bench_scale(settings: Settings, sizes: Sizes, report: Report, files: Files) -> None:
    details: dict[str, Any] = {}
    with Catalog(settings) as catalog:
        small = catalog.create_table("scale.kilo", schema="id BIGINT, dt STRING", partition_by=["dt"])
        files.grow(small, BASELINE_FILES, 10, BASELINE_FILES)
        base, _ = files.one_file_commits(small, sizes.single_commits)
        report.add(Figure("scale", f"{BASELINE_FILES:,} files: one-file commit", base, "s"))
        details["1000"] = _figures_at(report, f"{BASELINE_FILES:,} files", settings, small.name, 10)
        bulk = files.commit(small, [f"p{i % 10:04d}" for i in range(sizes.per_commit)])
        report.add(Figure("scale", f"{BASELINE_FILES:,} files: a {sizes.per_commit:,}-file commit", bulk, "s"))

        large = catalog.create_table("scale.large", schema="id BIGINT, dt STRING", partition_by=["dt"])
        for stop in sizes.stops:
            label = f"{stop:,} files"
            log(f"growing scale.large to {label} in {sizes.partitions:,} partitions")
            t0 = time.perf_counter()
            growth = files.grow(large, stop, sizes.partitions, sizes.per_commit)
            log(f"grown in {time.perf_counter() - t0:.0f} s")
            # the checkpoints the growth asked for, written by a background thread of this process: timed
            # on their own, and finished before the one-file commits are timed (they would share the GIL)
            t0 = time.perf_counter()
            if not catalog.services.flush(timeout_seconds=3600):
                raise RuntimeError("the background checkpoints did not finish within an hour")
            background = time.perf_counter() - t0
            # a checkpoint of the grown table, so the timed one below is built on it and covers only the
            # one-file commits (the interval may have left the growth's last commits after the last one)
            catalog.services.snapshots.write_checkpoint(large.snapshot(), f"bench-grown-{stop}")
            base, _ = files.one_file_commits(small, sizes.single_commits)
            # the small table's commits pushed the large one's snapshot out of the cache: the first commit
            # here loads it from the checkpoint, as a new process would
            at_size, first = files.one_file_commits(large, sizes.single_commits)
            report.add(
                Figure(
                    "scale",
                    f"{label}: one-file commit",
                    at_size,
                    "s",
                    f"{BASELINE_FILES:,} files",
                    at_size / base,
                    note="issue 32: <= 1.5x",
                )
            )
            report.add(Figure("scale", f"{label}:   the first (its snapshot loaded from the checkpoint)", first, "s"))
            report.add(
                Figure("scale", f"{label}: a {sizes.per_commit:,}-file commit (the growth's last)", growth[-1], "s")
            )
            report.add(Figure("scale", f"{label}: background checkpoint work left after the growth", background, "s"))
            t0 = time.perf_counter()
            catalog.services.snapshots.write_checkpoint(large.snapshot(), f"bench-{stop}")
            report.add(
                Figure(
                    "scale",
                    f"{label}: checkpoint after {sizes.single_commits} one-file commits",
                    time.perf_counter() - t0,
                    "s",
                )
            )
            at = _figures_at(report, label, settings, large.name, sizes.partitions)
            reads = spark_reads(settings, large.name)
            for kind, seconds in reads.items():
                report.add(
                    Figure(
                        "scale",
                        f"{label}: Spark read of one partition, call to {kind}",
                        seconds,
                        "s",
                        note="issue 32: first task <= 1 s" if "task" in kind else "",
                    )
                )
            details[str(stop)] = {**at, "spark": reads, "growth_commit_seconds": growth}
        walked = cold(settings, [large.name], "*")
        report.add(Figure("scale", f"{label}: cold snapshot, every file decoded", walked["seconds"], "s"))
        report.add(Figure("scale", f"{label}:   that process's peak memory", walked["peak_bytes"] / 2**20, "MiB"))
        older = cold(settings, [large.name], version=large.version // 2)
        report.add(
            Figure(
                "scale", f"{label}: cold snapshot at version {large.version // 2} (time travel)", older["seconds"], "s"
            )
        )
        keys, etcd_bytes = catalog.services.coordinator.table_usage(large.table_id)
        report.add(
            Figure(
                "scale",
                f"{label}: etcd bytes of the table ({keys:,} keys)",
                etcd_bytes,
                "B",
                note="issue 32: <= 150 KB",
            )
        )
        details["walked"], details["older"] = walked, older
    report.details["scale"] = details


def bench_ten_tables(settings: Settings, sizes: Sizes, report: Report, files: Files) -> None:
    size = sizes.stops[-1]
    names = [f"scale.ten{i}" for i in range(sizes.tables)]
    with Catalog(settings) as catalog:
        for name in names:
            log(f"growing {name} to {size:,} files")
            files.grow(
                catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"]),
                size,
                sizes.partitions,
                sizes.per_commit,
            )
            if not catalog.services.flush(timeout_seconds=3600):
                raise RuntimeError("the background checkpoints did not finish within an hour")
    found = cold(settings, names, "operator")
    label = f"{sizes.tables} tables of {size:,} files"
    # logged at once: removing the tables' millions of links afterwards takes many minutes
    log(f"{label}: the operator's reads {found['seconds']:.2f} s, peak memory {found['peak_bytes'] / 2**20:.0f} MiB")
    report.add(Figure("ten-tables", f"{label}: the operator's reads, twice over, new process", found["seconds"], "s"))
    report.add(
        Figure(
            "ten-tables",
            f"{label}:   that process's peak memory",
            found["peak_bytes"] / 2**20,
            "MiB",
            note="issue 32: < 1 GiB",
        )
    )
    report.details["ten_tables"] = found


def run(*, quick: bool = False, only: tuple[str, ...] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="scale", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = dict(sizes.__dict__)
    with bench_env() as env:
        files = Files(env.root / "template")
        if "scale" in only:
            bench_scale(env.settings, sizes, report, files)
        if "ten-tables" in only:
            bench_ten_tables(env.settings, sizes, report, files)
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
