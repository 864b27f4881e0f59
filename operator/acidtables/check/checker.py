"""The checker: reads the history the writers wrote, the log (etcd and archive) and the files, and
lists every anomaly (issue 10). Nothing here trusts the committer: replay and conflict rules are its
own (acidtables.check.rules), and the log is read as data."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from acidtables.core import Catalog, CommitRecord, DataFile, Table
from acidtables.core.storage.storage import txn_of_staging_dir

from .rules import REWRITES, must_fail


@dataclass
class Verdict:
    """What the checker found for one run."""

    anomalies: list[str] = field(default_factory=list)
    jobs: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    commits: int = 0

    def add(self, problem: str) -> None:
        self.anomalies.append(problem)


@dataclass
class History:
    """What the writers' history files say."""

    #: txn id -> its invoke line
    invoked: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: txn id -> its outcome line
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: "self-kill <point>" -> how many writers killed themselves there
    kills: Counter[str] = field(default_factory=Counter)


def read_history(directory: Path) -> History:
    """Every writer's file, read once."""
    history = History()
    for path in sorted(directory.glob("writer-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # the last line of a writer killed mid-write
            kind = event.get("kind")
            if kind == "invoke":
                history.invoked[event["txn_id"]] = event
            elif kind in ("ok", "fail", "unknown"):
                history.outcomes[event["txn_id"]] = event
            elif kind == "kill":
                history.kills[f"self-kill {event['point']}"] += 1
    return history


def describe(record: CommitRecord, partition_by: list[str], rlc: bool, statistics: bool = False) -> dict[str, Any]:
    """One commit as the rules read it: its log entry's JSON, so the checker shares no decoding with
    the committer beyond what the log stores."""
    entry = record.to_json()
    scope = entry.get("scope") or {}
    return {
        "operation": entry["operation"],
        "partitions": scope.get("partitions"),
        "read_files": entry.get("read_files", []),
        "read_predicates": entry.get("read_predicates", []),
        "reads_whole_table": entry.get("reads_whole_table", False),
        "removes": [f["path"] for f in entry.get("removes", [])],
        "adds": [
            {"path": f["path"], "partition": f.get("partition", {}), "data_change": f.get("data_change", True)}
            for f in entry.get("adds", [])
        ],
        "blind_append": entry.get("blind_append", False),
        "app_ids": entry.get("app_ids", {}),
        "isolation_level": entry.get("isolation_level"),
        "is_metadata": bool(entry.get("metadata")) and record.version > 0,
        "protocol": bool(entry.get("protocol")) and record.version > 0,
        "partition_by": partition_by,
        "rlc": rlc,
        "statistics": statistics,
    }


def check_table(
    catalog: Catalog, table: Table, invoked: dict[str, Any], outcomes: dict[str, Any], verdict: Verdict
) -> set[str]:
    """Every invariant of one table; the ids of the transactions its log holds (for check_cleanup)."""
    services = catalog.services
    entries = services.log(table.table_id, table.location).read(-1)
    records = [services.decode_log_entry(table.location, e) for e in entries]
    name = table.name
    # dense versions, each txn once
    if [r.version for r in records] != list(range(len(records))):
        verdict.add(f"{name}: the log's versions are not 0..{len(records) - 1} in order")
    by_txn: dict[str, list[int]] = defaultdict(list)
    for r in records:
        by_txn[r.txn_id].append(r.version)
    for txn_id, versions in by_txn.items():
        if len(versions) > 1:
            verdict.add(f"{name}: txn {txn_id} committed {len(versions)} times, at {versions}")
    # every acknowledged commit exactly there, every failed one absent, every unknown one resolved
    for txn_id, call in invoked.items():
        if call["table"] != name:
            continue
        outcome: dict[str, Any] = outcomes.get(txn_id) or {"kind": "unknown"}
        kind = outcome["kind"]
        verdict.jobs[kind] += 1
        landed = by_txn.get(txn_id, [])
        if kind == "ok" and not outcome.get("skipped"):
            if landed != [outcome["version"]]:
                verdict.add(
                    f"{name}: txn {txn_id} was acknowledged at version {outcome['version']}, the log has {landed}"
                )
        elif kind == "fail" and landed:
            verdict.add(f"{name}: txn {txn_id} failed with {outcome.get('exception')} but committed version {landed}")
        elif kind == "unknown":
            found = table.find_commit(txn_id)
            if (found is None) != (not landed) or (found is not None and [found] != landed):
                verdict.add(f"{name}: txn {txn_id}'s outcome was unknown; find_commit says {found}, the log {landed}")
    # idempotent writes: each (application id, version) at most once, and an acknowledged write that
    # was skipped as a repeat is in the log under an earlier transaction
    applied: dict[tuple[str, int], int] = {}
    for r in records:
        for app_id, app_version in r.app_ids.items():
            earlier = applied.setdefault((app_id, app_version), r.version)
            if earlier != r.version:
                verdict.add(f"{name}: {app_id} version {app_version} was applied twice, at {earlier} and {r.version}")
    for txn_id, call in invoked.items():
        outcome = outcomes.get(txn_id) or {}
        skipped = call["table"] == name and outcome.get("kind") == "ok" and outcome.get("skipped")
        if skipped and "app_id" in call and (call["app_id"], call["app_version"]) not in applied:
            verdict.add(
                f"{name}: txn {txn_id} was skipped as a repeat of {call['app_id']} version "
                f"{call['app_version']}, which the log never applied"
            )
    # a compaction or clustering rewrites rows, it never adds or loses one (the rows ride in the log)
    for r in records:
        if r.operation.value in REWRITES and not _same_rows(r.adds, r.removes):
            verdict.add(
                f"{name}: version {r.version} ({r.operation.display}) added other rows than the files it removed held"
            )
    # time versions: only data commits, strictly increasing
    last = None
    for r in records:
        if r.time_version is None:
            continue
        if last is not None and r.time_version <= last:
            verdict.add(f"{name}: version {r.version}'s time version is not after the previous data commit's")
        last = r.time_version
    # an independent serial replay: a removed file must be live, an added one new
    live: dict[str, DataFile] = {}
    for r in records:
        for f in r.removes:
            if f.path not in live:
                verdict.add(f"{name}: version {r.version} removes {f.path}, which was not live")
            live.pop(f.path, None)
        for f in r.adds:
            if f.path in live:
                verdict.add(f"{name}: version {r.version} adds {f.path}, which was live already")
            live[f.path] = f
    current = {p: f.size_bytes for p, f in table.snapshot().files_by_path.items()}
    if current != {p: f.size_bytes for p, f in live.items()}:
        verdict.add(
            f"{name}: the table's snapshot differs from a serial replay of its log "
            f"({len(current)} vs {len(live)} files)"
        )
    check_files(table, live, verdict)
    # the rules, re-judged: no committed commit met a winner it must have failed against
    policy = records[0].policy.value
    partition_by = list(table.metadata.partition_by)
    # row-level concurrency: deletion vectors on and no partitions (conflict-rules §1.2)
    rlc = table.metadata.row_level_concurrency and not partition_by
    statistics = table.metadata.conflict_detection == "statistics"
    described = [describe(r, partition_by, rlc, statistics) for r in records]
    for r in records[1:]:
        for winner in records[r.read_version + 1 : r.version]:
            why = must_fail(policy, described[winner.version], described[r.version])
            if why:
                verdict.add(
                    f"{name}: version {r.version} ({r.operation.display}, read version {r.read_version}) committed "
                    f"after version {winner.version} ({winner.operation.display}): {why}"
                )
    verdict.commits += len(records) - 1
    # fsck's invariants too
    report = table.fsck()
    for check in report.checks:
        for problem in check.problems:
            if check.name != "in flight":
                verdict.add(f"{name}: fsck {check.name}: {problem}")
    return set(by_txn)


def _same_rows(adds: tuple[DataFile, ...], removes: tuple[DataFile, ...]) -> bool:
    """Whether the added files hold exactly the removed files' rows (as multisets); True when a file's
    rows are not in the log (not a runner's file) and so cannot be compared."""
    if any("rows" not in f.extra for f in (*adds, *removes)):
        return True
    return Counter(row for f in adds for row in f.extra["rows"]) == Counter(
        row for f in removes for row in f.extra["rows"]
    )


def check_files(table: Table, live: dict[str, DataFile], verdict: Verdict) -> None:
    """Every file of the replayed table is on disk with the size, row count and rows its commit wrote."""
    storage = table.storage
    for path, entry in live.items():
        relative = storage.relative(path)
        found_size = storage.file_size(relative)
        if found_size != entry.size_bytes:
            verdict.add(f"{table.name}: {path} has {found_size} bytes on disk, the log says {entry.size_bytes}")
            continue
        with storage.open_input(relative) as handle:
            parquet = pq.ParquetFile(handle)
            if parquet.metadata.num_rows != entry.rows:
                verdict.add(f"{table.name}: {path} holds {parquet.metadata.num_rows} rows, the log says {entry.rows}")
                continue
            # a runner's file carries its rows in the log too
            written = entry.extra.get("rows")
            if written is not None and parquet.read(columns=["id"]).column("id").to_pylist() != list(written):
                verdict.add(f"{table.name}: {path} holds other rows than its commit wrote")


def check_cleanup(table: Table, committed: set[str], verdict: Verdict) -> None:
    """After every writer's lease has expired: cleanup(grace 0) leaves no staging directory of a
    transaction that did not commit."""
    table.cleanup(grace_seconds=0)
    root = Path(table.storage.absolute("data"))
    if not root.is_dir():
        return
    for entry in root.iterdir():
        txn_id = txn_of_staging_dir(entry.name)
        if txn_id is not None and txn_id not in committed:
            verdict.add(f"{table.name}: the staged files of dead transaction {txn_id} survived cleanup()")
