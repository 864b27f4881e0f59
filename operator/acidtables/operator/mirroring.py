"""Each AcidTable's mirrors kept caught up by the operator, and how far behind they are (spec.mirror).

The committing process mirrors in the background already (core.mirror); the operator's timer is the
backstop for commits whose process ended first (a Spark executor's, a killed job's) and the one place
that says how far behind a mirror is: status.mirror, the lag metrics, and `Degraded` (reason
MirrorBehind) once the oldest version the mirror lacks was committed longer ago than the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from acidtables.core import AcidTablesError, Table

MIRROR_BEHIND = "MirrorBehind"
MIRROR_CAUGHT_UP = "MirrorCaughtUp"


@dataclass(frozen=True)
class MirrorReport:
    """What one look at a table's mirror found: None fields when the table has no mirror."""

    #: status.mirror, or None to remove it
    status: dict[str, Any] | None
    lag_versions: int = 0
    lag_seconds: float = 0.0
    #: why the table is Degraded, when the mirror has been behind for longer than the threshold
    behind: str | None = None


def look_at_mirror(table: Table, now_us: int, threshold_seconds: float) -> MirrorReport:
    """Catch the table's mirror up, then report how far it is (a failure to write it is reported, not
    raised: the table itself is fine, and the next look tries again)."""
    error = None
    try:
        state = table.sync_mirror()
    except (AcidTablesError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        state = table.mirror_state()
    if not state.enabled:
        return MirrorReport(None)
    lag_seconds = max(0.0, (now_us - state.behind_since) / 1_000_000) if state.behind_since is not None else 0.0
    status: dict[str, Any] = {
        "format": "delta",
        "version": state.version,
        "tableVersion": state.head,
        "lagVersions": state.lag_versions,
        "lagSeconds": int(lag_seconds),
    }
    if error:
        status["lastError"] = error[:1000]
    behind = None
    if lag_seconds > threshold_seconds:
        behind = (
            f"the Delta mirror of {table.name} is at version {state.version}, the table at {state.head}: behind for "
            f"{int(lag_seconds)} s, more than the {threshold_seconds:g} s allowed"
            + (f"; the last attempt to write it failed: {error}" if error else "")
        )
    return MirrorReport(status, state.lag_versions, lag_seconds, behind)


__all__ = ["MIRROR_BEHIND", "MIRROR_CAUGHT_UP", "MirrorReport", "look_at_mirror"]
