"""Reads without Spark (issue 43): `Table.scan().to_arrow()` against delta-rs on the table's Delta mirror
and against a bare `pyarrow.dataset` over the same Parquet files; what the mirror costs a committer; and
one partition of a table of a million live files.

`throughput`: one table of `files` Parquet files (`rows_per_file` rows each: id BIGINT, amount DOUBLE,
name STRING, partitioned by dt over `partitions` values), committed through the public API with
`mirror.formats` = `delta` and its mirror caught up. Each round reads it whole and one partition of it
three ways, in an order that rotates round by round: `Table.scan(...).to_arrow()`;
`deltalake.DeltaTable(location).to_pyarrow_table()` (a new DeltaTable each time, as a reader that opens
the table pays; the partition through `filters=[("dt", "=", ...)]`); and `pyarrow.dataset.dataset`
over the absolute paths of the snapshot's files with Hive partitioning on dt and the schema given (the
floor: no log, no planning; the partition through a filter on dt, which Arrow prunes by path). Figures:
each reader's median throughput, and acidtables' per-round ratios of throughput to each other reader's,
medians. Goals: >= 0.9x the bare files, >= 1.0x delta-rs.

`mirror`: one-file commits (begin, stage, add_files, commit) to a table with the mirror off, to one
with it on (the mirror's background thread running in the committing process, as it does by default),
and to one with it on whose committing process leaves the mirror to another (the operator,
`sync_mirror`), in interleaved rounds with the background work finished between them: the median commit
latency of each and their ratios to off (goal: the mirror invisible, <= 1.1x). Then the background
work itself: with the committing process's scheduling of the mirror turned off, each one-file commit
followed by the call the background thread makes (`sync_delta(..., known=<last mirrored>)`), timed: per
mirrored version, and apart those that write a checkpoint (every `mirror.delta.checkpointInterval`, 10).

`large`: a table grown through the public API to `large_files` live files in `large_partitions`
partitions (hard links of one small Parquet file, as `bench scale` grows them), and, as its baseline, a
table holding only as many files as one partition of it. The files of every other partition of the large
table are then deleted from disk, so a read that opened any of them would fail: `scan(where=dt = ...)`
planned through a new Catalog (cold: snapshot from the checkpoint, partition pruning) and `.to_arrow()`,
timed, and the files the read asked storage for, counted.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import acidtables.core.commit.committer as committer
from acidtables import Catalog, DataFile, Table
from acidtables.core.mirror import sync_delta
from acidtables.core.settings import Settings

from . import workers
from .core import bench_env, log
from .report import Figure, Goal, Report, machine_info, now_iso
from .scale import Files

BENCHMARKS = ("throughput", "mirror", "large")
FILES_GOAL = Goal(">= 0.9 x the bare files", 0.9, at_least=True)
DELTA_GOAL = Goal(">= 1.0 x delta-rs", 1.0, at_least=True)
MIRROR_GOAL = Goal("mirror on <= 1.1 x off", 1.1, at_least=False)
SCHEMA = "id BIGINT, amount DOUBLE, name STRING, dt STRING"
FILE_SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("name", pa.string()), ("dt", pa.string())])
HIVE = ds.partitioning(pa.schema([("dt", pa.string())]), flavor="hive")
READERS = ("acidtables", "delta-rs", "bare files")


@dataclass(frozen=True)
class Sizes:
    files: int
    rows_per_file: int
    partitions: int
    rounds: int
    commit_rounds: int
    commits_per_round: int
    synced_versions: int
    large_files: int
    large_partitions: int
    per_commit: int
    large_reads: int


FULL = Sizes(
    files=200,
    rows_per_file=50_000,
    partitions=10,
    rounds=15,
    commit_rounds=6,
    commits_per_round=100,
    synced_versions=100,
    large_files=1_000_000,
    large_partitions=1_000,
    per_commit=10_000,
    large_reads=7,
)
QUICK = Sizes(
    files=100,
    rows_per_file=20_000,
    partitions=10,
    rounds=7,
    commit_rounds=4,
    commits_per_round=50,
    synced_versions=50,
    large_files=100_000,
    large_partitions=100,
    per_commit=10_000,
    large_reads=5,
)


def _partition(n: int) -> str:
    return f"p{n:02d}"


def _load(table: Table, sizes: Sizes) -> None:
    """`sizes.files` files spread over the partitions, one commit per partition."""
    generator = numpy.random.default_rng(43)
    per_partition = sizes.files // sizes.partitions
    next_id = 0
    for p in range(sizes.partitions):
        with table.begin("insert_into") as tx:
            entries = []
            for n in range(per_partition):
                rows = sizes.rows_per_file
                data = pa.table(
                    {
                        "id": pa.array(numpy.arange(next_id, next_id + rows, dtype=numpy.int64)),
                        "amount": pa.array(generator.random(rows) * 1000),
                        "name": pa.array([f"customer-{i % 9973}" for i in range(rows)]),
                    }
                )
                next_id += rows
                path = Path(tx.staging_dir) / f"dt={_partition(p)}" / f"part-{n:05d}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(data, path)
                entries.append(DataFile(str(path), {"dt": _partition(p)}, rows, path.stat().st_size))
            tx.add_files(entries)
            tx.commit()


def _readers(table: Table, where: str | None, partition: str | None) -> dict[str, Callable[[], pa.Table]]:
    from deltalake import DeltaTable

    paths = [table.storage.absolute(f.path) for f in table.snapshot().files]
    base = str(Path(paths[0]).parents[2])  # <location>/data: the _acid_txn= and dt= levels below it
    dt_filter = ds.field("dt") == partition if partition is not None else None
    delta_partitions = [("dt", "=", partition)] if partition is not None else None
    return {
        "acidtables": lambda: table.scan(where=where).to_arrow(),
        "delta-rs": lambda: DeltaTable(table.location).to_pyarrow_table(filters=delta_partitions),
        "bare files": lambda: ds.dataset(
            paths, schema=FILE_SCHEMA, format="parquet", partitioning=HIVE, partition_base_dir=base
        ).to_table(filter=dt_filter),
    }


def _check_same(readers: dict[str, Callable[[], pa.Table]]) -> int:
    """Every reader returns the same rows (count and sum of ids); the row count."""
    found = {}
    for name, read in readers.items():
        data = read()
        found[name] = (data.num_rows, pc.sum(data["id"]).as_py())
    if len(set(found.values())) != 1:
        raise RuntimeError(f"the readers disagree (rows, sum of ids): {found}")
    return int(next(iter(found.values()))[0])


def _timed(read: Callable[[], pa.Table]) -> float:
    t0 = time.perf_counter()
    read()
    return time.perf_counter() - t0


def bench_throughput(catalog: Catalog, sizes: Sizes, report: Report) -> None:
    table = catalog.create_table("read.orders", SCHEMA, partition_by=["dt"], properties={"mirror.formats": "delta"})
    log(f"writing {sizes.files} files of {sizes.rows_per_file:,} rows")
    _load(table, sizes)
    state = table.sync_mirror()
    if state.lag_versions:
        raise RuntimeError(f"the mirror did not catch up: {state}")
    details: dict[str, Any] = {}
    one = _partition(3)
    for label, where, partition in (
        ("whole table", None, None),
        (f"one partition of {sizes.partitions}", f"dt = '{one}'", one),
    ):
        readers = _readers(table, where, partition)
        rows = _check_same(readers)
        samples: dict[str, list[float]] = {name: [] for name in READERS}
        # a partition reads in a tenth of the time: three times the rounds, for the same noise
        rounds = sizes.rounds if partition is None else 3 * sizes.rounds
        for round_ in range(rounds):
            order = READERS[round_ % 3 :] + READERS[: round_ % 3]
            for name in order:
                samples[name].append(_timed(readers[name]))
            log(f"{label}, round {round_ + 1}: " + ", ".join(f"{n} {samples[n][-1]:.3f} s" for n in READERS))
        for name in READERS:
            report.add(
                Figure(
                    "throughput",
                    f"{label} ({rows:,} rows): {name}",
                    rows / statistics.median(samples[name]),
                    "rows/s",
                    note=f"median {statistics.median(samples[name]):.3f} s of {rounds}",
                )
            )
        for baseline, goal in (("bare files", FILES_GOAL), ("delta-rs", DELTA_GOAL)):
            ratios = [b / a for a, b in zip(samples["acidtables"], samples[baseline], strict=True)]
            report.add(
                Figure(
                    "throughput",
                    f"{label}: acidtables' throughput",
                    statistics.median(ratios),
                    "x",
                    baseline,
                    statistics.median(ratios),
                    goal,
                    note="median of per-round ratios",
                )
            )
        details[label] = {"rows": rows, "seconds": samples}
    report.details["throughput"] = details


@contextmanager
def _mirror_not_scheduled() -> Iterator[None]:
    """Commits of this process leave the mirror alone (the bench calls `sync_delta` itself)."""
    scheduled = getattr(committer, "schedule_mirror")  # noqa: B009 - not in the module's __all__
    setattr(committer, "schedule_mirror", lambda *args: None)  # noqa: B010
    try:
        yield
    finally:
        setattr(committer, "schedule_mirror", scheduled)  # noqa: B010


def bench_mirror(catalog: Catalog, sizes: Sizes, report: Report) -> None:
    elsewhere = "mirror on, written by another process"
    tables = {
        "mirror off": catalog.create_table("read.off", SCHEMA, partition_by=["dt"]),
        "mirror on": catalog.create_table(
            "read.on", SCHEMA, partition_by=["dt"], properties={"mirror.formats": "delta"}
        ),
        # the committing process leaves the mirror to another (the operator, `sync_mirror`): what the
        # commit path itself pays for a mirrored table, without the background thread beside it
        elsewhere: catalog.create_table(
            "read.elsewhere", SCHEMA, partition_by=["dt"], properties={"mirror.formats": "delta"}
        ),
    }
    for name, table in tables.items():  # warm-up: the process learns each table, the mirror thread starts
        with _mirror_not_scheduled() if name == elsewhere else contextlib.nullcontext():
            for _ in range(20):
                workers.append_one(table)
    if not catalog.services.flush(timeout_seconds=300):
        raise RuntimeError("the background work did not finish")
    latencies: dict[str, list[float]] = {name: [] for name in tables}
    medians: dict[str, list[float]] = {name: [] for name in tables}
    names = list(tables)
    for round_ in range(sizes.commit_rounds):
        for name in names[round_ % 3 :] + names[: round_ % 3]:
            samples = []
            with _mirror_not_scheduled() if name == elsewhere else contextlib.nullcontext():
                for _ in range(sizes.commits_per_round):
                    t0 = time.perf_counter()
                    workers.append_one(tables[name])
                    samples.append(time.perf_counter() - t0)
            # what the mirror thread has left is finished before the next round, so it burdens only its own
            if not catalog.services.flush(timeout_seconds=300):
                raise RuntimeError("the background work did not finish")
            latencies[name] += samples
            medians[name].append(statistics.median(samples))
        log(f"commit round {round_ + 1}: " + ", ".join(f"{n} {medians[n][-1] * 1000:.2f} ms" for n in tables))
    state = tables["mirror on"].mirror_state()
    if state.lag_versions:
        raise RuntimeError(f"the mirror is behind after the rounds: {state}")
    for name in tables:
        report.add(
            Figure(
                "mirror",
                f"one-file commit, {name}",
                statistics.median(latencies[name]),
                "s",
                note=f"p95 {sorted(latencies[name])[int(0.95 * len(latencies[name]))] * 1000:.2f} ms",
            )
        )
    for name in ("mirror on", elsewhere):
        ratios = [on / off for on, off in zip(medians[name], medians["mirror off"], strict=True)]
        report.add(
            Figure(
                "mirror",
                f"commit latency, {name}",
                statistics.median(ratios),
                "x",
                "mirror off",
                statistics.median(ratios),
                MIRROR_GOAL,
                note="median of per-round ratios",
            )
        )

    synced = catalog.create_table("read.synced", SCHEMA, partition_by=["dt"], properties={"mirror.formats": "delta"})
    services = catalog.services
    known = sync_delta(services, synced.table_id, synced.location).version
    plain: list[float] = []
    checkpoints: list[float] = []
    interval = 10
    with _mirror_not_scheduled():
        for _ in range(sizes.synced_versions):
            workers.append_one(synced)
            t0 = time.perf_counter()
            state = sync_delta(services, synced.table_id, synced.location, known=known)
            seconds = time.perf_counter() - t0
            known = state.version
            (checkpoints if synced.version % interval == 0 else plain).append(seconds)
    report.add(Figure("mirror", "background work per mirrored version (sync_delta)", statistics.median(plain), "s"))
    report.add(
        Figure(
            "mirror",
            f"  a version that also writes a checkpoint (every {interval})",
            statistics.median(checkpoints),
            "s",
            note=f"table of up to {len(synced.snapshot().files_by_path)} files",
        )
    )
    report.add(
        Figure(
            "mirror",
            "  mean over every version",
            statistics.mean(plain + checkpoints),
            "s",
        )
    )
    report.details["mirror"] = {
        "commit_seconds": latencies,
        "round_medians": medians,
        "sync_seconds": plain,
        "sync_checkpoint_seconds": checkpoints,
    }


class _Opened:
    """Counts the data files a read asks the table's storage for (footers are read through these)."""

    def __init__(self, table: Table) -> None:
        self.paths: set[str] = set()
        self._lock = threading.Lock()
        storage = table.storage
        arrow_file, open_input = storage.arrow_file, storage.open_input

        def counted_arrow_file(relative: str) -> tuple[Any, str]:
            if relative:  # "": the file system itself, which a dataset is given
                with self._lock:
                    self.paths.add(relative)
            return arrow_file(relative)

        def counted_open_input(relative: str) -> Any:
            with self._lock:
                self.paths.add(relative)
            return open_input(relative)

        storage.arrow_file = counted_arrow_file  # type: ignore[method-assign]
        storage.open_input = counted_open_input  # type: ignore[method-assign]


