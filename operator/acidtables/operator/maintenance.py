"""Table maintenance the operator runs by itself (issue 18): archiving quiet tables, and with
`spec.retention`, expire and vacuum on a jittered schedule.

It runs inside the operator, not as a job pod: archiving and expire are a few etcd requests and one
segment write, and vacuum deletes files by name from the log (no data is read), so a pod's start-up
(seconds, an image pull, a Spark-sized request) would cost far more than the work. The operator already
holds the storage credentials it needs to drop a table's data. kopf runs a resource's timer one call at
a time, so maintenance of one table never overlaps itself; the per-table jitter spreads tables over the
interval instead of waking them all at once.

Nothing here knows kopf: the handler passes the spec and the status in and writes what comes back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from acidtables.core import InvalidArgumentError, Table

from .compactions import parse_time

#: the schedule's spread: each table runs at its own fixed point within +-10 % of the interval
JITTER = 0.1


@dataclass(frozen=True)
class MaintenanceSettings:
    """How often expire and vacuum run for a table with `spec.retention`, and when a table is quiet."""

    every: timedelta = timedelta(hours=1)
    #: no commit for this long and nothing in flight: etcd keeps only the head's entry of the log
    quiet_after: timedelta = timedelta(minutes=10)


@dataclass
class MaintenanceOutcome:
    """What one pass did: the status fields to write, metrics to count and Events to post."""

    status: dict[str, Any] = field(default_factory=dict)
    #: (kind, outcome "ok" or "refused", files freed, bytes freed) per run
    runs: list[tuple[str, str, int, int]] = field(default_factory=list)
    #: (type "Normal" or "Warning", reason, message)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def jittered(every: timedelta, key: str) -> timedelta:
    """`every`, moved by a fixed fraction within +-JITTER that depends only on `key` (the resource's
    uid): stable across operator restarts, different between tables."""
    fraction = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    return every * (1 + JITTER * (2 * fraction - 1))


def due(last: str | None, now: datetime, every: timedelta, key: str) -> bool:
    previous = parse_time(last)
    return previous is None or now >= previous + jittered(every, key)


def maintain(
    table: Table,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    now: datetime,
    settings: MaintenanceSettings,
    key: str,
) -> MaintenanceOutcome:
    """One maintenance pass over a table. Raises what core raises (the handler counts and reports it)."""
    outcome = MaintenanceOutcome()
    retention = spec.get("retention") or {}
    if retention and due((status.get("lastExpire") or {}).get("time"), now, settings.every, key):
        _retain(table, retention, now, outcome)
    last_commit = parse_time((status.get("lastCommit") or {}).get("time"))
    archived = (status.get("lastArchive") or {}).get("archivedUpTo", -1)
    version = status.get("version")
    quiet = last_commit is not None and now - last_commit >= settings.quiet_after
    if quiet and isinstance(version, int) and archived < version - 1 and not status.get("inFlight"):
        report = table.archive(keep_versions=1)
        outcome.status["lastArchive"] = {"time": _stamp(now), "archivedUpTo": report.archived_upto}
        outcome.runs.append(("archive", "ok", 0, 0))
    return outcome


def _retain(table: Table, retention: Mapping[str, Any], now: datetime, outcome: MaintenanceOutcome) -> None:
    """Expire, then vacuum if asked. A retention core refuses (under the safety minimum) is recorded with
    the time, so it is said once per interval, not at every check."""
    versions = int(retention.get("versions") or 1000)
    duration = str(retention.get("duration") or "168h")
    try:
        expired = table.expire(retain_versions=versions, retain_duration=duration)
    except InvalidArgumentError as exc:
        outcome.status["lastExpire"] = {"time": _stamp(now), "error": str(exc)}
        outcome.runs.append(("expire", "refused", 0, 0))
        outcome.events.append(("Warning", "RetentionRefused", str(exc)))
        return
    outcome.status["lastExpire"] = {
        "time": _stamp(now),
        "oldestVersionKept": expired.oldest_version_kept,
        "versionsArchived": expired.versions_archived,
    }
    outcome.runs.append(("expire", "ok", 0, 0))
    if not retention.get("vacuum"):
        return
    vacuumed = table.vacuum(retain_duration=duration)
    outcome.status["lastVacuum"] = {
        "time": _stamp(now),
        "filesDeleted": vacuumed.files_deleted,
        "bytesDeleted": vacuumed.bytes_deleted,
    }
    outcome.runs.append(("vacuum", "ok", vacuumed.files_deleted, vacuumed.bytes_deleted))
    if vacuumed.files_deleted:
        message = f"deleted {vacuumed.files_deleted} files ({vacuumed.bytes_deleted} bytes) only expired versions read"
        outcome.events.append(("Normal", "Vacuumed", message))


def settings_from(every_seconds: float, quiet_after_seconds: float) -> MaintenanceSettings:
    return MaintenanceSettings(timedelta(seconds=every_seconds), timedelta(seconds=quiet_after_seconds))


__all__ = ["MaintenanceOutcome", "MaintenanceSettings", "due", "jittered", "maintain", "settings_from"]
