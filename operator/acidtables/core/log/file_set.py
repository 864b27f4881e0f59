"""A snapshot's active files, as a map from path to DataFile that a commit extends without copying it.

Each version's file set is the previous one plus one commit's adds and removes. Copying a map of a
million paths for every commit would make a one-file commit cost what the table holds (issue 32), so a
FileSet shares what it does not change: a flat `base` map at the bottom and, above it, a stack of
layers, each a set of adds and removed paths. Lookups walk the layers from the top, then the base.

The stack stays short by merging: a new layer on top is merged with the one below while it is at least
half that one's size, like a binary counter. So each change is copied O(log n) times over its life and a
lookup visits O(log n) layers, with no pause that grows with the table until the layers together
reach half the base. That last merge, into the base, copies the base once: amortised over the changes
that made the layers as large as half the table, each change pays O(1).

A FileSet never changes once made: every version's set stays what it was for the readers that pinned
it. Iterating it flattens it once into a plain dict (cached), the cost a reader of every file pays anyway.

Its base may be a checkpoint's manifests read on demand (`ManifestFiles`). Such a base is never merged
into nor copied by a commit, and the FileSet answers what it can without decoding it whole: its size,
a batch of paths (`find`), the files of some partitions (`in_partitions`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from acidtables.core.log.file_totals import FileTotals, PartitionTotals
from acidtables.core.log.manifest_files import ManifestFiles
from acidtables.core.log.manifests import partition_key
from acidtables.core.log.records import DataFile


@dataclass(frozen=True)
class _Layer:
    """Changes over the layers below: paths added (or replaced) and paths removed."""

    adds: Mapping[str, DataFile]
    removes: frozenset[str]

    @property
    def size(self) -> int:
        """What merging this layer copies: the measure the binary-counter merges compare."""
        return len(self.adds) + len(self.removes)

    def over(self, lower: _Layer) -> _Layer:
        """This layer merged onto `lower`: one layer that answers every lookup as the two did."""
        adds = {path: f for path, f in lower.adds.items() if path not in self.removes}
        adds.update(self.adds)
        return _Layer(adds, lower.removes | self.removes)


class FileSet(Mapping[str, DataFile]):
    """Path -> DataFile of the active files of one version. Immutable; `changed` makes the next one."""

    __slots__ = ("_base", "_flat", "_layers", "_len", "_lock")

    def __init__(self, base: Mapping[str, DataFile] | None = None, layers: tuple[_Layer, ...] = ()) -> None:
        """`base` is taken, not copied: the FileSet owns it from now on, and nobody may change it."""
        self._base: Mapping[str, DataFile] = base if base is not None else {}
        self._layers = layers
        #: the whole map, once someone iterated it (a base without layers is its own)
        self._flat: Mapping[str, DataFile] | None = self._base if not layers else None
        self._len: int | None = None
        self._lock = threading.Lock()

    def changed(self, adds: Iterable[DataFile], removes: Iterable[str]) -> FileSet:
        """The file set after one commit: `removes` (paths) gone, then `adds` in (a re-added path replaces
        its entry). Costs O(the commit's changes), amortised over later merges."""
        top = _Layer({f.path: f for f in adds}, frozenset(removes))
        if top.size == 0:
            return self
        # once flattened (a reader iterated it), the flat map is the cheaper start: no layers to walk
        flat = self._flat if not isinstance(self._flat, ManifestFiles) else None
        base, layers = (flat, []) if flat is not None else (self._base, list(self._layers))
        while layers and top.size * 2 >= layers[-1].size:
            top = top.over(layers.pop())
        # a checkpoint's manifests stay the base: merging into them would decode every entry
        if top.size * 2 >= max(len(base), 1) and not layers and not isinstance(base, ManifestFiles):
            base = _flatten(base, (top,))
            return FileSet(base, ())
        return FileSet(base, (*layers, top))

    # --- Mapping ---------------------------------------------------------------------------------------

    def __getitem__(self, path: str) -> DataFile:
        for layer in reversed(self._layers):
            found = layer.adds.get(path)
            if found is not None:
                return found
            if path in layer.removes:
                raise KeyError(path)
        return self._base[path]

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        try:
            self[path]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._flattened())

    def __len__(self) -> int:
        if self._flat is not None:
            return len(self._flat)
        if self._len is None:
            # the base's size, less the paths the layers removed or replaced, plus what they add
            adds, removes = _overlay(self._layers)
            changed = {*adds, *removes}
            base = self._base
            present = base.present(changed) if isinstance(base, ManifestFiles) else {p for p in changed if p in base}
            self._len = len(self._base) - len(present) + len(adds)
        return self._len

    def find(self, paths: Collection[str]) -> dict[str, DataFile]:
        """The entries of those of `paths` that are live: lookups in the layers, then one batch in the base."""
        if self._flat is not None:
            return _find(self._flat, paths)
        found: dict[str, DataFile] = {}
        below = []
        for path in paths:  # each path walks the layers (O(log n) of them), as a lookup does
            for layer in reversed(self._layers):
                entry = layer.adds.get(path)
                if entry is not None:
                    found[path] = entry
                    break
                if path in layer.removes:
                    break
            else:
                below.append(path)
        found.update(_find(self._base, below))
        return found

    def totals(self, small_file_bytes: int = 0) -> FileTotals:
        """Files, small files, change files, bytes and live rows; over a checkpoint's manifests from their
        columns, decoding only the entries the layers replaced or removed."""
        source = self._flat if self._flat is not None else self._base
        if not isinstance(source, ManifestFiles):
            return FileTotals.of(self._flattened().values(), small_file_bytes)
        adds, removes = _overlay(self._layers)
        replaced = source.find({*adds, *removes}).values()
        return (
            source.totals(small_file_bytes)
            - FileTotals.of(replaced, small_file_bytes)
            + FileTotals.of(adds.values(), small_file_bytes)
        )

    def partition_totals(self, small_file_bytes: int = 0) -> dict[str, PartitionTotals]:
        """Per partition (its canonical key): totals and the newest adding version. Over a checkpoint's
        manifests, from their columns, except the partitions the layers touched, whose entries alone
        are decoded (a removal can change which version is newest)."""
        source = self._flat if self._flat is not None else self._base
        if not isinstance(source, ManifestFiles):
            return _partition_totals(self._flattened().values(), small_file_bytes)
        adds, removes = _overlay(self._layers)
        replaced = source.find({*adds, *removes}).values()  # a re-added path may have left a partition
        touched = {partition_key(f.partition) for f in (*adds.values(), *replaced)}
        found = source.partition_totals(small_file_bytes, skip=touched)
        in_touched = self.in_partitions(lambda partition: partition_key(partition) in touched)
        found.update(_partition_totals(in_touched, small_file_bytes))
        return found

    def in_partitions(self, keep: Callable[[Mapping[str, Any]], bool]) -> list[DataFile]:
        """The live files of every partition `keep` accepts; from a checkpoint's manifests, only theirs."""
        source = self._flat if self._flat is not None else self._base
        if not isinstance(source, ManifestFiles):
            return [f for f in self._flattened().values() if keep(f.partition)]
        adds, removes = _overlay(self._layers)
        kept = [f for f in source.in_partitions(keep) if f.path not in removes and f.path not in adds]
        return kept + [f for f in adds.values() if keep(f.partition)]

    def _flattened(self) -> Mapping[str, DataFile]:
        """The whole map, made once and kept: readers that iterate pay the flattening once per version."""
        if self._flat is None:
            with self._lock:
                if self._flat is None:
                    self._flat = _flatten(self._base, self._layers)
        return self._flat

    @property
    def base(self) -> Mapping[str, DataFile]:
        """The map under the layers (a checkpoint's `ManifestFiles` when read from one)."""
        return self._base

    @property
    def depth(self) -> int:
        """Layers above the base (what a lookup walks at most, besides the base)."""
        return len(self._layers)


