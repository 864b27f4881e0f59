"""A writer of one multi-table transaction that the crash tests kill with SIGKILL at a chosen point.

Run as `python -m helpers.crash_multi_writer ENDPOINT PREFIX WAREHOUSE POINT TABLE [TABLE ...] [--app ID:N]`
(with `tests` on the path). It opens `catalog.transaction()` and begins one `insert_into` part per table,
in order, each staging three data files (partition dt=a) plus a stray `attempt-0.parquet` it never adds,
like a speculative task attempt: cleanup must delete that one and keep committed files. With `--app`,
each part calls `set_app_transaction(ID, N)`, so running the same job twice must commit it once.

It prints one line per step and then, at POINT, blocks reading stdin, so the test decides where it dies:

- `multi <multi_txn_id>` first, then `began <table> <txn_id> <staging_dir>` for each part it begins;
- `staging`: the FIRST part begun and two of its files written, nothing added, no other part begun;
- `staged`: every part's files written and added, commit not called;
- `committing`: as `staged`; on a line from stdin it calls commit() (the test has set its etcd proxy up
  meanwhile), so a kill lands while the commit request is in the network or etcd's answer is;
- `committed <json>`: commit() returned ({table: {"version", "skipped", "multi_txn_id"}});
- `finish`: commits at once, prints `finished <json>` and exits 0: a job run to its end (the rerun).

A short lease (2 s) makes the dead writer's in-flight registrations expire soon after it dies.
"""

from __future__ import annotations

import argparse
import json
import sys

from acidtables import CommitInfo, Transaction
from acidtables.core.settings import CommitSettings

from .tables import CatalogSpec, write_part

POINTS = ("staging", "staged", "committing", "committed", "finish")
LEASE_TTL_SECONDS = 2
#: the files a part adds; `attempt-0.parquet` is written beside them and never added
ADDED_FILES = tuple(f"part-{i}.parquet" for i in range(3))
STRAY_FILE = "attempt-0.parquet"


def _say(line: str) -> None:
    print(line, flush=True)


def _wait_for_the_test() -> None:
    sys.stdin.readline()


def _app_id(text: str) -> tuple[str, int]:
    app_id, _, version = text.rpartition(":")
    if not app_id or not version.isdigit():
        raise argparse.ArgumentTypeError(f"--app takes ID:VERSION, found {text!r}")
    return app_id, int(version)


def infos_json(infos: dict[str, CommitInfo]) -> str:
    return json.dumps(
        {
            name: {"version": info.version, "skipped": info.skipped, "multi_txn_id": info.multi_txn_id}
            for name, info in infos.items()
        },
        sort_keys=True,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crash_multi_writer")
    parser.add_argument("endpoint")
    parser.add_argument("prefix")
    parser.add_argument("warehouse")
    parser.add_argument("point", choices=POINTS)
    parser.add_argument("tables", nargs="+")
    parser.add_argument("--app", type=_app_id, default=None)
    args = parser.parse_args(argv)
    spec = CatalogSpec(args.endpoint, args.prefix, args.warehouse, CommitSettings(lease_ttl_seconds=LEASE_TTL_SECONDS))
    with spec.open() as catalog:
        tx = catalog.transaction()
        _say(f"multi {tx.id}")
        parts: list[Transaction] = []
        for name in args.tables:
            part = tx.begin(name, "insert_into")
            parts.append(part)
            _say(f"began {name} {part.txn_id} {part.staging_dir}")
            if args.app is not None:
                part.set_app_transaction(*args.app)
            files = [write_part(part.staging_dir, f, {"dt": "a"}) for f in ADDED_FILES[:2]]
            write_part(part.staging_dir, STRAY_FILE, {"dt": "a"})
            if args.point == "staging":
                _say("staging")
                _wait_for_the_test()
                return 0
            files.append(write_part(part.staging_dir, ADDED_FILES[2], {"dt": "a"}))
            part.add_files(files)
        if args.point in ("staged", "committing"):
            _say(args.point)
            _wait_for_the_test()
            if args.point == "staged":
                return 0
        infos = tx.commit()
        if args.point == "finish":
            _say(f"finished {infos_json(infos)}")
            return 0
        _say(f"committed {infos_json(infos)}")
        _wait_for_the_test()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
