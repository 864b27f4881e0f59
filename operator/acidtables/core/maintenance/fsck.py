"""`acidtables fsck TABLE`: the invariants of one table that need no history of who did what (issue 10).

What an operator on call runs when a user says a table looks wrong. Read-only: it reads etcd, the
archive segments, checkpoints and the data files' sizes, and changes nothing (`Table.repair` is the
one step that acts on what it finds: see core/maintenance/repair.py). Each check names what it
found, so the answer to "is the table broken" comes with where.

- versions: the log (etcd's window and the archive) holds every version 0..head exactly once, each
  entry names its own version, and the head names the newest;
- time versions: only data commits carry one, strictly increasing; the head's is the newest;
  every one is in the time index (etcd or a segment) pointing at its version;
- transactions: every committed txn id is found at its version (the lost-answer lookup);
- files: every file a retained version reads exists with its recorded size (a file a repair removed
  is known to be gone, not a finding); `FsckReport.missing` lists every file of the head that is gone,
  which is what `Table.repair` removes;
- checkpoints: every checkpoint (etcd, the archive marker, segments) proves itself and equals a replay
  of the log up to its version (one that does not costs its readers a replay of the log, not rows;
  `Table.repair` writes it again when etcd holds its key);
- archive: no log key at or below the marker is left in etcd; every segment proves itself;
- in flight: no registration of a transaction that has committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acidtables.core.errors import AcidTablesError, StorageUnavailableError
from acidtables.core.log.checkpoints import proven_checkpoint, read_snapshot
from acidtables.core.log.operations import Operation
from acidtables.core.log.records import CommitRecord
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import SnapshotBuilder
from acidtables.core.maintenance.metadata_files import oldest_retained_checkpoint
from acidtables.core.maintenance.retention import read_retention
from acidtables.core.schema.file_schema import file_schema_problems
from acidtables.core.storage.storage import Storage

#: problems listed per check at most (a table broken everywhere would otherwise print its whole log)
MAX_PROBLEMS = 50


@dataclass
class FsckCheck:
    name: str
    problems: list[str] = field(default_factory=list)
    #: what was looked at, so "ok" says how much
    examined: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, problem: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        elif len(self.problems) == MAX_PROBLEMS:
            self.problems.append("... (more problems not listed)")


@dataclass(frozen=True)
class FsckReport:
    table: str
    head_version: int | None
    checks: tuple[FsckCheck, ...]
    #: every data file the head version reads that is gone (URIs or absolute paths), uncapped: what
    #: `Table.repair` would remove; the "files" check names them too (with older versions' ones)
    missing: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def fsck(services: Services, table_id: str, name: str, location: str) -> FsckReport:
    coordinator = services.coordinator
    log = services.log(table_id, location)
    storage = services.storage(location)
    names = ("versions", "time versions", "transactions", "files", "checkpoints", "archive", "in flight")
    versions, times, txns, files, checkpoints, archive, inflight = (FsckCheck(n) for n in names)
    checks = (versions, times, txns, files, checkpoints, archive, inflight)
    head = coordinator.read_head(table_id)
    head_version = int(head.value["version"])
    _check_archive(services, table_id, log, archive)
    _check_inflight(services, table_id, log, inflight)

    # versions: read every entry, etcd's window and the archive
    try:
        entries = log.read(-1, head_version)
    except AcidTablesError as exc:
        versions.fail(f"the log cannot be read whole: {exc}")
        return FsckReport(name, head_version, checks)
    numbers = [int(e["version"]) for e in entries]
    versions.examined = len(entries)
    if numbers != list(range(head_version + 1)):
        missing = sorted(set(range(head_version + 1)) - set(numbers))
        versions.fail(f"the log should hold versions 0..{head_version} once each; missing {missing[:20]}")
    records: list[CommitRecord] = []
    for entry in entries:
        try:
            records.append(services.decode_log_entry(location, entry))
        except AcidTablesError as exc:
            versions.fail(str(exc))
    if len(records) != len(entries):
        return FsckReport(name, head_version, checks)

    # time versions: only data commits, strictly increasing, indexed
    last_time: int | None = None
    for record in records:
        times.examined += 1
        # D-20: data operations get one (a TRUNCATE of an empty table too), rewrites and metadata none
        if record.time_version is None:
            if record.operation.changes_data:
                times.fail(
                    f"version {record.version} ({record.operation.display}) changes data but has no time version"
                )
            continue
        if not record.operation.changes_data:
            times.fail(f"version {record.version} ({record.operation.display}) changes no data but has a time version")
        if last_time is not None and record.time_version <= last_time:
            times.fail(f"version {record.version}'s time version {record.time_version} is not after {last_time}")
        last_time = record.time_version
    if head.value.get("time_version") != last_time:
        times.fail(f"the head's time version {head.value.get('time_version')} is not the newest, {last_time}")
    indexed = dict((v, t) for t, v in log.versions_between_times(0, 2**62))
    for record in records:
        if record.time_version is not None and indexed.get(record.version) != record.time_version:
            times.fail(f"version {record.version}'s time version {record.time_version} is not in the time index")

    # transactions: the lost-answer lookup finds every committed txn at its version
    for record in records:
        txns.examined += 1
        found = log.find_txn(record.txn_id)
        if found != record.version:
            txns.fail(f"txn {record.txn_id} committed version {record.version} but its lookup says {found}")

    if not versions.ok:  # a replay of a log with gaps proves nothing more
        return FsckReport(name, head_version, checks)

    # replay once: checkpoints compared on the way; the retained versions' files gathered
    retention, _ = read_retention(coordinator, table_id)
    builder = SnapshotBuilder()
    wanted = _checkpoints(log, head_version, retention.oldest_version, checkpoints)
    in_etcd = set(coordinator.checkpoints(table_id))  # what a repair can replace (segments never change)
    needed: dict[str, int] = {}
    #: files whose entries a repair removed because they were gone
    repaired: set[str] = set()
    for record in records:
        builder.apply(record)
        if record.operation is Operation.REPAIR:
            repaired.update(f.path for f in record.removes)
        if record.version == retention.oldest_version:
            needed.update((f.path, f.size_bytes) for f in builder.files.values())
        elif record.version > retention.oldest_version:
            needed.update((f.path, f.size_bytes) for f in record.adds)
        for path in wanted.get(record.version, ()):
            checkpoints.examined += 1
            problem, unreadable = _compare_checkpoint(
                services, location, path, record.version, builder.peek().to_json()
            )
            if problem is not None:
                hint = _unreadable_hint(name, (record.version, path) in in_etcd) if unreadable else ""
                checkpoints.fail(problem + hint)

    # files: every file a retained version reads, with its recorded size; a file a repair removed is
    # known to be gone (the versions before the repair fail to read, naming it), so it is no finding
    head_snapshot = builder.peek()
    head_files = set(head_snapshot.files_by_path)
    gone: list[str] = []
    for path, size in sorted(needed.items()):
        files.examined += 1
        found_size = _file_size(storage, path, name)
        if found_size is None:
            if path in head_files:
                gone.append(storage.absolute(path))
            elif path in repaired:
                continue
            files.fail(
                f"{storage.absolute(path)} is missing (read by versions {retention.oldest_version}.."
                f"{'' if path in head_files else ', not by the head'})"
                + (f"; `acidtables fsck {name} --repair` removes its entry" if path in head_files else "")
            )
        elif found_size != size:
            files.fail(f"{storage.absolute(path)} has {found_size} bytes, its log entry says {size}")

    # file schemas: every file the head reads is readable as the table's rows (what the commit proof checks)
    gone_set = set(gone)
    for file in head_snapshot.files_by_path.values():
        relative = storage.relative(file.path)
        if storage.absolute(file.path) in gone_set:
            continue  # named above
        try:
            problems = file_schema_problems(storage.parquet_footer(relative), head_snapshot.metadata, file.kind)
        except Exception as exc:  # OSError, ArrowInvalid: not Parquet at all
            problems = [f"it is not a readable Parquet file ({exc})"]
        for problem in problems:
            files.fail(f"{storage.absolute(file.path)} cannot be read as rows of the table: {problem}")

    return FsckReport(name, head_version, checks, tuple(gone))


def _file_size(storage: Storage, path: str, name: str) -> int | None:
    """A file's size, None when it is gone; StorageUnavailableError when the location cannot say (a
    location that does not answer is no finding about the table's files)."""
    try:
        return storage.file_size(storage.relative(path))
    except OSError as exc:  # a NotFound is None above; anything else is the store, not the file
        raise StorageUnavailableError(
            f"fsck of {name}: the table location {storage.location} did not answer whether {path} exists ({exc}); "
            "check that the storage is reachable and readable, then run fsck again"
        ) from None


