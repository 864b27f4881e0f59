"""What leaves etcd: the archive marker (how far a table's log has moved into archive segments, and the
deletes that go with moving it), the txn index's cleanup, and the retention record (design §2).

The segments themselves are written by core.log.tablelog before the marker moves; this module only
moves the marker and deletes, in the same transaction, the keys the segment now holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyetcd
from pyetcd import transactions as ops

from acidtables.core.coordination.indexes import Indexes
from acidtables.core.coordination.values import dumps, json_object, with_counter
from acidtables.core.errors import CorruptMetadataError

#: txn-index keys deleted in one etcd transaction (etcd allows 128 operations in one)
TXN_KEYS_IN_A_TXN = 100


@dataclass(frozen=True)
class ArchiveMarker:
    """How far a table's log has moved out of etcd into archive segments (design §2). Everything at or
    before `upto` is in a segment; etcd may still hold some of it (an archiver that has not yet deleted)."""

    #: newest archived version; -1 while nothing is
    upto: int = -1
    #: newest time version among the archived versions (None: no archived data commit)
    time_upto: int | None = None
    #: the newest checkpoint at or before `upto`, whose key left etcd with its version: (version, path)
    checkpoint: tuple[int, str] | None = None
    #: the marker key's mod revision, which the next archiving compares (0: no marker yet)
    revision: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"upto": self.upto, "time_upto": self.time_upto, "checkpoint": self.checkpoint}


def archive_marker_from(value: bytes, mod_revision: int, key: str) -> ArchiveMarker:
    """The archive marker etcd's key `key` holds (read at `mod_revision`)."""
    data = json_object(value, key)
    try:
        checkpoint = data.get("checkpoint")
        time_upto = data.get("time_upto")
        return ArchiveMarker(
            upto=int(data["upto"]),
            time_upto=None if time_upto is None else int(time_upto),
            checkpoint=None if checkpoint is None else (int(checkpoint[0]), str(checkpoint[1])),
            revision=mod_revision,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptMetadataError(
            f"etcd key {key} is not an archive marker ({exc}): {str(data)[:200]}", key=key
        ) from None


@dataclass(frozen=True)
class ArchiveBatch:
    """What one archiving step moves out of etcd: the log entries, time-index entries and checkpoint
    keys at or before its last version."""

    entries: list[dict[str, Any]]
    #: (time version, ID version)
    times: list[tuple[int, int]]
    #: (version, checkpoint path)
    checkpoints: list[tuple[int, str]]


class Archiving(Indexes):
    """The archive marker, the txn index's cleanup and the retention record of tables."""

    def archive_marker(self, table_id: str) -> ArchiveMarker:
        key = self.keys.archived(table_id)
        value, meta = self._call("an archive marker read", lambda c: c.get(key))
        return ArchiveMarker() if value is None else archive_marker_from(value, meta.mod_revision, key)

    def archive_batch(self, table_id: str, seen: ArchiveMarker, upto: int) -> ArchiveBatch:
        """The log entries after the marker `seen` up to `upto`, with their time-index entries and
        checkpoint keys. Every range starts where the marker says etcd's part begins: deleted keys stay
        in etcd's index until its history is compacted, so a range from the start of a prefix would walk
        minutes of them at every step."""
        entries = self.read_log(table_id, seen.upto, upto)
        first_time = 0 if seen.time_upto is None else seen.time_upto + 1
        times = [pair for pair in self.time_entries_from(table_id, first_time) if pair[1] <= upto]
        checkpoints = self.checkpoints(table_id, seen.upto + 1, upto)
        return ArchiveBatch(entries, times, checkpoints)

    def advance_archive(
        self, table_id: str, seen: ArchiveMarker, marker: ArchiveMarker, txn_ids: Sequence[str] = ()
    ) -> ArchiveMarker | None:
        """Move the marker from `seen` to `marker` and delete, in the same transaction, the log entries,
        time-index entries and checkpoint keys it now covers (their segment is written already), and the
        txn-index keys `txn_ids` (at most TXN_KEYS_IN_A_TXN: one delete each). The marker as stored (its
        new revision), or None when another archiver moved it first. The other deletes are three ranges:
        etcd's limit on operations per transaction (128 by default) never binds, however many versions
        the batch holds."""
        if len(txn_ids) > TXN_KEYS_IN_A_TXN:
            raise ValueError(f"advance_archive(): at most {TXN_KEYS_IN_A_TXN} txn keys, got {len(txn_ids)}")
        key = self.keys.archived(table_id)
        first, past = seen.upto + 1, marker.upto + 1
        # from where `seen` ends, not from the prefix's start: etcd walks deleted keys in a range until
        # its history is compacted, and every earlier step's keys are deleted already
        deletes = [
            ops.Delete(self.keys.log(table_id, first), range_end=self.keys.log(table_id, past)),
            ops.Delete(self.keys.checkpoint(table_id, first), range_end=self.keys.checkpoint(table_id, past)),
        ]
        if marker.time_upto is not None:
            first_time = 0 if seen.time_upto is None else seen.time_upto + 1
            deletes.append(
                ops.Delete(
                    self.keys.time(table_id, first_time), range_end=self.keys.time(table_id, marker.time_upto + 1)
                )
            )
        deletes += [ops.Delete(self.keys.txn(table_id, t)) for t in txn_ids]
        succeeded, responses = self._call(
            "an archiving step",
            lambda c: c.transaction(
                compare=[c.transactions.mod(key) == seen.revision],
                success=[ops.Put(key, dumps(marker.to_json())), *deletes],
                failure=[],
            ),
        )
        if not succeeded:
            return None
        return replace(marker, revision=responses[0].response_put.header.revision)

    def delete_txn_keys(self, table_id: str, txn_ids: Sequence[str]) -> None:
        """Delete txn index keys, TXN_KEYS_IN_A_TXN per transaction (etcd allows 128 operations in one)."""

        def delete(deletes: list[Any]) -> Callable[[pyetcd.MultiEndpointEtcd3Client], Any]:
            return lambda c: c.transaction(compare=[], success=deletes, failure=[])

        for start in range(0, len(txn_ids), TXN_KEYS_IN_A_TXN):
            batch = [ops.Delete(self.keys.txn(table_id, t)) for t in txn_ids[start : start + TXN_KEYS_IN_A_TXN]]
            self._call("a txn index deletion", delete(batch))

    # --- retention -----------------------------------------------------------------------------------

    def read_retention(self, table_id: str) -> tuple[dict[str, Any] | None, int]:
        """The table's retention record and its mod revision (None, 0 when it has none)."""
        key = self.keys.retention(table_id)
        value, meta = self._call("a retention read", lambda c: c.get(key))
        if value is None:
            return None, 0
        return with_counter(json_object(value, key), "oldest_version", key), meta.mod_revision

    def put_retention(self, table_id: str, record: dict[str, Any], seen_revision: int) -> bool:
        """Replace the retention record if nobody changed it since `seen_revision`."""
        key = self.keys.retention(table_id)
        succeeded, _ = self._call(
            "a retention update",
            lambda c: c.transaction(
                compare=[c.transactions.mod(key) == seen_revision],
                success=[ops.Put(key, dumps(record))],
                failure=[],
            ),
        )
        return bool(succeeded)
