"""The read-only catalog commands: `tables`, `describe NAME`, `history NAME`.

Each function reads what it needs from the catalog and returns one result object; `main` renders it.
Everything shown comes from etcd (heads, the log) and the snapshot core builds from it, so the CLI
says what any writer would see at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from acidtables.core import (
    Catalog,
    Column,
    CorruptMetadataError,
    HistoryEntry,
    LiveRowCounter,
    Snapshot,
    Storage,
    Table,
    TableNotFoundError,
    split_name,
    to_datetime,
)

from .output import fields, rfc3339, table


def open_table(catalog: Catalog, name: str, method: str) -> Table:
    """The table, or an error that names it and the command that lists what exists."""
    namespace, short = split_name(name, method=method)
    try:
        return catalog.table(f"{namespace}.{short}")
    except TableNotFoundError:
        raise TableNotFoundError(
            f"no table {namespace}.{short}; `acidtables tables {namespace}` lists the tables of that namespace"
        ) from None


# --- tables ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSummary:
    name: str
    conflict_policy: str | None
    isolation_level: str | None
    version: int | None
    active_files: int | None
    #: what a read returns (merge-on-read applied); physical_rows: what the files hold
    rows: int | None
    size_bytes: int | None
    physical_rows: int | None = None
    #: why the table cannot be read (CorruptMetadataError's message); None for a healthy table
    damaged: str | None = None

    @staticmethod
    def of_damaged(name: str, reason: str) -> TableSummary:
        return TableSummary(name, None, None, None, None, None, None, damaged=reason)

    @staticmethod
    def of(snapshot: Snapshot, storage: Storage | None = None) -> TableSummary:
        """With `storage`, rows are the live rows a read returns (core.maintenance.live_rows); without, the log's."""
        meta = snapshot.metadata
        counts = LiveRowCounter().count(snapshot, storage) if storage is not None else None
        return TableSummary(
            name=meta.name,
            conflict_policy=meta.conflict_policy.value,
            isolation_level=meta.isolation_level.value if meta.isolation_level else None,
            version=snapshot.version,
            active_files=len(snapshot.files_by_path),
            rows=counts.live if counts is not None else snapshot.row_count,
            size_bytes=snapshot.size_bytes,
            physical_rows=counts.physical if counts is not None else snapshot.row_count,
        )

    def to_json(self) -> dict[str, Any]:
        namespace, short = split_name(self.name, method="describe")
        return {
            "name": self.name,
            "namespace": namespace,
            "table": short,
            "conflict_policy": self.conflict_policy,
            "isolation_level": self.isolation_level,
            "version": self.version,
            "active_files": self.active_files,
            "rows": self.rows,
            "physical_rows": self.physical_rows,
            "size_bytes": self.size_bytes,
            "damaged": self.damaged,
        }


@dataclass(frozen=True)
class TablesResult:
    namespace: str | None
    tables: tuple[TableSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "tables": [t.to_json() for t in self.tables]}

    def to_text(self) -> str:
        if not self.tables:
            where = f" in namespace {self.namespace}" if self.namespace else ""
            return f"no tables{where}"
        headers = ("NAME", "POLICY", "ISOLATION", "VERSION", "FILES", "ROWS", "PHYSICAL ROWS", "BYTES")
        rows = [
            (t.name, "DAMAGED", "-", "-", "-", "-", "-", "-")
            if t.damaged
            else (
                t.name,
                t.conflict_policy,
                t.isolation_level,
                t.version,
                t.active_files,
                t.rows,
                t.physical_rows,
                t.size_bytes,
            )
            for t in self.tables
        ]
        notes = [f"{t.name}: {t.damaged}" for t in self.tables if t.damaged]
        return "\n".join([table(headers, rows), *notes])


def list_tables(catalog: Catalog, namespace: str | None) -> TablesResult:
    summaries = []
    for name in catalog.list_tables(namespace):
        try:
            table = catalog.table(name)
            # live rows as a read returns them, as the AcidTable's status.rows says (issue 25)
            summaries.append(TableSummary.of(table.snapshot(), table.storage))
        except TableNotFoundError:
            continue  # dropped between the listing and the read: it no longer exists
        except CorruptMetadataError as exc:  # listed as damaged; the other tables still show
            summaries.append(TableSummary.of_damaged(name, str(exc)))
    return TablesResult(namespace, tuple(summaries))


