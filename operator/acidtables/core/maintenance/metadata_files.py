"""Checkpoints and manifests no retained version needs: what vacuum deletes of the table's own metadata.

A reader of version v starts at the newest checkpoint at or before v. Versions older than the retention
floor (the oldest version kept, or an older registered read) are refused, so the checkpoints a reader
can still start from are the newest one at or before the floor and every later one; the manifests
they name are the ones any reader can open. Everything else under `_acidtables/checkpoints/` and
`_acidtables/manifests/` is dead: checkpoints that expired, manifests every later checkpoint rewrote,
and the leftovers of a checkpoint writer that crashed before registering its list.

A file is deleted only once it is older than the vacuum's retention duration, so a checkpoint being
written now (its manifests written, its list not yet registered) is never taken for a leftover. When a
kept list cannot be read, or an archive segment (which may register checkpoints) cannot, what is
referenced is unknown, and no manifest (or, for a segment, no checkpoint) is deleted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from acidtables.core.log.tablelog import TableLog
from acidtables.core.storage.storage import METADATA_DIR, Storage

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = f"{METADATA_DIR}/checkpoints"
MANIFESTS_DIR = f"{METADATA_DIR}/manifests"


def oldest_retained_checkpoint(versions: Iterable[int], floor: int) -> int:
    """Of checkpoints registered at `versions`, the version of the oldest a reader of a version at or
    after `floor` may start from (the newest at or before it); 0 when there is none."""
    return max((version for version in versions if version <= floor), default=0)


def unreferenced_metadata(storage: Storage, log: TableLog, floor: int, name: str, *, older_than: float) -> list[str]:
    """Checkpoint lists and manifests (relative paths) no reader of a retained version opens, last
    modified before `older_than` (seconds since the epoch)."""
    registered, complete = log.registered_checkpoints()
    if not complete:
        logger.warning("%s: an archive segment cannot be read, so vacuum keeps every checkpoint and manifest", name)
        return []
    start = oldest_retained_checkpoint((version for version, _ in registered), floor)
    kept = {storage.relative(path) for version, path in registered if version >= start}
    referenced = _manifests_named(storage, kept, name)
    dead = [f.path for f in storage.walk(CHECKPOINTS_DIR) if f.path not in kept and f.modified_at < older_than]
    if referenced is not None:
        dead += [f.path for f in storage.walk(MANIFESTS_DIR) if f.path not in referenced and f.modified_at < older_than]
    return sorted(dead)


def _manifests_named(storage: Storage, lists: set[str], name: str) -> set[str] | None:
    """The manifests `lists` name, or None when one of them cannot be read."""
    named: set[str] = set()
    for path in sorted(lists):
        try:
            content = json.loads(storage.read(path))["snapshot"]
            named.update(storage.relative(str(m["path"])) for m in content.get("manifests", ()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("%s: checkpoint %s cannot be read (%s), so vacuum keeps every manifest", name, path, exc)
            return None
    return named


__all__ = ["oldest_retained_checkpoint", "unreferenced_metadata"]
