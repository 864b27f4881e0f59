"""The core benchmark: commits/s against the raw etcd floor, contention, and snapshot load time.

`python -m bench` (or `python -m bench core [--quick]`) calls `run()`. One embedded etcd serves the
whole run, so every ratio compares figures measured against the same server minutes apart:

- serial: the raw get + compare-and-swap loop on one key (the floor: the least a commit against etcd
  can cost with the client core uses) and serial `begin/add_files/commit` of one small file, in
  interleaved rounds so that noise from other work on the machine hits both alike; also the library's
  own etcd requests sent bare (the protocol's floor), which splits the gap into protocol and Python.
  Goal: library commits/s >= 0.5 x raw.
- contention: 4 and 16 processes doing blind appends to one table (and, as their baseline, the raw
  loop on one key with the same number of processes): throughput, retries, exhausted commits.
- snapshot: cold load of the latest snapshot (a new Catalog each time, so no in-process cache) of
  tables with 100, 10,000 and 100,000 versions built through the library.
  Goal: at 100,000 versions within 3 x the time at 100.
"""

from __future__ import annotations

import json
import multiprocessing
import queue
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from acidtables import Catalog, Table
from acidtables.core.commit.file_checks import prove_new_file
from acidtables.core.coordination.embedded import EmbeddedEtcd
from acidtables.core.log.checkpoints import read_snapshot
from acidtables.core.log.snapshot import Snapshot
from acidtables.core.settings import EtcdSettings, Settings
from acidtables.core.storage.storage import Storage

from . import workers
from .report import Figure, Goal, Report, machine_info, now_iso
from .reproof import bench_reproof

BENCHMARKS = ("serial", "contention", "snapshot", "archive", "reproof")
SERIAL_GOAL = Goal("library >= 0.6 x raw", 0.6, at_least=True)
LOAD_GOAL = Goal("largest <= 3 x smallest", 3.0, at_least=False)
MAINTENANCE_GOAL = Goal("with maintenance >= 0.9 x without", 0.9, at_least=True)
#: issue 18: a busy table's steady etcd footprint
ETCD_BYTES_BOUND = 150_000
HISTORY_LINEAR_GOAL = Goal("time per version <= 1.5 x the smallest table's", 1.5, at_least=False)
#: a child process that has not reported after this long is considered stuck
CHILD_TIMEOUT_SECONDS = 1800.0


@dataclass(frozen=True)
class Sizes:
    serial_rounds: int
    raw_operations: int
    library_commits: int
    #: (writer processes, commits each)
    contention: tuple[tuple[int, int], ...]
    history_versions: tuple[int, ...]
    load_repeats: int
    #: commits of the archive benchmark's footprint table, and per throughput round
    footprint_commits: int = 10_000
    maintenance_round_commits: int = 500


FULL = Sizes(
    serial_rounds=5,
    raw_operations=2000,
    library_commits=1000,
    contention=((4, 500), (16, 125)),
    history_versions=(100, 10_000, 100_000),
    load_repeats=21,
)
QUICK = Sizes(
    serial_rounds=3,
    raw_operations=500,
    library_commits=300,
    contention=((4, 100), (16, 25)),
    history_versions=(100, 1_000, 10_000),
    load_repeats=7,
    footprint_commits=2_000,
    maintenance_round_commits=200,
)


@dataclass(frozen=True)
class Env:
    server: EmbeddedEtcd
    settings: Settings
    root: Path


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the results table."""
    print(f"[bench {datetime.now(UTC).strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def bench_env() -> Iterator[Env]:
    """An embedded etcd and a warehouse in a temporary directory; etcd is stopped whatever happens."""
    with tempfile.TemporaryDirectory(prefix="acidtables-bench-") as tmp:
        root = Path(tmp)
        server = EmbeddedEtcd(root / "etcd")
        server.start()
        try:
            settings = Settings(
                etcd=EtcdSettings((server.endpoint,), prefix=f"/bench/{uuid.uuid4().hex}"),
                warehouse=str(root / "warehouse"),
            )
            log(f"etcd {server.endpoint} (pid {server.pid}), key prefix {settings.etcd.prefix}")
            yield Env(server, settings, root)
        finally:
            server.stop()


# --- serial: the raw floor and the library ----------------------------------------------------------


def etcd_counters(endpoint: str) -> dict[str, float]:
    """Round trips (gRPC calls etcd answered) and raft proposals so far, from etcd's own /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    calls = proposals = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "grpc_server_handled_total" and sample.labels.get("grpc_type") == "unary":
                calls += sample.value
            elif sample.name == "etcd_server_proposals_committed_total":
                proposals += sample.value
    return {"round_trips": calls, "proposals": proposals}


