"""Writer processes for the concurrency tests, started with multiprocessing's "spawn" context.

Each worker opens its own Catalog (one per process, as in production), waits at a barrier so all of them
start together, and reports what happened as a picklable `WorkerResult`: the commits it got back, the
conflicts it was told about, and any other error (which the tests treat as a failure).
"""

from __future__ import annotations

import multiprocessing
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.synchronize import Barrier
from queue import Empty
from typing import Any

from acidtables import Catalog, Table, Transaction
from acidtables.errors import AcidTablesError, ConcurrentModificationException

from .tables import CatalogSpec, inflight_txns, write_part

PARTITIONS = ("a", "b", "c")


@dataclass(frozen=True)
class WorkerSpec:
    catalog: CatalogSpec
    table: str
    worker: int
    operations: int
    seed: int = 0


@dataclass(frozen=True)
class Committed:
    version: int
    txn_id: str
    operation: str
    retries: int
    added: tuple[str, ...]  # absolute paths of the files the worker staged and added


@dataclass(frozen=True)
class Conflicted:
    txn_id: str
    operation: str
    exception: str
    staging_dir: str


@dataclass
class WorkerResult:
    worker: int
    commits: list[Committed] = field(default_factory=list)
    conflicts: list[Conflicted] = field(default_factory=list)
    #: operations that found nothing to do (e.g. compacting a partition with one file) and aborted
    nothing_to_do: int = 0
    #: unexpected errors, "Class: message"; CommitRetriesExhausted would land here
    errors: list[str] = field(default_factory=list)
    #: every transaction the worker began, committed or not
    began: list[str] = field(default_factory=list)
    #: those of them still registered in flight once all had ended, read before the worker's lease goes
    still_in_flight: list[str] = field(default_factory=list)


def _finish(result: WorkerResult, catalog: Catalog, table: Table) -> WorkerResult:
    """Record which of the worker's ended transactions etcd still lists in flight. Read while the
    worker's lease lives: closing the catalog revokes it, which would hide a registration left behind."""
    client = catalog.services.coordinator.client
    registered = set(inflight_txns(client, catalog.settings.etcd.prefix, table.table_id))
    result.still_in_flight = [txn for txn in result.began if txn in registered]
    return result


Worker = Callable[[WorkerSpec, Barrier], WorkerResult]


def _begin(result: WorkerResult, table: Table, operation: str) -> Transaction:
    tx = table.begin(operation)
    result.began.append(tx.txn_id)
    return tx


def _commit(result: WorkerResult, tx: Transaction, added: Sequence[str]) -> None:
    try:
        info = tx.commit()
    except ConcurrentModificationException as exc:
        result.conflicts.append(Conflicted(tx.txn_id, tx.operation.value, type(exc).__name__, tx.staging_dir))
        return
    except AcidTablesError as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        return
    result.commits.append(Committed(info.version, info.txn_id, tx.operation.value, info.retries, tuple(added)))


