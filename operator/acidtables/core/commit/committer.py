"""The commit loop: compare-and-swap the head, and on a lost compare judge the winners and rebase.

This is the only place that does I/O for a commit, in the etcd STM shape: (1) try the CAS; (2) if it
lost, the same round trip brought back the log since our read version, so judge each winning commit in
log order with the table's pure policy (conflict-rules §1.4); (3) rebase and try again, bounded and with
jittered backoff, or fail with the policy's exception. A lost answer is resolved by looking the txn id
up before anything is retried (D-30), so a commit is never applied twice nor reported failed when it
landed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from acidtables.core import events
from acidtables.core.commit.conflicts import judge
from acidtables.core.coordination.failures import CommitAnswerLost
from acidtables.core.coordination.tables import CasRequest, CasResult
from acidtables.core.errors import (
    CommitOutcomeUnknown,
    CommitRetriesExhausted,
    ConcurrentModificationException,
    CoordinatorFull,
    CoordinatorPermissionDenied,
    CoordinatorRefused,
    CoordinatorUnavailable,
    InvalidArgumentError,
    TableNotFoundError,
)
from acidtables.core.log.operations import IsolationLevel, Operation
from acidtables.core.log.records import CommitInfo, CommitRecord, Head, evolve, sealed_bytes, to_datetime
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import Snapshot, SnapshotBuilder
from acidtables.core.mirror import mirror_formats, schedule_mirror

logger = logging.getLogger(__name__)


class Staged(Protocol):
    """What committing needs of a transaction's staged files: delete them except what the landed record
    references, and end the transaction's in-flight registration. The transaction hands this in; the
    committer never reaches back into it."""

    def discard(self, keep: Iterable[str]) -> None: ...

    def release(self) -> None: ...

    def stop_registering(self) -> bool:
        """No in-flight registration is made for the transaction from now on. True when one may exist
        (made already, or by the process that began the transaction): the commit then deletes it."""
        ...


def commit(
    services: Services,
    intent: CommitRecord,
    *,
    snapshot: Snapshot,
    expected_revision: int,
    staged: Staged,
    reads_since: int | None = None,
) -> CommitInfo:
    """Make `intent` (read at `snapshot`, whose head had `expected_revision`) the table's next version:
    compare-and-swap, and on a lost compare judge the winners and rebase, bounded (the etcd STM shape,
    pyiceberg's `commit_table(table, requirements, updates)`). Returns what landed; raises the policy's
    conflict, CommitRetriesExhausted, CoordinatorUnavailable or CommitOutcomeUnknown. `reads_since`: the
    version some of the intent's reads saw, when older than the snapshot's (see Transaction.record_read)."""
    if records_nothing(intent):
        return skip(intent, staged, snapshot.version)
    committer = TableCommitter(services, intent, snapshot, expected_revision, staged)
    if reads_since is not None and reads_since < snapshot.version:
        committer.judge_commits_the_reads_missed(reads_since)
    return committer.run()


#: the operations whose commit is left out of the log when it would change nothing (below)
SKIPPED_WHEN_EMPTY = frozenset({Operation.UPDATE, Operation.DELETE, Operation.MERGE})


def skip(intent: CommitRecord, staged: Staged, version: int) -> CommitInfo:
    """End a commit that adds no version (nothing recorded, or already applied: `version` holds its
    effect): its staged files deleted, its registration ended."""
    staged.discard(keep=())
    staged.release()
    return CommitInfo(
        version=version,
        time_version=None,
        retries=0,
        txn_id=intent.txn_id,
        operation=intent.operation,
        skipped=True,
        multi_txn_id=intent.multi_txn_id,
    )


def retry_delay(services: Services, attempt: int) -> float:
    """The pause before the next attempt after `attempt` lost compares in a row. The failed
    compare-and-swap brought back what beat it and the commit is rebased onto it: the first retry goes
    at once. Losing again means a crowd: back off with full jitter, doubling from backoff_seconds,
    capped, as etcd's STM does."""
    settings = services.settings.commit
    if attempt <= 1:
        return 0.0
    ceiling = min(settings.backoff_max_seconds, settings.backoff_seconds * 2 ** (attempt - 2))
    return services.rng.uniform(0, ceiling)


def records_nothing(intent: CommitRecord) -> bool:
    """Delta's skipRecordingEmptyCommits: an UPDATE, DELETE or MERGE that matched no row, on a table
    at Serializable, adds no version. Nothing it would record could change what anyone reads, and as of
    its read version it is already serialised, so no concurrent commit can fail it. Delta records the
    empty commit under WriteSerializable, and so do the MaxCompute policies, whose matrices judge every
    job: there it reads as a version of its own in the history and is judged as any commit is."""
    return (
        intent.operation in SKIPPED_WHEN_EMPTY
        and intent.isolation_level is IsolationLevel.SERIALIZABLE
        and not (intent.adds or intent.removes or intent.app_ids)
        and intent.metadata is None
        and intent.protocol is None
    )


class TableCommitter:
    def __init__(
        self, services: Services, intent: CommitRecord, snapshot: Snapshot, expected_revision: int, staged: Staged
    ) -> None:
        self.services = services
        self.intent = intent
        self.snapshot = snapshot
        self.staged = staged
        self.operation = intent.operation
        self.txn_id = intent.txn_id
        self.read_version = snapshot.version
        self.meta = snapshot.metadata
        self.table_id = snapshot.metadata.table_id
        self.storage = services.storage(snapshot.metadata.location)
        self.log = services.log(snapshot.metadata.table_id, snapshot.metadata.location)
        self.settings = services.settings.commit
        self.started = time.monotonic()
        self.base_version = snapshot.version
        self.base_time = snapshot.time_version
        self.expected_revision = expected_revision
        #: winning commits we were rebased onto, in log order; with our record they rebuild the new head
        self.winners: list[CommitRecord] = []
        #: whether the commit transaction must delete an in-flight registration: a short transaction has
        #: none, and from here on none is made, so most commits spare etcd that operation
        self.unregister = staged.stop_registering()

    # --- events --------------------------------------------------------------------------------------

    def event(self, kind: str, **fields: Any) -> events.CommitEvent:
        return events.commit_event(
            kind,
            self.meta.name,
            table_id=self.table_id,
            operation=self.operation.value,
            txn_id=self.txn_id,
            duration_seconds=time.monotonic() - self.started,
            **fields,
        )

    # --- the loop ------------------------------------------------------------------------------------

    def run(self) -> CommitInfo:
        applied = self.already_applied()
        if applied is not None:
            return applied
        attempt = 0
        while True:
            attempt += 1
            now = self.services.clock()
            record = self.attempt_record(attempt, now, self.next_time_version(now))
            try:
                result = self.services.coordinator.compare_and_swap(self.cas_request(record, attempt))
            except CoordinatorFull as full:
                # etcd applies the write that crosses its quota and only then answers NOSPACE (its quota
                # applier), so a refusal may have landed: look the txn id up (reads still work)
                looked_up = self.after_lost_answer(str(full))
                if looked_up.succeeded:
                    return self.finish(self.decode(looked_up.log[0]))
                self.give_up()
                raise
            except (CoordinatorPermissionDenied, CoordinatorRefused):
                # refused before applying (the user may read the prefix but not write it; a request
                # over etcd's limits): nothing landed
                self.give_up()
                raise
            except CommitAnswerLost as lost:
                result = self.after_lost_answer(str(lost))
                if result.succeeded:
                    return self.finish(self.decode(result.log[0]))
            if result.succeeded:
                return self.finish(record)
            landed = self.absorb(result)
            if landed is not None:
                return self.finish(landed)
            if attempt >= self.settings.max_attempts:
                self.give_up()
                self.services.report(self.event("exhausted", retries=attempt))
                raise CommitRetriesExhausted(
                    f"{self.operation.display} on {self.meta.name} was rebased {attempt} times without winning the "
                    f"compare-and-swap (limit ACIDTABLES_COMMIT_MAX_ATTEMPTS={self.settings.max_attempts}); nothing "
                    "was committed. The table is very busy: retry later or raise the limit."
                )
            delay = retry_delay(self.services, attempt)
            self.services.report(self.event("retry", retries=attempt, backoff_seconds=delay))
            logger.info(
                "%s: txn %s (read version %d) rebased onto version %d, attempt %d/%d, retrying in %.3f s",
                self.meta.name,
                self.txn_id,
                self.read_version,
                self.base_version,
                attempt + 1,
                self.settings.max_attempts,
                delay,
            )
            if delay > 0:
                self.services.timer.sleep(delay)
                # Commits landed while we slept: rebase onto them now, so the next compare-and-swap
                # compares a fresh head instead of losing to everything that happened during the sleep.
                landed = self.absorb(self.services.coordinator.read_head_and_log(self.table_id, self.base_version))
                if landed is not None:
                    return self.finish(landed)

    def next_time_version(self, now: int) -> int | None:
        """D-19: strictly increasing even when clocks disagree; only data changes get one (D-20)."""
        return max(now, (self.base_time or 0) + 1) if self.operation.changes_data else None

    def attempt_record(self, attempt: int, now: int, time_version: int | None) -> CommitRecord:
        """The record this attempt writes: the (rebased) intent at the version after its base."""
        return evolve(
            self.intent,
            version=self.base_version + 1,
            committed_at=now,
            time_version=time_version,
            retries=attempt - 1,
            commit_micros=int((time.monotonic() - self.started) * 1_000_000),
        )

    def cas_request(self, record: CommitRecord, attempt: int, *, inline_max_bytes: int | None = None) -> CasRequest:
        """What the compare-and-swap of `record` sends for this table."""
        time_version = record.time_version
        head = Head(record.version, time_version if time_version is not None else self.base_time, self.txn_id)
        return CasRequest(
            table_id=self.table_id,
            expected_head_revision=self.expected_revision,
            read_after=self.base_version,
            version=record.version,
            entry=self._log_entry(record, attempt, inline_max_bytes),
            head=head.to_json(),
            txn_id=self.txn_id,
            time_version=time_version,
            unregister=self.unregister,
        )

    def judge_commits_the_reads_missed(self, since: int) -> None:
        """The job read the table at `since`, before the version it writes on: each commit in between is
        judged against what it read, as a concurrent one would be. They are already in its base, so
        nothing is rebased; a conflict fails the commit before any compare-and-swap."""
        for entry in self.log.read(since, self.read_version):
            self._judged(self.decode(entry))

    def _judged(self, earlier: CommitRecord) -> CommitRecord:
        """Our intent judged against a commit it did not see (§13.1 / the matrices): rebased onto it, or
        the policy's conflict raised once the staged files are given up."""
        verdict = judge(earlier, self.intent, self.meta)
        if isinstance(verdict, ConcurrentModificationException):
            self.fail(verdict)
            raise verdict
        return verdict

    def absorb(self, result: CasResult) -> CommitRecord | None:
        """Judge the winning commits in log order and rebase onto them (conflict-rules §1.4).

        Returns our own record if it is among them (an earlier attempt landed but its answer was lost);
        raises the policy's exception on a real conflict.
        """
        if result.head is None:
            self.give_up()
            raise TableNotFoundError(f"{self.meta.name} was dropped while {self.operation.display} was running")
        # etcd sent what it still has; a transaction whose read version left its window gets the rest
        # from the archive, so every winner is judged (a gap would be CorruptMetadataError, never a skip)
        log = self.log.complete(
            [e for e in result.log if int(e["version"]) > self.base_version],
            self.base_version,
            int(result.head.value["version"]),
        )
        for entry in log:
            winner = self.decode(entry)
            if winner.version <= self.base_version:
                continue
            if winner.txn_id == self.txn_id:
                return winner
            self.intent = self._judged(winner)
            self.winners.append(winner)
            self.base_version = winner.version
            if winner.time_version is not None:
                self.base_time = winner.time_version
        if int(result.head.value["version"]) == self.base_version:
            self.expected_revision = result.head.mod_revision
        # else the head moved past the log we were sent: the next compare-and-swap loses and reads again
        return None

    # --- pieces --------------------------------------------------------------------------------------

    def decode(self, entry: dict[str, Any]) -> CommitRecord:
        return self.services.decode_log_entry(self.meta.location, entry)

    def _log_entry(self, record: CommitRecord, attempt: int, inline_max_bytes: int | None) -> bytes:
        """The encoded log entry: the record itself, or (when larger than `inline_max_bytes`, by default
        ACIDTABLES' inline limit) a pointer to an immutable commit file written first. Encoded once
        here; etcd gets these bytes."""
        encoded = sealed_bytes(record.to_json())
        limit = self.settings.inline_record_max_bytes if inline_max_bytes is None else inline_max_bytes
        if len(encoded) <= limit:
            return encoded
        path = self.storage.commit_file(record.txn_id, attempt)
        try:
            self.storage.write_exclusive(path, encoded)
        except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
            self.give_up()
            raise InvalidArgumentError(
                f"{self.meta.name}: the commit file {self.storage.absolute(path)} cannot be written ({exc}); the "
                "table's metadata directory must be a directory of its own. Nothing was committed"
            ) from None
        pointer = {
            "version": record.version,
            "txn_id": record.txn_id,
            "operation": record.operation.value,
            "commit_file": path,
        }
        return sealed_bytes(pointer)

    def already_applied(self) -> CommitInfo | None:
        """D-27: a write whose (app id, version) the table already has is skipped as already applied."""
        for app_id, version in self.intent.app_ids.items():
            recorded = self.snapshot.app_ids.get(app_id)
            if recorded is not None and recorded[0] >= version:
                logger.info(
                    "%s: application %r version %d already applied at version %d; skipped",
                    self.meta.name,
                    app_id,
                    version,
                    recorded[1],
                )
                return skip(self.intent, self.staged, recorded[1])
        return None

    def after_lost_answer(self, why: str) -> CasResult:
        """Look the txn id up before any retry; if etcd stays away, the outcome is unknown. `why`: what
        made the answer unknown, for the log."""
        coordinator = self.services.coordinator
        try:
            landed = self.log.find_txn(self.txn_id)
            if landed is not None:
                logger.info(
                    "%s: txn %s landed at version %d although its answer was lost (%s)",
                    self.meta.name,
                    self.txn_id,
                    landed,
                    why,
                )
                return CasResult(True, None, self.log.read(landed - 1, landed))
            head = coordinator.read_head(self.table_id)
            return CasResult(False, head, self.log.read(self.base_version))
        except (CoordinatorUnavailable, CoordinatorRefused) as exc:  # no answer to the lookup: no answer at all
            raise CommitOutcomeUnknown(
                f"the commit of {self.operation.display} on {self.meta.name} (txn {self.txn_id}) was sent "
                f"but etcd's answer was lost and etcd stayed unreachable: it may or may not have landed. Its staged "
                f"files are kept. Once etcd is back, Table.find_commit({self.txn_id!r}) tells which.",
                txn_id=self.txn_id,
            ) from exc
        except LookupError:
            raise TableNotFoundError(f"{self.meta.name} was dropped while the commit was running") from None

    def finish(self, record: CommitRecord) -> CommitInfo:
        """After the commit point nothing raises: cleanup and checkpoint failures are warnings."""
        self.staged.discard(keep=[f.path for f in record.adds])
        self._cache_new_snapshot(record)
        self.services.report(self.event("committed", version=record.version, retries=record.retries))
        table = (self.table_id, self.meta.location)
        if record.version % max(1, self.settings.log_window_versions // 2) == 0:
            self.services.archiver.schedule(table, None)
        if self.services.checkpoint_due(table, record):
            # off the commit path, on a thread of this process (issue 32)
            self.services.checkpointer.schedule(table, (record.version, self.txn_id))
        if mirror_formats(record.metadata or self.meta) or (record.metadata is not None and mirror_formats(self.meta)):
            # the Delta mirror catches up off the commit path too; an ALTER that turned it off removes it
            schedule_mirror(self.services, table, record.version)
        logger.debug(
            "%s: txn %s committed version %d after %d retries",
            self.meta.name,
            self.txn_id,
            record.version,
            record.retries,
        )
        return CommitInfo(
            version=record.version,
            time_version=to_datetime(record.time_version),
            retries=record.retries,
            txn_id=self.txn_id,
            operation=record.operation,
            files_added=len(record.adds),
            files_removed=len(record.removes),
            is_blind_append=record.blind_append,
            multi_txn_id=record.multi_txn_id,
            metrics=dict(record.metrics),
        )

    def _cache_new_snapshot(self, record: CommitRecord) -> None:
        """The next transaction of this process then starts without reading the log."""
        chain = [w for w in self.winners if w.version < record.version] + [record]
        if [r.version for r in chain] != list(range(self.read_version + 1, record.version + 1)):
            return  # we did not see every commit in between (the answer-lost path): let the cache read the log
        try:
            self.services.snapshots.put(SnapshotBuilder(self.snapshot).apply_all(chain).build())
        except ValueError as exc:  # never after the commit point; the cache just misses
            logger.debug("%s: not caching version %d: %s", self.meta.name, record.version, exc)

    def fail(self, conflict: ConcurrentModificationException) -> None:
        self.give_up()
        self.services.report(
            self.event("conflict", exception=type(conflict).__name__),
            conflict.to_dict(),
        )

    def give_up(self) -> None:
        self.staged.discard(keep=())
        self.staged.release()
