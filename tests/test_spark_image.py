"""The Spark job image's Dockerfile pins what must agree with the project: checked without Docker
(building it is the `docker` marker's job, skipped where no engine runs)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "spark-images" / "Dockerfile").read_text()


def arg(name: str) -> str:
    found = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE, re.M)
    assert found, f"the Dockerfile has no ARG {name}"
    return found.group(1)


def test_the_image_installs_the_projects_version_and_the_chart_follows_it() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((ROOT / "charts" / "acidtables" / "Chart.yaml").read_text())
    assert arg("ACIDTABLES_VERSION") == version == chart["appVersion"]


def test_the_image_builds_on_debian_with_the_one_pinned_pyspark_and_runs_as_185() -> None:
    """pyspark is pinned once, in pyproject.toml, and the image installs the package (so that pin);
    Python and Java come from Debian; the entry point dispatches Spark's driver/executor arguments."""
    assert arg("BASE") == "debian:bookworm-slim" and "FROM ${BASE}" in DOCKERFILE
    pinned = [d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    assert [d for d in pinned if d.startswith("pyspark")] == ["pyspark==4.3.0"]
    assert "pyspark" not in DOCKERFILE.split("pip install", 1)[1].split("\n", 1)[0]  # no second pin
    assert "python3 python3-venv openjdk-17-jre-headless" in DOCKERFILE
    assert "mkdir -p /usr/share/man/man1" in DOCKERFILE  # openjdk's install fails on slim bases without it
    assert re.search(r"^USER 185$", DOCKERFILE, re.M)
    assert DOCKERFILE.rstrip().splitlines()[-1] == 'ENTRYPOINT ["/opt/acidtables/entrypoint.sh"]'
    entrypoint = (ROOT / "spark-images" / "entrypoint.sh").read_text()
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in entrypoint
    for word in ("operator)", "driver)", "executor)"):
        assert word in entrypoint


def test_the_entrypoint_dispatches_its_first_argument(tmp_path: Path) -> None:
    """The entry point run by sh with stand-ins for acidtables, python and java on PATH: each first
    argument reaches the program the official Spark image's entry point would start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("acidtables", "python", "java"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho {name} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SPARK_HOME": "/spark",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.0.0.1:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_APPLICATION_ID": "spark-app",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.2",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_EXECUTOR_MEMORY": "1024m",
        "SPARK_JAVA_OPT_1": "-Dspark.b=2",
        "SPARK_JAVA_OPT_0": "-Dspark.a=1",
    }
    script = str(ROOT / "spark-images" / "entrypoint.sh")

    def run(*args: str) -> str:
        done = subprocess.run(["sh", script, *args], capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run("operator", "--namespace=a") == "acidtables operator --namespace=a"
    assert run("compact", "--table", "t") == "python -m acidtables.jobs compact --table t"
    executor = run("executor").split()
    assert executor[:3] == ["java", "-Dspark.a=1", "-Dspark.b=2"]
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in executor
    assert executor[executor.index("--executor-id") + 1] == "3"
    assert executor[executor.index("--hostname") + 1] == "10.0.0.2"
    assert "-Xmx1024m" in executor
    del env["SPARK_DRIVER_URL"]
    done = subprocess.run(["sh", script, "executor"], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode != 0 and "SPARK_DRIVER_URL" in done.stderr


@pytest.mark.docker
def test_the_image_builds() -> None:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine runs here")
    subprocess.run(
        ["docker", "build", "-f", "spark-images/Dockerfile", "-t", "acidtables-spark:test", "."], cwd=ROOT, check=True
    )