def blind_appends(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    """`spec.operations` blind INSERT INTOs of one small file each into an unpartitioned table."""
    result = WorkerResult(spec.worker)
    with spec.catalog.open() as catalog:
        table = catalog.table(spec.table)
        barrier.wait(timeout=60)
        for i in range(spec.operations):
            tx = _begin(result, table, "insert_into")
            f = write_part(tx.staging_dir, f"w{spec.worker}-{i}.parquet", {})
            tx.add_files([f])
            _commit(result, tx, [f.path])
        return _finish(result, catalog, table)


def _append(table: Table, result: WorkerResult, rng: random.Random, name: str) -> None:
    tx = _begin(result, table, "insert_into")
    f = write_part(tx.staging_dir, name, {"dt": rng.choice(PARTITIONS)})
    tx.add_files([f])
    _commit(result, tx, [f.path])


def _overwrite(table: Table, result: WorkerResult, rng: random.Random, name: str) -> None:
    """INSERT OVERWRITE of one partition: remove what the snapshot has there, add one new file."""
    partition = rng.choice(PARTITIONS)
    tx = _begin(result, table, "insert_overwrite")
    old = tx.scan(f"dt = '{partition}'")
    f = write_part(tx.staging_dir, name, {"dt": partition})
    tx.remove_files(old)
    tx.add_files([f])
    _commit(result, tx, [f.path])


def _delete(table: Table, result: WorkerResult, rng: random.Random, name: str) -> None:
    """DELETE that drops one whole file its scan read."""
    partition = rng.choice(PARTITIONS)
    tx = _begin(result, table, "delete")
    files = tx.scan(f"dt = '{partition}'")
    if not files:
        tx.abort()
        result.nothing_to_do += 1
        return
    tx.remove_files([rng.choice(files)])
    _commit(result, tx, [])


def _compact(table: Table, result: WorkerResult, rng: random.Random, name: str) -> None:
    """Compaction of up to four files of a partition into one, with lineage to its inputs."""
    partition = rng.choice(PARTITIONS)
    tx = _begin(result, table, "minor_compact")
    files = tx.scan(f"dt = '{partition}'")
    if len(files) < 2:
        tx.abort()
        result.nothing_to_do += 1
        return
    inputs = files[:4]
    out = write_part(tx.staging_dir, name, {"dt": partition}, rows=sum(f.rows for f in inputs))
    tx.remove_files(inputs)
    tx.add_files([replace(out, lineage=tuple(f.path for f in inputs))])
    _commit(result, tx, [out.path])


#: operation -> weight in the mixed workload; appends dominate so there is always something to rewrite
MIX: dict[str, tuple[Callable[[Table, WorkerResult, random.Random, str], None], int]] = {
    "insert_into": (_append, 5),
    "insert_overwrite": (_overwrite, 1),
    "delete": (_delete, 2),
    "minor_compact": (_compact, 2),
}


def mixed_operations(spec: WorkerSpec, barrier: Barrier) -> WorkerResult:
    """A seeded random mix of appends, partition overwrites, deletes and compactions."""
    result = WorkerResult(spec.worker)
    rng = random.Random(spec.seed * 1000 + spec.worker)
    names = list(MIX)
    weights = [MIX[n][1] for n in names]
    with spec.catalog.open() as catalog:
        table = catalog.table(spec.table)
        barrier.wait(timeout=60)
        for i in range(spec.operations):
            op = rng.choices(names, weights)[0]
            MIX[op][0](table, result, rng, f"w{spec.worker}-{i}.parquet")
        return _finish(result, catalog, table)


# --- running them ----------------------------------------------------------------------------------


def _run(worker: Worker, spec: WorkerSpec, barrier: Barrier, results: Any) -> None:
    try:
        results.put(("ok", worker(spec, barrier)))
    except BaseException:  # report anything to the parent, which would otherwise wait for nothing
        results.put(("crashed", f"worker {spec.worker}:\n{traceback.format_exc()}"))


def run_workers(worker: Worker, specs: Sequence[WorkerSpec], timeout_seconds: float) -> list[WorkerResult]:
    """Run one spawned process per spec, all starting at once; return their results or raise."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(specs))
    results = ctx.Queue()
    processes = [ctx.Process(target=_run, args=(worker, spec, barrier, results), daemon=True) for spec in specs]
    for process in processes:
        process.start()
    out: list[WorkerResult] = []
    crashes: list[str] = []
    try:
        deadline = time.monotonic() + timeout_seconds
        while len(out) + len(crashes) < len(specs):
            try:
                kind, payload = results.get(timeout=max(0.0, deadline - time.monotonic()))
            except Empty:
                raise TimeoutError(
                    f"{len(specs) - len(out) - len(crashes)} of {len(specs)} workers did not finish within "
                    f"{timeout_seconds:g} s"
                ) from None
            if kind == "ok":
                out.append(payload)
            else:
                crashes.append(payload)
        for process in processes:
            process.join(timeout=30)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
    if crashes:
        raise RuntimeError("worker crashed:\n" + "\n".join(crashes))
    return sorted(out, key=lambda r: r.worker)


def conflict_counts(results: Sequence[WorkerResult]) -> Counter[str]:
    return Counter(c.exception for r in results for c in r.conflicts)
