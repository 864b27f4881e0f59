"""Archive segments: the part of a table's log etcd no longer holds, as immutable files (design §2).

etcd keeps the head, a short recent window of the log and what running transactions still need; every
older log entry, with its time-index entries and checkpoint keys, is written here first and only then
deleted from etcd (core.log.tablelog). A segment covers a contiguous range of versions and never changes.
Its name carries that range and the range of its time versions, so a reader picks the segments it needs
from a listing without opening the others:

    _acidtables/archive/<first:020d>-<last:020d>-<first time>-<last time>-<random>.json

(a time is 20 digits, or `n` for a segment without data commits). An archiver that died after writing a
segment but before etcd let go of its entries leaves a segment that the next one partly repeats: ranges
may overlap, and since log entries are immutable, overlapping segments agree on every version they share.
A segment that does not prove itself (a torn write: its checksum) is skipped, with a warning, in favour of
another that covers the same versions; a version no readable segment holds is CorruptMetadataError.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from acidtables.core.errors import CorruptMetadataError
from acidtables.core.storage.storage import METADATA_DIR, Storage, content_checksum

logger = logging.getLogger(__name__)

T = TypeVar("T")

ARCHIVE_DIR = f"{METADATA_DIR}/archive"
FORMAT = 1
#: parsed segments a reader keeps in memory (their indexes of txn ids and times are kept for good)
CACHED_SEGMENTS = 8


@dataclass(frozen=True)
class SegmentRef:
    """A segment as its name describes it."""

    first: int
    last: int
    time_first: int | None
    time_last: int | None
    path: str

    @staticmethod
    def parse(path: str) -> SegmentRef | None:
        """The segment a file name describes; None for any other file."""
        name = path.rsplit("/", 1)[-1]
        parts = name.removesuffix(".json").split("-")
        if not name.endswith(".json") or len(parts) != 5:
            return None
        try:
            first, last = int(parts[0]), int(parts[1])
            times = [None if p == "n" else int(p) for p in parts[2:4]]
        except ValueError:
            return None
        if first > last:
            return None
        return SegmentRef(first, last, times[0], times[1], path)


@dataclass(frozen=True)
class Segment:
    ref: SegmentRef
    #: raw log entries first..last, as etcd held them (a record, or a pointer to a commit file)
    entries: list[dict[str, Any]]
    #: (time version, ID version) of the data commits among them
    times: list[tuple[int, int]]
    #: (version, path) of the checkpoints registered among them
    checkpoints: list[tuple[int, str]]


def _time_name(time_us: int | None) -> str:
    return "n" if time_us is None else f"{time_us:020d}"


class Archive:
    """One table's archive segments: written by the archiver, read by everyone the log reader sends here.

    Thread-safe. Keeps the segment listing (segments only ever appear, at the new end) and a few parsed
    segments; the txn ids it has seen stay indexed, so looking many of them up (cleanup) reads each
    segment once.
    """

    def __init__(self, storage: Storage, table_id: str) -> None:
        self.storage = storage
        self.table_id = table_id
        self._lock = threading.RLock()
        self._refs: list[SegmentRef] | None = None
        self._bad: set[str] = set()
        self._cache: OrderedDict[str, Segment] = OrderedDict()
        self._txns: dict[str, int] = {}
        self._txns_read: set[str] = set()

    # --- writing -------------------------------------------------------------------------------------

    def write(
        self,
        entries: Sequence[dict[str, Any]],
        times: Iterable[tuple[int, int]],
        checkpoints: Iterable[tuple[int, str]],
    ) -> str:
        """Write one segment of contiguous log entries (with their time-index entries and checkpoints);
        returns its path. Each call writes a new file: a name is never reused."""
        if not entries:
            raise ValueError("an archive segment needs at least one log entry")
        first, last = int(entries[0]["version"]), int(entries[-1]["version"])
        if [int(e["version"]) for e in entries] != list(range(first, last + 1)):
            raise CorruptMetadataError(
                f"the log entries {first}..{last} to archive are not contiguous", key=f"log/{first}"
            )
        times = sorted((t, v) for t, v in times if first <= v <= last)
        content = {
            "format": FORMAT,
            "table_id": self.table_id,
            "first": first,
            "last": last,
            "entries": list(entries),
            "times": [list(pair) for pair in times],
            "checkpoints": [list(pair) for pair in sorted(checkpoints)],
        }
        name = "-".join(
            (
                f"{first:020d}",
                f"{last:020d}",
                _time_name(times[0][0] if times else None),
                _time_name(times[-1][0] if times else None),
                uuid.uuid4().hex[:12],
            )
        )
        path = f"{ARCHIVE_DIR}/{name}.json"
        document = {"checksum": content_checksum(content), "segment": content}
        # whole or not at all: readers list the directory while archivers write into it
        self.storage.publish(path, json.dumps(document, separators=(",", ":")).encode())
        ref = SegmentRef.parse(path)
        assert ref is not None  # we just built the name
        with self._lock:
            if self._refs is not None:
                self._refs.append(ref)
        return path

    # --- reading -------------------------------------------------------------------------------------

    def _reaching(self, *, version: int | None = None, time_us: int | None = None) -> list[SegmentRef]:
        """The segments, listed again only when the known ones end before `version` / `time_us`:
        segments appear only at the new end, so an older answer cannot change."""
        refs = self._segments()
        if version is not None and all(r.last < version for r in refs):
            return self._segments(refresh=True)
        if time_us is not None and all((r.time_last or -1) < time_us for r in refs):
            return self._segments(refresh=True)
        return refs

    def _segments(self, *, refresh: bool = False) -> list[SegmentRef]:
        with self._lock:
            if self._refs is None or refresh:
                listed = (SegmentRef.parse(f.path) for f in self.storage.list_dir(ARCHIVE_DIR))
                self._refs = sorted((r for r in listed if r is not None), key=lambda r: (r.first, r.last))
            return [r for r in self._refs if r.path not in self._bad]

    def _load(self, ref: SegmentRef) -> Segment | None:
        """The parsed segment, or None (remembered) when it does not prove itself."""
        with self._lock:
            cached = self._cache.get(ref.path)
            if cached is not None:
                self._cache.move_to_end(ref.path)
                return cached
        try:
            document = json.loads(self.storage.read(ref.path))
            content = document["segment"]
            problems = []
            if document.get("checksum") != content_checksum(content):
                problems.append("its checksum does not match its content")
            if content.get("table_id") != self.table_id:
                problems.append(f"it belongs to table {content.get('table_id')}")
            entries = content["entries"]
            versions = [int(e["version"]) for e in entries]
            if versions != list(range(ref.first, ref.last + 1)):
                problems.append(f"its entries are not versions {ref.first}..{ref.last}")
            if problems:
                raise ValueError("; ".join(problems))
            segment = Segment(
                ref,
                entries,
                [(int(t), int(v)) for t, v in content["times"]],
                [(int(v), str(p)) for v, p in content["checkpoints"]],
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.warning("archive segment %s of table %s is ignored (%s)", ref.path, self.table_id, exc)
            with self._lock:
                self._bad.add(ref.path)
            return None
        with self._lock:
            self._cache[ref.path] = segment
            while len(self._cache) > CACHED_SEGMENTS:
                self._cache.popitem(last=False)
            if ref.path not in self._txns_read:
                self._txns_read.add(ref.path)
                for entry in entries:
                    self._txns[str(entry.get("txn_id"))] = int(entry["version"])
        return segment

    def segment_refs(self) -> list[SegmentRef]:
        """Every segment under the archive directory now, readable or not (fsck)."""
        self._segments(refresh=True)
        with self._lock:
            return list(self._refs or ())

    def load(self, ref: SegmentRef) -> Segment | None:
        """The parsed segment, or None when it does not prove itself (logged)."""
        with self._lock:
            self._bad.discard(ref.path)
        return self._load(ref)

    def all_checkpoints(self) -> tuple[list[tuple[int, str]], bool]:
        """(version, path) of every checkpoint any readable segment lists, and whether every segment
        could be read (if not, what the others list is unknown: a caller deciding what nothing names
        must not guess)."""
        found: set[tuple[int, str]] = set()
        complete = True
        for ref in self._segments(refresh=True):
            segment = self._load(ref)
            complete = complete and segment is not None
            found.update(segment.checkpoints if segment else ())
        return sorted(found), complete

    def entries(self, after: int, upto: int) -> list[dict[str, Any]]:
        """The archived log entries after < version <= upto, oldest first; CorruptMetadataError naming
        the first version no readable segment holds."""
        out: list[dict[str, Any]] = []
        version = after + 1
        refreshed = False
        while version <= upto:
            covering = [r for r in self._segments() if r.first <= version <= r.last]
            if not covering and not refreshed:
                refreshed = True
                with self._lock:  # a segment judged unreadable earlier is read again (a torn one stays so)
                    self._bad.clear()
                self._segments(refresh=True)
                continue
            if not covering:
                raise CorruptMetadataError(
                    f"version {version} of table {self.table_id} has left etcd for the archive, but no readable "
                    f"archive segment under {self.storage.absolute(ARCHIVE_DIR)} holds it",
                    key=f"log/{version}",
                )
            ref = max(covering, key=lambda r: r.last)
            segment = self._load(ref)
            if segment is None:
                continue  # now marked bad: try another segment covering `version`
            stop = min(ref.last, upto)
            out.extend(segment.entries[version - ref.first : stop - ref.first + 1])
            version = stop + 1
        return out

    def find_txn(self, txn_id: str) -> int | None:
        """The version the transaction committed, if an archived entry says so."""
        with self._lock:
            if txn_id in self._txns:
                return self._txns[txn_id]
        for refresh in (False, True):
            for ref in sorted(self._segments(refresh=refresh), key=lambda r: -r.last):
                if ref.path in self._txns_read:
                    continue
                self._load(ref)
                with self._lock:
                    if txn_id in self._txns:
                        return self._txns[txn_id]
        return None

    def version_at_time(self, time_us: int) -> tuple[int, int] | None:
        """The newest archived data commit at or before `time_us`: (time version, ID version)."""
        timed = [r for r in self._reaching(time_us=time_us) if r.time_first is not None and r.time_first <= time_us]
        return self._newest_at_or_before(timed, time_us, lambda r: r.time_last or 0, lambda s: s.times)

    def versions_between_times(self, start_us: int, end_us: int) -> list[tuple[int, int]]:
        found: dict[int, tuple[int, int]] = {}
        for ref in self._reaching(time_us=end_us):
            if ref.time_first is None or ref.time_last is None:
                continue
            if ref.time_last < start_us or ref.time_first > end_us:
                continue
            segment = self._load(ref)
            for t, v in segment.times if segment else ():
                if start_us <= t <= end_us:
                    found[v] = (t, v)
        return sorted(found.values())

    def checkpoint_at_or_before(self, version: int) -> tuple[int, str] | None:
        """The newest archived checkpoint at or before `version`: (version, path)."""
        reaching = [r for r in self._reaching(version=version) if r.first <= version]
        return self._newest_at_or_before(reaching, version, lambda r: r.last, lambda s: s.checkpoints)

    def _newest_at_or_before(
        self,
        candidates: list[SegmentRef],
        bound: int,
        reach: Callable[[SegmentRef], int],
        pairs: Callable[[Segment], list[tuple[int, T]]],
    ) -> tuple[int, T] | None:
        """The pair with the greatest key at or before `bound` among the candidates' `pairs`, reading
        segments from the one that reaches furthest towards `bound` and stopping as soon as no later one
        can hold anything newer (segments may overlap, so the first found is not always the answer)."""
        best: tuple[int, T] | None = None
        for ref in sorted(candidates, key=lambda r: -min(reach(r), bound)):
            if best is not None and min(reach(ref), bound) <= best[0]:
                break
            segment = self._load(ref)
            for pair in pairs(segment) if segment else ():
                if pair[0] <= bound and (best is None or pair[0] > best[0]):
                    best = pair
        return best


__all__ = ["ARCHIVE_DIR", "Archive", "Segment", "SegmentRef"]
