"""The core of acidtables: the etcd commit point, the conflict rules and snapshots.

Everything that decides whether a commit wins lives here, so it is kept free of Spark
and Kubernetes: the same rules must hold whether a commit comes from a Spark job, the
operator or a test, and the core has to be testable against a bare etcd alone.
"""
