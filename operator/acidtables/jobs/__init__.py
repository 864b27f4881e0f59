"""Entry points that run inside Spark pods the operator creates (`python -m acidtables.jobs ...`).

A job reads its settings from the ACIDTABLES_* environment the operator gives the pod, does its work
through `acidtables.spark`, and leaves its outcome as a small JSON document in the container's
termination message, which the operator copies into the CompactionJob's status.
"""
