"""`python -m acidtables.check [--seed N] [--writers W] [--readers R] [--duration S] [--members 1,3]
[--faults kill,self-kill,pause,restart,leader,partition,delay|none] [--policies ...]
[--multi-table-rate F] [--plant split-commit|split-snapshots] [--workdir D]`: randomized histories
under faults, single-table jobs and multi-table transactions, readers taking snapshots() of several
tables, then the checker; exit 1 on any anomaly. With no options: the CI-sized run, one history on a
single etcd and one on a 3-member cluster, a minute of writing each."""

from __future__ import annotations

import argparse
import random
from dataclasses import replace
from pathlib import Path

from acidtables.core import exit_process

from .plants import PLANTS
from .runner import FAULTS, POLICIES, RunConfig, run
from .writer import MULTI_TABLE_RATE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acidtables.check", description=__doc__)
    parser.add_argument("--seed", type=int, help="replay a run (printed at the start of every run)")
    parser.add_argument("--writers", type=int, default=3, help="writer processes (3)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of writing per history (60)")
    parser.add_argument("--members", default="1,3", help="etcd members per history, comma-separated (1,3)")
    parser.add_argument(
        "--faults",
        help=f"comma-separated of {', '.join(FAULTS)}, or none (default: all; member kills only on an etcd that "
        "survives them)",
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated of {', '.join(POLICIES)}")
    parser.add_argument("--readers", type=int, default=1, help="reader processes taking snapshots() (1)")
    parser.add_argument(
        "--multi-table-rate",
        type=float,
        default=MULTI_TABLE_RATE,
        help=f"share of jobs that are multi-table transactions ({MULTI_TABLE_RATE})",
    )
    parser.add_argument(
        "--plant",
        choices=sorted(PLANTS),
        help="plant this bug in the writers and readers: the run must then report anomalies (exit 1)",
    )
    parser.add_argument("--workdir", help="keep etcd, the warehouse and the history here")
    args = parser.parse_args(argv)
    named = args.faults is not None
    raw = args.faults if named else ",".join(FAULTS)
    faults = () if raw == "none" else tuple(f for f in raw.split(",") if f)
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = [f for f in faults if f not in FAULTS] + [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"unknown faults or policies: {', '.join(unknown)}")
    try:
        members = [int(m) for m in args.members.split(",") if m]
    except ValueError:
        parser.error(f"--members takes member counts such as 1,3; found {args.members!r}")
    if not members or any(m not in (1, 3) for m in members):
        parser.error(f"--members: each history runs on 1 or 3 etcd members; found {args.members!r}")
    if args.writers < 1 or args.duration <= 0 or not policies:
        parser.error("--writers must be at least 1, --duration above 0, and --policies must name one")
    if args.readers < 0 or not 0 <= args.multi_table_rate <= 1:
        parser.error("--readers must be 0 or more, --multi-table-rate between 0 and 1")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {seed}", flush=True)
    anomalies = 0
    for count in members:
        workdir = None if args.workdir is None else Path(args.workdir) / f"members-{count}"
        config = RunConfig(seed, args.writers, args.duration, faults, policies, workdir, count)
        result = run(
            replace(
                config,
                member_kills_on_diverging_etcd=named,
                readers=args.readers,
                multi_table_rate=args.multi_table_rate,
                plant=args.plant,
            )
        )
        print(result.summary())
        print(f"history, faults and data under {result.workdir}", flush=True)
        anomalies += len(result.verdict.anomalies)
    return 1 if anomalies else 0


if __name__ == "__main__":
    exit_process(main())
