"""The rule import-linter cannot state: only acidtables.core.storage opens table locations.

import-linter refuses submodules of external packages as forbidden modules, and `pyarrow.fs` is one
(pyarrow.parquet is fine anywhere: it reads bytes a Storage hands it). So the source is read instead.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "operator" / "acidtables"
FILE_SYSTEMS = re.compile(
    r"^\s*(from pyarrow import fs\b|import pyarrow\.fs\b|from pyarrow\.fs import|import shutil\b)", re.M
)
ALLOWED = {"core/storage.py", "core/embedded.py"}  # embedded: the local etcd's own data directory, not a table


def test_only_storage_opens_table_locations() -> None:
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in ALLOWED and FILE_SYSTEMS.search(path.read_text())
    )
    assert offenders == []
