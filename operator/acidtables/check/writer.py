"""A writer process of the history runner: random jobs against the run's tables, each call and
outcome appended to its own history file (JSON lines, flushed and fsynced before the commit is sent
and after its answer), so a writer killed with SIGKILL at any point leaves an honest history: a job
whose outcome line is missing is "unknown", and the checker resolves it with find_commit.

Some jobs are multi-table transactions (issue 44): `catalog.transaction()` with one part per chosen
table, each part one of the same random jobs, committed together (or, now and then, aborted on
purpose). Each part gets its own invoke and outcome line, naming the group's id and tables, so every
part is checked as a single job is and the group as a whole besides. A reader process
(`run_reader`) meanwhile pins several tables at one instant with `catalog.snapshots()` and records the
versions it saw, for the checker's atomic-visibility check."""

from __future__ import annotations

import io
import json
import logging
import os
import random
import signal
import threading
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
from acidtables.core.catalog.multi_table import MultiTableTransaction

from .plants import plant

PARTITIONS = ("a", "b", "c")
#: job kinds a writer picks from, with weights (appends most, as in real pipelines). insert_select is
#: an INSERT that reads the table first (Delta's INS-R); app_insert an idempotent append carrying the
#: writer's application id (D-27); insert_overwrite a static overwrite of one partition,
#: overwrite_dynamic one of the partitions the new rows land in, overwrite_table of the whole table.
JOBS = (
    ("insert_into", 5),
    ("insert_select", 1),
    ("app_insert", 2),
    ("insert_overwrite", 2),
    ("overwrite_dynamic", 1),
    ("overwrite_table", 1),
    ("truncate", 1),
    ("update", 2),
    ("delete", 2),
    ("merge", 2),
    ("minor_compact", 2),
    ("major_compact", 1),
    ("cluster", 1),
    ("alter", 1),
)
#: where a writer may kill itself with SIGKILL: in the middle of staging (no invoke line yet), staged
#: but not yet committing, and inside commit() (a timer fires while the commit's requests are out)
KILL_POINTS = ("staging", "staged", "commit")
#: writers' lease: a killed writer's in-flight registrations are gone this long after it died
LEASE_SECONDS = 3
#: seconds into commit() at which the "commit" kill point fires: a commit takes a few milliseconds
COMMIT_KILL_WINDOW_SECONDS = 0.02
#: share of jobs that are multi-table transactions (when the run has two tables or more), and the most
#: tables one of them spans
MULTI_TABLE_RATE = 0.3
MULTI_TABLE_MOST = 3
#: share of multi-table transactions the writer aborts on purpose once every part is staged
MULTI_TABLE_ABORT_RATE = 0.05


class History:
    """One writer's history file: a line per call and per outcome, durable before it matters."""

    def __init__(self, path: Path) -> None:
        self._out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the writer's life)

    def write(self, **event: Any) -> None:
        self._out.write(json.dumps({"time": time.time(), **event}, sort_keys=True) + "\n")
        self._out.flush()
        os.fsync(self._out.fileno())


def parquet_of(rows: list[int]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(rows, pa.int64())}), sink)
    return sink.getvalue()


