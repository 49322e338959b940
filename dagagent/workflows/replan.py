"""The replan workflow: review a run → revised plan → diff → reuse prediction → run the
revision, reusing every unchanged success, as a child of the run.

::

    with dagagent.RunStore("runs.db") as store:
        record = store.last_run()
    revision = await revise_run(record, registry, llm=llm)      # or plan=edited_plan
    print(format_diff(revision.diff, record.plan, revision.plan))
    result = await run_revision(revision, registry, store="runs.db")
    # or both at once: revision, result = await replan_run(record, registry, llm=llm)

``dagagent replan`` is these calls plus printing, and :func:`dagagent.solve` replans its
rounds with them. A run that is not recorded (a :class:`~dagagent.RunResult` in memory)
becomes a record with :func:`record_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..graph import PlanGraph, validate
from ..plan import AgentTask, Plan, task_fingerprint
from ..planners import LLMReplanner, PlanningResult
from ..results import RunResult
from ..review import (
    PlanDiff,
    ReuseDecision,
    RunReview,
    diff_plans,
    predict_reuse,
    reuse_map,
    review_run,
)
from ..run import execute
from ..store import RunRecord

if TYPE_CHECKING:
    from ..llm import LLM
    from ..tools import Registry

__all__ = ["Revision", "record_of", "refuse_in_doubt", "replan_run", "revise_run", "run_revision"]


@dataclass(frozen=True)
class Revision:
    """A run's review and what will run next: the revised plan (the run's own plan when
    nothing revised it), its graph, the diff with the run's plan (``None`` without a
    revision), which tasks will be reused, and how the model planned it (``planning``,
    ``None`` when the plan came from elsewhere)."""

    parent: RunRecord
    review: RunReview
    plan: Plan
    graph: PlanGraph
    diff: PlanDiff | None
    reuse: dict[str, ReuseDecision]
    planning: PlanningResult | None = None
    feedback: str | None = None
    warnings: tuple[Any, ...] = field(default=())

    @property
    def revised(self) -> bool:
        return self.diff is not None

    @property
    def unchanged(self) -> bool:
        """The revised plan has the same tasks as the run's plan."""
        return self.diff is not None and not (
            self.diff.added or self.diff.removed or self.diff.changed
        )

    def reuse_map(self) -> dict[str, tuple[str, Any]]:
        """The ``reuse=`` argument of :func:`dagagent.execute` for this revision."""
        return reuse_map(self.parent)


def record_of(plan: Plan, result: RunResult) -> RunRecord:
    """A :class:`~dagagent.store.RunRecord` of a run that is in memory rather than in a
    store: every success with its arguments can be reused (the arguments are the real
    ones, not a redacted copy as in the store)."""
    tasks = {t.id: t for t in plan.tasks}
    fingerprints = {
        tid: task_fingerprint(tasks[tid], r.args)
        for tid, r in result.tasks.items()
        if tid in tasks and r.status.ok and r.args is not None
    }
    return RunRecord(
        run_id=result.run_id,
        parent_id=result.parent_id,
        created=result.started_at,
        goal=result.goal or plan.goal,
        status=result.status,
        executor=result.executor,
        started_at=result.started_at,
        finished_at=result.finished_at,
        critical_path=list(result.critical_path),
        critical_path_s=result.critical_path_s,
        plan=plan,
        tasks=dict(result.tasks),
        fingerprints=fingerprints,
    )


async def revise_run(
    record: RunRecord,
    registry: Registry,
    *,
    llm: LLM | None = None,
    replanner: LLMReplanner | None = None,
    plan: Plan | Mapping[str, Any] | str | Path | None = None,
    feedback: str | None = None,
    agent_llm: LLM | None = None,
    goal: str | None = None,
) -> Revision:
    """Review ``record`` and revise its plan: ``plan`` (edited by a person), else a model's
    (``replanner``, or an :class:`~dagagent.planners.LLMReplanner` over ``llm``; ``feedback``
    tells it what the results still lack), else none (the run's own plan, to run again).

    The plan is validated against ``registry`` (``agent_llm``: the model agent tasks will
    have; without one they get a ``no_llm`` warning). Raises
    :class:`~dagagent.errors.PlanValidationError` for an invalid plan,
    :class:`~dagagent.errors.PlanningError` when the model gave no valid plan; model errors
    propagate."""
    review = review_run(record)
    planning: PlanningResult | None = None
    revised: Plan | None = None
    if plan is not None:
        graph = validate(plan, registry, llm=agent_llm, check_llm=True)
        revised = graph.plan
    elif replanner is not None or llm is not None:
        if replanner is None:
            assert llm is not None
            replanner = LLMReplanner(llm, registry)
        planning = await replanner.replan_with_report(
            goal or record.goal, record.plan, record.tasks, feedback=feedback
        )
        revised = planning.plan
        graph = planning.graph
        if agent_llm is None and any(isinstance(t, AgentTask) for t in revised.tasks):
            graph = validate(revised, registry, check_llm=True)  # the no_llm warnings
    else:
        graph = validate(record.plan, registry, llm=agent_llm, check_llm=True)
    chosen = graph.plan
    warnings = tuple(planning.warnings) if planning is not None else ()
    return Revision(
        parent=record,
        review=review,
        plan=chosen,
        graph=graph,
        diff=diff_plans(record.plan, revised) if revised is not None else None,
        reuse=predict_reuse(record, chosen),
        planning=planning,
        feedback=feedback,
        warnings=(*warnings, *graph.warnings),
    )


