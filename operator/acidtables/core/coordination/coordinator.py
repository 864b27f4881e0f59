"""The coordinator: the one object through which acidtables talks to etcd (design §2).

It is put together from one class per concern, each in its own module of this package, all sharing one
connection (connection.py) and one key layout (keys.py, which also documents every key):

    tables.py      catalog entries, each table's head and log, the commit compare-and-swap
    indexes.py     the time index and the checkpoint keys
    archiving.py   the archive marker, the txn index's cleanup, the retention record
    leases.py      the process lease and in-flight registrations, leader leases
    watches.py     the state a change feed starts from, and the watch that follows it
    recorder.py    conflicts, aborts, retries and commit durations recorded for the operator
    space.py       usage, quota, reclaiming a full etcd

failures.py says what etcd's failures mean, values.py reads its values back, etcd_txn.py builds the
commit transaction's request.
"""

from __future__ import annotations

from collections.abc import Sequence

from acidtables.core.coordination.archiving import Archiving
from acidtables.core.coordination.leases import Leases
from acidtables.core.coordination.recorder import Recorder
from acidtables.core.coordination.space import Space
from acidtables.core.coordination.watches import Watches

#: how long close() waits for each of its threads (each is either idle or inside one bounded request)
_THREAD_STOP_SECONDS = 10.0


class Coordinator(Archiving, Leases, Watches, Recorder, Space):
    """A connection to etcd for one catalog, with everything acidtables asks of it. Thread-safe; one per
    process is enough."""

    def close(self) -> None:
        """Write what is queued, end this coordinator's threads, give up the process lease, and close the
        connection; it opens no other (a request after close raises CatalogClosedError). A thread or a
        channel left running when the interpreter exits can abort the process in gRPC's native code."""
        self.flush_events()
        self._closed.set()
        self._stop_recorder(_THREAD_STOP_SECONDS)
        self._stop_keepalive(_THREAD_STOP_SECONDS)
        self._revoke_process_lease()
        self._reset_client(close=True)


__all__: Sequence[str] = ["Coordinator"]
