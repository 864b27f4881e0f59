"""The memory benchmark's Spark drivers: one stream run for many micro-batches in a process of its own,
its memory sampled along the way.

`bench.stream` calls `measure()`, which starts `python -m bench.stream_memory ROLE JSON` so each run
begins from a clean JVM and a clean set of Python workers, and reads one JSON document back from its
last stdout line. Roles:

- `sink`: `writeStream.format("acidtables")` of 10-row micro-batches (the rate-micro-batch source, no
  trigger interval: back to back), one file and one commit each;
- `table-sink`: the same rows through `SparkTable.write_stream` (foreachBatch, Spark's Parquet writer,
  the commit in this driver's Python);
- `source`: `readStream.format("acidtables")` of a table of one-file versions from version 0 with
  maxFilesPerTrigger=1 and Trigger.AvailableNow into the noop sink: one version per micro-batch;
- `parquet-sink` and `parquet-source`: the baselines, the same streams through Spark's own Parquet file
  sink (into a directory) and file source (over a directory holding the source table's files, hard
  links, in commit order), so what Spark and its JVM grow by themselves is measured beside them.

`BENCH_STREAM_MEMORY_JVM_OPTIONS` becomes the driver JVM's `spark.driver.extraJavaOptions` (how a
garbage collector's settings change its resident memory over a long stream).

At each stop (completed micro-batches) it samples this driver's Python (VmRSS of /proc/self/status),
the JVM it launched (and its heap committed, in use after a full GC, and its non-heap memory: metaspace
and code cache), and the JVM's Python children (the worker daemon, its forked workers, the
streaming source's and sink's Python runners), each by VmRSS and by Pss (/proc/<pid>/smaps_rollup: a
forked worker's pages shared with the daemon counted once across them). The heap in use after a full GC
tells a leak from a heap Java has merely grown into. psutil is not a dependency:
processes are found by walking /proc for parent ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from acidtables import Catalog
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.spark import SparkTable, local_session, stop_session

from .core import log
from .stream_setup import batched_events, completed_batches, source_options

ROLES = ("sink", "table-sink", "source", "parquet-sink", "parquet-source")
#: roles whose `Run.table` is a directory, not a table name
PARQUET_ROLES = ("parquet-sink", "parquet-source")
#: extra options for each driver's JVM (spark.driver.extraJavaOptions); empty: none
JVM_OPTIONS_VARIABLE = "BENCH_STREAM_MEMORY_JVM_OPTIONS"
#: rows per micro-batch of the sinks' runs: as small as a batch gets while still writing a file
SINK_ROWS_PER_BATCH = 10
#: how often the driver looks at the query's progress
POLL_SECONDS = 0.1


# --- processes, from /proc ------------------------------------------------------------------------------


def _status_kib(pid: int, field: str) -> int:
    """A `field:` line of /proc/<pid>/status in KiB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS") * 1024


def pss_bytes(pid: int) -> int:
    """Proportional set size: each shared page divided among the processes sharing it."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _comm_and_parent(pid: int) -> tuple[str, int] | None:
    """A process's command name and parent id, from /proc/<pid>/stat (the name is in parentheses and
    may hold spaces, so the fields after it are split from its last parenthesis)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, int(text[text.rindex(")") + 2 :].split()[1])


