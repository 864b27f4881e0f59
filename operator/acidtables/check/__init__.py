"""A randomized history checker (issue 10): random concurrent jobs against real etcd under faults,
then a proof that nothing was lost, duplicated or allowed that the conflict rules forbid."""
