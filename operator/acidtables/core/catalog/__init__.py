"""Where a user's call comes in: the catalog of tables (create, drop, look up, the embedded etcd for
local use) and a table's own calls (snapshots, history, time travel, transactions, maintenance).

The top of core: everything here may use every package below it, and nothing below imports it.
`Catalog` is in `catalog.py`, `Table` in `table.py`.
"""
