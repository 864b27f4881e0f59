"""`python -m bench [core|spark|operator|scale|stream|read|multi] [--quick] [--only NAME ...]`: run the benchmarks.

With no suite named, core, spark and operator run in turn (operator needs KUBEBUILDER_ASSETS); scale
(tables of many live files, issue 32) and stream (Structured Streaming, issue 42) run only when named:
scale grows tables for many minutes, stream's memory runs take about two hours; read (reads without
Spark against delta-rs and bare Parquet, the Delta mirror's cost, one partition of a million-file table,
issue 43) grows a million-file table too; multi (multi-table commits against single-table ones, issue 44)
runs only when named. Results go to bench/results/ (gitignored) as one JSON
document per suite and run, with every sample; the tables on stdout are the summary. Progress lines go
to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import core, multi, operator, read, scale, spark, stream

SUITES = {
    "core": core,
    "spark": spark,
    "operator": operator,
    "scale": scale,
    "stream": stream,
    "read": read,
    "multi": multi,
}
#: what runs when no suite is named
DEFAULT_SUITES = ("core", "spark", "operator")
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "suite", nargs="?", default=None, choices=tuple(SUITES), help="which suite to run (default: all, in turn)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (core: histories of 100/1,000/10,000 versions, fewer commits; spark: 200,000 rows, "
        "100 small inserts; stream: 1,000 micro-batches per memory run): a few minutes each (stream: about 30)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=core.BENCHMARKS
        + spark.BENCHMARKS
        + operator.BENCHMARKS
        + scale.BENCHMARKS
        + stream.BENCHMARKS
        + read.BENCHMARKS
        + multi.BENCHMARKS,
        help="run only this benchmark (repeatable; a suite runs only if one of its benchmarks is named); default: all",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help=f"where to write the JSON (default: {RESULTS_DIR})"
    )
    args = parser.parse_args(argv)
    for name in (args.suite,) if args.suite else DEFAULT_SUITES:
        suite = SUITES[name]
        only = tuple(b for b in suite.BENCHMARKS if not args.only or b in args.only)
        if not only:
            continue
        report = suite.run(quick=args.quick, only=only, results_dir=args.results_dir)
        # each suite's table as soon as it is done, so a failure in the next one loses nothing
        print(report.render(), flush=True)
        missed = [f for f in report.figures if f.met is False]
        for figure in missed:
            print(f"goal not met: {figure.benchmark} / {figure.name}: {figure.goal.text if figure.goal else ''}")
    # a missed goal is a finding, not a failure: noise on a shared machine must not break `make bench`
    return 0


if __name__ == "__main__":
    sys.exit(main())
