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


HOSTLESS_SCRIPT = textwrap.dedent(
    """
    import os
    from acidtables.spark import local_session, stop_session

    s = local_session("hostless")
    print("rows", s.range(3).count())
    hadoop = s.sparkContext._jsc.hadoopConfiguration()
    print("s3a key", hadoop.get("fs.s3a.access.key"), hadoop.get("fs.s3a.endpoint"))
    worker = s.sparkContext.parallelize([0], 1).map(lambda _: os.environ.get("AWS_SECRET_ACCESS_KEY")).collect()
    print("worker secret", worker[0])
    print("driver secret", os.environ.get("AWS_SECRET_ACCESS_KEY"))
    stop_session(s)
    """
)

#: what the S3 test fixture and a job pod set
S3_ENVIRONMENT = {
    "AWS_ACCESS_KEY_ID": "hostless-key",
    "AWS_SECRET_ACCESS_KEY": "hostless-secret",
    "AWS_REGION": "us-east-1",
    "ACIDTABLES_S3_ENDPOINT": "http://127.0.0.1:9",
}


@pytest.mark.parametrize("s3_settings", [False, True], ids=["plain", "with-s3-settings"])
def test_local_spark_starts_where_the_host_name_resolves_to_nothing(s3_settings: bool) -> None:
    """In a UTS namespace whose host name no resolver knows (what a chroot or a fresh container often
    is), `local_session` still starts: local Spark uses the loopback address, not the host name. With
    AWS credentials in the environment (which Spark's JVM copies into S3A at start, resolving the host
    name as it does) the session starts too, and S3A and the Python workers still get the credentials."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and unshare to give the test a host name of its own")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP") and not k.startswith(("AWS_", "ACIDTABLES_S3_"))
    }
    if s3_settings:
        env.update(S3_ENVIRONMENT)
    done = subprocess.run(
        [
            unshare,
            "--uts",
            "sh",
            "-c",
            'hostname acidtables-unresolvable-host && exec "$0" -c "$1"',
            sys.executable,
            HOSTLESS_SCRIPT,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert "rows 3" in done.stdout, done.stderr[-3000:]
    if s3_settings:
        assert "s3a key hostless-key http://127.0.0.1:9" in done.stdout
        assert "worker secret hostless-secret" in done.stdout
        assert "driver secret hostless-secret" in done.stdout  # the process's own environment is as it was