def _check_archive(services: Services, table_id: str, log: Any, archive: FsckCheck) -> None:
    """Nothing at or below the marker left in etcd; every segment proves itself."""
    coordinator = services.coordinator
    marker = coordinator.archive_marker(table_id)
    left = [int(e["version"]) for e in coordinator.read_log(table_id, -1, marker.upto)] if marker.upto >= 0 else []
    if left:
        archive.fail(f"etcd still holds log entries {left[:10]} at or below the archive marker {marker.upto}")
    for ref in log.archive.segment_refs():
        archive.examined += 1
        if log.archive.load(ref) is None:
            archive.fail(f"segment {log.archive.storage.absolute(ref.path)} does not prove itself (see the warning)")


def _check_inflight(services: Services, table_id: str, log: Any, inflight: FsckCheck) -> None:
    """No registration outlives its commit."""
    for txn_id in services.coordinator.list_inflight(table_id):
        inflight.examined += 1
        committed = log.find_txn(txn_id)
        if committed is not None:
            inflight.fail(f"txn {txn_id} is registered in flight but committed version {committed}")


def _checkpoints(log: Any, head_version: int, floor: int, check: FsckCheck) -> dict[int, list[str]]:
    """version -> checkpoint paths registered anywhere (etcd's keys, the marker and the segments) that a
    reader of a version at or after `floor` may start from."""
    found: dict[int, list[str]] = {}
    for version, path in log.registered_checkpoints()[0]:  # an unreadable segment is the archive check's
        found.setdefault(version, []).append(path)
    for version in found:
        if version > head_version:
            check.fail(f"a checkpoint is registered at version {version}, after the head {head_version}")
    # checkpoints older than any retained version's starting point are vacuum's to delete
    start = oldest_retained_checkpoint(found, floor)
    return {version: paths for version, paths in found.items() if version >= start}