def _cold_partition_read(settings: Settings, name: str, partition: str, into: dict[str, Any]) -> None:
    """Through a new Catalog: seconds to plan `scan(where=dt = partition)` and to read it, and the files
    it planned and opened, added to `into`."""
    with Catalog(settings) as catalog:
        table = catalog.table(name)
        opened = _Opened(table)
        t0 = time.perf_counter()
        scan = table.scan(where=f"dt = '{partition}'")
        t1 = time.perf_counter()
        data = scan.to_arrow()
        t2 = time.perf_counter()
    if any(f.partition.get("dt") != partition for f in scan.files):
        raise RuntimeError(f"{name}: the scan of dt = {partition!r} planned files of other partitions")
    into.setdefault("plan_seconds", []).append(t1 - t0)
    into.setdefault("read_seconds", []).append(t2 - t1)
    into.update(rows=data.num_rows, planned=len(scan.files), opened=len(opened.paths))


def _delete_other_partitions(table: Table, keep: str) -> int:
    """Remove every `dt=` directory of the table's data but `keep`'s; the files removed."""
    removed = 0
    for directory in Path(table.location).glob("data/*/dt=*"):
        if directory.name != f"dt={keep}":
            removed += sum(1 for _ in directory.iterdir())
            shutil.rmtree(directory)
    return removed


