"""Transaction ids that name their writer's process lease.

A transaction registers itself in etcd only once it has run for a while (design §2: most appends
commit in milliseconds, and their one round trip is the compare-and-swap). Until then nothing in etcd
says it is alive, so its id says it instead: the first 16 hex digits are the etcd lease this process
holds while it runs. Cleanup keeps a staging directory whose lease is alive and deletes one whose
lease has expired, so a crashed writer's files are still found and a live writer's never deleted.
"""

from __future__ import annotations

import re
import uuid

_LEASED = re.compile(r"[0-9a-f]{48}")


def new_txn_id(lease_id: int) -> str:
    """A fresh transaction id carrying `lease_id` (etcd lease ids are positive 64-bit numbers)."""
    return f"{lease_id:016x}{uuid.uuid4().hex}"


def lease_of(txn_id: str) -> int | None:
    """The process lease a transaction id carries, or None (ids made before leases rode in them, and
    ids of commits that need none, such as a table's creation)."""
    return int(txn_id[:16], 16) if _LEASED.fullmatch(txn_id) else None
