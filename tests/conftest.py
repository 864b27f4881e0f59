"""Shared fixtures: one real etcd for the whole session, and a fresh key prefix per test.

Starting etcd costs about a second, so the server is shared; tests stay independent by
writing only under their own random prefix instead of wiping the server between tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from acidtables import Catalog
from acidtables.core.embedded import EmbeddedEtcd
from acidtables.core.settings import EtcdSettings, Settings


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedEtcd]:
    server = EmbeddedEtcd(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_prefix() -> str:
    return f"/acidtables-test/{uuid4().hex}"


@pytest.fixture
def catalog(etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path) -> Iterator[Catalog]:
    """A catalog on the session's etcd, under a fresh prefix, with a warehouse in the test's tmp dir."""
    settings = Settings(
        etcd=EtcdSettings((etcd_server.endpoint,), prefix=etcd_prefix),
        warehouse=str(tmp_path / "warehouse"),
    )
    cat = Catalog(settings)
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the whole run (starting Spark costs seconds; tests share it)."""
    from acidtables.spark import local_session, stop_session

    session = local_session("acidtables-tests")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        stop_session(session)
