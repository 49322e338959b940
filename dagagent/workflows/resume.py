"""Resuming a paused run: decisions in, the same run continued.

A run pauses when an approval rule's question is left for a person (``ask_later``, or the
CLI without a terminal): those tasks are ``waiting``, everything else ran as far as it
could. A person decides (``dagagent approve``, :meth:`RunStore.decide`, or ``decisions=``
here), then :func:`resume` continues the run **in place** (same run id, same record):

- what succeeded before the pause stands as recorded and never runs again;
- an approved call runs, with its edited arguments if it was edited; a denied one makes its
  task ``denied``; a call nobody decided about yet waits again (the run pauses again);
- an agent task whose call waited continues from its recorded steps, not from scratch;
- every decision is used once: the resume takes the run from ``paused`` to ``running`` and
  its decisions from ``decided`` to ``used`` in one store transaction, so two resumes (or an
  ``approve`` racing a resume) can never use one decision twice;
- the run goes on with the settings it was started with (its failure policy, concurrency,
  map size, retry spacing, what to do with calls in doubt, and its executor:
  :func:`recorded_settings`), unless the resume is given others, which the record then
  keeps instead.

::

    policy = dagagent.Policy([dagagent.Rule(tool="send_*", action="ask")], ask=ask_later)
    result = await dagagent.execute(plan, registry, interceptors=[policy], store="runs.db")
    # result.status is paused; later, anywhere:
    result = await dagagent.resume(result.run_id, registry, store="runs.db",
                                   decisions={"mail": dagagent.Approval.approve(by="ann")},
                                   interceptors=[policy])
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..approval import Approval
from ..errors import ConfigError, DecisionError
from ..executors import IN_PROCESS_EXECUTORS
from ..graph import validate
from ..plan import ToolTask
from ..results import ApprovalAnswer, RunResult, TaskStatus
from ..run import Resuming, execute
from ..runner import CallLedger, recorded_calls
from ..settings import RunSettings
from ..store import RunStore

if TYPE_CHECKING:
    from ..events import Listener
    from ..executors import Executor
    from ..llm import LLM
    from ..runner import AgentTaskRunner, Interceptor
    from ..store import RunRecord
    from ..tools import Registry

__all__ = [
    "RESUMABLE_EXECUTORS",
    "continue_claimed",
    "decider",
    "record_decision",
    "recorded_settings",
    "resumable_executor",
    "resume",
    "resume_sync",
    "resumed_executor",
]

RESUMABLE_EXECUTORS = IN_PROCESS_EXECUTORS


def resumable_executor(executor: str) -> str:
    """The executor a run started with ``executor`` goes on with: the same, when it can
    continue a run (the in-process ones), else ``dataflow``."""
    return executor if executor in RESUMABLE_EXECUTORS else "dataflow"


#: What a run on Temporal records of its server (``RunStore`` context key ``temporal``).
_TEMPORAL_KEYS = ("address", "namespace", "task_queue", "payloads")


def resumed_executor(executor: str, context: Mapping[str, Any], **temporal: Any) -> str | Executor:
    """The executor a resumed run goes on with: a run on Temporal goes on on Temporal, on
    the server its ``context`` names (``temporal``: options that win over it), where it
    follows its workflow if that still runs or finished; others as
    :func:`resumable_executor` says."""
    if executor != "temporal":
        return resumable_executor(executor)
    from ..executors import get_executor

    recorded = context.get("temporal")
    options = {
        k: v
        for k, v in (recorded if isinstance(recorded, dict) else {}).items()
        if k in _TEMPORAL_KEYS and isinstance(v, str)
    }
    return get_executor("temporal", **{**options, **temporal})


def recorded_settings(record: RunRecord, **changes: Any) -> RunSettings:
    """The settings run ``record`` goes on with when it is resumed: those it was recorded
    with (:attr:`~dagagent.store.RunRecord.settings`: ``on_failure``, ``max_concurrency``,
    ``max_elements``, ``retry``, ``in_doubt``) and its executor (as :func:`resumed_executor`
    says), each replaced by the one ``changes`` gives (:class:`~dagagent.RunSettings`
    names). A run recorded before dagagent kept its settings has the defaults on record.

    ``resume(run, ..., settings=recorded_settings(store.get_run(run), max_concurrency=2))``
    changes one setting and keeps the others. Raises
    :class:`~dagagent.errors.ConfigError` for a name that is not a setting, or a value that
    is not one it takes."""
    unknown = sorted(set(changes) - _SETTING_NAMES)
    if unknown:
        raise ConfigError(
            f"not run settings: {', '.join(unknown)} (they are {', '.join(sorted(_SETTING_NAMES))})"
        )
    if "executor" not in changes:
        changes["executor"] = resumed_executor(record.executor, record.context)
    return RunSettings.from_record(record.settings, **changes)


#: The names :func:`recorded_settings` takes: the fields of :class:`RunSettings`.
_SETTING_NAMES = frozenset(f.name for f in fields(RunSettings))


def decider(by: str | None = None) -> str:
    """Who a decision is recorded as taken by: ``by``, else ``$DAGAGENT_USER``, else the
    login name."""
    if by and by.strip():
        return by.strip()
    env = os.environ.get("DAGAGENT_USER", "").strip()
    if env:
        return env
    try:
        return getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry, say)
        return "unknown"


def record_decision(
    store: RunStore,
    run: str,
    task_id: str,
    approval: Approval,
    registry: Registry | None = None,
    *,
    by: str | None = None,
) -> None:
    """Record ``approval`` (approve, deny or edit) about the waiting calls of a task, as
    ``dagagent approve`` does; edited arguments are checked against the tool's schema when
    ``registry`` has the tool."""
    if approval.wait:
        raise ConfigError("Approval.later() is not a decision: give approve, deny or edit")
    who = approval.decided_by or decider(by)
    if not approval.approved:
        store.decide(run, task_id, "deny", by=who, reason=approval.reason)
    elif approval.args is not None:
        store.decide(
            run,
            task_id,
            "edit",
            by=who,
            reason=approval.reason,
            edit_args=dict(approval.args),
            check=_checker(registry),
        )
    else:
        store.decide(run, task_id, "allow", by=who, reason=approval.reason)


def _checker(registry: Registry | None) -> Any:
    if registry is None:
        return None

    def check(tool: str, args: dict[str, Any]) -> Any:
        if tool not in registry:
            return args  # checked when the call is made
        return registry.get(tool).validate_args(args)

    return check


async def resume(
    run: str,
    registry: Registry | None = None,
    *,
    store: RunStore | str | Path | None = None,
    decisions: Mapping[str, Approval] | None = None,
    decided_by: str | None = None,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    settings: RunSettings | None = None,
    llm: LLM | None = None,
    agent_runner: AgentTaskRunner | None = None,
) -> RunResult:
    """Continue the paused run ``run`` (an id or a unique prefix) recorded in ``store``.

    ``decisions``: ``{task id: Approval}`` recorded first (as ``dagagent approve`` would,
    ``decided_by`` naming who when the approval does not); decisions recorded earlier are
    used too. ``interceptors`` should hold the run's approval policy again: it is what
    hands each decision to its call (and makes a call nobody decided about wait again).
    The other options are :func:`dagagent.execute`'s. Without ``settings``, the run goes on
    with the settings it was started with (or last resumed with) and its executor
    (:func:`recorded_settings`); ``settings`` given are used as they are, and recorded with
    the run in their place: to change some and keep the others, give
    ``recorded_settings(record, name=value)``.

    Raises :class:`~dagagent.errors.StoreError` if there is no such run and
    :class:`~dagagent.errors.DecisionError` if it is not paused (or a decision is refused);
    nothing runs then. Returns the run's result: ``succeeded``, ``failed``, or ``paused``
    again when calls still wait."""
    opened = store if isinstance(store, RunStore) else RunStore(store)
    try:
        record = opened.get_run(run)
        validate(record.plan, registry)  # before anything is claimed: the tools are there
        _refuse_calls_made_elsewhere(record, registry, settings)
        for task_id, approval in (decisions or {}).items():
            record_decision(opened, record.run_id, task_id, approval, registry, by=decided_by)
        run_id, answers = opened.claim_resume(record.run_id)
        return await continue_claimed(
            opened,
            run_id,
            answers,
            registry,
            interceptors=interceptors,
            listeners=listeners,
            settings=settings,
            llm=llm,
            agent_runner=agent_runner,
        )
    finally:
        if opened is not store:
            opened.close()


def _refuse_calls_made_elsewhere(
    record: RunRecord, registry: Registry | None, settings: RunSettings | None
) -> None:
    """A run that ran on Temporal, with tasks whose tool has side effects (any tool, without
    ``registry``) and that did not succeed on record, is not continued in this process (on
    another executor than Temporal, by ``settings``): their calls are made on the workers,
    whose intents and outcomes are in the workflow's history, not in this store; here, they
    could be made a second time. On Temporal (without ``settings``, the run goes on there)
    the resume follows the run's workflow instead, which holds them."""
    if record.executor != "temporal":
        return
    chosen = settings.executor if settings is not None else "temporal"
    if (chosen if isinstance(chosen, str) else getattr(chosen, "name", None)) == "temporal":
        return
    unsure = [
        t.id
        for t in record.plan.tasks
        if isinstance(t, ToolTask)
        and (registry is None or t.tool not in registry or registry.get(t.tool).side_effects)
        and not (t.id in record.tasks and record.tasks[t.id].status.ok)
    ]
    if unsure:
        names = ", ".join(repr(t) for t in unsure[:5]) + (", ..." if len(unsure) > 5 else "")
        raise DecisionError(
            f"run {record.run_id} ran on Temporal, and the calls with side effects of "
            f"task {names} were made (or are being made) on its workers, whose record is the "
            "workflow's history, not this store: continuing the run in this process could make "
            "them a second time. The workflow goes on without the process that started it: "
            f"its result is on the server (workflow id dagagent-run-{record.run_id}); resume "
            "the run on Temporal to follow it and record it"
        )


