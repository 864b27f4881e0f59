"""Create a table, commit one file and read it back through a second catalog, in a process of its own.

Run as `python -m helpers.round_trip ENDPOINT PREFIX WAREHOUSE [USER PASSWORD]` (with `tests` on the
path); prints `committed <version> <files read back>`. A test runs it as a subprocess when the catalog
might spin forever (the user/password-over-http bug): a process can be killed at a deadline, a thread
cannot, and a spinning thread would keep eating a CPU for the rest of the test session.
"""

from __future__ import annotations

import sys

from acidtables import Catalog
from acidtables.core.settings import EtcdSettings, Settings

from .tables import write_part


def _catalog(endpoint: str, prefix: str, warehouse: str, credentials: list[str]) -> Catalog:
    user, password = credentials if credentials else (None, None)
    etcd = EtcdSettings((endpoint,), prefix=prefix, user=user, password=password, unavailable_timeout_seconds=3)
    return Catalog(Settings(etcd=etcd, warehouse=warehouse))


def main(argv: list[str]) -> int:
    endpoint, prefix, warehouse, *credentials = argv
    with (
        _catalog(endpoint, prefix, warehouse, credentials) as writing,
        _catalog(endpoint, prefix, warehouse, credentials) as reading,
    ):
        table = writing.create_table("ns.round_trip", schema="id BIGINT, dt STRING", partition_by=["dt"])
        tx = table.begin("insert_into")
        tx.add_files([write_part(tx.staging_dir, "part-0.parquet", {"dt": "a"})])
        info = tx.commit()
        read_back = len(reading.table("ns.round_trip").snapshot().files)
    print(f"committed {info.version} {read_back}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
