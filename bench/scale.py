"""Tables of many live files (issue 32): what a commit, a cold snapshot and a one-partition plan cost as
the number of live files grows.

A table of `partitions` partitions is grown through the public API in commits of `per_commit` real
Parquet files each (one small file's bytes, copied into each transaction's staging directory, so every
file passes the commit's proofs), up to `files` live files. Beside it, the same kind of table with 1,000
files is the baseline a one-file commit is compared with. Cold figures come from a new Python process
each (its own interpreter, imports and Catalog): the time from `catalog.table()` to the answer, and the
process's peak resident memory (VmHWM, imports included), as a Spark driver or the operator would
pay them.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables import Catalog, Table
from acidtables.core import Settings

from .core import bench_env, log
from .report import Figure, Report, machine_info, now_iso

BENCHMARKS = ("million",)


@dataclass(frozen=True)
class Sizes:
    files: int
    partitions: int
    per_commit: int
    #: one-file commits timed on each table (the median counts)
    single_commits: int = 21


FULL = Sizes(files=1_000_000, partitions=1_000, per_commit=10_000)
QUICK = Sizes(files=100_000, partitions=100, per_commit=10_000)
BASELINE_FILES = 1_000
ROWS_PER_FILE = 10


def _template() -> bytes:
    """One small Parquet file (an `id` column; the partition value lives in the directory)."""
    out = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(ROWS_PER_FILE), pa.int64())}), out)
    return out.getvalue()


def _commit_files(table: Table, partitions: list[str], template: bytes) -> float:
    """One insert_into of one file per entry of `partitions` (copies of `template`); its commit() seconds."""
    tx = table.begin("insert_into")
    entries = []
    for n, partition in enumerate(partitions):
        directory = Path(tx.staging_dir) / f"dt={partition}"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"part-{n:06d}.parquet"
        path.write_bytes(template)
        entries.append(
            {"path": str(path), "partition": {"dt": partition}, "rows": ROWS_PER_FILE, "size_bytes": len(template)}
        )
    tx.add_files(entries)
    t0 = time.perf_counter()
    tx.commit()
    return time.perf_counter() - t0


def grow(table: Table, files: int, partitions: int, per_commit: int, template: bytes) -> list[float]:
    """Grow `table` to `files` live files spread evenly over `partitions` partitions; each commit's seconds."""
    names = [f"p{i:04d}" for i in range(partitions)]
    seconds = []
    done = 0
    while done < files:
        batch = min(per_commit, files - done)
        seconds.append(_commit_files(table, [names[(done + i) % partitions] for i in range(batch)], template))
        done += batch
        if len(seconds) % 10 == 0:
            log(f"{table.name}: {done:,} live files, last {batch:,}-file commit {seconds[-1]:.2f} s")
    return seconds


def one_file_commits(table: Table, count: int, template: bytes) -> tuple[float, float]:
    """The median seconds of `count` one-file commits (begin, stage, add_files, commit) on `table`, and
    the first one's."""
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        _commit_files(table, ["p0000"], template)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), samples[0]


_COLD = """
import json, sys, time
from acidtables import Catalog
from acidtables.core import parse_predicate
name, version, partition = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
with Catalog.connect() as catalog:
    t0 = time.perf_counter()
    table = catalog.table(name)
    snapshot = table.snapshot(version)
    if partition == "*":  # every entry decoded, as a caller that walks the whole table pays
        files = len(snapshot.files)
    elif partition == "status":  # what the operator reads per reconcile: totals, and per partition
        from acidtables.core.maintenance.compaction import partition_files
        partition_files(snapshot, 32 << 20)
        files = snapshot.totals(32 << 20).files
    elif partition:
        predicate = parse_predicate(f"dt = '{partition}'", snapshot.metadata.column_types)  # as SparkTable.read
        files = len(snapshot.prune(predicate))
    else:
        files = len(snapshot.files_by_path)
    seconds = time.perf_counter() - t0
# the peak of this process's own memory: ru_maxrss would keep the forking parent's (Linux carries it
# across exec), VmHWM is this address space's high-water mark
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "files": files, "peak_bytes": peak}))
"""


