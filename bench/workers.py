"""What runs inside the benchmark's child processes (multiprocessing, spawn start method).

`bench.core` starts these in fresh interpreters so that contending writers really run in parallel on
CPython (threads would serialise on the GIL and understate contention), and so that long histories
are built by several writers at once, each appending to its own table. Every function here takes
plain picklable arguments, opens its own Catalog or etcd client, and returns a plain dict.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables import Catalog
from acidtables.core.commit.transaction import Transaction
from acidtables.core.errors import CommitRetriesExhausted
from acidtables.core.log.records import DataFile
from acidtables.core.settings import Settings

#: partitions the history tables spread their appends over
HISTORY_PARTITIONS = tuple(f"2026-11-{day:02d}" for day in range(1, 9))
#: every this-many versions a history table commits a minor compaction instead of an append
COMPACT_EVERY = 50
#: timing blocks of the history build, to show whether commits slow down as the log grows
BLOCK_COMMITS = 1000
#: a long build reports its progress on stderr every this many versions
PROGRESS_EVERY = 10_000


def _parquet_bytes(rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), sink)
    return bytes(sink.getvalue().to_pybytes())


#: one small Parquet file's bytes, encoded once: an append writes them (the commit proves every file it
#: adds, so it must exist and be Parquet) without paying for Parquet encoding in every commit
_SMALL = _parquet_bytes(1)


def small_file(txn: Transaction, partition: str, *, name: str = "part-00000.parquet", rows: int = 1) -> DataFile:
    """The one small data file a benchmark append stages: a real Parquet file of `rows` rows."""
    payload = _SMALL if rows == 1 else _parquet_bytes(rows)
    path = os.path.join(txn.staging_dir, name)
    os.makedirs(txn.staging_dir, exist_ok=True)
    with open(path, "xb") as out:
        out.write(payload)
    return DataFile(path=path, partition={"dt": partition}, rows=rows, size_bytes=len(payload))


#: rows of the Parquet file each benchmark append encodes and writes (the profile in issue 17)
APPEND_ROWS = 100


def append_one(table: Any, partition: str = "a") -> int:
    """One serial `begin/add_files/commit` of a Parquet file of APPEND_ROWS rows, encoded and written
    by this append; returns the commit's retries."""
    txn = table.begin("insert_into")
    txn.add_files([small_file(txn, partition, rows=APPEND_ROWS)])
    return int(txn.commit().retries)


def raw_cas_loop(client: Any, key: str, operations: int) -> list[int]:
    """`operations` successful get + compare-and-swap rounds on one key; returns retries per round.

    This is the floor the library is measured against: the least a commit against etcd can do (one
    read, one conditional write), with the same client library the core uses.
    """
    retries: list[int] = []
    for i in range(operations):
        lost = 0
        while True:
            _, meta = client.get(key)
            succeeded, _ = client.transaction(
                compare=[client.transactions.mod(key) == meta.mod_revision],
                success=[client.transactions.put(key, str(i).encode())],
                failure=[],
            )
            if succeeded:
                break
            lost += 1
        retries.append(lost)
    return retries


def raw_protocol_loop(client: Any, prefix: str, operations: int, record_bytes: int = 1000) -> None:
    """The library's etcd requests with no library around them: the floor of its commit protocol.

    Per commit, as core sends them to a table whose head the writer knows (its own last commit): the
    one compare-and-swap that puts the log entry, the head, the txn index and the time index and
    deletes a registration if there was one. The gap between this and the library is the library's own
    (Python, Parquet) cost; the gap between this and `raw_cas_loop` is the protocol's.
    """
    head = f"{prefix}/head"
    revision = client.put(head, b'{"version":0}').header.revision
    filler = b"x" * record_bytes
    for version in range(1, operations + 1):
        txn_id = uuid.uuid4().hex
        succeeded, responses = client.transaction(
            compare=[client.transactions.mod(head) == revision],
            success=[
                client.transactions.put(f"{prefix}/log/{version:020d}", filler),
                client.transactions.put(head, b'{"version":%d}' % version),
                client.transactions.put(f"{prefix}/txns/{txn_id}", b"%d" % version),
                client.transactions.delete(f"{prefix}/inflight/{txn_id}"),
                client.transactions.put(f"{prefix}/times/{time.time_ns() // 1000:020d}", b"%d" % version),
            ],
            failure=[],
        )
        if not succeeded:
            raise RuntimeError("the serial protocol loop lost a compare-and-swap: something else writes its key")
        revision = responses[0].response_put.header.revision


def _summary(retries: Sequence[int], latencies: Sequence[float], start: float, end: float) -> dict[str, Any]:
    return {
        "commits": len(retries),
        "retries_total": sum(retries),
        "retries_max": max(retries, default=0),
        "latency_p50_seconds": statistics.median(latencies) if latencies else 0.0,
        "latency_max_seconds": max(latencies, default=0.0),
        "latencies_seconds": list(latencies),
        "start": start,
        "end": end,
    }


