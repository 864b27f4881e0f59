"""An archiver (or expire) that kills itself with SIGKILL at a chosen point (issue 18's crash tests).

Run as `python -m helpers.crash_archiver ENDPOINT PREFIX WAREHOUSE TABLE POINT` (with `tests` on the
path). It archives the table with a window of 10 versions in batches of 10 and dies, by a real SIGKILL
of its own process, at POINT:

- `after-segment`: the first segment is written, etcd has not let go of its entries;
- `mid-batch`: two batches are done, the third's segment is written, its etcd step never sent;
- `before-marker-step`: the first segment written, the one etcd transaction that moves the marker and
  deletes the batch's keys (txn index keys included) never sent;
- `before-txn-keys`, `after-txn-keys`: with batches larger than one transaction's txn-key deletes (the
  limit is lowered to 5 here), the txn index keys go on their own before the marker moves: the first
  segment written and those keys not yet deleted, or deleted with the marker not moved;
- `expire-after-record`: expire wrote the new retention, before archiving anything.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.log import tablelog
from acidtables.core.log.archive import Archive
from acidtables.core.settings import CommitSettings

from .tables import CatalogSpec

POINTS = (
    "after-segment",
    "mid-batch",
    "before-marker-step",
    "before-txn-keys",
    "after-txn-keys",
    "expire-after-record",
)
WINDOW = 10


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(cls: Any, name: str, calls: int) -> None:
    """Let the `calls`-th call of cls.name run, then die."""
    original = getattr(cls, name)
    seen = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen[0] += 1
        if seen[0] == calls:
            _die()
        return result

    setattr(cls, name, wrapper)


def _before(cls: Any, name: str) -> None:
    setattr(cls, name, lambda *args, **kwargs: _die())


def main(argv: list[str]) -> int:
    endpoint, prefix, warehouse, table_name, point = argv
    if point == "after-segment":
        _after(Archive, "write", 1)
    elif point == "mid-batch":
        _after(Archive, "write", 3)
    elif point == "before-marker-step":
        _before(Coordinator, "advance_archive")
    elif point in ("before-txn-keys", "after-txn-keys"):
        # a batch of 10 versions no longer fits the marker's transaction
        tablelog.TXN_KEYS_IN_A_TXN = 5  # type: ignore[attr-defined]
        if point == "before-txn-keys":
            _before(Coordinator, "delete_txn_keys")
        else:
            _after(Coordinator, "delete_txn_keys", 1)
    elif point == "expire-after-record":
        _after(Coordinator, "put_retention", 1)
        _before(Archive, "write")
    else:
        raise SystemExit(f"crash point must be one of {POINTS}, found {point!r}")
    spec = CatalogSpec(endpoint, prefix, warehouse, CommitSettings(log_window_versions=WINDOW))
    with spec.open() as catalog:
        table = catalog.table(table_name)
        if point == "expire-after-record":
            table.expire(retain_versions=5, retain_duration="0h", force=True)
        else:
            log = catalog.services.log(table.table_id, table.location)
            tablelog.archive_log(log, keep_versions=WINDOW, batch_versions=10)
    return 0  # not reached: every point dies first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
