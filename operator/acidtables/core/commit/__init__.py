"""The commit path: a transaction (read, stage, validate), the committer that sends the one etcd
compare-and-swap and rebases after a lost race, and the conflict rules that judge each winner
(`conflicts/`: the MaxCompute matrices and Delta Lake's levels). With the proofs a commit's files must
pass first (`file_checks`, `presence`) and the transaction ids that name their writer's lease.

The order inside is import-linted: transaction, committer, conflicts, then the log's records.
"""
