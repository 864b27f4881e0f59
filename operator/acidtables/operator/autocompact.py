"""Automatic compaction: when a table's thresholds are met, which compaction to run, where, and why.

A pure decision over what etcd says (per-partition file counts from core.partition_files, the running
transactions with the partitions they write, the table's policy), so it is tested without a cluster.
It is conflict-aware (design §6): it picks what cannot lose to, or make lose, the writers it sees.

* `maxcompute` (primary key): MINOR commits next to INSERT INTO (seed 000: II/MinC both orders OK), so
  a partition with in-flight or recent writes gets MINOR; MAJOR only where the partition has been quiet
  for `major.quietFor` and nothing in flight touches it.
* `maxcompute-transactional`: a small-file merge loses to an INSERT INTO that commits first (seed 001),
  so only partitions no running transaction writes are compacted.
* `delta`: compaction never conflicts with a blind append, but an UPDATE/DELETE/MERGE that read the
  files it rewrites would fail after it (§8.1, without deletion vectors), so partitions such a job is
  running on are left alone.

What automatic compaction is waiting for is said in the AcidTable's `status.autoCompaction` (issue 40,
item 7), so `kubectl describe acidtable` answers "why has nothing compacted yet": `Verdict`, from
`explain` (the fullest partition against the thresholds, or the writers that keep a partition over them
out of reach) or the handler's own checks before it (compaction.auto off, a job running, backoff).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from acidtables.core import InFlight, Literal, PartitionFiles, parse_duration

from .context import quantity_bytes

#: in-flight operations that remove files a compaction may rewrite (a repair removes the entries of
#: files that are gone, as a DELETE does)
MODIFYING = frozenset({"update", "delete", "merge", "repair"})
WRITING = frozenset({"insert_into", "insert_overwrite", "truncate", "update", "delete", "merge", "repair"})


def duration(text: str | None, default: timedelta) -> timedelta:
    """`10m`, `1h30m`, `500ms` (the CRD checked the form)."""
    return parse_duration(text, argument="duration", method="spec") if text else default


@dataclass(frozen=True)
class Thresholds:
    min_small_files: int = 16
    small_file_bytes: int = 32 << 20
    min_delta_files: int = 64
    quiet_for: timedelta = timedelta(minutes=10)
    target_file_bytes: int = 128 << 20

    @staticmethod
    def from_spec(compaction: Mapping[str, Any]) -> Thresholds:
        minor, major = compaction.get("minor") or {}, compaction.get("major") or {}
        return Thresholds(
            min_small_files=int(minor.get("minSmallFiles") or 16),
            small_file_bytes=quantity_bytes(minor.get("smallFileBytes"), 32 << 20),
            min_delta_files=int(major.get("minDeltaFiles") or 64),
            quiet_for=duration(major.get("quietFor"), timedelta(minutes=10)),
            target_file_bytes=quantity_bytes(compaction.get("targetFileBytes"), 128 << 20),
        )


@dataclass(frozen=True)
class Choice:
    kind: str
    partition: Mapping[str, Literal]
    #: why, in words: the Event's message
    reason: str

    @property
    def where(self) -> str | None:
        """The partition as the job's `where` (None for an unpartitioned table)."""
        if not self.partition:
            return None
        parts = []
        for column, value in sorted(self.partition.items()):
            if value is None:
                parts.append(f"{column} IS NULL")
            elif isinstance(value, str):
                parts.append(f"{column} = '" + value.replace("'", "''") + "'")
            else:
                parts.append(f"{column} = {str(value).lower() if isinstance(value, bool) else value}")
        return " AND ".join(parts)


def _touches(txn: InFlight, partition: Mapping[str, Literal]) -> bool:
    """Whether a running transaction may write `partition` (unknown scope: assume it does)."""
    return txn.partitions is None or any(dict(p) == dict(partition) for p in txn.partitions)


