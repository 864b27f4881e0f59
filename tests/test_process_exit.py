"""Every process the project runs ends with exit code 0 after success (issue 41, item 1).

A process that did all its work and then dies in interpreter finalization (SIGABRT from a native thread
still joinable, exit 134) makes Kubernetes retry a job that succeeded. Closing a catalog ends every
thread and channel it started; the CLI and the job entry points leave through exit_process; and these
tests run such processes many times over and count their exit codes.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.helpers import envtest
from tests.helpers.operator_process import OperatorProcess
from tests.helpers.resources import table_resource
from tests.helpers.tables import staged_parquet
from tests.test_operator_leader import leader

from acidtables import Catalog
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.coordination.waiting import wait_for

#: a plain script using the library: commits, time travel over every version with the rows read by
#: pyarrow, fsck, then the end of the `with` block (or, with --leave-open, no close at all)
LIBRARY_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from acidtables import Catalog

    root, table_name = sys.argv[1], sys.argv[2]
    catalog = Catalog.local(root)
    table = catalog.table(table_name)
    txn = table.begin("insert_into")
    path = Path(txn.staging_dir) / "part.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [1], "p": ["a"]}), path)
    txn.add_files([{"path": str(path), "partition": {"p": "a"}, "rows": 1, "size_bytes": path.stat().st_size}])
    txn.commit()
    for version in range(table.snapshot().version + 1):
        files = [f"{table.location}/{p}" for p in table.snapshot(version=version).files_by_path]
        if files:
            ds.dataset(files, format="parquet").to_table()
    table.fsck()
    if "--leave-open" not in sys.argv:
        catalog.close()
    """
)

#: owns the embedded etcd the library scripts reuse, with their four tables, until its stdin closes
HOLDER_SCRIPT = textwrap.dedent(
    """
    import sys
    from acidtables import Catalog

    with Catalog.local(sys.argv[1]) as catalog:
        for i in range(4):
            catalog.create_table(f"s.t{i}", schema="id BIGINT, p STRING", partition_by=["p"])
        print("up", flush=True)
        sys.stdin.read()
    """
)

THREADS_SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    from acidtables import Catalog
    from acidtables.core.settings import CommitSettings, EtcdSettings, Settings

    def native_threads():
        names = []
        for tid in os.listdir("/proc/self/task"):
            try:
                names.append(open(f"/proc/self/task/{tid}/comm").read().strip())
            except OSError:
                pass
        return names

    settings = Settings(
        etcd=EtcdSettings((sys.argv[1],), prefix=sys.argv[2]),
        warehouse=sys.argv[3],
        commit=CommitSettings(register_after_seconds=0.01),
    )
    catalog = Catalog(settings)
    table = catalog.create_table("s.t", schema="id BIGINT")
    earlier, later = table.begin("insert_into"), table.begin("insert_into")
    deadline = time.monotonic() + 30
    while not catalog.services.coordinator.list_inflight(table.table_id) and time.monotonic() < deadline:
        time.sleep(0.01)
    earlier.commit(); later.commit()  # a retry: an event for the recorder thread
    print("while open:", sorted({t.name for t in threading.enumerate()}), flush=True)
    catalog.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(n.startswith(("event_engine", "grpc")) for n in native_threads()):
        time.sleep(0.05)
    print("python threads:", sorted(t.name for t in threading.enumerate() if t is not threading.main_thread()))
    print("grpc threads:", sorted(n for n in native_threads() if n.startswith(("event_engine", "grpc"))))
    """
)


def _codes(commands: list[list[str]], env: dict[str, str]) -> tuple[Counter[int], list[str]]:
    """Run `commands` two at a time: the count of each exit code, and the stderr of those that failed."""

    def one(command: list[str]) -> tuple[int, str]:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
        return done.returncode, done.stderr[-1500:]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, commands))
    return Counter(code for code, _ in results), [err for code, err in results if code != 0]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ACIDTABLES_")}


def _job_env(etcd_server: EmbeddedEtcd, etcd_prefix: str, catalog: Catalog) -> dict[str, str]:
    """What the operator gives a job pod: the catalog's etcd and warehouse, and nothing else of ours."""
    return {
        **_env(),
        "ACIDTABLES_ETCD_ENDPOINTS": etcd_server.endpoint,
        "ACIDTABLES_ETCD_PREFIX": etcd_prefix,
        "ACIDTABLES_WAREHOUSE": catalog.settings.warehouse,
    }


def _compact_command(table: str, job_id: str, log: Path) -> list[str]:
    """The job pod's entry point, `python -m acidtables.jobs compact`, for a minor compaction in local mode."""
    return [
        *(sys.executable, "-m", "acidtables.jobs", "compact", "--table", table, "--type", "minor"),
        *("--job-id", job_id, "--termination-log", str(log)),
    ]


