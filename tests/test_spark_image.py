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


def test_the_image_is_the_official_spark_python_image_of_the_pinned_spark_major_running_as_spark() -> None:
    spark = arg("SPARK_VERSION")
    assert "FROM spark:${SPARK_VERSION}-python3" in DOCKERFILE
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert spark.split(".")[0] == "4" and any(d.startswith("pyspark>=4") for d in pinned)
    assert re.search(r"^USER 185$", DOCKERFILE, re.M) and DOCKERFILE.rstrip().splitlines()[-1].startswith("ENTRYPOINT")
    assert "hadoop-aws-${HADOOP_VERSION}" in DOCKERFILE and "PYSPARK_PYTHON=" in DOCKERFILE
    assert '"pyspark==${SPARK_VERSION}"' in DOCKERFILE  # Python side and the image's jars are one release


@pytest.mark.docker
def test_the_image_builds() -> None:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine runs here")
    subprocess.run(
        ["docker", "build", "-f", "spark-images/Dockerfile", "-t", "acidtables-spark:test", "."], cwd=ROOT, check=True
    )
