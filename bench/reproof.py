"""`--only reproof`: what re-proving a commit's files at commit time costs (issue 24, item 4 d).

`Transaction.commit` re-proves, just before its compare-and-swap, that every new file it adds still
exists (`Transaction._prove_adds_present`). The baseline is the same commits with that step switched
off in this process (the method replaced by a no-op), measured in the same run, interleaved:

* serial: one-file appends as in `serial`, rounds alternating with and without the re-proof; plus
  the re-proof of one staged file timed alone (`Storage.missing`), as a share of a serial commit;
* 10,000 files: one transaction adding 10,000 staged files, its `commit()` timed with and without;
* object store (only where a moto server is found, as the tests find it): `Storage.missing` over N
  staged objects asked one request each against one listing, which is why a commit or a read of
  more than `STAT_LIMIT` files lists instead.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers.object_store import find_moto_server, moto_server

from acidtables import Catalog, Transaction
from acidtables.core.settings import Settings
from acidtables.core.storage import storage as storage_module
from acidtables.core.storage.storage import Storage

from . import workers
from .report import Figure, Goal, Report

REPROOF_GOAL = Goal("with re-proof >= 0.98 x without", 0.98, at_least=True)
BIG_COMMIT_FILES = 10_000


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the results table."""
    print(message, file=sys.stderr, flush=True)


@contextmanager
def _without_reproof() -> Iterator[None]:
    """The baseline: commits of this process skip the re-proof (nothing else changes)."""
    original = Transaction._prove_adds_present
    Transaction._prove_adds_present = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Transaction._prove_adds_present = original  # type: ignore[method-assign]


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _serial(catalog: Catalog, rounds: int, commits: int, report: Report) -> None:
    with_rates: list[float] = []
    without_rates: list[float] = []
    for round_ in range(rounds):
        for reproof in (True, False) if round_ % 2 == 0 else (False, True):
            table = catalog.create_table(
                f"bench.reproof_{round_}_{int(reproof)}", schema="id BIGINT, dt STRING", partition_by=["dt"]
            )
            workers.append_one(table)  # the process learns the new table's head
            if reproof:
                seconds = _timed(lambda: [workers.append_one(table) for _ in range(commits)])  # noqa: B023
                with_rates.append(commits / seconds)
            else:
                with _without_reproof():
                    seconds = _timed(lambda: [workers.append_one(table) for _ in range(commits)])  # noqa: B023
                without_rates.append(commits / seconds)
        log(
            f"reproof serial round {round_ + 1}/{rounds}: with {with_rates[-1]:.0f}, without {without_rates[-1]:.0f} "
            f"commits/s ({with_rates[-1] / without_rates[-1]:.3f}x)"
        )
    ratios = [w / wo for w, wo in zip(with_rates, without_rates, strict=True)]
    report.add(
        Figure(
            "reproof",
            "serial appends with the commit-time re-proof",
            statistics.median(with_rates),
            "commits/s",
            baseline="without",
            ratio=statistics.median(ratios),
            goal=REPROOF_GOAL,
            note=f"median of per-round ratios (min {min(ratios):.3f}, max {max(ratios):.3f}); "
            f"without: {statistics.median(without_rates):.0f} commits/s",
        )
    )
    # the step alone: one staged file, as a commit re-proves it
    table = catalog.create_table("bench.reproof_alone", schema="id BIGINT, dt STRING", partition_by=["dt"])
    txn = table.begin("insert_into")
    staged = workers.small_file(txn, "a", rows=workers.APPEND_ROWS)
    relative = [txn.storage.relative(staged.path)]
    under = txn.storage.staging_dir(txn.txn_id)
    repeats = 2000
    seconds = _timed(lambda: [txn.storage.missing(relative, under=under) for _ in range(repeats)]) / repeats
    txn.abort()
    commit_seconds = 1 / statistics.median(with_rates)
    report.add(
        Figure(
            "reproof",
            "re-proof of one staged file alone (Storage.missing, local)",
            seconds * 1e6,
            "us",
            note=f"{seconds / commit_seconds:.2%} of a serial commit",
        )
    )
    report.details["reproof_serial"] = {"with": with_rates, "without": without_rates, "ratios": ratios}


