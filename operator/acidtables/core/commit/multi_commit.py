"""The commit loop of a multi-table transaction: one etcd transaction over every table's head (issue 44).

Each part is an ordinary commit of one table (a TableCommitter: its intent, snapshot, staged files),
and the parts go to etcd together: one transaction compares every table's head and, only if none moved,
writes every table's new version. All tables move or none does. On a lost compare the same round trip
brought back what beat each part, so each part is judged by its own table's policy and rebased exactly
as a single commit would be (committer.py); a part that must fail fails the whole, with the named
exception of its table, and nothing is committed anywhere. A lost answer is resolved by looking the
parts' txn ids up: they land together, so the first part's answer is every part's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from acidtables.core.commit.committer import Staged, TableCommitter, records_nothing, retry_delay, skip
from acidtables.core.coordination.etcd_txn import SUCCESS_OPS_PER_TABLE
from acidtables.core.coordination.failures import CommitAnswerLost
from acidtables.core.coordination.tables import CasResult
from acidtables.core.errors import (
    CommitOutcomeUnknown,
    CommitRetriesExhausted,
    ConcurrentModificationException,
    CoordinatorFull,
    CoordinatorPermissionDenied,
    CoordinatorRefused,
    CorruptMetadataError,
    InvalidArgumentError,
)
from acidtables.core.log.records import CommitInfo, CommitRecord
from acidtables.core.log.services import Services
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.settings import EtcdSettings

logger = logging.getLogger(__name__)

#: bytes of a multi-table commit request that are not log entries: each table's keys and head, the
#: compares and the framing (about 400 bytes a table, measured; counted generously)
_OVERHEAD_BYTES_PER_TABLE = 2048


def max_tables(settings: EtcdSettings) -> int:
    """How many tables one multi-table commit can always hold: etcd applies at most --max-txn-ops
    operations per branch of a transaction, and each table adds up to SUCCESS_OPS_PER_TABLE. The size
    bound (--max-request-bytes) never decides it: each part's log entry goes to a commit file once it
    would take more than its share of the request (`inline_share`)."""
    return max(1, settings.max_txn_ops // SUCCESS_OPS_PER_TABLE)


def inline_share(services: Services, tables: int) -> int:
    """The largest log entry a part of a `tables`-table commit keeps inline in etcd: its share of
    etcd's request limit, never more than a single commit's. Larger ones become commit files, which
    etcd holds only a pointer to, so the request always fits."""
    budget = services.settings.etcd.max_request_bytes // tables - _OVERHEAD_BYTES_PER_TABLE
    return max(1024, min(services.settings.commit.inline_record_max_bytes, budget))


@dataclass(frozen=True)
class PendingCommit:
    """One table's part, as its Transaction hands it over: what commit() would pass the committer."""

    intent: CommitRecord
    snapshot: Snapshot
    expected_revision: int
    staged: Staged
    reads_since: int | None = None


def commit_together(services: Services, parts: Sequence[PendingCommit], *, multi_txn_id: str) -> list[CommitInfo]:
    """Commit every part or none, in one etcd transaction per attempt. Returns each part's CommitInfo,
    in order; raises the failing part's conflict (named for its table and this transaction),
    CommitRetriesExhausted, CoordinatorUnavailable or CommitOutcomeUnknown, as a single commit does."""
    return GroupCommit(services, parts, multi_txn_id=multi_txn_id).run()


