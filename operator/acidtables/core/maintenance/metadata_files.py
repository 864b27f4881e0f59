"""Checkpoints and manifests no retained version needs: what vacuum deletes of the table's own metadata.

A reader of version v starts at the newest checkpoint at or before v, or, when that one cannot be read
or does not prove itself, replays the log from the start (it never falls back to an older checkpoint).
Versions older than the retention floor (the oldest version kept, or an older registered read) are
refused, so the checkpoints a reader can still start from are the newest one at or before the floor
and every later one; the manifests the readable ones name are the ones any reader can open. Everything
else under `_acidtables/checkpoints/` and `_acidtables/manifests/` is dead: checkpoints that expired,
manifests every later checkpoint rewrote, and the leftovers of a checkpoint writer that gave up or died
before registering its list.

Never what a checkpoint being written may name, by any process, whatever the retention (`force`
lifts the retention rule, not the library's own work in flight): the files are listed first and etcd
read after, and a checkpoint writer registers in etcd, under its process lease, before it writes
anything (core.log.checkpoint_writer). So a listed file belongs to a writer still registered (kept,
with the manifests of the checkpoint it builds on), to a checkpoint registered by then (judged here),
or to a writer whose registration ended without its checkpoint, which can then never be registered.

A kept list that cannot be read names manifests nobody knows. While it is the newest readable-or-not
kept checkpoint (no readable newer one), it may be a storage hiccup and the head's readers would lose
their checkpoint, so no manifest is deleted; once a readable newer checkpoint exists, its readers have
that one, the readers of the versions between replay the log (as they already do), and it pins nothing.
An archive segment that cannot be read may register checkpoints nobody knows: nothing is deleted.
A file is deleted only once it is older than the vacuum's retention duration.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from acidtables.core.log.checkpoints import MANIFEST_FORMAT, proven_checkpoint
from acidtables.core.log.tablelog import TableLog
from acidtables.core.storage.storage import METADATA_DIR, FileInfo, Storage

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = f"{METADATA_DIR}/checkpoints"
MANIFESTS_DIR = f"{METADATA_DIR}/manifests"


def oldest_retained_checkpoint(versions: Iterable[int], floor: int) -> int:
    """Of checkpoints registered at `versions`, the version of the oldest a reader of a version at or
    after `floor` may start from (the newest at or before it); 0 when there is none."""
    return max((version for version in versions if version <= floor), default=0)


def unreferenced_metadata(storage: Storage, log: TableLog, floor: int, name: str, *, older_than: float) -> list[str]:
    """Checkpoint lists and manifests (relative paths) no reader of a retained version opens and no
    checkpoint being written names, last modified before `older_than` (seconds since the epoch)."""
    # listed before etcd is read (see the module docstring): the order is what protects a writer
    lists = list(storage.walk(CHECKPOINTS_DIR))
    manifests = list(storage.walk(MANIFESTS_DIR))
    state = log.checkpoint_state()
    if not state.complete:
        logger.warning("%s: an archive segment cannot be read, so vacuum keeps every checkpoint and manifest", name)
        return []
    start = oldest_retained_checkpoint((version for version, _ in state.registered), floor)
    kept = {storage.relative(path): version for version, path in state.registered if version >= start}
    bases = {storage.relative(info["base"]) for info in state.writers.values() if isinstance(info.get("base"), str)}
    writing = tuple(state.writers)

    def ours(f: FileInfo) -> bool:
        """A file a registered writer wrote: its name begins with the writer's."""
        file_name = f.path.rsplit("/", 1)[-1]
        return any(file_name.startswith((writer + ".", writer + "-")) for writer in writing)

    dead = [f.path for f in lists if f.path not in kept and f.path not in bases and not ours(f)]
    referenced = _manifests_named(storage, kept, bases, state.writers, name)
    if referenced is not None:
        dead += [f.path for f in manifests if f.path not in referenced and not ours(f)]
    modified = {f.path: f.modified_at for f in (*lists, *manifests)}
    return sorted(path for path in dead if modified[path] < older_than)


@dataclass(frozen=True)
class _Read:
    """One manifest list as vacuum read it."""

    #: the manifests it names; None when it cannot be read or does not prove itself
    named: set[str] | None
    #: why not
    problem: str = ""
    #: whether it may still be fine, so what it names is unknown rather than nothing: the storage did not
    #: answer, or it is in a format this acidtables does not read (a newer one wrote it)
    unknown: bool = False


def _manifests_named(
    storage: Storage, kept: Mapping[str, int], bases: set[str], writers: Mapping[str, Any], name: str
) -> set[str] | None:
    """The manifests a reader of a retained version can open and those a checkpoint being written
    builds on, or None when which ones is unknown (then no manifest may go)."""
    if any("damaged" in info for info in writers.values()):
        logger.warning("%s: a checkpoint writer's registration cannot be read, so vacuum keeps every manifest", name)
        return None
    named: set[str] = set()
    for path in sorted(bases):
        found = _read_list(storage, path, None)
        if found.named is None:  # the writer read it moments ago: a hiccup, or a list deleted by hand
            logger.warning(
                "%s: checkpoint %s, which a checkpoint being written builds on, cannot be read (%s), so vacuum "
                "keeps every manifest",
                name,
                path,
                found.problem,
            )
            return None
        named |= found.named
    read = {path: _read_list(storage, path, version) for path, version in kept.items()}
    readable = [kept[path] for path, found in read.items() if found.named is not None]
    for path, found in sorted(read.items(), key=lambda item: kept[item[0]]):
        if found.named is not None:
            named |= found.named
            continue
        newer = min((v for v in readable if v > kept[path]), default=None)
        if found.unknown or newer is None:
            logger.warning(
                "%s: checkpoint %s cannot be read (%s) and %s, so vacuum keeps every manifest",
                name,
                path,
                found.problem,
                "what it names is unknown" if found.unknown else "no newer checkpoint can be read either",
            )
            return None
        logger.info(
            "%s: checkpoint %s cannot be read (%s); readers of versions %d..%d replay the log instead, and it pins "
            "no manifest since checkpoint %d reads (`acidtables fsck %s --repair` writes it again)",
            name,
            path,
            found.problem,
            kept[path],
            newer - 1,
            newer,
            name,
        )
    return named


def _read_list(storage: Storage, path: str, version: int | None) -> _Read:
    """The manifests the list at `path` names, once it proves itself as the checkpoint of `version` (as
    a reader proves it; None: only parsed, for a base a writer has just proven)."""
    try:
        raw = storage.read(path)
        document = json.loads(raw)
        written_as = document.get("format", 1)
        if written_as not in (1, MANIFEST_FORMAT):
            return _Read(None, f"it is in format {written_as!r}, which this acidtables does not read", unknown=True)
        content = document["snapshot"] if version is None else proven_checkpoint(raw, version)
        return _Read({storage.relative(str(m["path"])) for m in content.get("manifests", ())})
    except FileNotFoundError as exc:
        return _Read(None, f"it is gone ({exc})")
    except OSError as exc:  # the store did not answer: no finding about the list
        return _Read(None, f"the storage did not answer ({exc})", unknown=True)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _Read(None, f"it does not prove itself ({str(exc) or type(exc).__name__})")


__all__ = ["oldest_retained_checkpoint", "unreferenced_metadata"]
