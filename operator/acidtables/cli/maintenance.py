"""The maintenance commands: `expire NAME`, `vacuum NAME`, `etcd-usage` (issue 18), `fsck NAME [--repair]`.

Each returns one result object that `output.render` prints, as the read-only commands do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acidtables.core import Catalog, ExpireReport, FsckReport, RepairReport, TableNotFoundError, VacuumReport

from .commands import open_table
from .output import fields, table

#: etcd-usage warns when a member's database is this full (etcd stops every table at 100 %)
WARN_FRACTION = 0.8


@dataclass(frozen=True)
class ExpireResult:
    name: str
    report: ExpireReport

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "table": self.name,
            "versions_archived": r.versions_archived,
            "keys_removed": r.keys_removed,
            "oldest_version_kept": r.oldest_version_kept,
        }

    def to_text(self) -> str:
        r = self.report
        return fields(
            [
                ("table", self.name),
                ("oldest version kept", r.oldest_version_kept),
                ("versions archived", r.versions_archived),
                ("etcd keys removed", r.keys_removed),
            ]
        )


def expire(catalog: Catalog, name: str, retain_versions: int, retain_duration: str, force: bool) -> ExpireResult:
    target = open_table(catalog, name, "expire")
    report = target.expire(retain_versions=retain_versions, retain_duration=retain_duration, force=force)
    return ExpireResult(target.name, report)


@dataclass(frozen=True)
class VacuumResult:
    name: str
    report: VacuumReport

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "table": self.name,
            "dry_run": r.dry_run,
            "files_deleted": r.files_deleted,
            "bytes_deleted": r.bytes_deleted,
            "paths": list(r.paths),
            "failed": list(r.failed),
            "metadata_paths": list(r.metadata),
        }

    def to_text(self) -> str:
        r = self.report
        verb = "would delete" if r.dry_run else "deleted"
        lines = [f"{self.name}: {verb} {r.files_deleted} files, {r.bytes_deleted} bytes", *r.paths]
        lines += [f"kept (could not delete, the next run tries again): {p}" for p in r.failed]
        if r.metadata:
            lines += [f"{self.name}: {verb} {len(r.metadata)} checkpoints and manifests no retained version needs"]
            lines += list(r.metadata)
        return "\n".join(lines)


def vacuum(catalog: Catalog, name: str, retain_duration: str, dry_run: bool, force: bool) -> VacuumResult:
    target = open_table(catalog, name, "vacuum")
    return VacuumResult(target.name, target.vacuum(retain_duration=retain_duration, dry_run=dry_run, force=force))


@dataclass(frozen=True)
class TableUsage:
    name: str
    keys: int
    bytes: int


@dataclass(frozen=True)
class EtcdUsageResult:
    endpoints: tuple[dict[str, Any], ...]
    alarms: tuple[str, ...]
    tables: tuple[TableUsage, ...]

    @property
    def warnings(self) -> list[str]:
        out = [f"etcd alarm {a} is raised: etcd refuses every write" for a in self.alarms]
        for e in self.endpoints:
            fraction = e["used_fraction"]
            if e["error"]:
                out.append(f"{e['endpoint']} did not report its usage: {e['error']}")
            elif fraction is not None and fraction >= WARN_FRACTION:
                out.append(
                    f"{e['endpoint']} is {fraction:.0%} full (at 100 % etcd stops every table): expire busy tables, "
                    "then compact and defragment etcd"
                )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoints": list(self.endpoints),
            "alarms": list(self.alarms),
            "tables": [{"name": t.name, "keys": t.keys, "bytes": t.bytes} for t in self.tables],
            "warnings": self.warnings,
        }

    def to_text(self) -> str:
        members = table(
            ("ENDPOINT", "DB BYTES", "IN USE", "QUOTA", "USED"),
            [
                (
                    e["endpoint"],
                    e["db_size_bytes"],
                    e["db_in_use_bytes"],
                    e["quota_bytes"],
                    None if e["used_fraction"] is None else f"{e['used_fraction']:.1%}",
                )
                for e in self.endpoints
            ],
        )
        tables = table(("TABLE", "KEYS", "BYTES"), [(t.name, t.keys, t.bytes) for t in self.tables])
        return "\n\n".join([members, tables, *(f"warning: {w}" for w in self.warnings)])


def etcd_usage(catalog: Catalog) -> EtcdUsageResult:
    coordinator = catalog.services.coordinator
    endpoints = tuple(
        {
            "endpoint": u.endpoint,
            "db_size_bytes": u.db_size_bytes,
            "db_in_use_bytes": u.db_in_use_bytes,
            "quota_bytes": u.quota_bytes,
            "used_fraction": u.used_fraction,
            "error": u.error,
        }
        for u in coordinator.endpoint_usage()
    )
    usage = []
    for name in catalog.list_tables():
        try:
            keys, size = coordinator.table_usage(catalog.table(name).table_id)
        except TableNotFoundError:
            continue  # dropped since the listing
        usage.append(TableUsage(name, keys, size))
    usage.sort(key=lambda t: (-t.bytes, t.name))
    return EtcdUsageResult(endpoints, tuple(coordinator.alarms()), tuple(usage))


@dataclass(frozen=True)
class FsckResult:
    report: FsckReport

    #: `acidtables fsck` exits 1 when a check failed, so scripts and probes need not parse the output
    @property
    def exit_code(self) -> int:
        return 0 if self.report.ok else 1

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "table": r.table,
            "head_version": r.head_version,
            "ok": r.ok,
            "checks": [{"name": c.name, "ok": c.ok, "examined": c.examined, "problems": c.problems} for c in r.checks],
            "missing_files": list(r.missing),
        }

    def to_text(self) -> str:
        r = self.report
        rows = [(c.name, "ok" if c.ok else "FAILED", c.examined, len(c.problems)) for c in r.checks]
        lines = [f"{r.table} at version {r.head_version}: {'ok' if r.ok else 'PROBLEMS FOUND'}"]
        lines.append(table(("CHECK", "RESULT", "EXAMINED", "PROBLEMS"), rows))
        lines += [f"{c.name}: {p}" for c in r.checks for p in c.problems]
        if r.missing:
            lines.append(
                f"{len(r.missing)} file(s) of version {r.head_version} are missing; `acidtables fsck {r.table} "
                "--repair` commits a version without them (--dry-run first lists them):"
            )
            lines += [f"missing: {path}" for path in r.missing]
        return "\n".join(lines)


def fsck(catalog: Catalog, name: str) -> FsckResult:
    return FsckResult(open_table(catalog, name, "fsck").fsck())


@dataclass(frozen=True)
class RepairResult:
    report: RepairReport

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "table": r.table,
            "dry_run": r.dry_run,
            "read_version": r.read_version,
            "version": r.version,
            "files_removed": len(r.removed),
            "rows_removed": r.rows_removed,
            "files": [
                {"path": f.path, "partition": dict(f.partition), "rows": f.live_rows, "size_bytes": f.size_bytes}
                for f in r.removed
            ],
            "checkpoints_rewritten": list(r.checkpoints),
        }

    def to_text(self) -> str:
        r = self.report
        lines = [self._files_text()]
        if r.checkpoints:
            versions = ", ".join(str(v) for v in r.checkpoints)
            done = "would be written again from the log" if r.dry_run else "were written again from the log"
            lines.append(f"the checkpoints of versions {versions} could not be read and {done}")
        return "\n".join(lines)

    def _files_text(self) -> str:
        r = self.report
        if not r.removed:
            return f"{r.table} at version {r.read_version}: no data file is missing" + (
                "" if r.checkpoints else "; nothing to repair"
            )
        if r.dry_run:
            head = (
                f"{r.table} at version {r.read_version}: {len(r.removed)} data file(s) are missing; a repair would "
                f"remove their entries ({r.rows_removed} rows). Nothing was changed"
            )
        else:
            head = (
                f"{r.table}: version {r.version} removes the entries of {len(r.removed)} missing data file(s) "
                f"({r.rows_removed} rows lost) found at version {r.read_version}"
            )
        rows = [(f.path, f.live_rows, f.size_bytes) for f in r.removed]
        return "\n".join([head, table(("MISSING FILE", "ROWS", "BYTES"), rows)])


def repair(catalog: Catalog, name: str, dry_run: bool) -> RepairResult:
    return RepairResult(open_table(catalog, name, "fsck").repair(dry_run=dry_run))
