"""Everything that talks to etcd, and nothing else does: the coordinator (the client, the key layout,
the head compare-and-swap, the log's keys, leases, watches, recorded events), the commit transaction
it sends (`etcd_txn`), leader election, the change feed the operator follows, the embedded etcd for
local use, and deadline-bounded waits.

Below the log and the commit path; it knows commit records only as JSON.
"""