class Writer:
    """One writer process's state: its random choices, its history and its application id's next
    version (advanced only by an acknowledged write, so a write whose outcome was unknown is retried
    with the same version and must land at most once)."""

    def __init__(self, rng: random.Random, log: History, seed: int, kill_rate: float) -> None:
        self.rng, self.log, self.kill_rate = rng, log, kill_rate
        self.app_id = f"check-writer-{seed}"
        self.app_version = 1
        self.kill_point = ""

    def maybe_die(self, point: str) -> None:
        """SIGKILL this process at `point` if the dice chose it for this job."""
        if self.kill_point == point:
            self.log.write(kind="kill", point=point)
            os.kill(os.getpid(), signal.SIGKILL)

    def stage(self, tx: Transaction, partition: str | None, rows: list[int], name: str) -> DataFile:
        directory = tx.storage.relative(tx.staging_dir) + ("" if partition is None else f"/dt={partition}")
        payload = parquet_of(rows)
        tx.storage.write_exclusive(f"{directory}/{name}.parquet", payload)
        self.maybe_die("staging")
        values = {} if partition is None else {"dt": partition}
        # the rows themselves ride along in the log (a few per file), so the checker can compare every
        # live file's content with what its commit said it wrote, row by row
        return DataFile(
            f"{directory}/{name}.parquet", values, rows=len(rows), size_bytes=len(payload), extra={"rows": rows}
        )

    def job(
        self, table: Table, kind: str, partition: str, n: int, group: MultiTableTransaction | None = None
    ) -> Transaction | None:
        """Begin a job and stage its files; None when there is nothing to do (an empty partition to
        rewrite). On an unpartitioned table every job is about the whole table. With `group`, the job is
        that multi-table transaction's part on `table` (and None means the whole group was aborted: a
        part's abort() gives up every part)."""
        partitioned = bool(table.metadata.partition_by)
        part = partition if partitioned else None
        where = f"dt = '{partition}'" if partitioned else None
        scope = [{"dt": partition}] if partitioned else None
        operation = {
            "insert_select": "insert_into",
            "app_insert": "insert_into",
            "overwrite_dynamic": "insert_overwrite",
            "overwrite_table": "insert_overwrite",
        }.get(kind, kind)
        tx = table.begin(operation) if group is None else group.begin(table, operation)
        rows = [self.rng.randrange(1_000_000) for _ in range(self.rng.randrange(1, 4))]
        if kind in ("insert_into", "insert_select", "app_insert"):
            if kind == "insert_select":
                tx.scan(where)  # INSERT ... SELECT from the table itself: not a blind append
            if kind == "app_insert":
                tx.set_app_transaction(self.app_id, self.app_version)
            tx.add_files([self.stage(tx, part, rows, f"ins-{n}")])
        elif kind == "insert_overwrite":
            tx.remove_files(tx.scan(where))
            tx.add_files([self.stage(tx, part, rows, f"ovw-{n}")])
            if partitioned:
                tx.set_scope(scope)
        elif kind == "overwrite_dynamic" and partitioned:
            landed = sorted({partition, self.rng.choice(PARTITIONS)})
            for value in landed:
                tx.remove_files(tx.scan(f"dt = '{value}'"))
                tx.add_files([self.stage(tx, value, rows, f"dyn-{n}-{value}")])
            tx.set_scope([{"dt": value} for value in landed])
        elif kind in ("overwrite_table", "overwrite_dynamic"):  # dynamic on an unpartitioned table: all of it
            tx.remove_files(tx.scan(None))
            tx.add_files([self.stage(tx, part, rows, f"all-{n}")])
            tx.set_scope(None)
        elif kind == "truncate":
            tx.remove_files(tx.scan(None))
            tx.set_scope(None)
        elif kind == "alter":
            tx.update_metadata(properties={"check.alter": str(n)})
        elif kind in ("update", "delete", "merge"):
            files = tx.scan(where)
            if not files:
                tx.abort()
                return None
            victim = self.rng.choice(files)
            tx.remove_files([victim])
            # copy-on-write of one file: DELETE drops its first row, UPDATE changes it, MERGE changes it
            # and inserts new rows
            old = list(victim.extra.get("rows", [0] * victim.rows))
            new = old[1:] if kind == "delete" else rows[:1] + old[1:] + (rows[1:] if kind == "merge" else [])
            if new:
                tx.add_files([self.stage(tx, part, new, f"{kind[:3]}-{n}")])
            if partitioned:
                tx.set_scope(scope)
        else:  # minor_compact, major_compact, cluster: every file of the partition into one
            files = tx.scan(where)
            if len(files) < 2:
                tx.abort()
                return None
            tx.remove_files(files)
            # the same rows in one file: the checker holds every committed rewrite to exactly that
            merged = [row for f in files for row in f.extra.get("rows", [0] * f.rows)]
            output = self.stage(tx, part, merged, f"cmp-{n}")
            tx.add_files([replace(output, lineage=tuple(f.path for f in files))])
            if partitioned:
                tx.set_scope(scope)
        return tx

    def commit(self, tx: Transaction | MultiTableTransaction) -> Any:
        if self.kill_point != "commit":
            return tx.commit()
        timer = threading.Timer(self.rng.uniform(0, COMMIT_KILL_WINDOW_SECONDS), self.maybe_die, ("commit",))
        timer.start()
        try:
            return tx.commit()
        finally:
            timer.cancel()

    def single(self, handles: dict[str, Table], kinds: list[str], n: int) -> None:
        """One job on one table."""
        rng, log = self.rng, self.log
        name, kind, partition = rng.choice(sorted(handles)), rng.choice(kinds), rng.choice(PARTITIONS)
        try:
            tx = self.job(handles[name], kind, partition, n)
        except AcidTablesError as exc:  # etcd away while beginning: nothing was sent
            log.write(kind="skipped", table=name, operation=kind, error=type(exc).__name__)
            time.sleep(0.1)  # a pause before the next job, not synchronisation
            return
        if tx is None:
            return
        self.log_invoke(name, kind, partition, tx)
        self.maybe_die("staged")
        try:
            info = self.commit(tx)
        except AcidTablesError as exc:
            log.write(txn_id=tx.txn_id, **failed(exc))
        else:
            log.write(kind="ok", txn_id=tx.txn_id, version=info.version, skipped=info.skipped)
            if kind == "app_insert":
                self.app_version += 1

    def multi(self, catalog: Catalog, handles: dict[str, Table], kinds: list[str], n: int) -> None:
        """One multi-table transaction: a random job per part on two or more tables, committed together
        (or aborted on purpose). Every part's invoke line names the group and its tables before the
        commit is sent; every part's outcome is the group's."""
        rng, log = self.rng, self.log
        chosen = rng.sample(sorted(handles), rng.randint(2, min(MULTI_TABLE_MOST, len(handles))))
        group = catalog.transaction()
        parts: list[tuple[str, str, str, Transaction]] = []
        try:
            for name in chosen:
                kind, partition = rng.choice(kinds), rng.choice(PARTITIONS)
                if not _has_work(handles[name], kind, partition):
                    # an empty partition to rewrite would give the whole group up: an append instead (a
                    # group still ends up aborted when a rewrite's files go between this look and its scan)
                    kind = "insert_into"
                tx = self.job(handles[name], kind, partition, n, group)
                if tx is None:  # nothing to do on this table: its abort() gave the whole group up
                    break
                parts.append((name, kind, partition, tx))
        except AcidTablesError as exc:  # etcd away while beginning: nothing was sent
            group.abort()
            log.write(kind="skipped", table=",".join(chosen), operation="multi", error=type(exc).__name__)
            time.sleep(0.1)  # a pause before the next job, not synchronisation
            return
        tables = [name for name, _, _, _ in parts]
        for name, kind, partition, tx in parts:
            self.log_invoke(name, kind, partition, tx, multi_txn_id=group.id, multi_txn_tables=tables)
        if group.state == "aborted" or rng.random() < MULTI_TABLE_ABORT_RATE:
            group.abort()
            for _, _, _, tx in parts:
                log.write(kind="aborted", txn_id=tx.txn_id, multi_txn_id=group.id)
            return
        self.maybe_die("staged")
        try:
            infos = self.commit(group)
        except AcidTablesError as exc:
            for _, _, _, tx in parts:
                log.write(txn_id=tx.txn_id, multi_txn_id=group.id, **failed(exc))
            return
        for name, _, _, tx in parts:
            info = infos[name]
            log.write(kind="ok", txn_id=tx.txn_id, multi_txn_id=group.id, version=info.version, skipped=info.skipped)
        if any(kind == "app_insert" for _, kind, _, _ in parts):
            self.app_version += 1

    def log_invoke(self, name: str, kind: str, partition: str, tx: Transaction, **group: Any) -> None:
        """A job's invoke line, written before its commit is sent: what it does where, from which read
        version, its application id and version when it writes one, and its group when it has one."""
        app = {"app_id": self.app_id, "app_version": self.app_version} if kind == "app_insert" else {}
        self.log.write(
            kind="invoke",
            table=name,
            operation=kind,
            partition=partition,
            txn_id=tx.txn_id,
            read_version=tx.read_version,
            **group,
            **app,
        )


