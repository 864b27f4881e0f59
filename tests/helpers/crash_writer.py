"""A writer the failure tests kill with SIGKILL at a chosen point of a transaction.

Run as `python -m helpers.crash_writer ENDPOINT PREFIX WAREHOUSE TABLE POINT` (with `tests` on the
path). It prints one line per step (`began <txn_id> <staging_dir>`, then `staging`, `staged` or
`committed <version>`) and then blocks reading stdin at POINT, so the test decides exactly where it dies:

- `staging`: two of three data files written, nothing handed to the transaction yet;
- `staged`: all files written and added, commit not called;
- `committed`: commit returned, before the process does anything else.

Besides its three data files it leaves a stray `attempt-0.parquet` in the staging dir that it never
adds, like a speculative task attempt: cleanup must delete that one and keep the committed ones.
A short lease (2 s) makes its in-flight registration expire soon after it dies.
"""

from __future__ import annotations

import sys

from acidtables.core.settings import CommitSettings

from .tables import CatalogSpec, write_part

POINTS = ("staging", "staged", "committed")
LEASE_TTL_SECONDS = 2


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str]) -> int:
    endpoint, prefix, warehouse, table_name, point = argv
    if point not in POINTS:
        raise SystemExit(f"crash point must be one of {POINTS}, found {point!r}")
    spec = CatalogSpec(endpoint, prefix, warehouse, CommitSettings(lease_ttl_seconds=LEASE_TTL_SECONDS))
    with spec.open() as catalog:
        tx = catalog.table(table_name).begin("insert_into")
        _say(f"began {tx.txn_id} {tx.staging_dir}")
        files = [write_part(tx.staging_dir, f"part-{i}.parquet", {"dt": "a"}) for i in range(2)]
        write_part(tx.staging_dir, "attempt-0.parquet", {"dt": "a"})
        if point == "staging":
            _say("staging")
            sys.stdin.readline()
            return 0
        files.append(write_part(tx.staging_dir, "part-2.parquet", {"dt": "a"}))
        tx.add_files(files)
        if point == "staged":
            _say("staged")
            sys.stdin.readline()
            return 0
        info = tx.commit()
        _say(f"committed {info.version}")
        sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
