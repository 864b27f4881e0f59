"""What the demos found, as values that print as text tables or as JSON (`--json`).

Both demos build the same views: a line per overlapping pair, the table read back in time, the
changes since, and (Spark) the compaction the operator would have run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from acidtables.core import CommitInfo, ConcurrentModificationException, Table, to_datetime

from ..output import rfc3339, table
from .scenarios import PolicySpec, Scenario


@dataclass(frozen=True)
class ScenarioResult:
    policy: PolicySpec
    scenario: Scenario
    earlier_version: int
    #: None when the later job failed
    later_version: int | None
    later_retries: int
    exception: str | None
    message: str | None

    @property
    def outcome(self) -> str:
        return "later_failed" if self.exception else "both_committed"

    @property
    def summary(self) -> str:
        if self.exception:
            return f"later failed: {self.exception}"
        if self.later_retries:
            plural = "retry" if self.later_retries == 1 else "retries"
            return f"both committed (later rebased, {self.later_retries} {plural})"
        return "both committed"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy.policy,
            "isolation_level": self.policy.isolation_level,
            "table": self.policy.table_name,
            "earlier": self.scenario.earlier.operation.display,
            "later": self.scenario.later.operation.display,
            "earlier_partition": f"dt={self.scenario.earlier.partition}",
            "later_partition": f"dt={self.scenario.later.partition}",
            "outcome": self.outcome,
            "summary": self.summary,
            "earlier_version": self.earlier_version,
            "later_version": self.later_version,
            "later_retries": self.later_retries,
            "exception": self.exception,
            "message": self.message,
        }


class Committable(Protocol):
    def commit(self) -> CommitInfo: ...


def commit_in_order(spec: PolicySpec, scenario: Scenario, earlier: Committable, later: Committable) -> ScenarioResult:
    """E commits, then L: both staged already. L either commits (rebased) or fails with its conflict."""
    won = earlier.commit()
    try:
        info = later.commit()
    except ConcurrentModificationException as exc:
        return ScenarioResult(spec, scenario, won.version, None, 0, type(exc).__name__, str(exc))
    return ScenarioResult(spec, scenario, won.version, info.version, info.retries, None, None)


SCENARIO_COLUMNS = ("POLICY", "EARLIER (E)", "LATER (L)", "PARTITIONS", "OUTCOME")


def scenario_rows(results: Sequence[ScenarioResult]) -> list[tuple[str, str, str, str, str]]:
    """One line per pair, for the SCENARIO_COLUMNS table both demos print."""
    return [
        (
            r.policy.label,
            r.scenario.earlier.operation.display,
            r.scenario.later.operation.display,
            r.scenario.partitions,
            r.summary,
        )
        for r in results
    ]


@dataclass(frozen=True)
class SnapshotView:
    label: str
    version: int
    time_version: datetime | None
    active_files: int
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "read_as": self.label,
            "version": self.version,
            "time_version": rfc3339(self.time_version),
            "active_files": self.active_files,
            "rows": self.rows,
        }


@dataclass(frozen=True)
class ChangeView:
    version: int
    time_version: datetime | None
    operation: str
    files_added: int
    files_removed: int
    rows_added: int
    rows_removed: int

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "time_version": rfc3339(self.time_version),
            "operation": self.operation,
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "rows_added": self.rows_added,
            "rows_removed": self.rows_removed,
        }


@dataclass(frozen=True)
class TimeTravel:
    table: str
    since_version: int
    snapshots: tuple[SnapshotView, ...]
    changes: tuple[ChangeView, ...]
    #: commits in the range that changes() leaves out because they changed no data (D-18)
    rewrites_left_out: tuple[tuple[int, str], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "snapshots": [s.to_json() for s in self.snapshots],
            "changes_since_version": self.since_version,
            "changes": [c.to_json() for c in self.changes],
            "rewrites_left_out": [{"version": v, "operation": op} for v, op in self.rewrites_left_out],
        }

    def to_text(self) -> str:
        snapshots = table(
            ("READ AS", "VERSION", "TIME VERSION", "FILES", "ROWS"),
            [(s.label, s.version, s.time_version, s.active_files, s.rows) for s in self.snapshots],
        )
        changes = table(
            ("VERSION", "TIME VERSION", "OPERATION", "FILES +", "FILES -", "ROWS +", "ROWS -"),
            [
                (c.version, c.time_version, c.operation, c.files_added, c.files_removed, c.rows_added, c.rows_removed)
                for c in self.changes
            ],
        )
        left_out = ", ".join(f"{op} at version {v}" for v, op in self.rewrites_left_out)
        note = f"; left out, as they changed no data: {left_out}" if left_out else ""
        return "\n".join(
            [
                f"Time travel on {self.table}:",
                snapshots,
                "",
                f"changes(start_version={self.since_version + 1}) on {self.table}{note}:",
                changes,
            ]
        )


@dataclass(frozen=True)
class Compaction:
    """The small-file compaction the Spark demo runs the way the operator's automatic compaction would."""

    table: str
    threshold: int
    small_files_before: int
    files_before: int
    files_after: int
    groups_committed: int
    rows_unchanged: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def to_text(self) -> str:
        return (
            f"Automatic-style compaction of {self.table}: {self.small_files_before} small files (threshold "
            f"{self.threshold}) -> {self.groups_committed} group(s) committed, files {self.files_before} -> "
            f"{self.files_after}, rows {'unchanged' if self.rows_unchanged else 'CHANGED'}."
        )


