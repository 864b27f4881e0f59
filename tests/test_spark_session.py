"""stop_session leaves no JVM behind: what `acidtables demo` promises ("leave nothing running")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    from pyspark import SparkContext
    from acidtables.spark import local_session, stop_session

    session = local_session("stop-test")
    assert session.range(3).count() == 3
    jvm = SparkContext._gateway.proc
    stop_session(session)
    print(jvm.pid, jvm.poll())
    """
)


@pytest.mark.slow  # starts and stops a second JVM
def test_stop_session_waits_for_the_jvm_to_exit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180, env={**os.environ}, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    pid, status = done.stdout.split()
    assert status != "None"  # the JVM had exited when stop_session returned, not merely been asked to
    assert not os.path.exists(f"/proc/{pid}")