def contending_raw_writer(settings: Settings, key: str, operations: int, barrier: Any, results: Any) -> None:
    """One of N processes running the raw get+CAS loop on the same key (the contention baseline)."""
    catalog = Catalog(settings)
    try:
        client = catalog.services.coordinator.client
        client.get(key)  # connect before the start line, so connection setup is not timed
        barrier.wait(timeout=300)
        start = time.monotonic()
        retries: list[int] = []
        latencies: list[float] = []
        for _ in range(operations):
            t0 = time.monotonic()
            retries.extend(raw_cas_loop(client, key, 1))
            latencies.append(time.monotonic() - t0)
        results.put({"ok": True, **_summary(retries, latencies, start, time.monotonic())})
    except BaseException as exc:  # the parent must hear about every failure, or it waits forever
        results.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        catalog.close()


def contending_library_writer(
    settings: Settings, table_name: str, commits: int, writer: int, barrier: Any, results: Any
) -> None:
    """One of N processes doing blind appends (begin/add_files/commit) to the same table."""
    catalog = Catalog(settings)
    try:
        table = catalog.table(table_name)
        table.snapshot()  # connect and fill the snapshot cache before the start line
        barrier.wait(timeout=300)
        start = time.monotonic()
        retries: list[int] = []
        latencies: list[float] = []
        exhausted = 0
        for _ in range(commits):
            t0 = time.monotonic()
            try:
                retries.append(append_one(table, partition=f"w{writer:02d}"))
            except CommitRetriesExhausted:
                exhausted += 1
            latencies.append(time.monotonic() - t0)
        results.put({"ok": True, "exhausted": exhausted, **_summary(retries, latencies, start, time.monotonic())})
    except BaseException as exc:  # the parent must hear about every failure, or it waits forever
        results.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        catalog.close()


def _compact_largest_partition(txn: Transaction, version: int) -> bool:
    """Minor-compact the partition with the most files into one file; False if nothing is worth it."""
    by_partition: dict[str, list[DataFile]] = {}
    for f in txn.snapshot.files_by_path.values():
        by_partition.setdefault(str(f.partition["dt"]), []).append(f)
    if not by_partition:
        return False
    partition, files = max(by_partition.items(), key=lambda item: len(item[1]))
    if len(files) < 2:
        return False
    txn.remove_files(files)
    output = small_file(txn, partition, name=f"compacted-{version:07d}.parquet", rows=sum(f.rows for f in files))
    txn.add_files([replace(output, lineage=tuple(f.path for f in files))])
    return True


def build_history(settings: Settings, table_name: str, versions: int) -> dict[str, Any]:
    """Create `table_name` and commit until its head is at `versions`, through the library.

    Most commits append one small file to one of a few partitions; every `COMPACT_EVERY`th commit is a
    minor compaction of the partition with the most files (remove them, add one file whose lineage
    names them), so the active file set stays bounded as it would with automatic compaction running.
    """
    catalog = Catalog(settings)
    try:
        table = catalog.create_table(table_name, schema="id BIGINT, dt STRING", partition_by=["dt"])
        counts: Counter[str] = Counter()
        block_seconds: list[float] = []
        started = block_start = time.monotonic()
        for version in range(1, versions + 1):
            if version % COMPACT_EVERY == 0:
                txn = table.begin("minor_compact")
                if _compact_largest_partition(txn, version):
                    counts["minor_compact"] += 1
                else:
                    txn.add_files([small_file(txn, HISTORY_PARTITIONS[0])])
                    counts["insert_into"] += 1
                info = txn.commit()
            else:
                txn = table.begin("insert_into")
                txn.add_files([small_file(txn, HISTORY_PARTITIONS[version % len(HISTORY_PARTITIONS)])])
                info = txn.commit()
                counts["insert_into"] += 1
            if info.version != version:
                raise RuntimeError(f"{table_name}: expected version {version}, committed {info.version}")
            if version % BLOCK_COMMITS == 0:
                now = time.monotonic()
                block_seconds.append(now - block_start)
                block_start = now
                if versions >= 10 * PROGRESS_EVERY and version % PROGRESS_EVERY == 0:
                    print(
                        f"[bench worker] {table_name}: {version:,}/{versions:,} versions, "
                        f"{BLOCK_COMMITS / block_seconds[-1]:.0f} commits/s",
                        file=sys.stderr,
                        flush=True,
                    )
        elapsed = time.monotonic() - started
        snapshot = table.snapshot()
        return {
            "table": table_name,
            "versions": snapshot.version,
            "active_files": len(snapshot.files_by_path),
            "partitions": len(snapshot.partitions()),
            "commits_by_operation": dict(counts),
            "build_seconds": elapsed,
            "build_commits_per_second": versions / elapsed if elapsed > 0 else 0.0,
            "block_commits": BLOCK_COMMITS,
            "block_seconds": block_seconds,
        }
    finally:
        catalog.close()


def build_histories(settings: Settings, tables: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """Build several history tables one after another in this process."""
    return [build_history(settings, name, versions) for name, versions in tables]