def failed(exc: AcidTablesError) -> dict[str, Any]:
    """The outcome line of a commit that raised: a conflict fails it, an unreachable etcd leaves it
    unknown (it may have landed: CommitOutcomeUnknown, or was never sent), anything else fails it."""
    if isinstance(exc, ConcurrentModificationException):
        return {"kind": "fail", "exception": type(exc).__name__}
    if isinstance(exc, CoordinatorUnavailable):
        return {"kind": "unknown", "exception": type(exc).__name__}
    return {"kind": "fail", "exception": type(exc).__name__, "message": str(exc)[:300]}


#: jobs with nothing to do on a partition holding fewer files than this
_FILES_NEEDED = {"update": 1, "delete": 1, "merge": 1, "minor_compact": 2, "major_compact": 2, "cluster": 2}


def _has_work(table: Table, kind: str, partition: str) -> bool:
    """Whether `kind` finds files to rewrite in `partition` (all of an unpartitioned table) now."""
    needed = _FILES_NEEDED.get(kind, 0)
    if not needed:
        return True
    partitioned = bool(table.metadata.partition_by)
    files = [
        f for f in table.snapshot().files_by_path.values() if not partitioned or f.partition.get("dt") == partition
    ]
    return len(files) >= needed


def run_writer(
    endpoints: tuple[str, ...],
    prefix: str,
    warehouse: str,
    tables: list[str],
    seed: int,
    history: str,
    until: float,
    kill_rate: float = 0.0,
    multi_rate: float = MULTI_TABLE_RATE,
    planted: str | None = None,
) -> None:
    """Entry point of one writer process: random jobs until `until` (time.time()); with `kill_rate`,
    that share of jobs ends with this process killing itself at one of KILL_POINTS; `multi_rate` of
    them are multi-table transactions; `planted` names a bug to plant first (acidtables.check.plants)."""
    # the core's warnings (an expired lease, a reconnect) go beside the history, not to the terminal
    logging.basicConfig(filename=Path(history).with_suffix(".log"), level=logging.INFO, force=True)
    plant(planted)
    rng = random.Random(seed)
    writer = Writer(rng, History(Path(history)), seed, kill_rate)
    commit = CommitSettings(lease_ttl_seconds=LEASE_SECONDS, register_after_seconds=0.2)
    settings = Settings(
        etcd=EtcdSettings(endpoints, prefix=prefix, unavailable_timeout_seconds=8.0),
        warehouse=warehouse,
        commit=commit,
    )
    kinds = [kind for kind, weight in JOBS for _ in range(weight)]
    with Catalog(settings) as catalog:
        handles = {name: catalog.table(name) for name in tables}
        n = 0
        while time.time() < until:
            n += 1
            writer.kill_point = rng.choice(KILL_POINTS) if rng.random() < kill_rate else ""
            if len(handles) > 1 and rng.random() < multi_rate:
                writer.multi(catalog, handles, kinds, n)
            else:
                writer.single(handles, kinds, n)


