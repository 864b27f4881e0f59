"""The rule import-linter cannot state: only acidtables.core.storage.storage opens table locations.

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
#: embedded: the local etcd's own data directory, not a table
ALLOWED = {"core/storage/storage.py", "core/coordination/embedded.py"}


def test_only_storage_opens_table_locations() -> None:
    offenders = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if str(path.relative_to(PACKAGE)) not in ALLOWED and FILE_SYSTEMS.search(path.read_text())
    )
    assert offenders == []


def test_the_facade_contract_names_every_core_module() -> None:
    """A core module added later is behind the facade too: the core-facade contract lists each one."""
    config = (PACKAGE.parents[1] / ".importlinter").read_text()
    contract = config.split("[importlinter:contract:core-facade]", 1)[1].split("[importlinter:", 1)[0]
    forbidden = set(re.findall(r"^\s+(acidtables\.core\.\w+)\s*$", contract, re.M))
    modules = {
        f"acidtables.core.{path.stem if path.is_file() else path.name}"
        for path in (PACKAGE / "core").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }
    assert modules - forbidden == set()


def test_every_public_name_resolves() -> None:
    """What users import (issue 31: a move inside core must not break it): every name the public
    modules' __all__ promise is there."""
    import importlib

    for module_name in ("acidtables", "acidtables.errors", "acidtables.core", "acidtables.spark"):
        module = importlib.import_module(module_name)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module_name
