"""stop_session leaves no JVM behind: what `acidtables demo` promises ("leave nothing running")."""

from __future__ import annotations

import os
import shutil
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


def test_local_spark_starts_where_the_host_name_resolves_to_nothing() -> None:
    """In a UTS namespace whose host name no resolver knows (what a chroot or a fresh container often
    is), `local_session` still starts: local Spark uses the loopback address, not the host name."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare to give the test a host name of its own")
    script = (
        "from acidtables.spark import local_session, stop_session\n"
        "s = local_session('hostless'); print('rows', s.range(3).count()); stop_session(s)"
    )
    done = subprocess.run(
        [
            unshare,
            "--uts",
            "sh",
            "-c",
            'hostname acidtables-unresolvable-host && exec "$0" -c "$1"',
            sys.executable,
            script,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        # AWS_* would make Spark name the host in the S3A settings it copies (SparkHadoopUtil), which needs a
        # resolvable name whatever the address; other tests may have left them set
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP") and not k.startswith("AWS_")
        },
    )
    assert "rows 3" in done.stdout, done.stderr[-3000:]