def bench_large(settings: Settings, files: Files, sizes: Sizes, report: Report) -> None:
    per_partition = sizes.large_files // sizes.large_partitions
    keep = "p0001"
    with Catalog(settings) as catalog:
        small = catalog.create_table("read.one_partition", schema="id BIGINT, dt STRING", partition_by=["dt"])
        # as many files as one partition of the large table, in a partition of the same name
        files.commit(small, [keep] * per_partition)
        large = catalog.create_table("read.large", schema="id BIGINT, dt STRING", partition_by=["dt"])
        log(f"growing read.large to {sizes.large_files:,} files in {sizes.large_partitions:,} partitions")
        t0 = time.perf_counter()
        files.grow(large, sizes.large_files, sizes.large_partitions, sizes.per_commit)
        log(f"grown in {time.perf_counter() - t0:.0f} s")
        if not catalog.services.flush(timeout_seconds=3600):
            raise RuntimeError("the background checkpoints did not finish within an hour")
        catalog.services.snapshots.write_checkpoint(large.snapshot(), "bench-read-grown")
        catalog.services.snapshots.write_checkpoint(small.snapshot(), "bench-read-grown")
        t0 = time.perf_counter()
        removed = _delete_other_partitions(large, keep)
        log(f"deleted {removed:,} files of the other partitions in {time.perf_counter() - t0:.0f} s")
        removed_small = _delete_other_partitions(small, keep)
    baseline: dict[str, Any] = {}
    at_scale: dict[str, Any] = {}
    for round_ in range(sizes.large_reads):  # interleaved, the order alternating
        reads = [(small.name, baseline), (large.name, at_scale)]
        for name, into in reads if round_ % 2 else reversed(reads):
            _cold_partition_read(settings, name, keep, into)
    label = f"{sizes.large_files:,} files"
    base_label = f"{baseline['planned']:,} files"
    for name, found in ((label, at_scale), (base_label, baseline)):
        report.add(
            Figure(
                "large",
                f"{name}: plan of one partition, new Catalog ({found['planned']:,} files planned)",
                statistics.median(found["plan_seconds"]),
                "s",
            )
        )
        report.add(
            Figure(
                "large",
                f"{name}:   its to_arrow() ({found['rows']:,} rows, {found['opened']:,} files opened)",
                statistics.median(found["read_seconds"]),
                "s",
            )
        )
    plan_total = [p + r for p, r in zip(at_scale["plan_seconds"], at_scale["read_seconds"], strict=True)]
    base_total = [p + r for p, r in zip(baseline["plan_seconds"], baseline["read_seconds"], strict=True)]
    report.add(
        Figure(
            "large",
            f"{label}: plan and read of one partition",
            statistics.median(plan_total),
            "s",
            base_label,
            statistics.median(plan_total) / statistics.median(base_total),
        )
    )
    report.add(
        Figure(
            "large",
            f"{label}: files of the other partitions on disk during the reads ({removed:,} deleted before)",
            0,
            "",
            note="the reads succeeded",
        )
    )
    if at_scale["opened"] != per_partition or at_scale["planned"] != per_partition:
        raise RuntimeError(f"the read of one partition opened {at_scale['opened']:,} files, not {per_partition:,}")
    report.details["large"] = {
        "at_scale": at_scale,
        "baseline": baseline,
        "deleted": removed,
        "deleted_small": removed_small,
    }


def run(*, quick: bool = False, only: tuple[str, ...] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="read", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = dict(sizes.__dict__)
    with bench_env() as env:
        with Catalog(env.settings) as catalog:
            if "throughput" in only:
                bench_throughput(catalog, sizes, report)
            if "mirror" in only:
                bench_mirror(catalog, sizes, report)
        if "large" in only:
            bench_large(env.settings, Files(env.root / "template"), sizes, report)
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