async def continue_claimed(
    store: RunStore,
    run_id: str,
    answers: Mapping[str, Sequence[ApprovalAnswer]],
    registry: Registry | None,
    *,
    settings: RunSettings | None = None,
    **options: Any,
) -> RunResult:
    """Continue run ``run_id``, which this process has claimed
    (:meth:`~dagagent.store.RunStore.claim_resume` gave ``answers``), as :func:`resume`
    does; the run is paused again if this stops before the run is recorded as ended.

    Without a ``ledger`` in ``options``, the guardrails count on from the calls the record
    says the run made (:func:`~dagagent.runner.recorded_calls`); a ledger given is used as
    it is (a resumed solve's, which counted them already)."""
    try:
        record = store.get_run(run_id)  # as it is now that this process holds it
        if options.get("ledger") is None:
            ledger = CallLedger()
            if registry is not None:
                ledger.restore(recorded_calls(record.plan.tasks, record.tasks, registry))
            options["ledger"] = ledger
        prior = {
            t: r for t, r in record.tasks.items() if r.status.ok or r.status is TaskStatus.WAITING
        }
        effects = store.effects(run_id)  # calls with side effects, by idempotency key
        if settings is None:
            settings = recorded_settings(record)
        return await execute(
            validate(record.plan, registry),
            registry,
            settings=settings,
            run_id=run_id,
            parent_id=record.parent_id,
            store=store,
            resuming=Resuming(prior, answers, effects),
            **options,
        )
    except BaseException:
        store.release_resume(run_id)  # nothing ran (or it was recorded as it ended)
        raise


def resume_sync(run: str, registry: Registry | None = None, **options: Any) -> RunResult:
    """:func:`resume` for scripts: runs its own event loop (do not call it from async code)."""

    async def main() -> RunResult:
        return await resume(run, registry, **options)

    return anyio.run(main)
