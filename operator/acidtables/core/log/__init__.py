"""The version log and what is built from it: commit records (`records`, with the operations they
name), the log as one sequence across etcd and archive segments (`tablelog`, `archive`), snapshots of
the active files (`snapshot`), and what every table of a catalog shares to read it (`services`: the
coordinator, storage, the snapshot cache and checkpoints)."""
