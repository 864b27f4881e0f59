"""acidtables: ACID tables whose every commit is an etcd compare-and-swap.

The public names users start from are re-exported here; everything else lives in its subpackage
(`acidtables.core`, `acidtables.spark`, `acidtables.operator`, `acidtables.metrics`, `acidtables.cli`).
"""

from acidtables.core import (
    Catalog,
    Change,
    ColumnStats,
    CommitInfo,
    DataFile,
    HistoryEntry,
    MultiTableTransaction,
    Table,
    Transaction,
)

__all__ = [
    "Catalog",
    "Change",
    "ColumnStats",
    "CommitInfo",
    "DataFile",
    "HistoryEntry",
    "MultiTableTransaction",
    "Table",
    "Transaction",
]
__version__ = "0.1.0"
