"""Looking at a table from the outside: real staged files, raw etcd keys and an independent log replay.

The tests check core against what is really on disk and in etcd, so these helpers read etcd keys with
a plain pyetcd client (the key layout of `acidtables.core.coordination.keys`) instead of asking the code
under test, and they replay the log with their own strict rules instead of `SnapshotBuilder`'s.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyetcd

from acidtables import Catalog, Table, Transaction
from acidtables.core.log.records import CommitRecord, DataFile
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.settings import CommitSettings, EtcdSettings, Settings


@dataclass(frozen=True)
class CatalogSpec:
    """What a worker process or a subprocess needs to open its own catalog on the test's etcd."""

    endpoint: str
    prefix: str
    warehouse: str
    #: commit settings for every catalog opened from this spec; None means the defaults
    commit: CommitSettings | None = None

    def open(
        self,
        *,
        commit: CommitSettings | None = None,
        request_timeout_seconds: float = 5.0,
        unavailable_timeout_seconds: float = 15.0,
    ) -> Catalog:
        etcd = EtcdSettings(
            (self.endpoint,),
            prefix=self.prefix,
            request_timeout_seconds=request_timeout_seconds,
            unavailable_timeout_seconds=unavailable_timeout_seconds,
        )
        return Catalog(Settings(etcd=etcd, warehouse=self.warehouse, commit=commit or self.commit or CommitSettings()))