def run_reader(
    endpoints: tuple[str, ...],
    prefix: str,
    warehouse: str,
    tables: list[str],
    seed: int,
    history: str,
    until: float,
    planted: str | None = None,
) -> None:
    """Entry point of a reader process: until `until`, pins two or more of `tables` at one instant with
    `catalog.snapshots()` and records each table's version, with the time the read began (a commit
    acknowledged before then must be in what it saw)."""
    logging.basicConfig(filename=Path(history).with_suffix(".log"), level=logging.INFO, force=True)
    plant(planted)
    rng = random.Random(seed)
    settings = Settings(
        etcd=EtcdSettings(endpoints, prefix=prefix, unavailable_timeout_seconds=8.0), warehouse=warehouse
    )
    with open(history, "a", buffering=1) as out, Catalog(settings) as catalog:
        while time.time() < until:
            names = rng.sample(tables, rng.randint(2, len(tables)))
            began = time.time()
            try:
                pinned = catalog.snapshots(names)
            except AcidTablesError as exc:
                out.write(json.dumps({"kind": "read-failed", "time": time.time(), "error": type(exc).__name__}) + "\n")
                time.sleep(0.1)  # a pause before the next read, not synchronisation
                continue
            versions = {name: snapshot.version for name, snapshot in pinned.items()}
            out.write(json.dumps({"kind": "read", "began": began, "time": time.time(), "versions": versions}) + "\n")
