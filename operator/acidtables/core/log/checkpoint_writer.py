"""Writing a checkpoint while vacuums run anywhere (issue 41, item 2).

Vacuum deletes the checkpoint lists and manifests no retained version needs (core.maintenance.
metadata_files), `force` and a zero retention included. A checkpoint being written names files nothing
registered names yet (its own) and manifests of the checkpoint it builds on (its base), which a newer
checkpoint may meanwhile have made dead. The background checkpointer (core.log.services) therefore
writes one in this order:

1. it registers itself in etcd, `checkpointing/<version>-<txn id>` under its process lease, naming its
   base; that name begins the name of every file it writes;
2. in the same etcd transaction it reads the checkpoints registered after its base: if there is one,
   the checkpoint is built without a base (every manifest new), or not at all when that one is at or
   after this version. Only a vacuum that read etcd before step 1 can miss the writer, and such a
   vacuum can judge the base dead only by a checkpoint registered before step 1, which step 2 sees;
3. it writes its manifests and its list (core.log.checkpoints);
4. it checks that the list reads back and proves itself and that every manifest it names exists;
5. one etcd transaction registers the checkpoint and ends the writer's registration, only while that
   registration is still there.

A vacuum lists the files first and reads etcd after, so each file it listed belongs to a writer still
registered (kept, with its base's manifests), to a checkpoint registered by then (judged like any
other), or to a writer that gave up or died: its registration went with its lease, and step 5 makes
sure its checkpoint is never registered, so its files are leftovers.

`stage_checkpoint` runs steps 1-3 and `StagedCheckpoint.register` steps 4-5: two phases, as a
transaction's prepare and commit, so a test can run a vacuum in between.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from acidtables.core.coordination.coordinator import Coordinator
from acidtables.core.log.checkpoints import Previous, proven_checkpoint, write_checkpoint
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.storage.storage import METADATA_DIR, Storage

logger = logging.getLogger(__name__)

_MANIFESTS_DIR = f"{METADATA_DIR}/manifests"


@dataclass(frozen=True)
class StagedCheckpoint:
    """A checkpoint written and not yet registered; `register` or `abandon` ends it. Until then its
    writer's registration keeps every vacuum, in any process, off the files it names."""

    coordinator: Coordinator
    storage: Storage
    table_id: str
    version: int
    #: its manifest list, relative to the table location
    path: str
    #: `<version:020d>-<txn id>`: its registration in etcd, and how the name of each file it wrote begins
    writer: str

    def register(self) -> bool:
        """Register the checkpoint once its list proves itself and every manifest it names exists: True
        when registered; False (said in the log, nothing registered) when a file is missing or does not
        prove itself, or when the writer's registration is gone (its lease expired: a vacuum may have
        taken its files). Either way the writer's registration ends."""
        location = self.storage.location
        try:
            content = proven_checkpoint(self.storage.read(self.path), self.version)
            named = [self.storage.relative(str(m["path"])) for m in content.get("manifests", ())]
            missing = self.storage.missing(named, under=_MANIFESTS_DIR)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.abandon()
            logger.warning(
                "the checkpoint of %s at version %d is not registered: its list %s cannot be read back (%s); "
                "snapshots read more log until the next",
                location,
                self.version,
                self.path,
                exc,
            )
            return False
        if missing:
            self.abandon()
            logger.warning(
                "the checkpoint of %s at version %d is not registered: %d manifest(s) it names are gone (%s); "
                "snapshots read more log until the next",
                location,
                self.version,
                len(missing),
                ", ".join(missing[:3]),
            )
            return False
        try:
            registered = self.coordinator.register_checkpoint(self.table_id, self.version, self.path, self.writer)
        except BaseException:
            # registered or not, the writer's registration must not outlive this call in a live process
            # (its files would be kept until the process ends): deleting it is right either way
            _end_quietly(self.coordinator, self.table_id, self.writer)
            raise
        if not registered:
            logger.warning(
                "the checkpoint of %s at version %d is not registered: its writer's registration expired with "
                "its lease (etcd unreachable too long?), so a vacuum may have taken its files; snapshots read more "
                "log until the next",
                location,
                self.version,
            )
            return False
        return True

    def abandon(self) -> None:
        """End the writer's registration without registering the checkpoint: its files are leftovers,
        which the next vacuum deletes."""
        self.coordinator.end_checkpoint(self.table_id, self.writer)


def stage_checkpoint(
    coordinator: Coordinator,
    storage: Storage,
    snapshot: Snapshot,
    txn_id: str,
    previous: Previous | None,
    *,
    lease_ttl_seconds: int,
) -> StagedCheckpoint | None:
    """Register the writer, then write `snapshot`'s checkpoint on `previous` (steps 1-3 above). None,
    with nothing left registered, when a checkpoint at or after its version is registered already."""
    table_id, version = snapshot.metadata.table_id, snapshot.version
    base = None if previous is None else (previous.version, previous.path)
    # steps 1 and 2 in one etcd transaction: what it reads is what was registered before the writer
    writer, newer = coordinator.begin_checkpoint(table_id, version, txn_id, base, lease_ttl_seconds)
    try:
        if newer and newer[-1][0] >= version:
            logger.info(
                "the checkpoint of %s at version %d is not needed: %s is registered", table_id, version, newer[-1]
            )
            coordinator.end_checkpoint(table_id, writer)
            return None
        if newer:
            # a vacuum that read etcd before this writer registered may judge the base dead by it
            logger.info(
                "the checkpoint of %s at version %d writes every manifest: checkpoint %s was registered after "
                "the one it was to build on",
                table_id,
                version,
                newer[-1],
            )
            previous = None
        path = write_checkpoint(storage, snapshot, txn_id, previous)
    except BaseException:
        _end_quietly(coordinator, table_id, writer)
        raise
    return StagedCheckpoint(coordinator, storage, table_id, version, path, writer)


def _end_quietly(coordinator: Coordinator, table_id: str, writer: str) -> None:
    try:
        coordinator.end_checkpoint(table_id, writer)
    except Exception:  # the lease ends it anyway; the error being raised is the one to see
        logger.debug("ending the checkpoint writer %s failed", writer, exc_info=True)


__all__ = ["StagedCheckpoint", "stage_checkpoint"]