def cold(settings: Settings, name: str, version: int | None = None, partition: str | None = None) -> dict[str, Any]:
    """A snapshot in a new process, and its size; given `partition`, the plan of a read of that partition
    ("*": every file decoded; "status": the operator's figures)."""
    env = {
        **os.environ,
        "ACIDTABLES_ETCD_ENDPOINTS": ",".join(settings.etcd.endpoints),
        "ACIDTABLES_ETCD_PREFIX": settings.etcd.prefix,
        "ACIDTABLES_WAREHOUSE": settings.warehouse,
    }
    done = subprocess.run(
        [sys.executable, "-c", _COLD, name, json.dumps(version), json.dumps(partition)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the cold reader failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench_million(settings: Settings, sizes: Sizes, report: Report) -> None:
    template = _template()
    with Catalog(settings) as catalog:
        small = catalog.create_table("million.small", schema="id BIGINT, dt STRING", partition_by=["dt"])
        grow(small, BASELINE_FILES, 10, BASELINE_FILES, template)
        large = catalog.create_table("million.large", schema="id BIGINT, dt STRING", partition_by=["dt"])
        log(f"growing million.large to {sizes.files:,} files in {sizes.partitions:,} partitions")
        t0 = time.perf_counter()
        growth = grow(large, sizes.files, sizes.partitions, sizes.per_commit, template)
        report.details["growth_commit_seconds"] = growth
        log(f"grown in {time.perf_counter() - t0:.0f} s")
        # the checkpoints the growth asked for, written by a background thread of this process: timed on
        # their own, and finished before the one-file commits are timed (they would share the GIL)
        t0 = time.perf_counter()
        if not catalog.services.flush(timeout_seconds=3600):
            raise RuntimeError("the background checkpoints did not finish within an hour")
        background = time.perf_counter() - t0
        middle_version = large.version // 2
        base, _ = one_file_commits(small, sizes.single_commits, template)
        # the small table's commits have pushed the large one's snapshots out of the cache: the first
        # commit here loads its snapshot from the checkpoint, as a new process would
        at_size, first = one_file_commits(large, sizes.single_commits, template)
        # a checkpoint of the head after those one-file commits, built on the last one: what the
        # background thread pays in a steady state, where commits touch a few partitions
        head_snapshot = large.snapshot()
        t0 = time.perf_counter()
        catalog.services.snapshots.write_checkpoint(head_snapshot, "bench-incremental")
        incremental = time.perf_counter() - t0
        keys, etcd_bytes = catalog.services.coordinator.table_usage(large.table_id)
    n = f"{sizes.files:,} files"
    report.add(Figure("million", f"one-file commit, {BASELINE_FILES:,} live files", base, "s"))
    report.add(
        Figure(
            "million", f"one-file commit, {n}", at_size, "s", "1,000 files", at_size / base, note="issue 32: <= 1.5x"
        )
    )
    report.add(Figure("million", "  the first of them (its snapshot loaded from the checkpoint)", first, "s"))
    report.add(Figure("million", f"{sizes.per_commit:,}-file commit, last of the growth", growth[-1], "s"))
    report.add(Figure("million", "background checkpoint work left after the growth", background, "s"))
    report.add(
        Figure("million", f"checkpoint after {sizes.single_commits} one-file commits (incremental)", incremental, "s")
    )
    head = cold(settings, "million.large")
    report.add(
        Figure("million", f"cold snapshot at head, {n}, new process", head["seconds"], "s", note="issue 32: <= 3 s")
    )
    report.add(
        Figure("million", "  that process's peak memory", head["peak_bytes"] / 2**20, "MiB", note="issue 32: <= 1 GiB")
    )
    status = cold(settings, "million.large", partition="status")
    report.add(Figure("million", "cold status figures (totals, per-partition totals)", status["seconds"], "s"))
    report.add(Figure("million", "  that process's peak memory", status["peak_bytes"] / 2**20, "MiB"))
    walked = cold(settings, "million.large", partition="*")
    report.add(Figure("million", "cold snapshot at head, every file decoded", walked["seconds"], "s"))
    report.add(Figure("million", "  that process's peak memory", walked["peak_bytes"] / 2**20, "MiB"))
    older = cold(settings, "million.large", version=middle_version)
    report.add(Figure("million", f"cold snapshot at version {middle_version} (time travel)", older["seconds"], "s"))
    plan = cold(settings, "million.large", partition="p0001")
    report.add(
        Figure(
            "million",
            f"cold plan of one partition of {sizes.partitions:,} ({plan['files']:,} files)",
            plan["seconds"],
            "s",
            note="issue 32: <= 0.3 s",
        )
    )
    report.add(Figure("million", "  that process's peak memory", plan["peak_bytes"] / 2**20, "MiB"))
    report.add(
        Figure("million", f"etcd bytes of the table ({keys:,} keys)", etcd_bytes, "B", note="issue 32: <= 150 KB")
    )
    report.details["cold"] = {"head": head, "status": status, "walked": walked, "older": older, "plan": plan}


def run(*, quick: bool = False, only: tuple[str, ...] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="million", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = dict(sizes.__dict__)
    with bench_env() as env:
        if "million" in only:
            bench_million(env.settings, sizes, report)
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