def choose(
    policy: str,
    rlc: bool,
    thresholds: Thresholds,
    partitions: Sequence[PartitionFiles],
    in_flight: Sequence[InFlight],
    written_at: Callable[[int], datetime | None],
    now: datetime,
) -> Choice | None:
    """At most one compaction to run now (the operator runs one per table at a time), or None."""
    writers = [t for t in in_flight if t.operation in WRITING]
    for p in sorted(partitions, key=lambda p: (-p.small_files, -p.change_files, repr(sorted(p.partition.items())))):
        busy = [t for t in writers if _touches(t, p.partition)]
        last_write = written_at(p.newest_version)
        quiet = not busy and last_write is not None and now - last_write >= thresholds.quiet_for
        where = ", ".join(f"{k}={v}" for k, v in sorted(p.partition.items())) or "the table"
        if policy == "maxcompute":
            if p.change_files >= thresholds.min_delta_files and quiet:
                return Choice("major", p.partition, f"{p.change_files} delta files in {where}, quiet for "
                              f"{int(thresholds.quiet_for.total_seconds())} s: MAJOR")  # fmt: skip
            if p.small_files >= thresholds.min_small_files or p.change_files >= thresholds.min_delta_files:
                why = f"{len(busy)} running write(s) there" if busy else "it is not quiet yet"
                return Choice("minor", p.partition, f"{p.small_files} small files in {where}; MINOR because {why} "
                              "(MINOR commits next to INSERT INTO)")  # fmt: skip
            continue
        if p.small_files < thresholds.min_small_files:
            continue
        if policy == "maxcompute-transactional" and busy:
            continue  # a small-file merge would lose to the insert committing first
        if policy == "delta" and not rlc and any(t.operation in MODIFYING for t in busy):
            continue  # an UPDATE/DELETE/MERGE that read these files would fail after us
        return Choice("minor", p.partition, f"{p.small_files} small files in {where}: MINOR")
    return None


@dataclass(frozen=True)
class Verdict:
    """What automatic compaction did or is waiting for, as `status.autoCompaction` shows it."""

    #: CamelCase: Off, BelowThresholds, WritersBusy, JobRunning, BackingOff, JobExists, JobCreated
    reason: str
    message: str

    def to_status(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message}


def _size(value: int) -> str:
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if value >= 1 << shift and value % (1 << shift) == 0:
            return f"{value >> shift}{unit}"
    return str(value)


def _where(partition: Mapping[str, Literal]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(partition.items())) or "the table"


def _against(p: PartitionFiles, thresholds: Thresholds) -> str:
    """A partition's small and delta files against the thresholds that would start a job."""
    return (
        f"{p.small_files} small files (under {_size(thresholds.small_file_bytes)}; minor.minSmallFiles "
        f"{thresholds.min_small_files}) and {p.change_files} delta files (major.minDeltaFiles "
        f"{thresholds.min_delta_files})"
    )


def _fullest(partitions: Sequence[PartitionFiles]) -> PartitionFiles:
    """The partition nearest a job: the order `choose` looks at them in."""
    return min(partitions, key=lambda p: (-p.small_files, -p.change_files, repr(sorted(p.partition.items()))))


def explain(
    policy: str, thresholds: Thresholds, partitions: Sequence[PartitionFiles], in_flight: Sequence[InFlight]
) -> Verdict:
    """Why `choose` chose nothing: no partition is over the thresholds (the fullest one said against
    them), or those over them are written by running transactions the compaction would lose to or
    fail."""
    if not partitions:
        return Verdict("BelowThresholds", "the table has no files yet: nothing to compact")
    minimum = thresholds.min_small_files
    over = [
        p
        for p in partitions
        if p.small_files >= minimum or (policy == "maxcompute" and p.change_files >= thresholds.min_delta_files)
    ]
    if not over:
        fullest = _fullest(partitions)
        return Verdict(
            "BelowThresholds",
            f"the fullest of {len(partitions)} partitions, {_where(fullest.partition)}, has "
            f"{_against(fullest, thresholds)}: a job starts when a partition reaches either",
        )
    fullest = _fullest(over)
    writers = [t for t in in_flight if t.operation in WRITING and _touches(t, fullest.partition)]
    why = {
        "maxcompute-transactional": "a small-file merge would lose to the write committing first (seed 001)",
        "delta": "an UPDATE, DELETE or MERGE that read those files would fail after it (§8.1)",
    }.get(policy, "it would conflict with them")
    return Verdict(
        "WritersBusy",
        f"{len(over)} partitions over the thresholds, the fullest {_where(fullest.partition)} with "
        f"{_against(fullest, thresholds)}, but {len(writers) or 'running'} transaction(s) write there: {why}; "
        "it compacts once they end",
    )