def _big_commit(catalog: Catalog, report: Report) -> None:
    """One commit of 10,000 staged files, with and without the re-proof (alternating, 2 each)."""
    timings: dict[bool, list[float]] = {True: [], False: []}
    reproof_alone: list[float] = []
    for attempt, reproof in enumerate((True, False, False, True)):
        table = catalog.create_table(f"bench.reproof_big_{attempt}", schema="id BIGINT, dt STRING", partition_by=["dt"])
        txn = table.begin("insert_into")
        files = [workers.small_file(txn, "a", name=f"part-{i:05d}.parquet") for i in range(BIG_COMMIT_FILES)]
        txn.add_files(files)
        if reproof:
            relative = [txn.storage.relative(f.path) for f in files]
            under = txn.storage.staging_dir(txn.txn_id)
            reproof_alone.append(_timed(lambda: txn.storage.missing(relative, under=under)))  # noqa: B023
            timings[True].append(_timed(txn.commit))
        else:
            with _without_reproof():
                timings[False].append(_timed(txn.commit))
        log(f"reproof 10,000-file commit {attempt + 1}/4 ({'with' if reproof else 'without'}): done")
    with_s, without_s = statistics.median(timings[True]), statistics.median(timings[False])
    report.add(
        Figure(
            "reproof",
            f"commit() of {BIG_COMMIT_FILES:,} files with the re-proof",
            with_s * 1000,
            "ms",
            baseline="without",
            ratio=without_s / with_s,
            note=f"without: {without_s * 1000:.0f} ms; the re-proof alone {statistics.median(reproof_alone) * 1000:.0f}"
            " ms (a stat per file); ratio is speed, without/with",
        )
    )
    report.details["reproof_big_commit"] = {
        "with_seconds": timings[True],
        "without_seconds": timings[False],
        "reproof_alone_seconds": reproof_alone,
    }


@contextmanager
def _moto() -> Iterator[str | None]:
    """The tests' moto S3 server on loopback with the bucket `bench`, or None where none is installed."""
    binary = find_moto_server()
    if binary is None:
        yield None
        return
    with (
        tempfile.TemporaryDirectory() as directory,
        moto_server(binary, "bench", Path(directory) / "moto.log") as endpoint,
    ):
        yield endpoint


def _object_store(report: Report, counts: tuple[int, ...]) -> None:
    with _moto() as endpoint:
        if endpoint is None:
            log("reproof: no moto_server (set ACIDTABLES_TEST_MOTO_SERVER): object-store figures skipped")
            return
        payload = b"x" * 64
        for count in counts:
            storage = Storage(f"s3a://bench/{uuid.uuid4().hex[:8]}")
            under = "data/_acid_txn=bench"
            paths = [f"{under}/_acid_write=w/part-{i:05d}.parquet" for i in range(count)]
            for path in paths:
                storage.write_exclusive(path, payload)
            storage.write_exclusive("data/_acid_txn=other/part-0.parquet", payload)  # a neighbour not listed
            limit = storage_module.STAT_LIMIT
            try:
                storage_module.STAT_LIMIT = 10**9
                requests = _timed(lambda: storage.missing(paths, under=under))  # noqa: B023
                storage_module.STAT_LIMIT = 0
                listing = _timed(lambda: storage.missing(paths, under=under))  # noqa: B023
            finally:
                storage_module.STAT_LIMIT = limit
            report.add(
                Figure(
                    "reproof",
                    f"object store (moto), {count} files: one listing vs a request each",
                    listing * 1000,
                    "ms",
                    baseline="requests",
                    ratio=requests / listing,
                    note=f"a request each: {requests * 1000:.0f} ms; ratio is speed, requests/listing",
                )
            )
            log(f"reproof object store {count}: requests {requests * 1000:.0f} ms, listing {listing * 1000:.0f} ms")


def bench_reproof(settings: Settings, rounds: int, commits: int, report: Report, *, quick: bool) -> None:
    catalog = Catalog(settings)
    try:
        _serial(catalog, rounds, commits, report)
        _big_commit(catalog, report)
    finally:
        catalog.close()
    _object_store(report, (4, 16, 100, 1000) if not quick else (4, 16, 100))


__all__ = ["bench_reproof"]
