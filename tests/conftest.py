"""Shared fixtures: one real etcd for the whole session, and a fresh key prefix per test.

Starting etcd costs about a second, so the server is shared; tests stay independent by
writing only under their own random prefix instead of wiping the server between tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import pytest

from acidtables.core.embedded import EmbeddedEtcd


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