def _overlay(layers: tuple[_Layer, ...]) -> tuple[Mapping[str, DataFile], frozenset[str]]:
    """The layers as one: what they add over the base, and which of the base's paths they remove."""
    if not layers:
        return {}, frozenset()
    merged = layers[0]
    for layer in layers[1:]:
        merged = layer.over(merged)
    return merged.adds, merged.removes


def _partition_totals(files: Iterable[DataFile], small_file_bytes: int) -> dict[str, PartitionTotals]:
    groups: dict[str, list[DataFile]] = {}
    for f in files:
        groups.setdefault(partition_key(f.partition), []).append(f)
    return {key: PartitionTotals.of(members, small_file_bytes) for key, members in groups.items()}


def _find(base: Mapping[str, DataFile], paths: Collection[str]) -> dict[str, DataFile]:
    if isinstance(base, ManifestFiles):
        return base.find(paths)
    return {p: base[p] for p in paths if p in base}


def _flatten(base: Mapping[str, DataFile], layers: Iterable[_Layer]) -> dict[str, DataFile]:
    """`base` with the layers applied in order, each one's removes before its adds (as a commit applies)."""
    flat = dict(base.everything() if isinstance(base, ManifestFiles) else base)
    for layer in layers:
        for path in layer.removes:
            flat.pop(path, None)
        flat.update(layer.adds)
    return flat