def write_part(directory: str, name: str, partition: Mapping[str, str | None], rows: int = 3) -> DataFile:
    """Write a small real Parquet file (columns id, dt) in exclusive mode and describe it."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    data = pa.table(
        {"id": pa.array(range(rows), pa.int64()), "dt": pa.array([partition.get("dt", "")] * rows, pa.string())}
    )
    with open(path, "xb") as out:
        pq.write_table(data, out)
    return DataFile(path=path, partition=dict(partition), rows=rows, size_bytes=os.path.getsize(path))


def staged_parquet(tx: Transaction, partition: Mapping[str, str | None] | None = None, rows: int = 1) -> DataFile:
    """A real Parquet file of `rows` rows in the transaction's staging directory, described truthfully
    (the commit proves a file's size and row count)."""
    n = len(os.listdir(tx.staging_dir)) if os.path.isdir(tx.staging_dir) else 0
    return write_part(tx.staging_dir, f"part-{n:05d}.parquet", dict(partition or {}), rows)


# --- raw etcd reads --------------------------------------------------------------------------------


def commit_into(table: Table, *partitions: str) -> None:
    """One committed insert of a one-row file into each of `partitions` (values of `dt`)."""
    with table.begin("insert_into") as tx:
        tx.add_files([staged_parquet(tx, {"dt": dt}) for dt in partitions])
        tx.commit()


def etcd_client(host: str, port: int) -> pyetcd.MultiEndpointEtcd3Client:
    """A plain pyetcd client straight to etcd, bypassing acidtables (and any proxy)."""
    return pyetcd.client(host, port, timeout=5)


def _table_key(prefix: str, table_id: str, *parts: str) -> str:
    return "/".join((prefix, "tables", table_id, *parts))


def log_versions(
    client: pyetcd.MultiEndpointEtcd3Client, prefix: str, table_id: str, location: str | None = None
) -> list[int]:
    """Every version key under the table's log prefix, in key order; with `location`, also every version
    its archive segments hold (read as files: `_acidtables/archive/*.json`, design §2), each version once."""
    keys = [meta.key.decode() for _, meta in client.get_prefix(_table_key(prefix, table_id, "log", ""), keys_only=True)]
    versions = {int(key.rsplit("/", 1)[1]) for key in keys}
    if location is not None:
        for segment in Path(location, "_acidtables", "archive").glob("*.json"):
            versions.update(int(e["version"]) for e in json.loads(segment.read_bytes())["segment"]["entries"])
    return sorted(versions)


def inflight_txns(client: pyetcd.MultiEndpointEtcd3Client, prefix: str, table_id: str) -> list[str]:
    found = client.get_prefix(_table_key(prefix, table_id, "inflight", ""), keys_only=True)
    return sorted(meta.key.decode().rsplit("/", 1)[1] for _, meta in found)


def txn_version(client: pyetcd.MultiEndpointEtcd3Client, prefix: str, table_id: str, txn_id: str) -> int | None:
    value, _ = client.get(_table_key(prefix, table_id, "txns", txn_id))
    return None if value is None else int(value)


def head_version(client: pyetcd.MultiEndpointEtcd3Client, prefix: str, table_id: str) -> int | None:
    value, _ = client.get(_table_key(prefix, table_id, "head"))
    return None if value is None else int(json.loads(value)["version"])


# --- the log, replayed -----------------------------------------------------------------------------


def committed_records(catalog: Catalog, table: Table) -> list[CommitRecord]:
    """Every commit record of the table, oldest first, decoded from the log (or its commit files)."""
    services = catalog.services
    entries = services.log(table.table_id, table.location).read(-1)  # etcd's window and the archive
    return [services.decode_log_entry(table.location, entry) for entry in entries]


def replay_violations(records: Sequence[CommitRecord], files_at: Callable[[int], set[str]]) -> list[str]:
    """Replay the log serially with strict rules (invariant G5) and list every way it fails them.

    A removed file must be live at the version before; a path may be added only once in the table's
    life (no resurrection, no duplicate); versions must be dense from 0; and the replayed file set must
    equal `files_at(version)` (what the snapshot at that version says) at every version.
    """
    problems: list[str] = []
    live: set[str] = set()
    ever_added: set[str] = set()
    for expected, record in enumerate(records):
        if record.version != expected:
            problems.append(f"log position {expected} holds version {record.version}: versions are not dense")
            return problems
        for f in record.removes:
            if f.path not in live:
                problems.append(
                    f"v{record.version} {record.operation.value} removes {f.path}, not live at v{expected - 1}"
                )
            live.discard(f.path)
        for f in record.adds:
            if f.path in ever_added:
                problems.append(f"v{record.version} {record.operation.value} adds {f.path} a second time")
            ever_added.add(f.path)
            live.add(f.path)
        snapshot_files = files_at(record.version)
        if snapshot_files != live:
            problems.append(
                f"v{record.version}: snapshot has {sorted(snapshot_files - live)} extra and "
                f"{sorted(live - snapshot_files)} missing compared with the replay"
            )
    return problems


def source_options(catalog: Catalog) -> dict[str, str]:
    """The `acidtables` data source's options that reach the catalog's etcd prefix and warehouse."""
    return {
        "etcd.endpoints": ",".join(catalog.settings.etcd.endpoints),
        "etcd.prefix": catalog.settings.etcd.prefix,
        "warehouse": catalog.settings.warehouse,
    }


# --- catalogs with other settings, and their background work ---------------------------------------


def catalog_with(catalog: Catalog, **commit: int) -> Catalog:
    """Another catalog on the same etcd prefix and warehouse, with its own commit settings."""
    settings = Settings(
        etcd=catalog.settings.etcd, warehouse=catalog.settings.warehouse, commit=CommitSettings(**commit)
    )
    return Catalog(settings)


class HeldCheckpoints:
    """Holds each checkpoint `catalog` writes in the background, its snapshot loaded, until `release` is
    set: a test sees that work in flight (`writing` is set once one is held)."""

    def __init__(self, catalog: Catalog) -> None:
        self.writing, self.release = threading.Event(), threading.Event()
        snapshots = catalog.services.snapshots
        write_checkpoint = snapshots.write_checkpoint

        def held(snapshot: Snapshot, txn_id: str) -> bool:
            self.writing.set()
            assert self.release.wait(30)
            return write_checkpoint(snapshot, txn_id)

        snapshots.write_checkpoint = held  # type: ignore[method-assign]
