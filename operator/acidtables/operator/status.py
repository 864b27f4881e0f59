"""An AcidTable's status as a view of etcd: version, files, bytes, last commit, in-flight work.

Computed from the table's log and checkpoints (core's snapshot, cached and advanced incrementally)
whenever the change feed says the table's head or in-flight set changed; the data files are read only
for the live rows of primary-key partitions with change files (core.maintenance.live_rows), and only their key
columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from acidtables.core import InFlight, LiveRowCounter, Table

#: files under this size count as small when the spec does not say (the CRD's example: 32Mi)
DEFAULT_SMALL_FILE_BYTES = 32 << 20


def _rfc3339(micros: int | None) -> str | None:
    if micros is None:
        return None
    return datetime.fromtimestamp(micros / 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def table_status(
    table: Table,
    *,
    small_file_bytes: int = DEFAULT_SMALL_FILE_BYTES,
    in_flight: Sequence[InFlight] | None = None,
    counter: LiveRowCounter | None = None,
) -> dict[str, Any]:
    """The etcd-derived part of the status (conditions and observedGeneration are the handler's);
    `in_flight` when the caller has read it already. `rows` is what a read returns (merge-on-read
    applied: core.maintenance.live_rows, which reads the key columns of partitions with change files, remembered
    by `counter`), `physicalRows` what the files hold."""
    snapshot = table.snapshot()
    counts = (counter or LiveRowCounter()).count(snapshot, table.storage)
    totals = snapshot.totals(small_file_bytes)  # from a checkpoint's manifests without decoding entries
    newest = table.history(limit=1)
    status: dict[str, Any] = {
        "tableId": table.table_id,
        "catalogName": table.name,
        "conflictPolicy": snapshot.metadata.conflict_policy.value,
        "version": snapshot.version,
        "timeVersion": _rfc3339(snapshot.time_version),
        "files": totals.files,
        "smallFiles": totals.small_files,
        "deltaFiles": totals.change_files,
        "bytes": totals.size_bytes,
        "rows": counts.live,
        "physicalRows": counts.physical,
        "inFlight": len(table.in_flight() if in_flight is None else in_flight),
    }
    if newest:
        entry = newest[0]
        status["lastCommit"] = {
            "version": entry.version,
            "operation": entry.operation.display,
            "time": entry.committed_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
    return status