@contextmanager
def _holding_etcd(root: Path) -> Iterator[None]:
    """A process that starts the embedded etcd under `root` with four tables and owns it; the processes
    under test reuse it, as reader processes do. It too must end with 0."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "up"
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert holder.returncode == 0


def test_closing_a_catalog_ends_every_thread_and_grpc_channel_it_started(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", THREADS_SCRIPT, etcd_server.endpoint, etcd_prefix, str(tmp_path / "warehouse")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    # the threads a catalog starts were there to be stopped: the lease, the registrar, the event recorder
    assert all(name in lines["while open"] for name in ("acidtables-lease", "acidtables-registrar"))
    assert lines["python threads"] == "[]"
    assert lines["grpc threads"] == "[]"


@pytest.mark.slow  # two hundred processes
@pytest.mark.parametrize("closing", ["closed", "left open"])
def test_a_library_script_exits_0_every_time(tmp_path: Path, closing: str) -> None:
    root = tmp_path / "home"
    runs = 100
    extra = ["--leave-open"] if closing == "left open" else []
    commands = [[sys.executable, "-c", LIBRARY_SCRIPT, str(root), f"s.t{i % 4}", *extra] for i in range(runs)]
    with _holding_etcd(root):
        codes, failures = _codes(commands, _env())
    assert codes == Counter({0: runs}), failures[:3]


@pytest.mark.slow  # a hundred processes
def test_the_cli_exits_0_every_time(tmp_path: Path) -> None:
    root = tmp_path / "home"
    runs = 100
    verbs = (["tables"], ["describe", "s.t0"], ["history", "s.t1"], ["fsck", "s.t2"], ["etcd-usage"])
    commands = [
        [sys.executable, "-m", "acidtables.cli", f"--local={root}", *verbs[i % len(verbs)]] for i in range(runs)
    ]
    with _holding_etcd(root):
        codes, failures = _codes(commands, _env())
    assert codes == Counter({0: runs}), failures[:3]


@pytest.mark.slow  # three Spark jobs, a JVM each
def test_a_compaction_job_exits_0_every_time(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path, catalog: Catalog
) -> None:
    """The job pod's entry point, `python -m acidtables.jobs compact`, in Spark's local mode: each run
    ends with 0 after it succeeded, its outcome written for the operator."""
    table = catalog.create_table("s.small", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for _ in range(3):
        with table.begin("insert_into") as tx:
            tx.add_files([staged_parquet(tx, {"dt": "a"}, rows=2)])
            tx.commit()
    env = _job_env(etcd_server, etcd_prefix, catalog)
    outcomes = []
    for run in range(3):
        log = tmp_path / f"outcome-{run}.json"
        done = subprocess.run(
            _compact_command("s.small", f"job-{run}", log),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outcomes.append(json.loads(log.read_text()))
    assert [outcome["phase"] for outcome in outcomes] == ["Succeeded"] * 3
    assert outcomes[0]["filesRemoved"] == 3 and table.snapshot().row_count == 6  # the first one compacted


@pytest.mark.slow  # a Spark job
def test_a_compaction_job_stopped_by_sigterm_ends_at_once_and_says_what_it_committed(
    etcd_server: EmbeddedEtcd, etcd_prefix: str, tmp_path: Path, catalog: Catalog
) -> None:
    """Deleting a CompactionJob (or draining its node) sends the job's PID 1 SIGTERM mid-write. Without a
    handler it ran on for the grace period and died without a word; now it stops Spark, aborts the group
    it was staging and writes an outcome naming the signal and the versions it committed before it."""
    table = catalog.create_table("s.parted", schema="id BIGINT, dt STRING", partition_by=["dt"])
    for day in "abcdef":  # six groups, each its own Spark job and commit
        for _ in range(2):
            with table.begin("insert_into") as tx:
                tx.add_files([staged_parquet(tx, {"dt": day}, rows=2)])
                tx.commit()
    before = table.snapshot().version
    data = Path(table.location) / "data"
    written = {path for path in data.rglob("*.parquet")}
    log = tmp_path / "outcome.json"
    env = _job_env(etcd_server, etcd_prefix, catalog)
    job = subprocess.Popen(
        _compact_command("s.parted", "stopped", log),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        # the first group's rewrite has begun: Spark is writing into a staging directory
        wait_for(lambda: bool(set(data.rglob("*.parquet")) - written) or job.poll() is not None, 300)
        assert job.poll() is None, job.communicate()[0][-4000:]
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    # -15 was the old end (the default disposition; as a container's PID 1, the signal was dropped)
    assert job.returncode == 1, output[-4000:]
    outcome = json.loads(log.read_text())
    assert outcome["phase"] == "Failed" and "stopped by SIGTERM" in outcome["message"], outcome
    committed = [entry.version for entry in table.history() if entry.version > before]
    assert sorted(outcome["committedVersions"]) == sorted(committed) and len(committed) < 6, (outcome, committed)
    snapshot = table.snapshot()
    assert snapshot.row_count == 24 and table.fsck().ok
    # nothing of the interrupted group became visible; what Spark wrote for it is the cleanup's to remove
    table.cleanup(grace_seconds=0)
    live = {Path(table.location) / path for path in snapshot.files_by_path}
    assert set(data.rglob("*.parquet")) - written <= live


def _leading_or_ended(catalog: Catalog, process: subprocess.Popen[bytes]) -> bool:
    return leader(catalog) is not None or process.poll() is not None


@pytest.mark.slow  # twenty operator processes
def test_the_operator_exits_0_on_sigterm_every_time(
    kube_api: envtest.KubeAPI, kube_namespace: str, operator_env: dict[str, str], catalog: Catalog, tmp_path: Path
) -> None:
    """`acidtables operator` against a real API server (skips without KUBEBUILDER_ASSETS): started, leading,
    with a table reconciled, then stopped as Kubernetes stops a pod; every run ends with 0."""
    envtest.apply(kube_api, kube_namespace, table_resource("exits"))
    codes: Counter[int] = Counter()
    for run in range(20):
        operator = OperatorProcess(tmp_path / f"operator-{run}.log", operator_env, [kube_namespace])
        try:
            wait_for(functools.partial(_leading_or_ended, catalog, operator.process), 60)
            envtest.kubectl(
                kube_api, "wait", "--for=condition=Ready", "acidtable/exits", "-n", kube_namespace, "--timeout=60s"
            )
        finally:
            code = operator.stop()
        codes[code] += 1
        assert code == 0, operator.log()[-4000:]
        wait_for(lambda: leader(catalog) is None, 60)  # the lease given up: the next one leads at once
    assert codes == Counter({0: 20})
