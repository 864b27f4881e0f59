"""The acidtables image, run as the chart runs it (issue 25, item 1).

Each test starts the real image with podman: uid 185, a read-only root file system with a writable /tmp,
the warehouse mounted at the path the table names, etcd on the host's loopback (`--network host`). CI
builds the image first (`.ci/image`: buildah on a debian:bookworm-slim made with mmdebstrap) and names
it in ACIDTABLES_TEST_IMAGE; elsewhere these tests skip and say so (`make image-test` builds and runs
them). ACIDTABLES_PODMAN_ARGS and ACIDTABLES_PODMAN_RUN_ARGS carry what a sandbox needs (a runtime,
lower rlimits) before and after `run`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from tests.helpers.kmock_operator import KmockOperator
from tests.helpers.podman_kubelet import POD_USER, give_to_pod_user, podman, run_arguments
from tests.helpers.tables import staged_parquet

from acidtables import Catalog, Table
from acidtables.core.coordination.embedded import EmbeddedEtcd, free_port
from acidtables.core.coordination.waiting import wait_for
from acidtables.core.settings import EtcdSettings, Settings

IMAGE_VARIABLE = "ACIDTABLES_TEST_IMAGE"
#: set by .ci/image: there a missing image or podman is a failure, not a skip
REQUIRE_VARIABLE = "ACIDTABLES_REQUIRE_IMAGE"

pytestmark = pytest.mark.image


@pytest.fixture(scope="module")
def image() -> str:
    name = os.environ.get(IMAGE_VARIABLE)
    problem = None
    if not name:
        problem = f"{IMAGE_VARIABLE} names no image (`make image-test` builds one and runs these tests)"
    elif shutil.which("podman") is None:
        problem = "podman is not installed (apt-get install podman)"
    if problem:
        if os.environ.get(REQUIRE_VARIABLE):
            pytest.fail(f"{REQUIRE_VARIABLE} is set but {problem}")
        pytest.skip(problem)
    assert name is not None
    return name


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory uid 185 can use (pytest's own tmp dirs are root's, mode 0700), mounted at its own path."""
    path = Path(tempfile.mkdtemp(prefix="acidtables-image-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def podman_command(
    image: str, args: Sequence[str], *, env: dict[str, str], mounts: Sequence[Path], name: str
) -> list[str]:
    command = [*podman("run", "--rm", "--name", name), *run_arguments()]
    command += ["--user", str(POD_USER), "--read-only", "--tmpfs", "/tmp:rw,mode=1777", "--network", "host"]
    for mount in mounts:
        command += ["-v", f"{mount}:{mount}"]
    for key, value in env.items():
        command += ["-e", f"{key}={value}"]
    return [*command, image, *args]


def catalog_on(etcd: EmbeddedEtcd, warehouse: Path) -> tuple[Catalog, dict[str, str]]:
    """A catalog under a fresh prefix, and the environment that reaches the same one from a container."""
    prefix = f"/image-{uuid.uuid4().hex[:8]}"
    settings = Settings(etcd=EtcdSettings((etcd.endpoint,), prefix=prefix), warehouse=str(warehouse))
    env = {
        "ACIDTABLES_ETCD_ENDPOINTS": etcd.endpoint,
        "ACIDTABLES_ETCD_PREFIX": prefix,
        "ACIDTABLES_WAREHOUSE": str(warehouse),
    }
    return Catalog(settings), env


def four_small_files(catalog: Catalog, name: str) -> Table:
    table = catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
    for _ in range(4):
        tx = table.begin("insert_into")
        tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
        tx.commit()
    return table


def compact_args(table: Table, termination: Path) -> list[str]:
    return [
        "compact",
        "--table",
        table.name,
        "--type",
        "minor",
        "--job-id",
        uuid.uuid4().hex,
        "--termination-log",
        str(termination),
    ]


def test_the_job_entry_point_compacts_a_real_table(image: str, etcd_server: EmbeddedEtcd, workdir: Path) -> None:
    catalog, env = catalog_on(etcd_server, workdir / "warehouse")
    with catalog:
        table = four_small_files(catalog, "image.small")
        give_to_pod_user(workdir)
        termination = workdir / "termination"
        command = podman_command(
            image, compact_args(table, termination), env=env, mounts=[workdir], name=f"job-{uuid.uuid4().hex[:8]}"
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        outcome = json.loads(termination.read_text())
        assert (outcome["phase"], outcome["filesRemoved"], outcome["filesAdded"]) == ("Succeeded", 4, 1)
        snapshot = table.snapshot()
        assert len(snapshot.files) == 1 and snapshot.row_count == 8
        assert snapshot.version == outcome["committedVersion"]


def test_a_losing_job_writes_its_conflict_to_the_termination_message(
    image: str, etcd_server: EmbeddedEtcd, workdir: Path
) -> None:
    """The job is stopped (SIGSTOP) once its rewrite has begun staging; a DELETE of the same files
    commits; the job, resumed, loses its commit and says to what, exiting 3 (Conflicted: not retried)."""
    catalog, env = catalog_on(etcd_server, workdir / "warehouse")
    with catalog:
        table = four_small_files(catalog, "image.loser")
        data = Path(table.location) / "data"
        before = set(data.iterdir())
        give_to_pod_user(workdir)
        termination = workdir / "termination"
        name = f"loser-{uuid.uuid4().hex[:8]}"
        job = subprocess.Popen(
            podman_command(image, compact_args(table, termination), env=env, mounts=[workdir], name=name),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for(lambda: bool(set(data.iterdir()) - before), 300, message="the job staged nothing in 300 s")
            pid = int(
                subprocess.run(
                    ["podman", "inspect", "--format", "{{.State.Pid}}", name],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            os.kill(pid, signal.SIGSTOP)
            try:
                delete = table.begin("delete")
                delete.remove_files(delete.scan(None))
                winner = delete.commit()
            finally:
                os.kill(pid, signal.SIGCONT)
            output, _ = job.communicate(timeout=300)
        finally:
            if job.poll() is None:
                job.kill()
        assert job.returncode == 3, output[-4000:]
        outcome = json.loads(termination.read_text())
        assert outcome["phase"] == "Conflicted"
        assert outcome["conflict"]["winningVersion"] == winner.version
        assert outcome["conflict"]["winningOperation"] == "DELETE"
        assert outcome["conflict"]["exception"] == "ConcurrentDeleteDeleteException"  # both removed the files
        assert table.snapshot().version == winner.version  # the job committed nothing


def test_spark_executor_arguments_start_the_executor_backend(image: str) -> None:
    """What Spark's Kubernetes scheduler starts an executor pod with: the image runs Spark's executor
    backend, which tries the driver (none listens here) and gives up."""
    env = {
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.0.0.1:9",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_APPLICATION_ID": "spark-image-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "image-test-exec-1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "512m",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=9",
    }
    command = podman_command(image, ["executor"], env=env, mounts=[], name=f"exec-{uuid.uuid4().hex[:8]}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert "KubernetesExecutorBackend" in output, output[-4000:]
    assert "127.0.0.1:9" in output  # it tried the driver it was given
    assert done.returncode != 0


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):  # not listening yet, or answering 503
        return False


def test_the_operator_entry_point_starts_and_answers_its_health_endpoints(
    image: str, etcd_server: EmbeddedEtcd, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`operator` as the chart runs it, against kmock's API server and the host's etcd: /healthz and
    /readyz answer 200 on the health port, and SIGTERM stops it."""
    kube = KmockOperator(workdir, etcd_server.endpoint, f"/image-{uuid.uuid4().hex[:8]}")
    kube.start_kube(monkeypatch.setenv)
    try:
        kubeconfig = workdir / "kubeconfig"  # start_kube wrote it there (its tmp_path), for uid 185 too
        give_to_pod_user(workdir)
        health, metrics = free_port(), free_port()
        env = {
            "KUBECONFIG": str(kubeconfig),
            "ACIDTABLES_ETCD_ENDPOINTS": etcd_server.endpoint,
            "ACIDTABLES_ETCD_PREFIX": kube.settings.etcd.prefix,
            "ACIDTABLES_WAREHOUSE": str(workdir / "warehouse"),
            "ACIDTABLES_HEALTH_PORT": str(health),
            "ACIDTABLES_METRICS_PORT": str(metrics),
        }
        name = f"operator-{uuid.uuid4().hex[:8]}"
        operator = subprocess.Popen(
            podman_command(image, ["operator", "--namespace=default"], env=env, mounts=[workdir], name=name),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            for path in ("healthz", "readyz"):
                url = f"http://127.0.0.1:{health}/{path}"

                def up(url: str = url) -> bool:
                    return answers(url) or operator.poll() is not None

                wait_for(up, 180, message=f"{url} never answered")
                assert operator.poll() is None, operator.communicate()[0][-4000:]
            # at once, as a rollout may: tests/test_operator_signals.py has why the moment matters
            killed = subprocess.run(
                ["podman", "kill", "--signal", "TERM", name], capture_output=True, text=True, timeout=60
            )
            assert killed.returncode == 0, killed.stderr
            try:
                output, _ = operator.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True, timeout=60).stdout
                raise AssertionError(f"SIGTERM did not stop the operator in 120 s:\n{logs[-4000:]}") from None
        finally:
            if operator.poll() is None:
                subprocess.run(["podman", "rm", "--force", name], capture_output=True, timeout=60)  # not left running
                operator.kill()
        assert operator.returncode == 0, output[-4000:]  # SIGTERM: a clean stop
        assert "acting for default" in output and "health probes on" in output
    finally:
        kube.stop_kube()