# --- describe ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DescribeResult:
    name: str
    table_id: str
    location: str
    columns: tuple[Column, ...]
    partition_by: tuple[str, ...]
    primary_key: tuple[str, ...]
    conflict_policy: str
    isolation_level: str | None
    #: deletion vectors requested at creation; in effect only on an unpartitioned table (§1.2)
    row_level_concurrency: bool
    row_level_concurrency_in_effect: bool
    version: int
    time_version: datetime | None
    committed_at: datetime | None
    created_at: datetime | None
    active_files: int
    rows: int
    size_bytes: int
    properties: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "table_id": self.table_id,
            "location": self.location,
            "schema": [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in self.columns],
            "partition_by": list(self.partition_by),
            "primary_key": list(self.primary_key),
            "conflict_policy": self.conflict_policy,
            "isolation_level": self.isolation_level,
            "row_level_concurrency": self.row_level_concurrency,
            "row_level_concurrency_in_effect": self.row_level_concurrency_in_effect,
            "version": self.version,
            "time_version": rfc3339(self.time_version),
            "committed_at": rfc3339(self.committed_at),
            "created_at": rfc3339(self.created_at),
            "active_files": self.active_files,
            "rows": self.rows,
            "size_bytes": self.size_bytes,
            "properties": dict(self.properties),
        }

    def to_text(self) -> str:
        rlc = "on" if self.row_level_concurrency_in_effect else "off"
        if self.row_level_concurrency and not self.row_level_concurrency_in_effect:
            rlc = "off (deletion vectors on, but the table is partitioned)"
        summary = fields(
            [
                ("name", self.name),
                ("table id", self.table_id),
                ("location", self.location),
                ("partition by", self.partition_by),
                ("primary key", self.primary_key),
                ("conflict policy", self.conflict_policy),
                ("isolation level", self.isolation_level),
                ("row-level concurrency", rlc),
                ("version", self.version),
                ("time version", self.time_version),
                ("last commit at", self.committed_at),
                ("created at", self.created_at),
                ("active files", self.active_files),
                ("rows", self.rows),
                ("bytes", self.size_bytes),
            ]
        )
        schema = table(("COLUMN", "TYPE", "NULLABLE"), [(c.name, c.type, c.nullable) for c in self.columns])
        parts = [summary, "", schema]
        if self.properties:
            parts += ["", table(("PROPERTY", "VALUE"), sorted(self.properties.items()))]
        return "\n".join(parts)


def describe(catalog: Catalog, name: str) -> DescribeResult:
    snapshot = open_table(catalog, name, "describe").snapshot()
    meta = snapshot.metadata
    return DescribeResult(
        name=meta.name,
        table_id=meta.table_id,
        location=meta.location,
        columns=meta.columns,
        partition_by=meta.partition_by,
        primary_key=meta.primary_key,
        conflict_policy=meta.conflict_policy.value,
        isolation_level=meta.isolation_level.value if meta.isolation_level else None,
        row_level_concurrency=meta.row_level_concurrency,
        row_level_concurrency_in_effect=meta.rlc_in_effect,
        version=snapshot.version,
        time_version=to_datetime(snapshot.time_version),
        committed_at=to_datetime(snapshot.committed_at or None),
        created_at=to_datetime(meta.created_at or None),
        active_files=len(snapshot.files_by_path),
        rows=snapshot.row_count,
        size_bytes=snapshot.size_bytes,
        properties=dict(meta.properties),
    )


# --- history -----------------------------------------------------------------------------------------


def _history_json(entry: HistoryEntry) -> dict[str, Any]:
    # HistoryEntry.to_json() writes "+00:00" times; the CLI promises RFC 3339 with "Z" everywhere
    return {
        **entry.to_json(),
        "time_version": rfc3339(entry.time_version),
        "committed_at": rfc3339(entry.committed_at),
    }


@dataclass(frozen=True)
class HistoryResult:
    name: str
    limit: int | None
    entries: tuple[HistoryEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "limit": self.limit, "entries": [_history_json(e) for e in self.entries]}

    def to_text(self) -> str:
        headers = (
            "VERSION",
            "TIME VERSION",
            "OPERATION",
            "READ VERSION",
            "RETRIES",
            "FILES +",
            "FILES -",
            "ROWS +",
            "ROWS -",
            "COMMITTED AT",
            "TOGETHER WITH",
        )
        rows = [
            (
                e.version,
                e.time_version,
                e.operation.display,
                e.read_version,
                e.retries,
                e.files_added,
                e.files_removed,
                e.rows_added,
                e.rows_removed,
                e.committed_at,
                # the other tables of the multi-table transaction this commit was one part of
                ", ".join(t for t in e.multi_txn_tables if t != self.name),
            )
            for e in self.entries
        ]
        return table(headers, rows)


def history(catalog: Catalog, name: str, limit: int | None) -> HistoryResult:
    target = open_table(catalog, name, "history")
    return HistoryResult(target.name, limit, tuple(target.history(limit=limit)))
