"""e2e, on a real cluster: CompactionJobs run as Spark driver pods the operator creates (one that
succeeds, one that loses a conflict to a writer pod's DELETE, a driver whose image never pulls, one
deleted while running), automatic compaction beside an in-flight INSERT INTO, and the operator's pod
deleted in the middle of a job (its Deployment starts another): no duplicate pod, no lost status, no
double commit.

Needs only ACIDTABLES_E2E_KUBECONFIG and ACIDTABLES_E2E_IMAGE; the chart, its bundled etcd and the
warehouse claim (mounted at /warehouse in every pod) are installed as tests/e2e/test_e2e_tables.py says.
The conflict scenario has one timed step a real cluster cannot pause: the writer pod commits its DELETE
the moment the job's transaction shows in etcd (registered after a second), while the job is still
rewriting files with Spark (seconds), so the job's commit meets the DELETE.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.cluster import Release, skip_reason
from tests.helpers.resources import (
    automatic_jobs,
    catalog_name,
    events_for,
    eventually,
    get,
    get_job,
    job_resource,
    table_resource,
)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

#: a driver image no node can pull (the `.invalid` top-level domain never resolves)
NEVER_PULLS = "registry.invalid/acidtables/never-pulls:0"
JOB_SECONDS = 600.0


def small_files(release: Release, name: str, count: int, **spec: Any) -> str:
    """An AcidTable `name` with `count` one-file inserts of 3 rows in partition `a`; its catalog name."""
    release.apply(table_resource(name, **spec))
    release.wait_for_condition("acidtables", name, "Ready")
    table = catalog_name(release.namespace, name)
    written = release.run("insert", "insert", {"table": table, "partition": "a", "rows": 3, "batches": count})
    assert written["versions"] == list(range(1, count + 1))
    return table


def phase(release: Release, name: str) -> str | None:
    found: str | None = get_job(release.cluster, release.namespace, name).get("status", {}).get("phase")
    return found


def _version_and_in_flight(release: Release, name: str) -> tuple[int | None, int | None]:
    status = get(release.cluster, release.namespace, name).get("status", {})
    return status.get("version"), status.get("inFlight")


def test_a_compaction_job_rewrites_the_small_files_and_reports_exactly(release: Release) -> None:
    table = small_files(release, "events", 4)
    before = release.run("read", "read", {"table": table})
    assert (before["files"], before["rows"]) == (4, 12)
    release.apply(job_resource("compact-1"))
    job = release.wait_for_condition("compactionjobs", "compact-1", "Succeeded", timeout_seconds=JOB_SECONDS)
    status = job["status"]
    assert (status["phase"], status["attempts"]) == ("Succeeded", 1)
    assert (status["result"]["filesRemoved"], status["result"]["filesAdded"]) == (4, 1)
    assert status["result"]["committedVersion"] == 5
    after = release.run("read", "read", {"table": table})
    assert (after["version"], after["files"], after["ids"]) == (5, 1, before["ids"])  # rows unchanged
    assert after["history"][0] == "MINOR COMPACT"
    pod = release.cluster.request("GET", f"/api/v1/namespaces/{release.namespace}/pods/compact-1-driver-1")
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert job["metadata"]["uid"] in pod["spec"]["containers"][0]["command"]


def test_a_compaction_job_with_executors_runs_them_as_pods_and_ends_as_without(release: Release) -> None:
    """`executors: 2` (issue 30): the driver creates two executor pods, which reach it over the pod
    network and run its tasks; the job ends as the same job without executors does, and Finished ends
    a wait on it."""
    table = small_files(release, "wide", 4)
    before = release.run("read", "read", {"table": table})
    spark = {"executors": 2, "executorMemory": "512m", "driverMemory": "1g"}
    release.apply(job_resource("wide-1", table="wide", spark=spark))
    job = release.wait_for_condition("compactionjobs", "wide-1", "Finished", timeout_seconds=JOB_SECONDS)
    status = job["status"]
    assert status["phase"] == "Succeeded", status
    assert (status["result"]["filesRemoved"], status["result"]["filesAdded"]) == (4, 1)
    after = release.run("read", "read", {"table": table})
    assert (after["files"], after["ids"]) == (1, before["ids"])
    assert not status.get("executors"), status  # no executor failed or waited


def test_a_compaction_job_that_loses_says_which_commit_won(release: Release) -> None:
    table = small_files(release, "losing", 3)
    # the writer prepares a DELETE of the first insert's file (ids 0-2) and commits it once the job is in flight
    deleter = release.start("deleter", "delete_when_compacting", {"table": table, "condition": "id < 3"})
    eventually(
        lambda: get(release.cluster, release.namespace, "losing").get("status", {}).get("inFlight") == 1,
        "the prepared DELETE in flight",
        release,
        timeout_seconds=300,
    )
    release.apply(job_resource("compact-2", table="losing"))
    winner = release.result(deleter)
    job = release.wait_for_condition("compactionjobs", "compact-2", "Failed", timeout_seconds=JOB_SECONDS)
    status = job["status"]
    assert (status["phase"], status["attempts"]) == ("Conflicted", 1)  # not retried
    conflict = status["result"]["conflict"]
    assert (conflict["winningVersion"], conflict["winningOperation"]) == (winner["version"], "DELETE")
    assert conflict["exception"] == "ConcurrentDeleteDeleteException"
    assert release.run("read", "read", {"table": table})["version"] == winner["version"]  # the job committed nothing


def test_a_driver_whose_image_never_pulls_fails_the_job_instead_of_staying_pending(release: Release) -> None:
    small_files(release, "stuck", 2)
    release.apply(job_resource("stuck", table="stuck", backoffLimit=0, spark={"image": NEVER_PULLS}))
    job = release.wait_for_condition("compactionjobs", "stuck", "Failed", timeout_seconds=JOB_SECONDS)
    assert job["status"]["phase"] == "Failed"
    assert "did not start within 30 s" in job["status"]["message"]

    def failed_event() -> bool:
        events = events_for(release.cluster, release.namespace, "stuck")
        return any(e["reason"] == "Failed" and e["involvedObject"]["kind"] == "CompactionJob" for e in events)

    # kopf posts Events from a queue of its own: the Event may come a moment after the status
    eventually(failed_event, "a Failed Event on the job", release)


def test_a_driver_pod_deleted_while_running_fails_the_attempt(release: Release) -> None:
    small_files(release, "vanish", 2)
    release.apply(job_resource("vanish", table="vanish", backoffLimit=0))
    eventually(lambda: phase(release, "vanish") == "Running", "the job running", release, JOB_SECONDS)
    release.cluster.delete(f"/api/v1/namespaces/{release.namespace}/pods/vanish-driver-1")
    job = release.wait_for_condition("compactionjobs", "vanish", "Failed", timeout_seconds=JOB_SECONDS)
    assert job["status"]["phase"] == "Failed" and "deleted before it finished" in job["status"]["message"]
    assert "result" not in job["status"]  # no outcome was reported, so none is invented


def test_automatic_minor_compaction_after_small_inserts_next_to_an_in_flight_insert(release: Release) -> None:
    compaction = {"auto": True, "minor": {"minSmallFiles": 3}, "major": {"minDeltaFiles": 3, "quietFor": "1h"}}
    release.apply(table_resource("auto", primaryKey=["id"], conflictPolicy="maxcompute", compaction=compaction))
    release.wait_for_condition("acidtables", "auto", "Ready")
    table = catalog_name(release.namespace, "auto")
    # a job of the user's whose driver never starts (retried, so it stays unfinished): automatic
    # compaction waits beside it, never next to it, while the writer sets the scene
    release.apply(job_resource("blocker", table="auto", backoffLimit=6, spark={"image": NEVER_PULLS}))
    # three small inserts into dt=p (over the threshold), then an INSERT INTO held open there (registered
    # in etcd); the writer commits it once the operator's MINOR COMPACT has landed
    writer = release.start(
        "auto-writer",
        "hold_insert",
        {"table": table, "partition": "p", "id": 100, "before_batches": 3, "until_operation": "MINOR COMPACT"},
    )
    # at version 3 the three inserts have committed, so what is in flight is the held one
    eventually(
        lambda: _version_and_in_flight(release, "auto") == (3, 1),
        "the three inserts committed and the held one in flight",
        release,
        timeout_seconds=300,
    )
    assert automatic_jobs(release.cluster, release.namespace) == []
    release.cluster.delete(f"/apis/acidtables.io/v1alpha1/namespaces/{release.namespace}/compactionjobs/blocker")

    def succeeded() -> list[dict[str, Any]]:
        return [
            j
            for j in automatic_jobs(release.cluster, release.namespace)
            if j.get("status", {}).get("phase") == "Succeeded"
        ]

    (job,) = eventually(succeeded, "an automatic job succeeded", release, JOB_SECONDS)
    assert (job["spec"]["type"], job["spec"]["where"]) == ("minor", "dt = 'p'")
    assert job["metadata"]["ownerReferences"][0]["name"] == "auto"
    events = events_for(release.cluster, release.namespace, "auto")
    decision = next(e for e in events if e["reason"] == "AutoCompaction")
    assert "MINOR because 1 running write(s) there" in decision["message"]

    held = release.result(writer)  # MINOR next to INSERT INTO: the writer still commits (seed 000)
    assert "exception" not in held and held["retries"] == 1, held
    after = release.run("read", "read", {"table": table})
    assert after["history"][:2] == ["INSERT INTO", "MINOR COMPACT"]
    assert after["ids"] == [*range(9), 100]


def test_an_operator_pod_deleted_mid_job_is_replaced_and_nothing_is_duplicated_or_lost(release: Release) -> None:
    table = small_files(release, "survive", 3)
    release.apply(job_resource("survive", table="survive"))
    eventually(lambda: phase(release, "survive") == "Running", "the job running", release, JOB_SECONDS)
    (killed,) = [p["metadata"]["name"] for p in release.operator_pods()]
    release.cluster.delete(f"/api/v1/namespaces/{release.namespace}/pods/{killed}", grace_seconds=0)
    replacement = release.wait_for_operator(1)
    assert replacement[0]["metadata"]["name"] != killed  # the Deployment started another
    job = release.wait_for_condition("compactionjobs", "survive", "Succeeded", timeout_seconds=JOB_SECONDS)
    after = release.run("read", "read", {"table": table})
    assert job["status"]["attempts"] == 1 and job["status"]["result"]["committedVersion"] == after["version"]
    selector = "acidtables.io/compaction-job=survive"
    pods = release.cluster.request("GET", f"/api/v1/namespaces/{release.namespace}/pods?labelSelector={selector}")
    assert [p["metadata"]["name"] for p in pods["items"]] == ["survive-driver-1"]  # no second pod
    assert after["history"].count("MINOR COMPACT") == 1  # no double commit