def _compare_checkpoint(
    services: Services, location: str, path: str, version: int, replayed: dict[str, Any]
) -> tuple[str | None, bool]:
    """What is wrong with the checkpoint (None: it proves itself and equals the replay), and whether
    that is that it cannot be read (readers then replay the log: slower, not wrong)."""
    storage = services.storage(location)
    try:
        content = proven_checkpoint(storage.read(path), version)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"checkpoint {path} of version {version} does not prove itself ({exc})", True
    try:
        stored = read_snapshot(storage, content).to_json()
    except (OSError, KeyError, TypeError, ValueError) as exc:
        return f"checkpoint {path} of version {version} is not a snapshot ({exc})", True
    if stored != replayed:
        differing = sorted(k for k in set(stored) | set(replayed) if stored.get(k) != replayed.get(k))
        return f"checkpoint {path} differs from a replay of the log at version {version} in {differing}", False
    return None, False


def _unreadable_hint(name: str, replaceable: bool) -> str:
    """What a failed checkpoint means for readers, and what to do (issue 41, item 2)."""
    meaning = "; readers of the versions it starts replay the log instead"
    if replaceable:
        return meaning + f", until `acidtables fsck {name} --repair` writes it again"
    return meaning + ", until the retention moves past the next checkpoint (an archive segment holds it)"


__all__ = ["FsckCheck", "FsckReport", "fsck"]
