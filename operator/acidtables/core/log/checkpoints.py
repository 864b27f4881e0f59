"""Checkpoints: a snapshot written down so a reader can start there instead of at the table's creation.

A checkpoint is a small JSON document (the manifest list) at `_acidtables/checkpoints/`, registered
under `checkpoints/<version>` in etcd. It holds the snapshot's metadata, protocol, application ids and
time version, and names the Parquet manifests that hold its file entries (core.log.manifests). Writing
the next checkpoint rewrites only the manifests whose buckets the commits since the previous one
touched, so its cost follows what changed, not the table (issue 32).

Order of writing, for crash safety: manifests, then the list, then the etcd key. A crash anywhere
leaves files nobody names, and the previous checkpoint plus the log still give every version.

A checkpoint is never trusted, only used: the list proves itself (version, entry count, checksum of its
content) and every manifest its SHA-256 and entry count, or the reader replays the log instead. The
first format, one JSON document with every file in it, is still read: tables written before manifests
upgrade at their next checkpoint, without touching a data file.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from acidtables.core.log import manifests
from acidtables.core.log.file_set import FileSet
from acidtables.core.log.manifest_files import ManifestFiles
from acidtables.core.log.manifests import Manifest
from acidtables.core.log.records import CommitRecord, DataFile
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.storage.storage import Storage, content_checksum

logger = logging.getLogger(__name__)

#: the manifest-list format; the first (no "format" key) is one JSON document of every file
MANIFEST_FORMAT = 2
#: manifests fetched at once from an object store
_PARALLEL_READS = 8


def proven_checkpoint(raw: bytes, version: int) -> dict[str, Any]:
    """The snapshot content a checkpoint file holds, once it proves itself: its version, entry count and
    checksum match its content (a torn or edited file is recognised instead of trusted). ValueError,
    KeyError, TypeError or AttributeError say why not. The reader and fsck prove checkpoints the same
    way; a manifest proves itself when it is read (`read_snapshot`)."""
    document = json.loads(raw)
    content = document["snapshot"]
    problems = []
    written_as = document.get("format", 1)
    if written_as not in (1, MANIFEST_FORMAT):
        problems.append(f"it is in format {written_as!r}, which this acidtables does not read (a newer one wrote it?)")
    elif ("manifests" in content) != (written_as == MANIFEST_FORMAT):
        problems.append(f"its content is not what format {written_as} holds")
    if document.get("version") != version or content.get("version") != version:
        problems.append(f"it is registered as version {version} but says {document.get('version')}")
    if document.get("checksum") != content_checksum(content):
        problems.append("its checksum does not match its content")
    if document.get("file_count") != entry_count(content):
        problems.append("its file count does not match its file list")
    if problems:
        raise ValueError("; ".join(problems))
    return dict(content)


def entry_count(content: Mapping[str, Any]) -> int:
    if "manifests" in content:
        return sum(int(m["entries"]) for m in content["manifests"])
    return len(content.get("files", ()))


def read_snapshot(storage: Storage, content: Mapping[str, Any]) -> Snapshot:
    """The snapshot a proven checkpoint holds, its manifests read and proven (OSError or ValueError when
    one is missing or does not match the list); their entries are decoded only as readers ask."""
    if "manifests" not in content:
        return Snapshot.from_json(content)
    listed = [Manifest.from_json(raw) for raw in content["manifests"]]
    if len(listed) > 1 and not storage.is_local:
        # an object store answers each GET in tens of milliseconds: fetch the manifests side by side
        with ThreadPoolExecutor(max_workers=min(len(listed), _PARALLEL_READS)) as pool:
            raw = list(pool.map(storage.read, [m.path for m in listed]))
    else:
        raw = [storage.read(m.path) for m in listed]
    contents = [manifests.prove(data, m) for data, m in zip(raw, listed, strict=True)]
    return Snapshot.from_json(content, FileSet(ManifestFiles(listed, contents)))


@dataclass(frozen=True)
class Previous:
    """The checkpoint before the one being written, and the log records between the two."""

    version: int
    content: Mapping[str, Any]
    records: Sequence[CommitRecord]
    #: its manifest list, as registered (what a checkpoint being written names as the one it builds on)
    path: str = ""

    @property
    def buckets(self) -> int:
        return int(self.content["buckets"])

    def manifests(self) -> dict[int, Manifest]:
        return {m.bucket: m for m in (Manifest.from_json(raw) for raw in self.content["manifests"])}


def write_checkpoint(storage: Storage, snapshot: Snapshot, txn_id: str, previous: Previous | None) -> str:
    """Write `snapshot`'s checkpoint (manifests, then the list) and return the list's path; the caller
    registers it in etcd. With a manifest checkpoint before it, only the buckets the records since then
    touched are rewritten."""
    live = len(snapshot.files_by_path)
    writer = _ManifestWriter(storage, snapshot, txn_id)
    if previous is None or "manifests" not in previous.content or manifests.needs_new_buckets(live, previous.buckets):
        buckets = manifests.bucket_count(live)
        written = writer.all(buckets)
    else:
        buckets = previous.buckets
        try:
            written = writer.changed(previous)
        except (OSError, ValueError) as exc:  # a previous manifest gone or damaged: start afresh
            logger.warning(
                "checkpoint %d rewrites every manifest: a previous one is unreadable (%s)", snapshot.version, exc
            )
            written = []
        if sum(m.entries for m in written) != live:  # that, or a record that misnamed a file's partition
            written = writer.all(buckets)
    content = {
        **snapshot.header_json(),
        "buckets": buckets,
        "manifests": [m.to_json() for m in sorted(written, key=lambda m: m.bucket)],
    }
    document = {
        "format": MANIFEST_FORMAT,
        "version": snapshot.version,
        "file_count": entry_count(content),
        "checksum": content_checksum(content),
        "snapshot": content,
    }
    path = storage.checkpoint_file(snapshot.version, txn_id)
    storage.write_exclusive(path, json.dumps(document, separators=(",", ":")).encode())
    return path


class _ManifestWriter:
    def __init__(self, storage: Storage, snapshot: Snapshot, txn_id: str) -> None:
        self.storage = storage
        self.snapshot = snapshot
        self.txn_id = txn_id

    def all(self, buckets: int) -> list[Manifest]:
        """Every bucket written from the snapshot's files."""
        groups: dict[int, list[DataFile]] = defaultdict(list)
        for f in self.snapshot.files_by_path.values():
            groups[manifests.bucket_of(f, buckets)].append(f)
        return [self._write(bucket, manifests.entries_table(files)) for bucket, files in sorted(groups.items())]

    def changed(self, previous: Previous) -> list[Manifest]:
        """The previous checkpoint's manifests, with the buckets its records touched rewritten."""
        buckets, files = previous.buckets, self.snapshot.files_by_path
        changed_paths: set[str] = set()
        touched: set[int] = set()
        for record in previous.records:
            for f in (*record.removes, *record.adds):
                changed_paths.add(f.path)
                touched.add(manifests.bucket_of(f, buckets))
        added: dict[int, list[DataFile]] = defaultdict(list)
        for live in files.find(changed_paths).values():  # one batch, not a lookup per path
            bucket = manifests.bucket_of(live, buckets)
            added[bucket].append(live)
            touched.add(bucket)
        result = previous.manifests()
        replaced = pa.array(sorted(changed_paths), pa.string())
        for bucket in touched:
            kept = manifests.entries_table(())
            old = result.pop(bucket, None)
            if old is not None:
                entries = manifests.decode(self.storage.read(old.path), old)
                kept = entries.filter(pc.invert(pc.is_in(entries.column("path"), value_set=replaced)))
            table = pa.concat_tables([kept, manifests.entries_table(added.get(bucket, ()))])
            if table.num_rows:
                result[bucket] = self._write(bucket, table)
        return list(result.values())

    def _write(self, bucket: int, entries: pa.Table) -> Manifest:
        ordered = manifests.sorted_entries(entries)
        data = manifests.encode(ordered)
        path = self.storage.manifest_file(self.snapshot.version, bucket, self.txn_id)
        self.storage.write_exclusive(path, data)
        return Manifest(path, manifests.sha256(data), bucket, ordered.num_rows, manifests.summarise(ordered))


__all__ = ["MANIFEST_FORMAT", "Previous", "entry_count", "proven_checkpoint", "read_snapshot", "write_checkpoint"]
