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
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

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

    __slots__ = ("_base", "_flat", "_layers", "_lock")

    def __init__(self, base: Mapping[str, DataFile] | None = None, layers: tuple[_Layer, ...] = ()) -> None:
        """`base` is taken, not copied: the FileSet owns it from now on, and nobody may change it."""
        self._base: Mapping[str, DataFile] = base if base is not None else {}
        self._layers = layers
        #: the whole map, once someone iterated it (a base without layers is its own)
        self._flat: Mapping[str, DataFile] | None = self._base if not layers else None
        self._lock = threading.Lock()

    def changed(self, adds: Iterable[DataFile], removes: Iterable[str]) -> FileSet:
        """The file set after one commit: `removes` (paths) gone, then `adds` in (a re-added path replaces
        its entry). Costs O(the commit's changes), amortised over later merges."""
        top = _Layer({f.path: f for f in adds}, frozenset(removes))
        if top.size == 0:
            return self
        # once flattened (a reader iterated it), the flat map is the cheaper start: no layers to walk
        base, layers = (self._flat, []) if self._flat is not None else (self._base, list(self._layers))
        while layers and top.size * 2 >= layers[-1].size:
            top = top.over(layers.pop())
        if top.size * 2 >= max(len(base), 1) and not layers:
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
        return len(self._flattened())

    def _flattened(self) -> Mapping[str, DataFile]:
        """The whole map, made once and kept: readers that iterate pay the flattening once per version."""
        if self._flat is None:
            with self._lock:
                if self._flat is None:
                    self._flat = _flatten(self._base, self._layers)
        return self._flat

    @property
    def depth(self) -> int:
        """Layers above the base (what a lookup walks at most, besides the base)."""
        return len(self._layers)


def _flatten(base: Mapping[str, DataFile], layers: Iterable[_Layer]) -> dict[str, DataFile]:
    """`base` with the layers applied in order, each one's removes before its adds (as a commit applies)."""
    flat = dict(base)
    for layer in layers:
        for path in layer.removes:
            flat.pop(path, None)
        flat.update(layer.adds)
    return flat
