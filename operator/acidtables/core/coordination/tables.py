"""Tables in etcd: catalog entries, each table's head and log, and the commit point (design §2).

A commit is one etcd transaction: compare the head's mod revision, and on success write the log entry,
the head, the txn index (and the time index) at once. On a lost compare, the same round trip brings back
the new head and the log entries since the writer's read version, so a rebase needs no extra read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from pyetcd import transactions as ops
from pyetcd import utils as etcd_utils

from acidtables.core.coordination import etcd_txn, failures
from acidtables.core.coordination.connection import Connection
from acidtables.core.coordination.failures import CommitAnswerLost
from acidtables.core.coordination.values import catalog_entry, dumps, integer, log_entries, log_entry, versioned
from acidtables.core.coordination.waiting import SYSTEM_TIMER, Timer
from acidtables.core.errors import CorruptMetadataError
from acidtables.core.settings import EtcdSettings

#: log entries a commit transaction's failure branch (or a rebase read) brings back at most: 12 of the
#: largest inline records (256 KiB) still fit one gRPC answer. A writer further behind than that reads
#: the rest in pages, one more round trip; one that lost a race to a few commits never does.
LOG_ENTRIES_IN_A_TXN = 12
#: how long a head this process saw stays a transaction's starting point without asking etcd again
KNOWN_HEAD_SECONDS = 10.0


@dataclass(frozen=True)
class HeadState:
    """The head record and its etcd mod revision, which the commit compares."""

    value: dict[str, Any]
    mod_revision: int


@dataclass(frozen=True)
class CasRequest:
    """One table's part of a commit: compare its head's mod revision, write `version` (`entry`, the
    encoded log entry) and the new `head`; `read_after` is where the log read back on a lost compare
    starts; `unregister`: delete the transaction's in-flight registration, which may exist."""

    table_id: str
    expected_head_revision: int
    read_after: int
    version: int
    entry: bytes
    head: dict[str, Any]
    txn_id: str
    time_version: int | None
    unregister: bool = True


@dataclass(frozen=True)
class CasResult:
    """Outcome of one compare-and-swap. On a lost compare, the new head and the log since the read
    version come back in the same round trip (the etcd STM shape), so a rebase needs no extra read."""

    succeeded: bool
    head: HeadState | None
    log: list[dict[str, Any]]