def _per_commit(before: dict[str, float], after: dict[str, float], commits: int) -> dict[str, float]:
    return {name: (after[name] - before[name]) / commits for name in before}


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def bench_serial(env: Env, sizes: Sizes, report: Report) -> float:
    """Raw get+CAS vs serial library appends, interleaved rounds; returns the library's median rate."""
    catalog = Catalog(env.settings)
    try:
        client = catalog.services.coordinator.client
        key = f"{env.settings.etcd.prefix}/raw-cas"
        client.put(key, b"0")
        # warm-up: connections, the process lease, imports and caches on both paths
        workers.raw_cas_loop(client, key, 200)
        warm = catalog.create_table("bench.serial_warmup", schema="id BIGINT, dt STRING", partition_by=["dt"])
        for _ in range(100):
            workers.append_one(warm)
        workers.raw_protocol_loop(client, f"{key}-protocol-warmup", 100)
        raw_rates: list[float] = []
        protocol_rates: list[float] = []
        library_rates: list[float] = []
        #: etcd round trips and raft proposals per library commit (etcd's /metrics; includes the
        #: counters' own reads, which are not gRPC calls)
        per_commit: list[dict[str, float]] = []
        for round_ in range(sizes.serial_rounds):
            t0 = time.perf_counter()
            retries = workers.raw_cas_loop(client, key, sizes.raw_operations)
            raw_rates.append(_rate(sizes.raw_operations, time.perf_counter() - t0))
            if any(retries):
                raise RuntimeError("the serial raw loop lost a compare-and-swap: something else writes its key")
            t0 = time.perf_counter()
            workers.raw_protocol_loop(client, f"{key}-protocol-{round_}", sizes.library_commits)
            protocol_rates.append(_rate(sizes.library_commits, time.perf_counter() - t0))
            # a fresh table per round, so every round starts from the same active file count (zero)
            table = catalog.create_table(f"bench.serial_{round_}", schema="id BIGINT, dt STRING", partition_by=["dt"])
            workers.append_one(table)  # the process learns the new table's head
            before = etcd_counters(env.server.endpoint)
            t0 = time.perf_counter()
            for _ in range(sizes.library_commits):
                workers.append_one(table)
            library_rates.append(_rate(sizes.library_commits, time.perf_counter() - t0))
            per_commit.append(_per_commit(before, etcd_counters(env.server.endpoint), sizes.library_commits))
            log(
                f"serial round {round_ + 1}/{sizes.serial_rounds}: raw {raw_rates[-1]:.0f} ops/s, "
                f"protocol floor {protocol_rates[-1]:.0f} commits/s, "
                f"library {library_rates[-1]:.0f} commits/s ({library_rates[-1] / raw_rates[-1]:.2f}x raw)"
            )
        proof_seconds = _proof_seconds(catalog, sizes.library_commits)
    finally:
        catalog.close()
    ratios = [lib / raw for lib, raw in zip(library_rates, raw_rates, strict=True)]
    raw_median = statistics.median(raw_rates)
    library_median = statistics.median(library_rates)
    report.add(Figure("serial", "raw get+CAS, one key", raw_median, "ops/s", note="median of rounds"))
    protocol_ratios = [p / raw for p, raw in zip(protocol_rates, raw_rates, strict=True)]
    report.add(
        Figure(
            "serial",
            "raw requests of the library's protocol",
            statistics.median(protocol_rates),
            "commits/s",
            baseline="raw",
            ratio=statistics.median(protocol_ratios),
            note="the commit CAS alone (4 puts, 1 delete), from a head the writer knows",
        )
    )
    floor_ratios = [lib / p for lib, p in zip(library_rates, protocol_rates, strict=True)]
    report.add(
        Figure(
            "serial",
            "library begin/add_files/commit",
            library_median,
            "commits/s",
            baseline="raw",
            ratio=statistics.median(ratios),
            goal=SERIAL_GOAL,
            note=f"ratio: median of per-round ratios (min {min(ratios):.2f}, max {max(ratios):.2f})",
        )
    )
    report.add(
        Figure(
            "serial",
            "library vs its protocol's raw requests",
            library_median,
            "commits/s",
            baseline="protocol",
            ratio=statistics.median(floor_ratios),
            note="what the library's own Python costs on top of the etcd requests it must send",
        )
    )
    commit_seconds = 1 / library_median if library_median else 0.0
    report.add(
        Figure(
            "serial",
            "commit proof of one staged file (stat + Parquet footer)",
            proof_seconds * 1e6,
            "us",
            note=f"{proof_seconds / commit_seconds:.1%} of a serial commit; included in the library rate above"
            if commit_seconds
            else "",
        )
    )
    report.details["serial"] = {
        "rounds": sizes.serial_rounds,
        "raw_operations_per_round": sizes.raw_operations,
        "library_commits_per_round": sizes.library_commits,
        "raw_ops_per_second": raw_rates,
        "protocol_commits_per_second": protocol_rates,
        "library_commits_per_second": library_rates,
        "ratios": ratios,
        "protocol_ratios": protocol_ratios,
        "library_to_protocol_ratios": floor_ratios,
        "etcd_per_library_commit": per_commit,
    }
    for name, unit in (("round_trips", "etcd round trips per commit"), ("proposals", "raft proposals per commit")):
        report.add(
            Figure(
                "serial",
                f"library {unit}",
                statistics.median(c[name] for c in per_commit),
                "",
                note="etcd's /metrics around each round; raw get+CAS: 2 round trips, 1 proposal",
            )
        )
    return library_median


