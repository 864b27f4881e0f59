"""The checker: reads the history the writers wrote, the log (etcd and archive) and the files, and
lists every anomaly (issue 10). Nothing here trusts the committer: replay and conflict rules are its
own (acidtables.check.rules), and the log is read as data.

Multi-table transactions (issue 44) are checked part by part as single jobs are (check_table), and as
groups (check_multi): each group all-or-nothing against what its writer was told, its parts written by
one etcd transaction, and no reader's `catalog.snapshots()` ever holding one part without the others."""

from __future__ import annotations

import bisect
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
    #: multi-table transactions by outcome (ok, fail, aborted, unknown)
    multi: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: multi-table transactions found committed in the logs
    multi_commits: int = 0
    #: readers' snapshots() of several tables, checked for atomic visibility
    reads: int = 0

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
    #: readers' reads: {"began": time, "versions": {table: version}}
    reads: list[dict[str, Any]] = field(default_factory=list)


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
            elif kind in ("ok", "fail", "unknown", "aborted"):
                history.outcomes[event["txn_id"]] = event
            elif kind == "kill":
                history.kills[f"self-kill {event['point']}"] += 1
    for path in sorted(directory.glob("reader-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("kind") == "read":
                history.reads.append(event)
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
        elif kind == "aborted" and landed:
            verdict.add(f"{name}: txn {txn_id} was aborted but committed version {landed}")
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


@dataclass(frozen=True)
class Part:
    """One table's part of a multi-table transaction, as that table's log holds it."""

    table: str
    version: int
    txn_id: str
    #: the group's tables, as this part's log entry names them
    tables: tuple[str, ...]
    time_version: int | None
    #: the etcd revision its log entry was written at (None: archived out of etcd since)
    revision: int | None


def log_revisions(catalog: Catalog, table: Table) -> dict[int, int]:
    """version -> the etcd revision its log key was written at, for the entries still in etcd: read
    from etcd itself, so whether a group's parts were written by one etcd transaction is seen directly."""
    coordinator = catalog.services.coordinator
    start, end = coordinator.keys.log_range(table.table_id, 0, None)
    found = {}
    for _, meta in coordinator._paged_range("the checker's read of log revisions", start, end):
        found[int(meta.key.decode().rsplit("/", 1)[-1])] = meta.mod_revision
    return found


#: how many reads of one group seen in part, or stale reads of one table, are spelled out
_SHOWN = 3


def check_multi(catalog: Catalog, tables: list[Table], history: History, verdict: Verdict) -> None:
    """Every multi-table transaction all-or-nothing, and every reader's view atomic:

    - each multi_txn_id is in the tables its log entries name, once each, and those are the tables its
      writer began parts on (less the parts the commit skipped: an application version a table had);
    - its parts were written at one etcd revision (one etcd transaction) and share one time version;
    - acknowledged: every part that was not skipped is there; failed or aborted: no part is anywhere;
      unknown: every part or none (again less the parts that could have been skipped);
    - no reader's snapshots() saw a part of one without the parts on the other tables it read, saw a
      version a log never reached, or missed a commit acknowledged before its read began."""
    landed: dict[str, list[Part]] = defaultdict(list)
    final: dict[str, int] = {}
    applied: dict[str, dict[tuple[str, int], str]] = {}
    for table in tables:
        services = catalog.services
        entries = services.log(table.table_id, table.location).read(-1)
        records = [services.decode_log_entry(table.location, e) for e in entries]
        revisions = log_revisions(catalog, table)
        final[table.name] = records[-1].version if records else -1
        applied[table.name] = {(a, v): r.txn_id for r in records for a, v in r.app_ids.items()}
        for r in records:
            if r.multi_txn_id:
                landed[r.multi_txn_id].append(
                    Part(
                        table.name,
                        r.version,
                        r.txn_id,
                        tuple(r.multi_txn_tables),
                        r.time_version,
                        revisions.get(r.version),
                    )
                )
    # the groups the writers began: multi_txn_id -> table -> txn id
    begun: dict[str, dict[str, str]] = defaultdict(dict)
    for txn_id, call in history.invoked.items():
        if call.get("multi_txn_id"):
            begun[call["multi_txn_id"]][call["table"]] = txn_id
    for multi_id, parts in sorted(landed.items()):
        _check_landed_group(multi_id, parts, begun.get(multi_id), verdict)
    for multi_id, members in sorted(begun.items()):
        present = {p.table for p in landed.get(multi_id, [])}
        outcomes = [history.outcomes.get(txn_id) or {"kind": "unknown"} for txn_id in members.values()]
        kinds = {o["kind"] for o in outcomes}
        # a writer killed between its parts' outcome lines told some of them: one told outcome is the group's
        kind = next((k for k in ("ok", "fail", "aborted") if k in kinds), "unknown")
        verdict.multi[kind] += 1
        if present:
            verdict.multi_commits += 1
        told = sorted(kinds - {"unknown"})
        if len(told) > 1:
            verdict.add(f"multi-table transaction {multi_id}: its parts were told different outcomes ({told})")

        def skippable(table: str, txn_id: str) -> bool:
            """A part the commit may have skipped: its table already had its application version."""
            call = history.invoked[txn_id]
            key = (call.get("app_id"), call.get("app_version"))
            return "app_id" in call and applied[table].get(key, txn_id) != txn_id  # type: ignore[arg-type]

        if kind == "ok":
            skipped = {t for t, txn in members.items() if (history.outcomes.get(txn) or {}).get("skipped")}
            expected = set(members) - skipped
            # a part whose outcome line its killed writer never wrote may have been skipped too
            untold = {t for t, txn in members.items() if txn not in history.outcomes and skippable(t, txn)}
            if present - expected or expected - present - untold:
                verdict.add(
                    f"multi-table transaction {multi_id} was acknowledged on {sorted(expected)}, its parts are in "
                    f"{sorted(present)}"
                )
        elif kind in ("fail", "aborted"):
            if present:
                why = next((o.get("exception") for o in outcomes if o.get("exception")), kind)
                verdict.add(
                    f"multi-table transaction {multi_id} was {'aborted' if kind == 'aborted' else 'failed'} "
                    f"({why}) but left parts on {sorted(present)}"
                )
        elif present:
            missing = {t for t in set(members) - present if not skippable(t, members[t])}
            if missing:
                verdict.add(
                    f"multi-table transaction {multi_id} of unknown outcome landed on {sorted(present)} but not on "
                    f"{sorted(missing)}"
                )
    check_reads(landed, final, history, verdict)


def _check_landed_group(multi_id: str, parts: list[Part], begun: dict[str, str] | None, verdict: Verdict) -> None:
    where = Counter(p.table for p in parts)
    twice = sorted(t for t, n in where.items() if n > 1)
    if twice:
        verdict.add(f"multi-table transaction {multi_id} committed more than once on {twice}")
    named = {p.tables for p in parts}
    if len(named) > 1:
        verdict.add(f"multi-table transaction {multi_id}'s parts name different tables: {sorted(named)}")
    listed = set(parts[0].tables)
    if not set(where) <= listed:
        verdict.add(
            f"multi-table transaction {multi_id} is in {sorted(where)}, its log entries name {sorted(listed)} only"
        )
    revisions = sorted({p.revision for p in parts if p.revision is not None})
    if len(revisions) > 1:
        at = ", ".join(f"{p.table} version {p.version} at {p.revision}" for p in sorted(parts, key=lambda p: p.table))
        verdict.add(
            f"multi-table transaction {multi_id}'s parts were written at different etcd revisions ({at}): "
            "not by one etcd transaction, so for a while one table had it and another not"
        )
    times = {p.time_version for p in parts if p.time_version is not None}
    if len(times) > 1:
        verdict.add(f"multi-table transaction {multi_id}'s parts have different time versions {sorted(times)}")
    if begun is None:
        verdict.add(f"multi-table transaction {multi_id} is in {sorted(where)} but no writer began it")
        return
    if listed != set(begun):
        verdict.add(
            f"multi-table transaction {multi_id}'s log entries name {sorted(listed)}, its writer began parts on "
            f"{sorted(begun)}"
        )
    for p in parts:
        if begun.get(p.table, p.txn_id) != p.txn_id:
            verdict.add(
                f"multi-table transaction {multi_id}'s part on {p.table} is txn {p.txn_id}, its writer's was "
                f"{begun[p.table]}"
            )


def check_reads(landed: dict[str, list[Part]], final: dict[str, int], history: History, verdict: Verdict) -> None:
    """Atomic visibility and freshness of every read of several tables at one instant."""
    reads = history.reads
    verdict.reads += len(reads)
    for read in reads:
        for table, version in read["versions"].items():
            if version > final.get(table, -1):
                verdict.add(f"a reader saw {table} at version {version}, which its log never reached")
    # no read holds one part of a group without its parts on the other tables it read
    for multi_id, parts in sorted(landed.items()):
        if len(parts) < 2:
            continue
        torn = []
        for read in reads:
            seen = read["versions"]
            held = {p.table: p.version <= seen[p.table] for p in parts if p.table in seen}
            if len(held) > 1 and len(set(held.values())) > 1:
                torn.append(read)
        for read in torn[:_SHOWN]:
            seen = read["versions"]
            parts_seen = ", ".join(
                f"{p.table} version {p.version} ({'seen' if p.version <= seen[p.table] else 'not seen'})"
                for p in sorted(parts, key=lambda p: p.table)
                if p.table in seen
            )
            verdict.add(
                f"a reader's snapshots() at {read['began']:.3f} saw multi-table transaction {multi_id} in part: "
                f"{parts_seen}; it read {seen}"
            )
        if len(torn) > _SHOWN:
            verdict.add(f"... and {len(torn) - _SHOWN} more reads saw multi-table transaction {multi_id} in part")
    # freshness: a commit acknowledged before a read began is in what the read saw
    acked: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for txn_id, outcome in history.outcomes.items():
        call = history.invoked.get(txn_id)
        if call is not None and outcome["kind"] == "ok" and not outcome.get("skipped") and "time" in outcome:
            acked[call["table"]].append((float(outcome["time"]), int(outcome["version"])))
    newest: dict[str, tuple[list[float], list[int]]] = {}
    for table, pairs in acked.items():
        pairs.sort()
        times, highest, top = [], [], -1
        for when, version in pairs:
            top = max(top, version)
            times.append(when)
            highest.append(top)
        newest[table] = (times, highest)
    stale: dict[str, int] = Counter()
    for read in reads:
        for table, version in read["versions"].items():
            if table not in newest:
                continue
            times, highest = newest[table]
            index = bisect.bisect_left(times, float(read["began"])) - 1
            if index >= 0 and highest[index] > version:
                stale[table] += 1
                if stale[table] <= _SHOWN:
                    verdict.add(
                        f"a reader's snapshots() at {read['began']:.3f} saw {table} at version {version}, though "
                        f"version {highest[index]} was acknowledged before the read began"
                    )
    for table, count in sorted(stale.items()):
        if count > _SHOWN:
            verdict.add(f"... and {count - _SHOWN} more stale reads of {table}")
