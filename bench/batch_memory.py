"""`SparkTable.write_stream`'s driver memory without the streaming engine: the micro-batches' commits
called directly, Python's own allocations followed by tracemalloc (issue 42).

    .venv/bin/python -m bench.batch_memory [--batches 2000] [--stops 100,1000,2000] [--compact-every 50]
                                           [--no-tracemalloc]

A local[2] session and a table in `Catalog.local(<tmp>)`; then `BatchCommitter(table, checkpoint,
"append")(batch, batch_id)` for batch ids 0..N-1, each batch a new 10-row DataFrame of one day in one
Spark partition (so one file a batch, as the memory bench's `table-sink` run writes). With
`--compact-every K` the table is minor-compacted (spark.compaction.compact) after every K-th batch, so
its live files stay under K + 1: whatever still grows then is held per batch, not per live file.

At each stop: VmRSS (and again after glibc's malloc_trim and Arrow's pool gave back their free memory),
tracemalloc's total and the growth since the previous stop grouped by traceback (the largest sites),
glibc's bytes in use (mallinfo2: native allocations tracemalloc does not see), Arrow's pool, the live
files and their Python size each. tracemalloc costs about 2x the time; `--no-tracemalloc` runs without
it and reports Python's small-object allocator (its arenas and the bytes in use in them) instead, which
is only readable without tracemalloc's hooks. One JSON document on the last stdout line; the rest goes
to stderr. bench/README.md (streams, memory) has what it found.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import sys
import tempfile
import time
import tracemalloc
import types
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from acidtables import Catalog
from acidtables.spark import local_session, stop_session
from acidtables.spark.compaction import compact
from acidtables.spark.stream_batches import BatchCommitter

from .core import log
from .stream_memory import rss_bytes

SCHEMA = "id BIGINT, ts TIMESTAMP, dt STRING, amount DOUBLE, note STRING"
ROWS_PER_BATCH = 10
#: frames kept per allocation: enough to see which of our modules holds what a library allocated
FRAMES = 12
#: growth sites printed per stop
TOP = 15


def _sites(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> list[dict[str, Any]]:
    """The largest growths between two snapshots, by traceback, innermost acidtables frame first."""
    out = []
    for stat in after.compare_to(before, "traceback")[:TOP]:
        frames = [f"{f.filename.split('site-packages/')[-1].split('operator/')[-1]}:{f.lineno}" for f in stat.traceback]
        out.append({"size_diff": stat.size_diff, "count_diff": stat.count_diff, "frames": frames[::-1]})
    return out


def run(batches: int, stops: list[int], compact_every: int, *, trace: bool = True) -> dict[str, Any]:
    # Spark first: its JVM is a forked child, and forking after gRPC started its threads can fail
    spark = local_session("acidtables-batch-memory")
    spark.sparkContext.setLogLevel("ERROR")
    samples: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="acidtables-batch-memory-") as tmp, Catalog.local(tmp) as catalog:
            table = catalog.create_table("bench.batch_memory", schema=SCHEMA, partition_by=["dt"])
            checkpoint = Path(tmp) / "checkpoint"
            checkpoint.mkdir()
            (checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
            committer = BatchCommitter(table, str(checkpoint), "append")
            if trace:  # off: the allocator's own figures (obmalloc_bytes) are only there without its hooks
                tracemalloc.start(FRAMES)
            previous: tracemalloc.Snapshot | None = None
            started = time.perf_counter()
            for batch_id in range(batches):
                first = batch_id * ROWS_PER_BATCH
                batch = spark.range(first, first + ROWS_PER_BATCH, 1, 1).selectExpr(
                    "id",
                    "current_timestamp() AS ts",
                    "'2026-11-01' AS dt",
                    "CAST(id % 1000 AS DOUBLE) AS amount",
                    "concat('click ', CAST(id AS STRING)) AS note",
                )
                committer(batch, batch_id)
                done = batch_id + 1
                if compact_every and done % compact_every == 0:
                    compact(spark, table, "minor")
                if done in stops:
                    del batch
                    gc.collect()
                    snap = (
                        tracemalloc.take_snapshot().filter_traces((tracemalloc.Filter(False, tracemalloc.__file__),))
                        if trace
                        else None
                    )
                    obmalloc = obmalloc_bytes()
                    files = table.snapshot().files
                    live = len(files)
                    s: dict[str, Any] = {
                        "batches": done,
                        "seconds": round(time.perf_counter() - started, 1),
                        "rss_bytes": rss_bytes_self(),
                        "traced_bytes": sum(t.size for t in snap.statistics("filename")) if snap else 0,
                        "live_files": live,
                        "malloc_in_use_bytes": malloc_in_use(),
                        "arrow_pool_bytes": pa.total_allocated_bytes(),
                        "bytes_per_data_file": deep_bytes(files) // max(live, 1),
                        "arrow_pool_max_bytes": pa.default_memory_pool().max_memory(),
                        "obmalloc_arena_bytes": obmalloc[0],
                        "obmalloc_used_bytes": obmalloc[1],
                        # what stays resident once the allocators give back their free memory: RSS
                        # above it is freed memory an allocator keeps, not memory anything holds
                        "rss_trimmed_bytes": trimmed_rss(),
                        "version": table.snapshot().version,
                    }
                    if previous is not None and snap is not None:
                        s["growth"] = _sites(previous, snap)
                    samples.append(s)
                    log(
                        f"{done:,} batches in {s['seconds']:.0f} s: RSS {s['rss_bytes'] / 2**20:.1f} MiB, traced "
                        f"{s['traced_bytes'] / 2**20:.2f} MiB, "
                        f"malloc {(s['malloc_in_use_bytes'] or 0) / 2**20:.1f} MiB, "
                        f"arrow {s['arrow_pool_bytes'] / 2**20:.1f} (max {s['arrow_pool_max_bytes'] / 2**20:.1f}) MiB, "
                        f"obmalloc {s['obmalloc_arena_bytes'] / 2**20:.1f} MiB "
                        f"({s['obmalloc_used_bytes'] / 2**20:.1f} in use), "
                        f"RSS trimmed {s['rss_trimmed_bytes'] / 2**20:.1f} MiB, {live} live files "
                        f"({s['bytes_per_data_file']:,} B each), version {s['version']}"
                    )
                    for site in s.get("growth", [])[:TOP]:
                        log(
                            f"  {site['size_diff']:+,} B {site['count_diff']:+,} blocks  "
                            + " <- ".join(site["frames"][:6])
                        )
                    previous = snap
                    del files
            tracemalloc.stop()
    finally:
        stop_session(spark)
    return {"batches": batches, "compact_every": compact_every, "samples": samples}


def rss_bytes_self() -> int:
    return rss_bytes(os.getpid())


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_in_use() -> int | None:
    """Bytes glibc's malloc has handed out and not had back (every arena, mmapped blocks included):
    native allocations tracemalloc does not see (pyarrow's parsed footers, gRPC), and Python's larger
    objects, which it does. None off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):
        return None
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def obmalloc_bytes() -> tuple[int, int]:
    """Python's small-object allocator: the bytes of its arenas (what it holds from the system) and of
    the blocks in use in them, from sys._debugmallocstats (which prints to the C stderr)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        key = name.strip()
        if key in ("Total", "# bytes in allocated blocks") and key not in found:
            found[key] = int(value.strip().replace(",", ""))
    return found.get("Total", 0), found.get("# bytes in allocated blocks", 0)


def trimmed_rss() -> int:
    """VmRSS after glibc's malloc_trim and Arrow's pool release what they hold free."""
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_bytes_self()


def deep_bytes(roots: list[Any]) -> int:
    """The bytes of `roots` and everything they reach that is not a type, module or function (shared
    interned strings and small ints count once)."""
    seen: set[int] = set()
    todo = list(roots)
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_memory", description=__doc__)
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--stops", default="100,1000,2000", help="comma-separated batch counts to sample at")
    parser.add_argument("--compact-every", type=int, default=0, help="minor-compact after every K-th batch (0: never)")
    parser.add_argument(
        "--no-tracemalloc", action="store_true", help="without tracemalloc: Python's allocator figures instead"
    )
    args = parser.parse_args(argv)
    stops = [int(s) for s in args.stops.split(",")]
    print(json.dumps(run(args.batches, stops, args.compact_every, trace=not args.no_tracemalloc)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