def _proof_seconds(catalog: Catalog, files: int) -> float:
    """Mean time add_files spends proving one new file (exists, size, Parquet row count and schema,
    partition directories), read cold through a fresh Storage as a commit of a file nobody described first does."""
    table = catalog.create_table("bench.serial_proof", schema="id BIGINT, dt STRING", partition_by=["dt"])
    txn = table.begin("insert_into")
    staged = [workers.small_file(txn, "a", name=f"part-{i:05d}.parquet") for i in range(files)]
    storage = Storage(table.location)
    relative = [replace(f, path=storage.relative(f.path)) for f in staged]
    meta = txn.target_metadata  # what add_files proves against (read once, as a transaction holds it)
    t0 = time.perf_counter()
    for f in relative:
        prove_new_file(storage, f, txn.txn_id, meta, "add_files")
    seconds = (time.perf_counter() - t0) / files
    txn.abort()
    return seconds


# --- contention: N writer processes ------------------------------------------------------------------


def _run_children(target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Start one spawned process per argument tuple (each gets the shared barrier and result queue
    appended), wait for every result, and never leave a child behind."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    results = ctx.Queue()
    children = [ctx.Process(target=target, args=(*a, barrier, results), daemon=True) for a in args]
    for child in children:
        child.start()
    collected: list[dict[str, Any]] = []
    deadline = time.monotonic() + CHILD_TIMEOUT_SECONDS
    try:
        while len(collected) < len(children):
            try:
                collected.append(results.get(timeout=1.0))
            except queue.Empty:
                if not any(c.is_alive() for c in children):
                    raise RuntimeError(
                        f"{len(children) - len(collected)} benchmark processes died without reporting"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"benchmark processes did not finish within {CHILD_TIMEOUT_SECONDS:g} s"
                    ) from None
    finally:
        for child in children:
            child.join(timeout=30)
            if child.is_alive():
                child.terminate()
                child.join()
    failures = [r["error"] for r in collected if not r.get("ok")]
    if failures:
        raise RuntimeError(f"benchmark processes failed: {'; '.join(failures)}")
    return collected


def _combine(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    commits = sum(r["commits"] for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies_seconds"])
    return {
        "commits": commits,
        "seconds": seconds,
        "per_second": _rate(commits, seconds),
        "retries_mean": sum(r["retries_total"] for r in results) / commits if commits else 0.0,
        "retries_max": max(r["retries_max"] for r in results),
        "exhausted": sum(r.get("exhausted", 0) for r in results),
        "latency_p50_seconds": statistics.median(latencies) if latencies else 0.0,
        "latency_p99_seconds": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0,
        "latency_max_seconds": latencies[-1] if latencies else 0.0,
        "per_writer": [{k: v for k, v in r.items() if k != "latencies_seconds"} for r in results],
    }


def bench_contention(env: Env, sizes: Sizes, report: Report, serial_library_rate: float | None) -> None:
    details: dict[str, Any] = {}
    catalog = Catalog(env.settings)
    try:
        for writers, each in sizes.contention:
            key = f"{env.settings.etcd.prefix}/raw-contention-{writers}"
            catalog.services.coordinator.client.put(key, b"0")
            log(f"contention: {writers} raw writers x {each} get+CAS on one key")
            raw = _combine(_run_children(workers.contending_raw_writer, [(env.settings, key, each)] * writers))
            name = f"bench.contention_{writers}"
            catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
            log(f"contention: {writers} library writers x {each} blind appends to {name}")
            library = _combine(
                _run_children(
                    workers.contending_library_writer, [(env.settings, name, each, w) for w in range(writers)]
                )
            )
            details[str(writers)] = {"commits_each": each, "raw": raw, "library": library}
            bench = f"contention x{writers}"
            report.add(
                Figure(
                    bench,
                    "raw get+CAS, one key",
                    raw["per_second"],
                    "ops/s",
                    note=f"retries mean {raw['retries_mean']:.2f}, max {raw['retries_max']}",
                )
            )
            report.add(
                Figure(
                    bench,
                    "library blind appends",
                    library["per_second"],
                    "commits/s",
                    baseline=f"raw x{writers}",
                    ratio=library["per_second"] / raw["per_second"] if raw["per_second"] else None,
                    note=f"{_ratio_text(library['per_second'], serial_library_rate)} the serial library rate",
                )
            )
            report.add(Figure(bench, "library retries per commit, mean", library["retries_mean"], ""))
            report.add(Figure(bench, "library retries per commit, max", library["retries_max"], ""))
            report.add(Figure(bench, "library CommitRetriesExhausted", library["exhausted"], ""))
            report.add(Figure(bench, "library commit latency, p50", library["latency_p50_seconds"], "s"))
            report.add(Figure(bench, "library commit latency, p99", library["latency_p99_seconds"], "s"))
            report.add(Figure(bench, "library commit latency, max", library["latency_max_seconds"], "s"))
            log(
                f"contention x{writers}: raw {raw['per_second']:.0f} ops/s; library {library['per_second']:.0f} "
                f"commits/s, retries mean {library['retries_mean']:.2f} max {library['retries_max']}, "
                f"exhausted {library['exhausted']}"
            )
    finally:
        catalog.close()
    report.details["contention"] = details


def _ratio_text(value: float, baseline: float | None) -> str:
    return "n/a x" if not baseline else f"{value / baseline:.2f}x"


# --- snapshot load time ------------------------------------------------------------------------------


def _build_groups(versions: Sequence[int]) -> list[list[tuple[str, int]]]:
    """Split the history tables over two builder processes (two cores) with balanced commit counts."""
    groups: list[list[tuple[str, int]]] = [[], []]
    loads = [0, 0]
    for n in sorted(versions, reverse=True):
        i = loads.index(min(loads))
        groups[i].append((f"bench.history_{n}", n))
        loads[i] += n
    return [g for g in groups if g]


def _median_seconds(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else 0.0


def _cold_load(settings: Settings, name: str, version: int | None) -> tuple[float, float]:
    """One `Table.snapshot()` with a new Catalog (empty snapshot cache): (snapshot() seconds, seconds
    including the connection and the catalog lookup)."""
    t0 = time.perf_counter()
    catalog = Catalog(settings)
    try:
        table = catalog.table(name)  # connects and reads the catalog entry
        t1 = time.perf_counter()
        snapshot = table.snapshot(version)
        t2 = time.perf_counter()
    finally:
        catalog.close()
    if version is not None and snapshot.version != version:
        raise RuntimeError(f"{name}: asked for version {version}, loaded {snapshot.version}")
    return t2 - t1, t2 - t0


def _read_checkpoint(storage: Storage, path: str) -> Snapshot:
    return read_snapshot(storage, json.loads(storage.read(path))["snapshot"])


def _version_at_now(table: Table) -> int:
    return table.version_at(time.time())


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _measure_reads(settings: Settings, versions: Sequence[int], repeats: int) -> dict[int, dict[str, list[float]]]:
    """Every read, `repeats` times, round-robin over the tables, so that a burst of load from other work
    on the machine lands on all sizes alike instead of on whichever table was being measured."""
    samples: dict[int, dict[str, list[float]]] = {n: {} for n in versions}

    def add(n: int, key: str, seconds: float) -> None:
        samples[n].setdefault(key, []).append(seconds)

    catalog = Catalog(settings)
    try:
        tables = {n: catalog.table(f"bench.history_{n}") for n in versions}
        coordinator = catalog.services.coordinator
        for _ in range(repeats):
            for n in versions:
                name = f"bench.history_{n}"
                head, head_with_connect = _cold_load(settings, name, None)
                add(n, "at_head", head)
                add(n, "at_head_with_connect", head_with_connect)
                add(n, "at_head_minus_1", _cold_load(settings, name, n - 1)[0])
                # the etcd requests a cold load makes, one by one (the checkpoint file read is the rest)
                table_id = tables[n].table_id
                add(n, "head_read", _timed(partial(coordinator.read_head, table_id)))
                add(n, "checkpoint_lookup", _timed(partial(coordinator.checkpoint_at_or_before, table_id, n)))
                log_reader = catalog.services.log(table_id, tables[n].location)
                add(n, "log_read_99", _timed(partial(log_reader.read, n - 100, n - 1)))
                found = coordinator.checkpoint_at_or_before(table_id, n)
                if found is not None:
                    storage = catalog.services.storage(tables[n].location)
                    add(n, "checkpoint_read", _timed(partial(_read_checkpoint, storage, found[1])))
        # Separately, after: on a long log these make etcd read and sort every key of an index, and
        # the garbage that leaves in etcd must not slow the loads above. Time travel goes to now and
        # to the commit time of version n/2.
        middle = {n: tables[n].commits(n // 2, n // 2)[0].committed_at / 1_000_000 for n in versions}
        for n in versions:  # the whole history once per table (issue 17: 100,000 versions return)
            add(n, "history_all", _timed(tables[n].history))
            usage = coordinator.table_usage(tables[n].table_id)
            add(n, "etcd_keys", usage[0])
            add(n, "etcd_bytes", usage[1])
        for _ in range(repeats):
            for n in versions:
                table = tables[n]
                add(n, "history_limit_10", _timed(partial(table.history, limit=10)))
                add(n, "version_at_now", _timed(partial(_version_at_now, table)))
                add(n, "version_at_middle", _timed(partial(table.version_at, middle[n])))
    finally:
        catalog.close()
    return samples


def build_rate_figure(build: dict[str, Any]) -> Figure | None:
    """Whether commits slow down as the log grows: the median rate of the 1,000-commit blocks in the
    last fifth of the build against those in the second fifth. By the second fifth the other builder
    (a tenth of the commits) has finished, so both ran alone; medians keep a burst of load from other
    work on the machine from deciding the figure."""
    blocks = build["block_seconds"]
    if len(blocks) < 5:
        return None
    size = build["block_commits"]
    fifth = len(blocks) // 5
    early = statistics.median(_rate(size, s) for s in blocks[fifth : 2 * fifth])
    late = statistics.median(_rate(size, s) for s in blocks[4 * fifth :])
    total = len(blocks) * size
    return Figure(
        "snapshot",
        f"history build rate, commits {4 * fifth * size:,}-{total:,}",
        late,
        "commits/s",
        baseline=f"commits {fifth * size:,}-{2 * fifth * size:,}",
        ratio=late / early if early else None,
        note=f"median of {size:,}-commit blocks; whole build {build['build_commits_per_second']:.0f} commits/s",
    )


def bench_snapshot(env: Env, sizes: Sizes, report: Report) -> None:
    versions = sorted(sizes.history_versions)
    groups = _build_groups(versions)
    log(
        f"snapshot: building histories {', '.join(f'{n:,}' for n in versions)} versions in {len(groups)} "
        "processes (this is the long part)"
    )
    t0 = time.monotonic()
    with ProcessPoolExecutor(max_workers=len(groups), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(workers.build_histories, env.settings, group) for group in groups]
        built = {r["versions"]: r for f in futures for r in f.result(timeout=CHILD_TIMEOUT_SECONDS * 4)}
    log(f"snapshot: histories built in {time.monotonic() - t0:.0f} s")
    interval = env.settings.commit.checkpoint_interval
    samples = _measure_reads(env.settings, versions, sizes.load_repeats)
    measured: dict[int, dict[str, Any]] = {}
    for n in versions:
        measured[n] = {
            "build": built[n],
            "log_entries_read_at_head": n % interval,
            "log_entries_read_at_head_minus_1": (n - 1) % interval,
            "samples_seconds": samples[n],
        }
        log(
            f"snapshot: {n:,} versions, {built[n]['active_files']} active files: load "
            f"{_median_seconds(samples[n]['at_head']) * 1000:.2f} ms at head, "
            f"{_median_seconds(samples[n]['at_head_minus_1']) * 1000:.2f} ms at head-1"
        )
    smallest, largest = versions[0], versions[-1]

    def add_series(label: str, pick: Callable[[dict[str, Any]], list[float]], goal: Goal | None) -> None:
        values = {n: _median_seconds(pick(measured[n])) for n in versions}
        base = values[smallest]
        for n in versions:
            report.add(
                Figure(
                    "snapshot",
                    f"{label}, {n:,} versions",
                    values[n],
                    "s",
                    baseline=f"{smallest:,} versions" if n != smallest else None,
                    ratio=values[n] / base if n != smallest and base else None,
                    goal=goal if n == largest else None,
                )
            )

    for n in versions:
        report.add(
            Figure(
                "snapshot",
                f"active files, {n:,} versions",
                built[n]["active_files"],
                "files",
                note=f"{built[n]['commits_by_operation'].get('minor_compact', 0)} minor compactions",
            )
        )
    add_series("cold load at head", lambda m: m["samples_seconds"]["at_head"], LOAD_GOAL)
    add_series(
        f"cold load at head-1 (+{interval - 1} log entries)",
        lambda m: m["samples_seconds"]["at_head_minus_1"],
        LOAD_GOAL,
    )
    add_series("  of which: checkpoint lookup", lambda m: m["samples_seconds"]["checkpoint_lookup"], None)
    add_series("  of which: checkpoint file read+decode", lambda m: m["samples_seconds"]["checkpoint_read"], None)
    add_series("  of which: head read", lambda m: m["samples_seconds"]["head_read"], None)
    add_series("  of which: 99 log entries read", lambda m: m["samples_seconds"]["log_read_99"], None)
    add_series("history(limit=10)", lambda m: m["samples_seconds"]["history_limit_10"], None)
    per_version = {n: _median_seconds(measured[n]["samples_seconds"]["history_all"]) / n for n in versions}
    for n in versions:
        report.add(
            Figure(
                "snapshot",
                f"history() of all {n:,} versions",
                per_version[n] * n,
                "s",
                baseline=f"per version at {smallest:,}" if n != smallest else None,
                ratio=per_version[n] / per_version[smallest] if n != smallest else None,
                goal=HISTORY_LINEAR_GOAL if n == largest else None,
                note="ratio: time per version; 1 = linear",
            )
        )
        report.add(
            Figure(
                "snapshot",
                f"etcd bytes of the table, {n:,} versions",
                _median_seconds(measured[n]["samples_seconds"]["etcd_bytes"]),
                "B",
                note=f"{_median_seconds(measured[n]['samples_seconds']['etcd_keys']):.0f} keys; the rest archived",
            )
        )
    add_series("version_at(now)", lambda m: m["samples_seconds"]["version_at_now"], None)
    add_series("version_at(time of version n/2)", lambda m: m["samples_seconds"]["version_at_middle"], None)
    build_rate = build_rate_figure(built[largest])
    if build_rate is not None:
        report.add(build_rate)
    report.details["snapshot"] = {"checkpoint_interval": interval, "tables": {str(n): measured[n] for n in versions}}


# --- archive: etcd's footprint, throughput under maintenance, reads from the archive ------------------


def _footprint(env: Env, sizes: Sizes, report: Report) -> None:
    """etcd keys and bytes of one table while it takes `footprint_commits` appends at default settings
    (its retention 168h, expired every 1,000 commits): flat, under the bound."""
    catalog = Catalog(env.settings)
    try:
        table = catalog.create_table("bench.footprint", schema="id BIGINT, dt STRING", partition_by=["dt"])
        coordinator = catalog.services.coordinator
        samples: list[tuple[int, int, int]] = []
        step = max(1, sizes.footprint_commits // 10)
        for n in range(1, sizes.footprint_commits + 1):
            workers.append_one(table, f"p{n % 8}")
            if n % 1000 == 0:
                table.expire(retain_versions=1000, retain_duration="168h")
            if n % step == 0:
                catalog.services.archiver.flush()
                keys, size = coordinator.table_usage(table.table_id)
                samples.append((n, keys, size))
                log(f"archive: {n:,} commits, etcd holds {keys} keys, {size:,} bytes of the table")
    finally:
        catalog.close()
    first, last = samples[0], samples[-1]
    report.add(
        Figure(
            "archive",
            f"etcd bytes of a busy table after {last[0]:,} commits",
            last[2],
            "B",
            baseline=f"after {first[0]:,}",
            ratio=last[2] / first[2],
            note=f"max {max(s[2] for s in samples):,} B over the run (bound {ETCD_BYTES_BOUND:,}); {last[1]} keys",
        )
    )
    report.details["archive_footprint"] = [{"commits": n, "keys": k, "bytes": b} for n, k, b in samples]


def maintenance_loop(settings: Settings, name: str, pause_seconds: float, stop: Any, results: Any) -> None:
    """In its own process, as the operator runs it: expire (keeping 50 versions) and vacuum of `name`,
    then a pause, until `stop` is set; puts the number of runs on `results`."""
    runs = 0
    with Catalog(settings) as catalog:
        table = catalog.table(name)
        while not stop.wait(pause_seconds):
            table.expire(retain_versions=50, retain_duration=0, force=True)
            table.vacuum(retain_duration=0, force=True)
            runs += 1
    results.put(runs)


#: the variants of the maintenance benchmark: (label, archiving in the writer, expire+vacuum pause)
MAINTENANCE_VARIANTS = (
    ("no maintenance", False, None),
    ("archiving after commits", True, None),
    ("archiving, expire+vacuum every 100 ms in another process", True, 0.1),
)


def _throughput(env: Env, sizes: Sizes, report: Report) -> None:
    """Serial appends with no maintenance at all (a window no table reaches), with the background
    archiving every busy table runs, and with an operator-like process also running expire and vacuum
    of the same table every 100 ms (thousands of times its default hourly cadence), interleaved rounds."""
    quiet = replace(env.settings, commit=replace(env.settings.commit, log_window_versions=10**9))
    rates: dict[str, list[float]] = {label: [] for label, _, _ in MAINTENANCE_VARIANTS}
    runs = 0
    context = multiprocessing.get_context("spawn")
    for round_ in range(sizes.serial_rounds):
        for number, (label, archiving, pause) in enumerate(MAINTENANCE_VARIANTS):
            settings = env.settings if archiving else quiet
            with Catalog(settings) as catalog:
                name = f"bench.maintained_{round_}_{number}"
                table = catalog.create_table(name, schema="id BIGINT, dt STRING", partition_by=["dt"])
                for _ in range(20):  # the table's head known, and something to expire
                    workers.append_one(table)
                stop, results = context.Event(), context.Queue()
                side = None
                if pause is not None:
                    side = context.Process(target=maintenance_loop, args=(settings, name, pause, stop, results))
                    side.start()
                t0 = time.perf_counter()
                for _ in range(sizes.maintenance_round_commits):
                    workers.append_one(table)
                rates[label].append(_rate(sizes.maintenance_round_commits, time.perf_counter() - t0))
                stop.set()
                if side is not None:
                    runs += results.get(timeout=CHILD_TIMEOUT_SECONDS)
                    side.join()
        log("archive: round " + f"{round_ + 1}: " + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rates.items()))
    baseline = MAINTENANCE_VARIANTS[0][0]
    for label, _, pause in MAINTENANCE_VARIANTS[1:]:
        ratios = [w / wo for w, wo in zip(rates[label], rates[baseline], strict=True)]
        report.add(
            Figure(
                "archive",
                f"serial appends, {label}",
                statistics.median(rates[label]),
                "commits/s",
                baseline=baseline,
                ratio=statistics.median(ratios),
                goal=MAINTENANCE_GOAL if pause is None else None,
                note=f"{runs} expire+vacuum runs in all rounds" if pause is not None else "",
            )
        )


def _archive_reads(env: Env, sizes: Sizes, report: Report) -> None:
    """A cold snapshot load at an old version and a whole history read, from etcd alone and then (the
    same table, archived) from the archive."""
    unarchived = replace(env.settings, commit=replace(env.settings.commit, log_window_versions=10**9))
    commits = min(2000, sizes.footprint_commits)
    with Catalog(unarchived) as catalog:
        table = catalog.create_table("bench.archived_reads", schema="id BIGINT, dt STRING", partition_by=["dt"])
        for n in range(commits):
            workers.append_one(table, f"p{n % 8}")
    old = commits // 4 + 37  # 37 versions past a checkpoint: the load reads log entries too

    def measure() -> dict[str, float]:
        loads, histories = [], []
        for _ in range(sizes.load_repeats):
            loads.append(_cold_load(env.settings, "bench.archived_reads", old)[0])
            with Catalog(env.settings) as cold:
                histories.append(_timed(cold.table("bench.archived_reads").history))
        return {"load": statistics.median(loads), "history": statistics.median(histories)}

    from_etcd = measure()
    with Catalog(env.settings) as catalog:
        catalog.table("bench.archived_reads").archive()
    from_archive = measure()
    for key, label in (("load", f"cold snapshot load at version {old:,}"), ("history", f"history() of {commits:,}")):
        report.add(
            Figure(
                "archive",
                f"{label}, from the archive",
                from_archive[key],
                "s",
                baseline="etcd only",
                ratio=from_archive[key] / from_etcd[key],
                note=f"etcd only: {from_etcd[key] * 1000:.1f} ms",
            )
        )


def bench_archive(env: Env, sizes: Sizes, report: Report) -> None:
    _footprint(env, sizes, report)
    _throughput(env, sizes, report)
    _archive_reads(env, sizes, report)


# --- the suite -----------------------------------------------------------------------------------------


def run(*, quick: bool = False, only: Sequence[str] = BENCHMARKS, results_dir: Path | None = None) -> Report:
    sizes = QUICK if quick else FULL
    report = Report(suite="core", quick=quick, machine=machine_info(), started_at=now_iso())
    report.details["sizes"] = {k: v for k, v in sizes.__dict__.items()}
    with bench_env() as env:
        report.details["commit_settings"] = dict(env.settings.commit.__dict__)
        serial_rate = bench_serial(env, sizes, report) if "serial" in only else None
        if "contention" in only:
            bench_contention(env, sizes, report, serial_rate)
        if "snapshot" in only:
            bench_snapshot(env, sizes, report)
        if "archive" in only:
            bench_archive(env, sizes, report)
        if "reproof" in only:
            bench_reproof(env.settings, 2 * sizes.serial_rounds + 3, sizes.library_commits, report, quick=quick)
    path = report.finish(results_dir)
    if path is not None:
        log(f"results written to {path}")
    return report
