"""`python -m bench [core] [--quick] [--only NAME ...]`: run the benchmarks, print a table, save JSON.

Results go to bench/results/ (gitignored) as one JSON document per run, with every sample; the table
on stdout is the summary. Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import core

SUITES = ("core",)
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("suite", nargs="?", default="core", choices=SUITES, help="which suite to run (default: core)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (histories of 100/1,000/10,000 versions, fewer commits): about a minute",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=core.BENCHMARKS,
        help="run only this benchmark (repeatable); default: all",
    )
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help=f"where to write the JSON (default: {RESULTS_DIR})"
    )
    args = parser.parse_args(argv)
    report = core.run(quick=args.quick, only=tuple(args.only or core.BENCHMARKS), results_dir=args.results_dir)
    print(report.render())
    missed = [f for f in report.figures if f.met is False]
    for figure in missed:
        print(f"goal not met: {figure.benchmark} / {figure.name}: {figure.goal.text if figure.goal else ''}")
    # a missed goal is a finding, not a failure: noise on a shared machine must not break `make bench`
    return 0


if __name__ == "__main__":
    sys.exit(main())
