"""Reviewing a recorded run, comparing plans, deciding what a revised plan may reuse.

Pure functions over records (no I/O): :func:`review_run` says what failed and why, what was
cancelled or skipped because of it and what succeeded; :func:`diff_plans` lists added,
removed and changed tasks (and what changed in each); :func:`reuse_map` is the
``reuse={task_id: (fingerprint, output)}`` argument of :func:`dagagent.execute` built from a
parent run; :func:`predict_reuse` tells, before running, which tasks of a revised plan will be
reused, and :func:`new_versions` which successes it changes under their ids (they run again).
The runner makes the final decision at run time by comparing fingerprints
(:func:`dagagent.plan.task_fingerprint`: id, tool, resolved arguments) and the outputs of the
task's dependencies with the parent run's, so a changed upstream output defeats reuse even when
the task's own definition is unchanged.
"""

from ._diff import Change, PlanDiff, diff_plans, format_diff
from ._reuse import ReuseDecision, new_versions, predict_reuse, reuse_map
from ._review import RunReview, TaskOutcome, format_review, review_run, shorten

__all__ = [
    "Change",
    "PlanDiff",
    "ReuseDecision",
    "RunReview",
    "TaskOutcome",
    "diff_plans",
    "format_diff",
    "format_review",
    "new_versions",
    "predict_reuse",
    "reuse_map",
    "review_run",
    "shorten",
]