def descendants(root: int) -> list[tuple[int, str]]:
    """Every process below `root` (children, their children, ...), with its command name."""
    children: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            found = _comm_and_parent(int(entry.name))
            if found is not None:
                children[found[1]].append((int(entry.name), found[0]))
    out: list[tuple[int, str]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def jvm_pid() -> int:
    """The JVM this driver launched (PySpark's gateway: spark-submit execs java)."""
    found = [pid for pid, name in descendants(os.getpid()) if name == "java"]
    if len(found) != 1:
        raise RuntimeError(f"expected one JVM below this driver, found {found}")
    return found[0]


def sample(spark: SparkSession, jvm: int, batches: int, started: float) -> dict[str, Any]:
    """The memory of this driver's three kinds of process after `batches` micro-batches."""
    workers = [pid for pid, name in descendants(jvm) if name.startswith("python")]
    java: Any = spark.sparkContext._jvm
    runtime = java.java.lang.Runtime.getRuntime()
    committed = int(runtime.totalMemory())  # before the GC, which may shrink it
    java.java.lang.System.gc()
    heap = int(runtime.totalMemory()) - int(runtime.freeMemory())
    non_heap = int(java.java.lang.management.ManagementFactory.getMemoryMXBean().getNonHeapMemoryUsage().getUsed())
    me = os.getpid()
    return {
        "batches": batches,
        "seconds": time.perf_counter() - started,
        "driver_rss_bytes": rss_bytes(me),
        "driver_pss_bytes": pss_bytes(me),
        "jvm_rss_bytes": rss_bytes(jvm),
        "jvm_pss_bytes": pss_bytes(jvm),
        "jvm_heap_after_gc_bytes": heap,
        "jvm_heap_committed_bytes": committed,
        # metaspace, code cache and compressed class space
        "jvm_non_heap_bytes": non_heap,
        "jvm_threads": _status_kib(jvm, "Threads"),
        "workers": len(workers),
        "workers_rss_bytes": sum(rss_bytes(p) for p in workers),
        "workers_pss_bytes": sum(pss_bytes(p) for p in workers),
        "largest_worker_rss_bytes": max((rss_bytes(p) for p in workers), default=0),
    }


# --- the driver process -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the parent tells a driver process: where the table is, and when to sample and stop."""

    endpoints: tuple[str, ...]
    prefix: str
    warehouse: str
    #: the table's name, or for PARQUET_ROLES the directory written or read
    table: str
    checkpoint: str
    stops: tuple[int, ...]
    max_seconds: float
    jvm_options: str = ""

    def settings(self) -> Settings:
        return Settings(etcd=EtcdSettings(self.endpoints, prefix=self.prefix), warehouse=self.warehouse)


def _drained(stream: DataFrame, run: Run) -> StreamingQuery:
    """A source's run: every micro-batch into the noop sink, until the source has no more."""
    writer = stream.writeStream.format("noop").option("checkpointLocation", run.checkpoint)
    return writer.trigger(availableNow=True).start()


def _start(role: str, spark: SparkSession, catalog: Catalog, run: Run) -> StreamingQuery:
    options = source_options(run.settings())
    if role == "parquet-source":
        any_file = str(next(Path(run.table).iterdir()))  # the file source needs the schema up front
        reader = spark.readStream.schema(spark.read.parquet(any_file).schema)
        return _drained(reader.option("maxFilesPerTrigger", 1).parquet(run.table), run)
    if role == "source":
        reader = spark.readStream.format("acidtables").options(**options)
        return _drained(reader.option("maxFilesPerTrigger", 1).option("startingVersion", 0).load(run.table), run)
    # one day: one file, so one commit of one file, per micro-batch
    events = batched_events(spark, SINK_ROWS_PER_BATCH, days=1)
    if role == "table-sink":
        return SparkTable(spark, catalog.table(run.table)).write_stream(events, run.checkpoint)
    if role == "parquet-sink":
        return (
            events.writeStream.format("parquet")
            .partitionBy("dt")
            .option("path", run.table)
            .option("checkpointLocation", run.checkpoint)
            .start()
        )
    writer = events.writeStream.format("acidtables").options(**options)
    return writer.option("checkpointLocation", run.checkpoint).start(run.table)


def drive(role: str, run: Run) -> dict[str, Any]:
    """Run the stream until its last stop (or `max_seconds`, or, for the source, the table's end),
    sampling memory at each stop."""
    # Spark first: its JVM is a forked child, and forking after gRPC (the etcd client) starts its threads
    # can leave the child without the descriptors it needs (acidtables.jobs.compact says the same)
    conf = {"spark.driver.extraJavaOptions": run.jvm_options} if run.jvm_options else None
    spark = local_session(f"acidtables-bench-memory-{role}", conf=conf)
    try:
        jvm = jvm_pid()
        with Catalog(run.settings()) as catalog:
            started = time.perf_counter()
            query = _start(role, spark, catalog, run)
            samples: list[dict[str, Any]] = []
            stops = list(run.stops)
            stopped_by = "stops"
            try:
                while stops:
                    done = completed_batches(query)
                    if done >= stops[0]:
                        samples.append(sample(spark, jvm, done, started))
                        log(f"memory {role}: {_line(samples[-1])}")
                        while stops and stops[0] <= done:
                            stops.pop(0)
                        continue
                    if not query.isActive:
                        if query.exception() is not None:
                            raise RuntimeError(f"the {role} query failed after {done} batches: {query.exception()}")
                        stopped_by = "end of the table"
                        break
                    if time.perf_counter() - started > run.max_seconds:
                        stopped_by = f"time limit ({run.max_seconds:g} s)"
                        break
                    time.sleep(POLL_SECONDS)
                done = completed_batches(query)
                if stopped_by != "stops" and (not samples or samples[-1]["batches"] < done):
                    samples.append(sample(spark, jvm, done, started))
                    log(f"memory {role}: {_line(samples[-1])} ({stopped_by})")
            finally:
                query.stop()
    finally:
        stop_session(spark)
    return {"role": role, "stopped_by": stopped_by, "samples": samples}


def _line(s: dict[str, Any]) -> str:
    mib = 2**20
    return (
        f"{s['batches']:,} batches in {s['seconds']:.0f} s: driver {s['driver_rss_bytes'] / mib:.0f} MiB, "
        f"JVM {s['jvm_rss_bytes'] / mib:.0f} MiB (heap after GC {s['jvm_heap_after_gc_bytes'] / mib:.0f} MiB), "
        f"{s['workers']} Python workers {s['workers_rss_bytes'] / mib:.0f} MiB"
    )


def main(argv: Sequence[str]) -> int:
    role, spec = argv
    if role not in ROLES:
        raise SystemExit(f"role must be one of {', '.join(ROLES)}, found {role!r}")
    found = json.loads(spec)
    run = Run(**{**found, "endpoints": tuple(found["endpoints"]), "stops": tuple(found["stops"])})
    print(json.dumps(drive(role, run)), flush=True)
    return 0


# --- the parent's side --------------------------------------------------------------------------------


def measure(
    settings: Settings, role: str, table: str, root: Path, stops: Sequence[int], max_seconds: float
) -> dict[str, Any]:
    """One role's run in a new driver process; what it measured."""
    run = Run(
        endpoints=tuple(settings.etcd.endpoints),
        prefix=settings.etcd.prefix,
        warehouse=settings.warehouse,
        table=table,
        checkpoint=str(root / f"memory-{role}-{uuid.uuid4().hex[:6]}"),
        stops=tuple(stops),
        max_seconds=max_seconds,
        jvm_options=os.environ.get(JVM_OPTIONS_VARIABLE, "").strip(),
    )
    spec = json.dumps(run.__dict__)
    # stderr goes straight to the bench's: the driver's progress lines, and Spark's errors if any
    done = subprocess.run(
        [sys.executable, "-m", "bench.stream_memory", role, spec],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
        timeout=max_seconds + 1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {role} memory driver failed (exit {done.returncode}); its errors are above")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