class Tables(Connection):
    """Catalog entries, heads and logs."""

    def __init__(self, settings: EtcdSettings, *, timer: Timer = SYSTEM_TIMER) -> None:
        super().__init__(settings, timer=timer)
        #: table id -> the newest head this process has seen (its own commits, lost races, reads) and
        #: when: where a transaction starts without a round trip; the compare-and-swap judges whatever is
        #: newer. Only for KNOWN_HEAD_SECONDS: a process that last saw a table long ago asks again, so a
        #: transaction never starts from a snapshot whose files retention may have let vacuum delete
        self._heads: dict[str, tuple[HeadState, float]] = {}
        #: each table's commit transaction parts, made at its first commit through this coordinator
        self._prepared: dict[str, etcd_txn.CommitRequests] = {}

    # --- the catalog ---------------------------------------------------------------------------------

    def create_table(
        self,
        namespace: str,
        name: str,
        entry: dict[str, Any],
        table_id: str,
        record: dict[str, Any],
        head: dict[str, Any],
    ) -> bool:
        """Create the catalog entry, version 0 and the head in one transaction; False if the name exists."""
        key = self.keys.catalog(namespace, name)
        succeeded, _ = self._call(
            "create_table",
            lambda c: c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[
                    c.transactions.put(key, dumps(entry)),
                    c.transactions.put(self.keys.log(table_id, 0), dumps(record)),
                    c.transactions.put(self.keys.head(table_id), dumps(head)),
                    c.transactions.put(self.keys.txn(table_id, record["txn_id"]), b"0"),
                ],
                failure=[],
            ),
        )
        return bool(succeeded)

    def get_catalog_entry(self, namespace: str, name: str) -> dict[str, Any] | None:
        key = self.keys.catalog(namespace, name)
        value, _ = self._call("a catalog read", lambda c: c.get(key))
        return catalog_entry(value, key) if value is not None else None

    def list_catalog(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every catalog entry under the prefix; a damaged one is listed as {"name", "damaged": reason}
        so one damaged table does not hide the others."""
        prefix = self.keys.catalog_listing(namespace)
        values = self._call("a catalog listing", lambda c: list(c.get_prefix(prefix, sort_order="ascend")))
        out = []
        for value, meta in values:
            key = meta.key.decode(errors="replace")
            try:
                out.append(catalog_entry(value, key))
            except CorruptMetadataError as exc:
                out.append({"name": ".".join(key.rsplit("/", 2)[-2:]), "damaged": str(exc), "key": key})
        return out

    def drop_table(self, namespace: str, name: str, table_id: str) -> bool:
        """Remove the catalog entry and every key of the table in one transaction."""
        key = self.keys.catalog(namespace, name)
        prefix = self.keys.table(table_id)
        end = etcd_utils.prefix_range_end(prefix.encode())
        succeeded, _ = self._call(
            "drop_table",
            lambda c: c.transaction(
                compare=[c.transactions.version(key) > 0],
                success=[c.transactions.delete(key), ops.Delete(prefix, range_end=end)],
                failure=[],
            ),
        )
        self.forget_head(table_id)
        return bool(succeeded)

    # --- head and log --------------------------------------------------------------------------------

    def read_head(self, table_id: str, *, serializable: bool = False) -> HeadState:
        """The table's head. `serializable`: from whichever member answers, without a quorum read (it
        may be a little behind, which is fine where the compare-and-swap judges what is newer)."""
        key = self.keys.head(table_id)
        value, meta = self._call("a head read", lambda c: c.get(key, serializable=serializable))
        if value is None:
            self.forget_head(table_id)
            raise LookupError(f"table {table_id} has no head")
        return self._remember(table_id, HeadState(versioned(value, key), meta.mod_revision))

    def read_heads(self, table_ids: Sequence[str]) -> tuple[dict[str, HeadState | None], int]:
        """Every table's head (None: no head, the table was dropped) at one etcd revision, which is
        returned too: what each table looked like at one instant, so no multi-table commit is seen in
        part. One round trip for up to --max-txn-ops tables; more are read at the first read's revision."""
        found: dict[str, HeadState | None] = {}
        revision = 0
        step = max(1, self.settings.max_txn_ops)
        for start in range(0, len(table_ids), step):
            chunk = list(table_ids[start : start + step])
            request = etcd_txn.read_many([self.keys.head(t).encode() for t in chunk], revision)
            response = self._call("a read of several tables' heads", lambda c, r=request: etcd_txn.send(c, r))  # type: ignore[misc]
            if not revision:
                revision = response.header.revision
            for index, table_id in enumerate(chunk):
                head = self._head_state(table_id, etcd_txn.range_kvs(response, index))
                found[table_id] = None if head is None else self._remember(table_id, head)
        return found, revision

    def known_head(self, table_id: str) -> HeadState | None:
        """The newest head of the table this process has seen in the last KNOWN_HEAD_SECONDS, without
        asking etcd."""
        with self._lock:
            known = self._heads.get(table_id)
        if known is None or time.monotonic() - known[1] > KNOWN_HEAD_SECONDS:
            return None
        return known[0]

    def forget_head(self, table_id: str) -> None:
        with self._lock:
            self._heads.pop(table_id, None)

    def _remember(self, table_id: str, head: HeadState) -> HeadState:
        with self._lock:
            known = self._heads.get(table_id)
            if known is None or head.mod_revision >= known[0].mod_revision:
                self._heads[table_id] = (head, time.monotonic())
        return head

    def read_log(self, table_id: str, after: int, upto: int | None = None) -> list[dict[str, Any]]:
        """Log entries with after < version <= upto (all newer ones when upto is None), oldest first,
        read in pages. The key range itself is bounded: etcd 3.5 reads every key of a range it is asked
        to sort, whatever the limit, so readers never ask for "newest first, limit n"."""
        start, end = self.keys.log_range(table_id, after, upto)
        values = self._paged_range("a log read", start, end)
        return [log_entry(v, m.key.decode(errors="replace")) for v, m in values]

    def compare_and_swap(self, request: CasRequest) -> CasResult:
        """The commit point: if the head is unchanged, write log/<version>, the head, the txn index and
        the time index in one etcd transaction. Raises CommitAnswerLost when the answer did not come."""
        client = self.client
        response = self._send_commit(client, etcd_txn.build_many([self._commit_parts(request, LOG_ENTRIES_IN_A_TXN)]))
        if response.succeeded:
            return CasResult(
                True, self._remember(request.table_id, HeadState(request.head, response.header.revision)), []
            )
        head_kvs, log_kvs = etcd_txn.range_kvs(response, 0), etcd_txn.range_kvs(response, 1)
        return self._rebase_state(request.table_id, request.read_after, head_kvs, log_kvs)

    def _commit_parts(self, r: CasRequest, window: int) -> tuple[Any, list[Any], list[Any]]:
        """Table `r.table_id`'s compare, success operations and failure reads for this commit."""
        return self._commit_requests(r.table_id).parts(
            expected_head_revision=r.expected_head_revision,
            read_after=r.read_after,
            window=window,
            version=r.version,
            entry=r.entry,
            head=dumps(r.head),
            txn_id=r.txn_id,
            time_version=r.time_version,
            unregister=r.unregister,
        )

    def compare_and_swap_many(self, requests: Sequence[CasRequest]) -> list[CasResult]:
        """The commit point of a multi-table transaction: one etcd transaction that compares every
        table's head and, only if none moved, writes every table's new version (log entry, head, txn
        index, time index) at once. The answer holds one CasResult per request, in order: all succeeded,
        or none did and each says what its table's head and log are now (unmoved tables bring back no
        log). Raises CommitAnswerLost when the answer did not come."""
        client = self.client
        # a lost compare brings back at most LOG_ENTRIES_IN_A_TXN log entries in all, so the answer stays
        # as small as a single commit's; a table further behind reads the rest in pages
        window = LOG_ENTRIES_IN_A_TXN // len(requests)
        parts = [self._commit_parts(r, window) for r in requests]
        response = self._send_commit(client, etcd_txn.build_many(parts))
        if response.succeeded:
            return [
                CasResult(True, self._remember(r.table_id, HeadState(r.head, response.header.revision)), [])
                for r in requests
            ]
        results, index = [], 0
        for r in requests:
            head_kvs = etcd_txn.range_kvs(response, index)
            log_kvs = etcd_txn.range_kvs(response, index + 1) if window > 0 else []
            index += 2 if window > 0 else 1
            head = self._head_state(r.table_id, head_kvs)
            if head is not None and head.mod_revision == r.expected_head_revision:
                results.append(CasResult(False, self._remember(r.table_id, head), []))
            else:
                results.append(self._rebase_state(r.table_id, r.read_after, head_kvs, log_kvs))
        return results

    def _send_commit(self, client: Any, request: Any) -> Any:
        """Send a commit transaction once, never retried: its answer may be lost after etcd applied it,
        which the committer resolves by looking the txn id up (CommitAnswerLost)."""
        try:
            return etcd_txn.send(client, request)
        except (grpc.RpcError, *failures.CONNECTION_ERRORS, ValueError) as exc:
            if isinstance(exc, ValueError) and not failures.closed_channel(exc):
                raise
            if failures.no_space(exc):  # etcd may have applied it (see the committer): look it up
                raise failures.full(self.settings, "the commit") from exc
            if isinstance(exc, grpc.RpcError) and failures.over_limits(exc):
                raise failures.over_limits_error(self.settings, "the commit", exc) from exc
            if isinstance(exc, grpc.RpcError) and failures.permission_denied(exc):
                # etcd checks the user's rights before applying anything: a definite refusal, not a lost
                # answer to look up (nor a lost race to rebase and retry)
                raise failures.refused(self.settings, "the commit", exc) from exc
            self._reset_client()
            raise CommitAnswerLost(str(exc)) from exc

    def _commit_requests(self, table_id: str) -> etcd_txn.CommitRequests:
        prepared = self._prepared.get(table_id)
        if prepared is None:
            prepared = self._prepared[table_id] = etcd_txn.CommitRequests(
                head=self.keys.head(table_id),
                log=self.keys.family(table_id, "log"),
                txns=self.keys.family(table_id, "txns"),
                inflight=self.keys.family(table_id, "inflight"),
                times=self.keys.family(table_id, "times"),
            )
        return prepared

    def _rebase_state(self, table_id: str, after: int, head_kvs: Any, log_kvs: Any) -> CasResult:
        """The head and every log entry after `after` up to it: the first LOG_ENTRIES_IN_A_TXN came
        with the head, the rest (a writer far behind) are read in pages."""
        head = self._head_state(table_id, head_kvs)
        log = log_entries(log_kvs)
        if head is None:
            self.forget_head(table_id)
        else:
            self._remember(table_id, head)
            received = int(log[-1].get("version", after)) if log else after
            newest = int(head.value["version"])
            if newest > received:
                log += self.read_log(table_id, received, newest)
        return CasResult(False, head, log)

    def read_head_and_log(self, table_id: str, after: int) -> CasResult:
        """The head and the log after `after`: what a committer needs to rebase. One round trip unless
        more than LOG_ENTRIES_IN_A_TXN commits landed since."""
        start, end = self.keys.log_range(table_id, after, after + LOG_ENTRIES_IN_A_TXN)
        _, responses = self._call(
            "a head and log read",
            lambda c: c.transaction(
                compare=[], success=[ops.Get(self.keys.head(table_id)), ops.Get(start, range_end=end)], failure=[]
            ),
        )
        head_kvs, log_kvs = responses
        return self._rebase_state(table_id, after, head_kvs, log_kvs)

    def _head_state(self, table_id: str, head_kvs: Any) -> HeadState | None:
        if not head_kvs:
            return None
        return HeadState(versioned(head_kvs[0][0], self.keys.head(table_id)), head_kvs[0][1].mod_revision)

    def find_txn(self, table_id: str, txn_id: str) -> int | None:
        key = self.keys.txn(table_id, txn_id)
        value, _ = self._call("a transaction lookup", lambda c: c.get(key))
        return integer(value, key) if value is not None else None
