"""Shared helpers of the concurrency and failure tests: real files, raw etcd reads, workers, a proxy.

Each concern lives in its own module (`tables`, `workers`, `proxy`, `crash_writer`); this package
exports nothing itself.
"""
