"""A real S3-protocol server on loopback for object-store locations: moto's server, run as a process.

moto pins python-dateutil below 3 while the kubernetes client needs 3 or later, so it lives in a venv
of its own (`make install` builds .venv-s3); ACIDTABLES_TEST_MOTO_SERVER or PATH may name another
`moto_server`. Tables reach it the way a user reaches MinIO: ACIDTABLES_S3_ENDPOINT and the AWS_*
credentials.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from acidtables.core.coordination.embedded import free_port
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.storage.storage import S3_ENDPOINT

BUCKET = "lake"
_REPO = Path(__file__).resolve().parents[2]


def find_moto_server() -> str | None:
    for candidate in (
        os.environ.get("ACIDTABLES_TEST_MOTO_SERVER"),
        str(_REPO / ".venv-s3" / "bin" / "moto_server"),
        shutil.which("moto_server"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint, timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def moto_server(binary: str, bucket: str, log: Path) -> Iterator[str]:
    """moto's S3 server from `binary` on a free loopback port (its output in `log`), with `bucket`, and
    the environment that points acidtables (pyarrow) at it while the block runs (restored after, the
    server stopped)."""
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in (S3_ENDPOINT, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    try:
        wait_for(lambda: _answers(endpoint), timeout_seconds=30, message=f"moto_server at {endpoint} ({log})")
        os.environ.update(
            {
                S3_ENDPOINT: endpoint,
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_REGION": "us-east-1",
            }
        )
        from pyarrow import fs as pafs

        pafs.S3FileSystem(endpoint_override=endpoint, region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on a free loopback port, with the bucket `lake`, and the environment that
    points acidtables (pyarrow) at it; skipped, naming the server, where it is not installed."""
    binary = find_moto_server()
    if binary is None:
        pytest.skip("no moto_server: run `make install` (it builds .venv-s3) or set ACIDTABLES_TEST_MOTO_SERVER")
    with moto_server(binary, BUCKET, tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        yield endpoint
