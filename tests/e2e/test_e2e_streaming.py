"""e2e, on a real cluster: examples/streaming-job.yaml as written, a stream landing in a table every few
seconds while the operator compacts the table by itself, its pod deleted mid-stream and started again by
its Deployment: every row lands exactly once, no micro-batch fails because compaction ran, and the
operator's metrics count the stream's commits like any other.

The example is applied as the docs say (`kubectl apply -f`, the table and the stream together); only
what ties it to the README's install changes: the namespace's own release (the operator container's etcd
and warehouse settings, and its claim), the image under test, and the table's catalog name, which
follows the namespace. Needs ACIDTABLES_E2E_KUBECONFIG and ACIDTABLES_E2E_IMAGE, as the rest of the tier.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from tests.helpers.cluster import SHARED_ENV_PREFIXES, WAREHOUSE, Release, skip_reason
from tests.helpers.resources import automatic_jobs, catalog_name, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "streaming-job.yaml"
#: the example's table, and its name in the catalog of the README's `sales` namespace
TABLE, EXAMPLE_CATALOG_NAME = "clicks", "sales.clicks"
DEPLOYMENT = "clicks-stream"
#: a JVM start, the table's wait and a few five-second micro-batches, on a busy node
STREAM_SECONDS = 600.0
#: the line the example prints per micro-batch
BATCH_LINE = re.compile(r"^batch (\d+): (\d+) rows$", re.MULTILINE)


def example(release: Release) -> tuple[dict[str, Any], dict[str, Any]]:
    """The example's AcidTable and Deployment, pointed at this release."""
    table, deployment = yaml.safe_load_all(EXAMPLE.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env, volumes, mounts = release.shared_settings()
    own = [e for e in container["env"] if not e["name"].startswith(SHARED_ENV_PREFIXES)]
    container["env"] = [*env, *own]
    container["image"] = release.image
    pod["volumes"], container["volumeMounts"] = volumes, mounts
    script = container["args"][0]
    assert script.count(f'"{EXAMPLE_CATALOG_NAME}"') == 2, "the example names its table twice: wait, then stream"
    container["args"] = [script.replace(EXAMPLE_CATALOG_NAME, catalog_name(release.namespace, TABLE))]
    return table, deployment


def stream_pods(release: Release) -> list[dict[str, Any]]:
    path = f"/api/v1/namespaces/{release.namespace}/pods?labelSelector=app={DEPLOYMENT}"
    items = release.cluster.request("GET", path)
    return [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")]


def running_pod(release: Release, other_than: str | None = None) -> str:
    def found() -> str | None:
        for pod in stream_pods(release):
            name: str = pod["metadata"]["name"]
            if name != other_than and pod.get("status", {}).get("phase") == "Running":
                return name
        return None

    name: str = eventually(found, f"a running {DEPLOYMENT} pod", release, STREAM_SECONDS)
    return name


def batches(release: Release, pod: str) -> list[int]:
    """The micro-batch ids a stream pod has logged, in order."""
    return [int(m.group(1)) for m in BATCH_LINE.finditer(release.pod_log(pod, tail_lines=10_000))]


def logged_batches(release: Release, pod: str, at_least: int) -> list[int]:
    found: list[int] = eventually(
        lambda: (seen := batches(release, pod)) and len(seen) >= at_least and seen,
        f"{at_least} micro-batches logged by {pod}",
        release,
        STREAM_SECONDS,
    )
    return found


def test_the_streaming_example_lands_every_row_once_beside_automatic_compaction(release: Release) -> None:
    table, deployment = example(release)
    release.apply(table)
    release.apply(deployment)  # at once, as one `kubectl apply -f`: the stream waits for its table
    release.wait_for_condition("acidtables", TABLE, "Ready")
    first = running_pod(release)
    logged_batches(release, first, 3)

    def compacted() -> list[dict[str, Any]]:
        return [
            j
            for j in automatic_jobs(release.cluster, release.namespace)
            if j.get("status", {}).get("phase") == "Succeeded"
        ]

    jobs = eventually(compacted, "an automatic compaction of the stream's table succeeded", release, STREAM_SECONDS)
    assert jobs[0]["spec"]["type"] == "minor"

    # the pod goes (a node drained, a rollout): its Deployment starts another on the same checkpoint
    before = batches(release, first)
    release.cluster.delete(f"/api/v1/namespaces/{release.namespace}/pods/{first}")
    second = running_pod(release, other_than=first)
    after = logged_batches(release, second, 3)
    # the query goes on from its checkpoint: its batch ids continue, where a new query would start at 0;
    # each pod prints a line per micro-batch, none skipped
    assert after[0] >= before[-1] > 0, (before, after)
    for logged in (before, after):
        assert logged == list(range(logged[0], logged[-1] + 1)), logged

    release.cluster.request(
        "PATCH", f"/apis/apps/v1/namespaces/{release.namespace}/deployments/{DEPLOYMENT}", {"spec": {"replicas": 0}}
    )
    eventually(lambda: not stream_pods(release), "the stream stopped", release, STREAM_SECONDS)
    checkpoint = next(e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
                      if e["name"] == "CHECKPOINT")  # fmt: skip
    table_name = catalog_name(release.namespace, TABLE)
    # the reader pod mounts the same claim: the checkpoint by its place in the warehouse
    in_warehouse = str(PurePosixPath(checkpoint).relative_to(WAREHOUSE))
    found = release.run("account", "account", {"table": table_name, "checkpoint": in_warehouse})
    # the rate source numbers its rows 0, 1, 2, ... and replays a batch cut short: every id once, none missing
    assert found["min_id"] == 0 and found["rows"] == found["distinct_ids"] == found["max_id"] + 1, found
    assert found["operations"].get("MINOR COMPACT", 0) >= 1, found
    # the query's own record in the table: its last committed micro-batch, at least the last one logged
    assert found["stream_batch"] >= after[-1], (found, after)

    labels = (("namespace", release.namespace.replace("-", "_")), ("table", TABLE))
    inserts = tuple(sorted((*labels, ("operation", "insert_into"))))
    samples = release.metrics()
    commits = samples.get(("acidtables_cluster_commits_total", inserts))
    assert commits is not None and commits >= found["operations"]["INSERT INTO"], (commits, found)
    assert samples.get(("acidtables_cluster_exhausted_total", inserts)) == 0, samples
