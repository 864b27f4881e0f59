"""Benchmarks of acidtables, run with `python -m bench` (not part of the test suite: they are timed).

`bench.core` measures the commit path and snapshot loading against an embedded etcd; every figure
with a goal is a ratio to a baseline measured in the same run. See bench/README.md for the figures.
"""