@dataclass(frozen=True)
class DemoResult:
    #: how the pairs overlapped, the first line of the text
    interleaving: str
    scenarios: tuple[ScenarioResult, ...]
    time_travel: TimeTravel
    compaction: Compaction | None = None
    seconds: float | None = None
    #: the Spark demo's SQL part (an acidtables.cli.demo.sql.SqlTour); anything with to_json / to_text
    sql: Any = None
    #: the Spark demo's streams (an acidtables.cli.demo.streams.StreamTour); anything with to_json / to_text
    streams: Any = None
    #: the last step, DuckDB querying a table the demo wrote (an acidtables.cli.demo.duckdb_read.DuckDBRead)
    duckdb: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenarios": [s.to_json() for s in self.scenarios],
            "time_travel": self.time_travel.to_json(),
        }
        if self.compaction is not None:
            out["compaction"] = self.compaction.to_json()
        if self.sql is not None:
            out["sql"] = self.sql.to_json()
        if self.streams is not None:
            out["streams"] = self.streams.to_json()
        if self.duckdb is not None:
            out["duckdb"] = self.duckdb.to_json()
        if self.seconds is not None:
            out["seconds"] = round(self.seconds, 1)
        return out

    def to_text(self) -> str:
        lines = [self.interleaving, "", table(SCENARIO_COLUMNS, scenario_rows(self.scenarios)), ""]
        if self.compaction is not None:
            lines += [self.compaction.to_text(), ""]
        lines.append(self.time_travel.to_text())
        if self.sql is not None:
            lines += ["", self.sql.to_text()]
        if self.streams is not None:
            lines += ["", self.streams.to_text()]
        if self.duckdb is not None:
            lines += ["", self.duckdb.to_text()]
        if self.seconds is not None:
            lines += ["", f"Done in {self.seconds:.0f} s."]
        return "\n".join(lines)


def time_travel(target: Table, since_version: int) -> TimeTravel:
    """Read the table as of an earlier version, as of that version's time, and now; then its changes."""
    then = target.snapshot(version=since_version)
    then_time = to_datetime(then.time_version)
    by_time = target.snapshot(timestamp=then_time) if then_time is not None else then
    now = target.snapshot()
    views = tuple(
        SnapshotView(label, s.version, to_datetime(s.time_version), len(s.files_by_path), s.row_count)
        for label, s in (
            (f"version={since_version}", then),
            (f"timestamp={rfc3339(then_time)}", by_time),
            ("now", now),
        )
    )
    changes = target.changes(start_version=since_version + 1)
    change_views = tuple(
        ChangeView(
            c.version,
            c.time_version,
            c.operation.display,
            len(c.added),
            len(c.removed),
            sum(f.live_rows for f in c.added),
            sum(f.live_rows for f in c.removed),
        )
        for c in changes
    )
    changed = {c.version for c in changes}
    left_out = tuple(
        (h.version, h.operation.display)
        for h in reversed(target.history())
        if h.version > since_version and h.version not in changed
    )
    return TimeTravel(target.name, since_version, views, change_views, left_out)
