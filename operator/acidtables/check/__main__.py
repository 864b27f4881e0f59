"""`python -m acidtables.check [--seed N] [--writers W] [--duration S] [--faults kill,pause,restart|none]
[--policies ...] [--workdir D]`: a randomized history under faults, then the checker; exit 1 on any
anomaly. With no options: a CI-sized run of about a minute."""

from __future__ import annotations

import argparse
import random
import sys

from .runner import FAULTS, POLICIES, RunConfig, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m acidtables.check", description=__doc__)
    parser.add_argument("--seed", type=int, help="replay a run (printed at the start of every run)")
    parser.add_argument("--writers", type=int, default=3, help="writer processes (3)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of writing (60)")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated of {', '.join(FAULTS)}, or none")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated of {', '.join(POLICIES)}")
    parser.add_argument("--workdir", help="keep etcd, the warehouse and the history here")
    args = parser.parse_args(argv)
    faults = () if args.faults == "none" else tuple(f for f in args.faults.split(",") if f)
    policies = tuple(p for p in args.policies.split(",") if p)
    unknown = [f for f in faults if f not in FAULTS] + [p for p in policies if p not in POLICIES]
    if unknown or args.writers < 1 or args.duration <= 0:
        parser.error(f"unknown faults or policies {unknown}, or writers < 1, or duration <= 0")
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {seed}", flush=True)
    result = run(RunConfig(seed, args.writers, args.duration, faults, policies, args.workdir))
    print(result.summary())
    print(f"history, faults and data under {result.workdir}")
    return 1 if result.verdict.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