async def run_revision(revision: Revision, registry: Registry | None, **options: Any) -> RunResult:
    """Run ``revision.plan`` as a new run whose parent is the reviewed run, reusing the
    outputs of every unchanged success. ``options`` are those of :func:`dagagent.execute`
    (``executor``, ``store``, ``llm``, ``listeners``, ...).

    Raises :class:`~dagagent.errors.DecisionError`, before anything runs, when a task of the
    revised plan made a call with side effects in the reviewed run that is in doubt (its
    process died during it, or it was cut off): run again under a new run, it could take
    effect twice. Resume the reviewed run first (it resolves the call); a run that ended is
    not resumed: a person says what became of the call
    (:meth:`~dagagent.store.RunStore.resolve_in_doubt`), and the revision takes its output
    over (it happened), makes it again with its key (it did not) or denies its task."""
    refuse_in_doubt(revision, options.get("store"))
    return await execute(
        revision.graph,
        registry,
        reuse=revision.reuse_map(),
        parent_id=revision.parent.run_id,
        **options,
    )


async def replan_run(
    record: RunRecord,
    registry: Registry,
    *,
    llm: LLM | None = None,
    replanner: LLMReplanner | None = None,
    plan: Plan | Mapping[str, Any] | str | Path | None = None,
    feedback: str | None = None,
    **options: Any,
) -> tuple[Revision, RunResult]:
    """:func:`revise_run` then :func:`run_revision`. Agent tasks of the revised plan use
    ``options["llm"]`` when given, else ``llm``."""
    agent_llm = options.pop("llm", None) or llm
    revision = await revise_run(
        record,
        registry,
        llm=llm,
        replanner=replanner,
        plan=plan,
        feedback=feedback,
        agent_llm=agent_llm,
    )
    result = await run_revision(revision, registry, llm=agent_llm, **options)
    return revision, result


def refuse_in_doubt(revision: Revision, store: Any) -> None:
    """Raise :class:`~dagagent.errors.DecisionError` when running ``revision`` as a new run
    would make again a call in doubt of the reviewed run (see :func:`run_revision`): a call
    in doubt is resolved by resuming its own run."""
    if store is None:
        return
    from ..errors import DecisionError
    from ..store import RunStore

    again = {t.id for t in revision.plan.tasks} - set(revision.reuse_map())
    opened = store if isinstance(store, RunStore) else RunStore(store)
    blocked: list[Any] = []
    status = ""
    try:
        if not opened.exists(revision.parent.run_id):
            return
        # In doubt: no outcome (its process died: ``started``) or cut off (a timeout, a
        # cancellation, a lost worker or server: ``cancelled``), and not resolved since; in
        # the reviewed run or in a run it descends from (a revision of a revision may bring
        # back a task its parent left out), unless a nearer run has the call on record.
        settled: set[tuple[Any, ...]] = set()
        for run_id in opened.ancestry(revision.parent.run_id):
            effects = opened.effects(run_id)
            blocked = [
                e for e in effects if e.in_doubt and e.task_id in again and _slot(e) not in settled
            ]
            if blocked:
                status = opened.get_run(run_id).status.value
                break
            settled.update(_slot(e) for e in effects if not e.in_doubt)
    finally:
        if opened is not store:
            opened.close()
    if blocked:
        shown = ", ".join(f"{e.where} ({e.tool}, key {e.key})" for e in blocked[:5])
        parent = blocked[0].run_id
        if status in ("paused", "interrupted"):
            how = (
                f"resume run {parent} first (dagagent resume {parent}) so that they are "
                "resolved, then revise it"
            )
        else:  # it ended: nothing resumes it, a person says what became of each call
            first = blocked[0]
            how = (
                f"run {parent} is {status} and cannot be resumed to resolve them: check with "
                "the services by their keys whether they took effect, then say so "
                f"('dagagent approve {parent} {first.task_id} --happened --output JSON', "
                "'--allow' to make it again with its key, or '--deny'; see 'dagagent "
                "approvals'), or leave their tasks out of the revised plan"
            )
        of = (
            ""
            if parent == revision.parent.run_id
            else f", which run {revision.parent.run_id} descends from,"
        )
        raise DecisionError(
            f"run {parent}{of} has calls with side effects in doubt that the revised plan would "
            f"make again under a new run, and new keys: {shown}; {how}"
        )


def _slot(e: Any) -> tuple[Any, ...]:
    """Who made a call on record and what it was (its key aside)."""
    return (e.task_id, e.element, e.source, e.fingerprint, e.occurrence)
