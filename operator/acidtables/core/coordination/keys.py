"""The etcd key layout: every key acidtables writes, built in this one place (design §2).

Under one prefix (default `/acidtables/v1`):

    catalog/<namespace>/<name>          -> table id, location, created_at (immutable facts)
    tables/<id>/head                    -> newest version; the key every commit compares
    tables/<id>/log/<version:020d>      -> commit record, or a pointer to an immutable commit file
    tables/<id>/txns/<txn_id>           -> version that committed the transaction (lost-answer lookup)
    tables/<id>/times/<time_us:020d>    -> version of a data commit (time travel by timestamp)
    tables/<id>/checkpoints/<v:020d>    -> checkpoint file of the active files at version v
    tables/<id>/checkpointing/<v:020d>-<txn> -> a checkpoint being written (and the one it builds on), under a lease
    tables/<id>/inflight/<txn_id>       -> a running transaction, under the process's lease
    tables/<id>/archived                -> how far the log has moved to archive segments (core.log.tablelog)
    tables/<id>/retention               -> the oldest version time travel may still read (core.maintenance.retention)
    leaders/<name>                      -> the identity leading `name`, under its lease (core.coordination.leader)
    events/<id>/<time_us:020d>-<txn>-<n> -> a conflict, abort, retry or commit durations, under a short lease

Numbers are zero-padded to 20 digits so a range read returns them in numeric order. A range "up to the
end of" a family of keys ends at the family's name followed by "0" (`log0` after `log/`): "0" is the
character after "/", so the range holds exactly the family.
"""

from __future__ import annotations

from dataclasses import dataclass


def pad(number: int) -> str:
    """A version or a time as it appears in a key."""
    return f"{number:020d}"


@dataclass(frozen=True)
class KeyLayout:
    """The keys under one prefix."""

    prefix: str

    # --- the catalog ---------------------------------------------------------------------------------

    def catalog(self, namespace: str, name: str) -> str:
        return f"{self.prefix}/catalog/{namespace}/{name}"

    def catalog_listing(self, namespace: str | None = None) -> str:
        """The prefix of every catalog entry, or of one namespace's."""
        return f"{self.prefix}/catalog/" + (f"{namespace}/" if namespace else "")

    # --- one table -----------------------------------------------------------------------------------

    def table(self, table_id: str) -> str:
        """The prefix of every key of one table (what dropping it deletes)."""
        return f"{self.prefix}/tables/{table_id}/"

    def _of(self, table_id: str, *parts: str) -> str:
        return self.table(table_id) + "/".join(parts)

    def head(self, table_id: str) -> str:
        return self._of(table_id, "head")

    def log(self, table_id: str, version: int) -> str:
        return self._of(table_id, "log", pad(version))

    def log_range(self, table_id: str, after: int, upto: int | None) -> tuple[str, str]:
        """[start, end) of the log entries with after < version <= upto (all newer when upto is None)."""
        start = self.log(table_id, after + 1)
        end = self.log(table_id, upto + 1) if upto is not None else self._of(table_id, "log0")
        return start, end

    def family(self, table_id: str, name: str) -> str:
        """The prefix of one family of a table's keys (`log`, `txns`, `inflight`, `times`, `checkpoints`),
        ending in "/": what the commit transaction appends its keys to."""
        return self._of(table_id, name, "")

    def txn(self, table_id: str, txn_id: str) -> str:
        return self._of(table_id, "txns", txn_id)

    def time(self, table_id: str, time_us: int) -> str:
        return self._of(table_id, "times", pad(time_us))

    def times_end(self, table_id: str) -> str:
        """The end of the whole time index (exclusive)."""
        return self._of(table_id, "times0")

    def checkpoint(self, table_id: str, version: int) -> str:
        return self._of(table_id, "checkpoints", pad(version))

    def checkpoints_end(self, table_id: str) -> str:
        """The end of every checkpoint key (exclusive)."""
        return self._of(table_id, "checkpoints0")

    def checkpoint_writer(self, table_id: str, writer: str) -> str:
        """A checkpoint being written; `writer` (`<version:020d>-<txn id>`) begins the name of every file
        it writes."""
        return self._of(table_id, "checkpointing", writer)

    def inflight(self, table_id: str, txn_id: str) -> str:
        return self._of(table_id, "inflight", txn_id)

    def archived(self, table_id: str) -> str:
        return self._of(table_id, "archived")

    def retention(self, table_id: str) -> str:
        return self._of(table_id, "retention")

    # --- beside the tables ---------------------------------------------------------------------------

    def leader(self, name: str) -> str:
        return f"{self.prefix}/leaders/{name}"

    def events(self, table_id: str | None = None) -> str:
        """The prefix of every recorded event, or of one table's."""
        return f"{self.prefix}/events/" + (f"{table_id}/" if table_id else "")

    def event(self, table_id: str, time_us: int, txn_id: str, nonce: int) -> str:
        return f"{self.events(table_id)}{pad(time_us)}-{txn_id}-{nonce}"

    def relative(self, key: str) -> str:
        """A key's path under the prefix (what a watch reports)."""
        return key.removeprefix(self.prefix + "/")
