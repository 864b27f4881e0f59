"""Bugs to plant in the writer and reader processes of a run (`--plant NAME`), to show the checker
catches what it exists to catch (issue 44). Each replaces one piece of the core, in that process only,
with a plausible wrong version of it:

  split-commit     a multi-table commit's parts go to etcd one table at a time, each its own
                   compare-and-swap: each part is still judged by its table's rules, but the group is no
                   longer all-or-nothing (one table can move without the others, and a reader can see
                   one part without the rest)
  split-snapshots  catalog.snapshots() reads each table's head in a request of its own, at its own
                   revision: a multi-table commit landing between two of those reads is seen in part

A planted run must end with anomalies; the tests in tests/test_check_multi_table.py show it does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from acidtables.core.coordination.tables import CasRequest, CasResult, HeadState, Tables


def _split_commit(self: Tables, requests: Sequence[CasRequest]) -> list[CasResult]:
    return [self.compare_and_swap(r) for r in requests]


def _split_snapshots(self: Tables, table_ids: Sequence[str]) -> tuple[dict[str, HeadState | None], int]:
    found: dict[str, HeadState | None] = {}
    revision = 0
    for table_id in table_ids:
        heads, revision = _READ_HEADS(self, [table_id])
        found.update(heads)
    return found, revision


_READ_HEADS = Tables.read_heads

#: name -> (method of the etcd coordinator it replaces, the planted version)
PLANTS: dict[str, tuple[str, Callable[..., object]]] = {
    "split-commit": ("compare_and_swap_many", _split_commit),
    "split-snapshots": ("read_heads", _split_snapshots),
}


def plant(name: str | None) -> None:
    """Plant bug `name` in this process (None: none)."""
    if name is None:
        return
    method, planted = PLANTS[name]
    setattr(Tables, method, planted)