class GroupCommit:
    """One multi-table commit. Besides its outcome it says what an interrupted run left: `landed` once
    an answer or a lookup showed every part committed; `may_have_landed` from the moment a request is
    sent until an answer says it lost. A caller interrupted (KeyboardInterrupt, an unexpected error)
    while `may_have_landed` must keep the staged files: they may be the tables' data now (cleanup
    checks the log before deleting any)."""

    def __init__(self, services: Services, parts: Sequence[PendingCommit], *, multi_txn_id: str) -> None:
        tables = tuple(p.snapshot.metadata.name for p in parts)
        if len(parts) > max_tables(services.settings.etcd):
            raise InvalidArgumentError(
                f"a multi-table transaction holds at most {max_tables(services.settings.etcd)} tables "
                f"(ACIDTABLES_ETCD_MAX_TXN_OPS={services.settings.etcd.max_txn_ops}); found {len(parts)}"
            )
        self.services = services
        self.multi_txn_id = multi_txn_id
        self.tables = tables
        self.landed = False
        self.may_have_landed = False
        self.infos: list[CommitInfo | None] = [None] * len(parts)
        #: (index into parts, its committer) of the parts that still have something to commit
        self.committers: list[tuple[int, TableCommitter]] = []
        #: the version some of a part's reads saw, when older than its snapshot (Transaction.record_read)
        self.reads_since: dict[int, int | None] = {}
        for index, part in enumerate(parts):
            intent = part.intent
            if (intent.multi_txn_id, intent.multi_txn_tables) != (multi_txn_id, tables):
                # Transaction.pending_commit names the group in the intent; a part made for another group
                # would write a history that names the wrong transaction
                raise InvalidArgumentError(
                    f"part {index} of multi-table transaction {multi_txn_id} over {', '.join(tables)} was prepared "
                    f"for {intent.multi_txn_id} over {', '.join(intent.multi_txn_tables)}; nothing was committed"
                )
            if records_nothing(intent):
                self.infos[index] = skip(intent, part.staged, part.snapshot.version)
                continue
            committer = TableCommitter(services, intent, part.snapshot, part.expected_revision, part.staged)
            self.committers.append((index, committer))
            self.reads_since[index] = part.reads_since

    def run(self) -> list[CommitInfo]:
        # D-27 per table: a part whose (app id, version) its table already has is skipped, as alone
        pending = []
        for index, committer in self.committers:
            applied = committer.already_applied()
            if applied is not None:
                self.infos[index] = applied
            else:
                pending.append((index, committer))
        self.committers = pending
        for index, committer in self.committers:
            since = self.reads_since[index]
            try:
                if since is not None and since < committer.read_version:
                    committer.judge_commits_the_reads_missed(since)
            except ConcurrentModificationException as conflict:
                self._fail_all(committer, conflict)
            except BaseException:
                self._give_up_all()
                raise
        if self.committers:
            for index, info in zip((i for i, _ in self.committers), self._commit(), strict=True):
                self.infos[index] = info
        return [info for info in self.infos if info is not None]

    def _commit(self) -> list[CommitInfo]:
        committers = [c for _, c in self.committers]
        coordinator = self.services.coordinator
        inline = inline_share(self.services, len(committers))
        attempt = 0
        while True:
            attempt += 1
            now = self.services.clock()
            # one time version for every part that changes data: a read of these tables as of any time
            # sees all of this transaction's changes or none (each table's still strictly increases)
            changing = [c for c in committers if c.operation.changes_data]
            shared_time = max([now, *((c.base_time or 0) + 1 for c in changing)]) if changing else None
            # every part is stamped with that time too, those that change no data included: time travel
            # carries a version forward over such a part only when it was made by then (TableLog.version_as_of)
            stamped = shared_time if shared_time is not None else now
            records = [
                c.attempt_record(attempt, stamped, shared_time if c.operation.changes_data else None)
                for c in committers
            ]
            requests = [
                c.cas_request(r, attempt, inline_max_bytes=inline) for c, r in zip(committers, records, strict=True)
            ]
            self.may_have_landed, answered = True, True
            try:
                results = coordinator.compare_and_swap_many(requests)
            except CoordinatorFull as full:
                # etcd may have applied the write that crossed its quota (committer.py): look it up
                looked_up = self._after_lost_answer(committers, full)
                if looked_up[0].succeeded:
                    return self._finish_landed(committers, looked_up)
                self.may_have_landed = False
                self._give_up_all()
                raise
            except (CoordinatorPermissionDenied, CoordinatorRefused):
                self.may_have_landed = False  # refused before anything was applied
                self._give_up_all()
                raise
            except CommitAnswerLost as lost:
                # not found is not the end of it: a request etcd applies late is found by the next
                # attempt, whose compare then loses to it
                answered = False
                results = self._after_lost_answer(committers, lost)
                if results[0].succeeded:
                    return self._finish_landed(committers, results)
            if results[0].succeeded:
                self.landed = True
                return [c.finish(r) for c, r in zip(committers, records, strict=True)]
            if answered:  # every compare was answered and one failed: this request was not applied
                self.may_have_landed = False
            landed = self._absorb_all(committers, results)
            if landed:
                return self._finish_landed(committers, self._after_lost_answer(committers, None))
            if attempt >= committers[0].settings.max_attempts:
                self._give_up_all()
                for c in committers:
                    self.services.report(c.event("exhausted", retries=attempt))
                raise CommitRetriesExhausted(
                    f"multi-table transaction {self.multi_txn_id} over {', '.join(self.tables)} was rebased "
                    f"{attempt} times without winning the compare-and-swap (limit ACIDTABLES_COMMIT_MAX_ATTEMPTS="
                    f"{committers[0].settings.max_attempts}); nothing was committed to any of them. The tables are "
                    "very busy: retry later or raise the limit."
                )
            delay = retry_delay(self.services, attempt)
            for c in committers:
                self.services.report(c.event("retry", retries=attempt, backoff_seconds=delay))
            logger.info(
                "multi-table transaction %s over %s rebased, attempt %d/%d, retrying in %.3f s",
                self.multi_txn_id,
                ", ".join(self.tables),
                attempt + 1,
                committers[0].settings.max_attempts,
                delay,
            )
            if delay > 0:
                self.services.timer.sleep(delay)
                fresh = [coordinator.read_head_and_log(c.table_id, c.base_version) for c in committers]
                if self._absorb_all(committers, fresh):
                    return self._finish_landed(committers, self._after_lost_answer(committers, None))

    def _absorb_all(self, committers: list[TableCommitter], results: list[CasResult]) -> bool:
        """Judge and rebase every part whose table moved; True when a part found its own record among
        the winners (an earlier attempt landed, its answer lost), which means every part landed."""
        landed = False
        for committer, result in zip(committers, results, strict=True):
            head = result.head
            if head is not None and not result.log and head.mod_revision == committer.expected_revision:
                continue  # this table did not move
            try:
                landed = committer.absorb(result) is not None or landed
            except ConcurrentModificationException as conflict:
                self._fail_all(committer, conflict)
            except BaseException:
                self._give_up_all()
                raise
        return landed

    def _after_lost_answer(self, committers: list[TableCommitter], lost: Exception | None) -> list[CasResult]:
        """Every part's outcome once the answer was lost (`lost`; None when an earlier attempt's record
        was found among the winners): the parts land together, so either every txn id is found or none is.
        The parts are looked up one after another, so a request etcd applies late (still in raft when
        the first lookup ran) is found on a later part only: one found part means all landed, and the
        parts not found are looked up again. Still not found would be damage, said so."""
        why = str(lost) if lost is not None else "an earlier attempt landed"
        try:
            results = [c.after_lost_answer(why) for c in committers]
            if any(r.succeeded for r in results):
                results = [
                    r if r.succeeded else c.after_lost_answer(why) for c, r in zip(committers, results, strict=True)
                ]
        except CommitOutcomeUnknown as unknown:
            raise self._outcome_unknown(committers) from unknown
        if all(r.succeeded for r in results):
            self.landed = True
        elif len({r.succeeded for r in results}) > 1:
            found = [c.meta.name for c, r in zip(committers, results, strict=True) if r.succeeded]
            raise CorruptMetadataError(
                f"multi-table transaction {self.multi_txn_id} is committed on {', '.join(found)} but not on the "
                f"rest of {', '.join(self.tables)}; its parts are written by one etcd transaction, so this is damage "
                "(acidtables fsck)",
                key=f"txns/{committers[0].txn_id}",
            )
        return results

    def _outcome_unknown(self, committers: list[TableCommitter]) -> CommitOutcomeUnknown:
        """The answer was lost and etcd stayed away while the parts were looked up: every part or none
        landed, and each table knows its part by its own txn id."""
        txn_ids = {c.meta.name: c.txn_id for c in committers}
        named = ", ".join(f"{table}: {txn_id}" for table, txn_id in txn_ids.items())
        return CommitOutcomeUnknown(
            f"multi-table transaction {self.multi_txn_id} was sent but etcd's answer was lost and etcd stayed "
            f"unreachable: every table or none was committed. The staged files are kept. Once etcd is back, "
            f"Table.find_commit on any one of the tables with its part's txn id tells for all ({named}).",
            txn_id=committers[0].txn_id,
            txn_ids=txn_ids,
            multi_txn_id=self.multi_txn_id,
        )

    def _finish_landed(self, committers: list[TableCommitter], results: list[CasResult]) -> list[CommitInfo]:
        self.landed = True
        return [c.finish(c.decode(r.log[0])) for c, r in zip(committers, results, strict=True)]

    def _fail_all(self, failed: TableCommitter, conflict: ConcurrentModificationException) -> NoReturn:
        """One part lost under its table's rules: the whole transaction fails with that part's exception;
        the failing part gave up and reported its conflict, the others are given up as aborted."""
        for _, committer in self.committers:
            if committer is not failed:
                committer.give_up()
                self.services.report(committer.event("aborted"))
        raise conflict.as_part_of(self.multi_txn_id, self.tables)

    def _give_up_all(self) -> None:
        for _, committer in self.committers:
            committer.give_up()


__all__ = ["GroupCommit", "PendingCommit", "commit_together", "inline_share", "max_tables"]
