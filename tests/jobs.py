"""Jobs for conflict tests: each seed operation as a two-phase transaction on real staged files.

Core never reads data files, so a file's content is modelled by *row tokens* kept in `DataFile.extra`:
a write makes fresh tokens, a compaction's output holds exactly its inputs' tokens. That lets a test
state the seeds' promises about data ("the later job's result overwrites the earlier job's", "the
compaction completes") as checks on the live tokens: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from acidtables import Table, Transaction
from acidtables.core.log.records import ColumnStats, DataFile, FileKind, TableMetadata
from acidtables.core.log.snapshot import Snapshot

_counter = itertools.count()


def tokens_of(file: DataFile) -> list[str]:
    return list(file.extra.get("tokens", ()))


def live_tokens(snapshot: Snapshot, partition: str | None = None) -> Counter[str]:
    """Row tokens visible in a snapshot (optionally one partition), minus rows hidden by deletion vectors."""
    out: Counter[str] = Counter()
    for f in snapshot.files:
        if partition is not None and f.partition.get("dt") != partition:
            continue
        hidden = set(f.deletion_vector or ())
        out.update(t for i, t in enumerate(tokens_of(f)) if i not in hidden)
    return out


#: Arrow types for the column types these tests' tables use
_ARROW_TYPES = {
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "STRING": pa.string(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
}


def table_rows(
    meta: TableMetadata, count: int, *, ids: Sequence[int] | None = None, tokens: Sequence[str] | None = None
) -> pa.Table:
    """`count` rows the table can read (its stored columns; partition values are the log's): `id` from
    `ids` (so the file's content agrees with the statistics a test claims), a `token` column from
    `tokens`, key and NOT NULL columns filled, other columns NULL."""
    partition = {p.lower() for p in meta.partition_by}
    columns: dict[str, pa.Array] = {}
    for n, column in enumerate(meta.columns):
        if column.name.lower() in partition:
            continue
        arrow = _ARROW_TYPES.get(column.type.upper())
        if arrow is None:
            if not column.nullable:
                raise AssertionError(f"table_rows: no test values for NOT NULL {column.name} {column.type}")
            continue  # left out: reads as NULL
        if column.name.lower() == "id" and ids:
            values: list[object] = [ids[i % len(ids)] for i in range(count)]
        elif column.name.lower() == "token" and tokens is not None:
            values = list(tokens)
        elif column.nullable and column.name not in meta.primary_key:
            values = [None] * count
        else:
            values = [_filler(arrow, next(_counter) + n) for _ in range(count)]
        columns[column.name] = pa.array(values, arrow)
    return pa.table(columns) if columns else pa.table({"_": pa.nulls(count, pa.int64())}).drop_columns(["_"])


def _filler(arrow: pa.DataType, n: int) -> object:
    if pa.types.is_integer(arrow):
        return n
    if pa.types.is_floating(arrow):
        return float(n)
    if pa.types.is_boolean(arrow):
        return bool(n % 2)
    if pa.types.is_date32(arrow):
        import datetime

        return datetime.date(2026, 1, 1) + datetime.timedelta(days=n % 365)
    return f"v{n}"


def stage(
    tx: Transaction,
    partition: str | None,
    *,
    tokens: Sequence[str] | None = None,
    ids: Sequence[int] | None = None,
    kind: FileKind = FileKind.DATA,
    lineage: Sequence[str] = (),
    ordered: bool = False,
) -> DataFile:
    """Write a real file into the transaction's staging dir and describe it. `ids` become the min/max
    statistics of column `id` (row-level conflict checks use them)."""
    n = next(_counter)
    if tokens is None:
        tokens = [f"r{n}-{i}" for i in range(len(ids) if ids else 2)]
    path = Path(tx.staging_dir) / f"part-{n:05d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as out:  # a real Parquet file: the commit proves its size, rows and schema
        pq.write_table(table_rows(tx.target_metadata, len(tokens), ids=ids, tokens=tokens), out)
    stats = {"id": ColumnStats(min(ids), max(ids), 0)} if ids else {}
    return DataFile(
        path=str(path),
        partition={"dt": partition} if partition is not None else {},
        rows=len(tokens),
        size_bytes=path.stat().st_size,
        stats=stats,
        kind=kind,
        lineage=tuple(lineage),
        ordered_lineage=ordered,
        extra={"tokens": list(tokens)},
    )


@dataclass
class Job:
    """A prepared (staged, not committed) job and what it expects to write."""

    tx: Transaction
    label: str
    partition: str | None
    #: tokens the job adds that did not exist before (empty for compactions)
    new_tokens: list[str] = field(default_factory=list)

    @property
    def staged_paths(self) -> list[Path]:
        return sorted(Path(self.tx.staging_dir).glob("*.parquet"))


def _where(partition: str | None) -> str | None:
    return None if partition is None else f"dt = '{partition}'"


def _files(tx: Transaction, partition: str | None) -> list[DataFile]:
    return [f for f in tx.snapshot.files if partition is None or f.partition.get("dt") == partition]


def insert_into(table: Table, partition: str | None, ids: Sequence[int] | None = None) -> Job:
    tx = table.begin("insert_into")
    f = stage(tx, partition, ids=ids)
    tx.add_files([f])
    return Job(tx, "INSERT INTO", partition, tokens_of(f))


def insert_overwrite(table: Table, partition: str | None) -> Job:
    tx = table.begin("insert_overwrite")
    old = tx.scan(_where(partition))
    tx.remove_files(old)
    f = stage(tx, partition)
    tx.add_files([f])
    tx.set_scope(None if partition is None else [{"dt": partition}])
    return Job(tx, "INSERT OVERWRITE", partition, tokens_of(f))


def truncate(table: Table, partition: str | None) -> Job:
    tx = table.begin("truncate")
    tx.remove_files(tx.scan(_where(partition)))
    tx.set_scope(None if partition is None else [{"dt": partition}])
    return Job(tx, "TRUNCATE", partition)


def update_merge_on_read(table: Table, partition: str | None, operation: str = "update") -> Job:
    """Primary-key tables (D-07): UPDATE/DELETE write a keyed delta file; nothing is removed."""
    tx = table.begin(operation)
    tx.scan(_where(partition))
    f = stage(tx, partition, kind=FileKind.CHANGES)
    tx.add_files([f])
    return Job(tx, operation.upper(), partition, tokens_of(f))


def update_copy_on_write(table: Table, partition: str | None, operation: str = "update") -> Job:
    """Tables without a primary key: rewrite the first file of the partition."""
    tx = table.begin(operation)
    victim = tx.scan(_where(partition))[0]
    tx.remove_files([victim])
    kept = tokens_of(victim)[1:]  # the first row is deleted (or updated, below)
    new = [f"u{next(_counter)}"] if operation == "update" else []
    f = stage(tx, partition, tokens=kept + new)
    tx.add_files([f])
    return Job(tx, operation.upper(), partition, new)


def compact(table: Table, partition: str | None, operation: str = "minor_compact") -> Job:
    """Rewrite every file of the partition into one output that lists its inputs (D-06)."""
    tx = table.begin(operation)
    inputs = _files(tx, partition)
    tx.remove_files(inputs)
    tokens = [t for f in inputs for t in tokens_of(f)]
    f = stage(tx, partition, tokens=tokens, lineage=[i.path for i in inputs], kind=FileKind.BASE, ordered=True)
    tx.add_files([f])
    return Job(tx, operation.upper().replace("_", " "), partition)


JobFactory = Callable[[Table, str | None], Job]


def seed_partition(table: Table, partition: str | None, files: int = 2) -> None:
    """Give a partition a few committed files so compactions and rewrites have inputs."""
    for _ in range(files):
        tx = table.begin("insert_into")
        tx.add_files([stage(tx, partition)])
        tx.commit()


def replay(table: Table) -> dict[int, set[str]]:
    """G5: apply every committed record in log order; the live path set at each version."""
    records = table.commits()
    live: set[str] = set()
    out: dict[int, set[str]] = {}
    for r in records:
        for f in r.removes:
            assert f.path in live or any(a.path == f.path for a in r.adds), (
                f"version {r.version} removes {f.path}, which was not live"
            )
            live.discard(f.path)
        live.update(f.path for f in r.adds)
        out[r.version] = set(live)
    return out


def assert_files_intact(table: Table) -> None:
    """G4 on disk: every file of every retained snapshot exists and has its recorded size, so no path
    (abort, a lost commit, cleanup, a rebase) has deleted or replaced a file a version still uses; and
    none is empty (a job never adds a file with no live rows)."""
    storage = table.storage
    for version in range(table.version + 1):
        for f in table.snapshot(version=version).files:
            assert f.live_rows > 0, f"{f.path}, live at version {version}, has no live rows"
            local = storage.absolute(f.path)
            assert os.path.isfile(local), f"{f.path}, live at version {version}, is gone"
            assert os.path.getsize(local) == f.size_bytes, (
                f"{f.path}, live at version {version}, has {os.path.getsize(local)} bytes, the log says {f.size_bytes}"
            )


def assert_invariants(table: Table, failed: Sequence[Job] = ()) -> None:
    """G1, G2, G4, G5 after a scenario: dense versions, failed jobs invisible and cleaned, every
    retained snapshot's files intact, replay matches."""
    history = table.history()
    versions = sorted(h.version for h in history)
    assert versions == list(range(len(versions))), f"versions are not dense: {versions}"
    assert_files_intact(table)
    replayed = replay(table)
    for version, paths in replayed.items():
        assert set(table.snapshot(version=version).files_by_path) == paths, f"replay differs at {version}"
    referenced = {f.path for r in table.commits() for f in r.adds}
    for job in failed:
        assert job.tx.txn_id not in {h.txn_id for h in history}, f"failed {job.label} is in the log"
        assert not any(job.tx.txn_id in p for p in referenced), f"failed {job.label}'s files are referenced"
        assert job.staged_paths == [], f"failed {job.label} left staged files"


def with_deletion_vector(file: DataFile, positions: Sequence[int]) -> DataFile:
    hidden = sorted(set(file.deletion_vector or ()) | set(positions))
    return replace(file, deletion_vector=tuple(hidden), added_version=None)
