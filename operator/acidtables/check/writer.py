"""A writer process of the history runner: random jobs against the run's tables, each call and
outcome appended to its own history file (JSON lines, flushed and fsynced before the commit is sent
and after its answer), so a writer killed with SIGKILL at any point leaves an honest history: a job
whose outcome line is missing is "unknown", and the checker resolves it with find_commit."""

from __future__ import annotations

import io
import json
import os
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables.core import (
    AcidTablesError,
    Catalog,
    CommitSettings,
    ConcurrentModificationException,
    CoordinatorUnavailable,
    DataFile,
    EtcdSettings,
    Settings,
    Table,
    Transaction,
)

PARTITIONS = ("a", "b", "c")
#: operations a writer picks from, with weights (appends most, as in real pipelines)
OPERATIONS = (
    ("insert_into", 6),
    ("insert_overwrite", 2),
    ("truncate", 1),
    ("update", 2),
    ("delete", 2),
    ("minor_compact", 2),
    ("major_compact", 1),
)


class History:
    """One writer's history file: a line per call and per outcome, durable before it matters."""

    def __init__(self, path: Path) -> None:
        self._out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the writer's life)

    def write(self, **event: Any) -> None:
        self._out.write(json.dumps({"time": time.time(), **event}, sort_keys=True) + "\n")
        self._out.flush()
        os.fsync(self._out.fileno())


def _parquet(rows: list[int]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), sink)
    return sink.getvalue()


def _stage(tx: Transaction, partition: str, rows: list[int], name: str) -> DataFile:
    relative = f"{tx.storage.relative(tx.staging_dir)}/dt={partition}/{name}.parquet"
    payload = _parquet(rows)
    tx.storage.write_exclusive(relative, payload)
    low, high = (min(rows), max(rows)) if rows else (0, 0)
    return DataFile(relative, {"dt": partition}, rows=len(rows), size_bytes=len(payload), extra={"ids": [low, high]})


def _job(table: Table, operation: str, partition: str, rng: random.Random, n: int) -> Transaction | None:
    """Begin a job, stage its files; None when there is nothing to do (an empty partition to rewrite)."""
    tx = table.begin(operation)
    where = f"dt = '{partition}'"
    rows = [rng.randrange(1_000_000) for _ in range(rng.randrange(1, 4))]
    if operation == "insert_into":
        tx.add_files([_stage(tx, partition, rows, f"ins-{n}")])
    elif operation == "insert_overwrite":
        tx.remove_files(tx.scan(where))
        tx.add_files([_stage(tx, partition, rows, f"ovw-{n}")])
        tx.set_scope([{"dt": partition}])
    elif operation == "truncate":
        tx.remove_files(tx.scan(None))
        tx.set_scope(None)
    elif operation in ("update", "delete"):
        files = tx.scan(where)
        if not files:
            tx.abort()
            return None
        victim = rng.choice(files)
        tx.remove_files([victim])
        kept = max(0, victim.rows - 1) + (1 if operation == "update" else 0)
        if kept:
            tx.add_files([_stage(tx, partition, rows[:1] * kept, f"{operation[:3]}-{n}")])
        tx.set_scope([{"dt": partition}])
    else:  # minor_compact, major_compact: every file of the partition into one
        files = tx.scan(where)
        if len(files) < 2:
            tx.abort()
            return None
        tx.remove_files(files)
        total = sum(f.rows for f in files)
        output = _stage(tx, partition, list(range(total)), f"cmp-{n}")
        tx.add_files([replace(output, lineage=tuple(f.path for f in files))])
        tx.set_scope([{"dt": partition}])
    return tx


def run_writer(
    endpoint: str, prefix: str, warehouse: str, tables: list[str], seed: int, history: str, until: float
) -> None:
    """Entry point of one writer process: random jobs until `until` (time.time())."""
    rng = random.Random(seed)
    log = History(Path(history))
    commit = CommitSettings(lease_ttl_seconds=3, register_after_seconds=0.2)
    settings = Settings(
        etcd=EtcdSettings((endpoint,), prefix=prefix, unavailable_timeout_seconds=8.0),
        warehouse=warehouse,
        commit=commit,
    )
    names = [op for op, weight in OPERATIONS for _ in range(weight)]
    with Catalog(settings) as catalog:
        handles = {name: catalog.table(name) for name in tables}
        n = 0
        while time.time() < until:
            n += 1
            name, operation, partition = rng.choice(tables), rng.choice(names), rng.choice(PARTITIONS)
            try:
                tx = _job(handles[name], operation, partition, rng, n)
            except AcidTablesError as exc:  # etcd away while beginning: nothing was sent
                log.write(kind="skipped", table=name, operation=operation, error=type(exc).__name__)
                time.sleep(0.1)
                continue
            if tx is None:
                continue
            log.write(
                kind="invoke",
                table=name,
                operation=operation,
                partition=partition,
                txn_id=tx.txn_id,
                read_version=tx.read_version,
            )
            try:
                info = tx.commit()
            except ConcurrentModificationException as exc:
                log.write(kind="fail", txn_id=tx.txn_id, exception=type(exc).__name__)
            except CoordinatorUnavailable as exc:
                # the commit may or may not have landed (CommitOutcomeUnknown) or was never sent
                log.write(kind="unknown", txn_id=tx.txn_id, exception=type(exc).__name__)
            except AcidTablesError as exc:
                log.write(kind="fail", txn_id=tx.txn_id, exception=type(exc).__name__, message=str(exc)[:300])
            else:
                log.write(kind="ok", txn_id=tx.txn_id, version=info.version, skipped=info.skipped)
