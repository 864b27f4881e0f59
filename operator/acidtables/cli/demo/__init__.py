"""`acidtables demo`: the conflict rules, run for real on an embedded etcd and shown as a table.

`scenarios` says what runs (policies, pairs of overlapping jobs, the initial load), `staging` does the
core demo's file work with pyarrow, `views` holds what both demos report, `runner` runs the core demo
(`--core`) and `spark` the Spark one; Spark is imported only by the latter.
"""

from .runner import run_demo
from .scenarios import CORE_SCENARIOS, POLICIES, SPARK_SCENARIOS, Job, PolicySpec, Scenario
from .views import DemoResult, ScenarioResult

__all__ = [
    "CORE_SCENARIOS",
    "POLICIES",
    "SPARK_SCENARIOS",
    "DemoResult",
    "Job",
    "PolicySpec",
    "Scenario",
    "ScenarioResult",
    "run_demo",
]
