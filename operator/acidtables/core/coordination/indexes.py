"""The indexes beside a table's log: the time index (time travel by timestamp) and the checkpoint keys.

etcd 3.5 ignores `limit` on a sorted range (it reads and sorts every key in it), so no lookup here asks
for "newest first": each reads a bounded key range in ascending order instead (design §2).
"""

from __future__ import annotations

from typing import Any

from acidtables.core.coordination.tables import Tables
from acidtables.core.coordination.values import checkpoint_entry, integer, time_entry
from acidtables.core.errors import CorruptMetadataError


class Indexes(Tables):
    """The time index and the checkpoint keys of tables."""

    # --- the time index ------------------------------------------------------------------------------

    def version_at_time(self, table_id: str, time_us: int, *, newer_than: int | None = None) -> tuple[int, int] | None:
        """The newest data commit at or before `time_us` in etcd's time index: (time version, ID version).
        `newer_than`: the index holds nothing at or before this time (it was archived), so look no lower.

        A newest-first read of the whole time index would cost one key per data commit ever made.
        Instead read unsorted (ascending key order) windows ending at `time_us`, each 8 times wider than
        the last, starting at one second. At or after the newest data commit (the usual "as of now"), the
        head names it, and one more read gives its ID version."""
        head = self.read_head(table_id)
        newest = head.value.get("time_version")
        if newest is not None and not isinstance(newest, int):
            head_key = self.keys.head(table_id)
            raise CorruptMetadataError(f"etcd key {head_key} has a time_version that is not a number", key=head_key)
        if newest is not None and time_us >= int(newest):
            newest_key = self.keys.time(table_id, int(newest))
            value, _ = self._call("a time lookup", lambda c: c.get(newest_key))
            if value is not None:
                return int(newest), integer(value, newest_key)
        end = self.keys.time(table_id, time_us + 1)
        floor = 0 if newer_than is None else newer_than + 1
        width = 1_000_000
        while True:
            low = max(floor, time_us + 1 - width)
            values = self._paged_range("a time lookup", self.keys.time(table_id, low), end)
            if values:
                value, meta = values[-1]
                return time_entry(value, meta)
            if low == floor:
                return None
            width *= 8

    def versions_between_times(self, table_id: str, start_us: int, end_us: int) -> list[tuple[int, int]]:
        """Data commits with start_us <= time version <= end_us: (time version, ID version) pairs, in
        time order (the keys' order: padded numbers)."""
        start, end = self.keys.time(table_id, start_us), self.keys.time(table_id, end_us + 1)
        values = self._paged_range("a time range read", start, end)
        return [time_entry(v, m) for v, m in values]

    def time_entries_from(self, table_id: str, first_us: int) -> list[tuple[int, int]]:
        """Every time-index entry at or after `first_us`: (time version, ID version)."""
        values = self._paged_range(
            "a time index read", self.keys.time(table_id, first_us), self.keys.times_end(table_id)
        )
        return [time_entry(v, m) for v, m in values]

    # --- checkpoints ---------------------------------------------------------------------------------

    def put_checkpoint(self, table_id: str, version: int, path: str) -> None:
        key = self.keys.checkpoint(table_id, version)
        self._call("a checkpoint registration", lambda c: c.put(key, path.encode()))

    def checkpoints(self, table_id: str, first: int = 0, upto: int | None = None) -> list[tuple[int, str]]:
        """The checkpoints registered in etcd at versions first..upto (all when upto is None): (version, path)."""
        start = self.keys.checkpoint(table_id, first)
        end = self.keys.checkpoints_end(table_id) if upto is None else self.keys.checkpoint(table_id, upto + 1)
        values = self._paged_range("a checkpoint listing", start, end)
        return [checkpoint_entry(v, m) for v, m in values]

    def checkpoint_at_or_before(
        self, table_id: str, version: int, *, within: int | None = None
    ) -> tuple[int, str] | None:
        """The newest checkpoint at or before `version`. With `within`, look among the versions
        (version - within, version] first: the unbounded newest-first read costs one key per checkpoint
        the table ever wrote. An unsorted range comes back in ascending key order anyway."""
        end = self.keys.checkpoint(table_id, version + 1)
        if within is not None:
            near = self.keys.checkpoint(table_id, max(0, version - within + 1))
            values: list[Any] = self._call("a checkpoint lookup", lambda c: list(c.get_range(near, end)))
            if values:
                return checkpoint_entry(*values[-1])
        start = self.keys.checkpoint(table_id, 0)
        values = self._call(
            "a checkpoint lookup", lambda c: list(c.get_range(start, end, sort_order="descend", limit=1))
        )
        return checkpoint_entry(*values[0]) if values else None
