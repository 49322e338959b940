"""From a goal to an answer, and from a failed run to its revision: the workflows that
combine planners, the joiner and execution.

- :func:`solve` / :func:`solve_sync`: goal → plan → run → join (finish or replan) → …
  → :class:`Solution`.
- :func:`revise_run`, :func:`run_revision`, :func:`replan_run`: review a run, revise its
  plan (a model's or a person's), diff it, predict reuse, run it as a child of the run.
- :func:`resume` / :func:`resume_sync`: continue a paused run once a person has decided
  about its waiting calls (:func:`record_decision` records a decision), with the settings
  it was started with (:func:`recorded_settings`).
- :func:`resume_solve` / :func:`resume_solve_sync`: continue a paused solve (its round's run,
  then the joiner and the rounds after it), rebuilt from its records.
- :class:`Session`: a conversation, each question a solve that sees the turns before it.
"""

from .replan import Revision, record_of, replan_run, revise_run, run_revision
from .resume import record_decision, recorded_settings, resume, resume_sync
from .session import Session
from .solve import SOLVE_SETTINGS, Round, Solution, SolveUsage, solve, solve_sync
from .solve_resume import resume_solve, resume_solve_sync

__all__ = [
    "SOLVE_SETTINGS",
    "Revision",
    "Round",
    "Session",
    "Solution",
    "SolveUsage",
    "record_decision",
    "record_of",
    "recorded_settings",
    "replan_run",
    "resume",
    "resume_solve",
    "resume_solve_sync",
    "resume_sync",
    "revise_run",
    "run_revision",
    "solve",
    "solve_sync",
]
