"""Running a plan from the CLI: always recorded in the run store, with the right progress
display attached and stop signals handled (:func:`run_recorded`)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings import RunSettings
from ._app import Interrupted, err, tools_spec

if TYPE_CHECKING:
    from rich.console import Console

    from ..graph import PlanGraph
    from ..results import RunResult
    from ..store import RunRecord

__all__ = [
    "interrupted_message",
    "recorded_mcp_spec",
    "recorded_tools_spec",
    "run_recorded",
    "say_recorded",
    "tools_context",
]


def run_recorded(
    graph: PlanGraph,
    registry: Any,
    *,
    console: Console | None,
    store: str | Path | None = None,
    run_id: str | None = None,
    listeners: tuple[Any, ...] = (),
    live: bool = True,
    tools_spec: str | None = None,
    mcp_specs: tuple[str, ...] = (),
    skills_dir: Path | None = None,
    approval: dict[str, Any] | None = None,
    agents: dict[str, Any] | None = None,
    **options: Any,
) -> RunResult:
    """Run a validated plan, recording it in the run store (``store``, or the default path),
    with progress on ``console`` (``None``: no progress; ``live=False``: plain lines even on a
    terminal). ``tools_spec`` (see :func:`recorded_tools_spec`), ``mcp_specs`` (``--mcp``) and
    ``skills_dir`` (``--skills``) are recorded with the run, so that ``replan``, ``resume`` and
    ``approve`` load the same tools by default, and so are the approval rules (``approval``:
    see :meth:`~dagagent.cli.rules.ApprovalRules.context`), so that ``resume`` asks the same
    questions, and what its agent tasks were given (``agents``: the model, its server and
    timeouts, ``--max-tools``), so that ``resume`` gives them the same (the run's settings
    are recorded by ``execute``). Returns the result."""
    import asyncio

    from ..errors import StoreError
    from ..run import execute, new_run_id
    from ..store import RunStore
    from ..tools._loop import run_own_loop
    from .progress import LiveProgress, progress_for
    from .signals import stoppable

    run_id = run_id or new_run_id()
    context = tools_context(tools_spec, mcp_specs, skills_dir)
    settings: RunSettings = options.get("settings") or RunSettings()
    if approval:  # what 'dagagent resume' asks with
        context["approval"] = approval
    context.update(agents or {})  # what 'dagagent resume' gives the agent tasks
    progress = progress_for(graph, console, live=live) if console is not None else None
    if progress is not None:
        listeners = (*listeners, progress)
    executor: Any = settings.executor
    reach = getattr(executor, "reach", None)
    if callable(reach):  # a run on Temporal: where 'dagagent resume' finds its workflow
        context["temporal"] = reach()
    if getattr(executor, "on_progress", False) is None:  # say what happens while it starts
        executor.on_progress = (
            progress.note if isinstance(progress, LiveProgress) else _say_on_stderr
        )
    with RunStore(store, context=context or None) as run_store:

        async def main() -> RunResult:
            return await stoppable(
                execute(
                    graph, registry, store=run_store, run_id=run_id, listeners=listeners, **options
                )
            )

        try:
            if progress is None:
                return run_own_loop(main)
            with progress:
                return run_own_loop(main)
        except (KeyboardInterrupt, asyncio.CancelledError):  # see guard: 3.10 gives the latter
            try:  # execute raises instead of returning the result: its record has it
                record: RunRecord | None = run_store.get_run(run_id)
                in_doubt = sum(1 for e in run_store.effects(run_id) if e.in_doubt)
            except StoreError:  # stopped before the run was recorded (a cluster starting)
                record, in_doubt = None, 0
            raise Interrupted(
                interrupted_message(record, store, in_doubt),
                record.as_result().to_json_dict() if record is not None else None,
            ) from None


def _say_on_stderr(text: str) -> None:
    err.print(text, markup=False, highlight=False)


def interrupted_message(
    record: RunRecord | None, store: str | Path | None, in_doubt: int = 0
) -> str:
    """What Ctrl-C during a run leaves behind (``record``: ``None`` if nothing) and how to go
    on: the run's id and the commands that show it and run the rest of it (``replan
    --execute`` reuses every task that succeeded), and, with calls in doubt on its record
    (``in_doubt``: calls with side effects it cut off), the command that lists them."""
    if record is None:
        return "interrupted before the run started: nothing was recorded"
    run_id = record.run_id
    where = f" --store {shlex.quote(str(store))}" if store is not None and str(store) else ""
    done = sum(1 for r in record.tasks.values() if r.status.ok)
    those = "that one" if done == 1 else f"those {done}"
    reuses = f"  # reuses {those}" if done else ""  # the line fits 80 columns
    doubt = (
        f"  in doubt:     dagagent approvals --run {run_id}{where}  # {in_doubt} call"
        f"{'s' if in_doubt != 1 else ''}: check, then approve\n"
        if in_doubt
        else ""
    )
    return (
        f"interrupted: run {run_id} is recorded as cancelled ({done} of "
        f"{len(record.plan.tasks)} tasks succeeded)\n"
        f"  see it:       dagagent show {run_id}{where}\n"
        f"{doubt}"
        f"  run the rest: dagagent replan {run_id}{where} --execute{reuses}"
    )


def tools_context(
    tools_spec: str | None, mcp_specs: Sequence[str], skills: Path | None = None
) -> dict[str, Any]:
    """The tools a run or a solve is recorded with (``replan``, ``resume`` and ``approve``
    load them again): the module spec (see :func:`recorded_tools_spec`), the ``--mcp``
    servers, each without its secrets (see :func:`recorded_mcp_spec`), and the ``--skills``
    folder (its absolute path)."""
    context: dict[str, Any] = {"tools": tools_spec} if tools_spec else {}
    if mcp_specs:
        context["mcp"] = [recorded_mcp_spec(m) for m in mcp_specs]
    if skills is not None:
        context["skills"] = str(Path(skills).resolve())
    return context


def recorded_mcp_spec(spec: str) -> str:
    """An ``--mcp NAME=COMMAND|URL`` as the store keeps it: every secret in the command or
    the URL (an environment assignment, an option or header named like a secret, a query
    parameter, a URL's password) hidden by :func:`~dagagent.text.redact_command_line`."""
    from ..text import redact_command_line

    name, sep, target = spec.partition("=")
    return f"{name}{sep}{redact_command_line(target)}" if sep else redact_command_line(spec)


def recorded_tools_spec(spec: str | None, mcp: Sequence[str] = ()) -> str | None:
    """The module tools a CLI run loads (``--tools``, else ``$DAGAGENT_TOOLS``, else, without
    ``--mcp``, the demo tools), with a file path made absolute so that it still works from
    another directory."""
    spec = tools_spec(spec, mcp)
    if spec is None:
        return None
    target, sep, attr = spec.rpartition(":")
    if sep and (target.endswith(".py") or os.sep in target) and Path(target).is_file():
        return f"{Path(target).resolve()}:{attr}"
    return spec


def say_recorded(
    result: RunResult, store: str | Path | None, *, detail: str = "", quiet: bool = False
) -> bool:
    """Say on stderr where the run is recorded (``detail`` inside the parentheses), unless
    ``quiet``; but only if the store holds all of it. If it does not, say what is missing
    whatever ``quiet`` says, and return ``False``."""
    from ..store import default_store_path

    path = default_store_path(store)
    loss = result.record_loss
    if loss is None:
        if not quiet:
            extra = f" ({detail})" if detail else ""
            err.print(
                f"recorded as run {result.run_id}{extra} in {path}", markup=False, highlight=False
            )
        return True
    if loss.run:
        message = f"error: run {result.run_id} was NOT recorded in {path}: {loss.error}"
    else:
        message = (
            f"error: the record of run {result.run_id} in {path} is incomplete: "
            f"{', '.join(loss.parts)} could not be written ({loss.error})"
        )
    err.print(message, markup=False, highlight=False)
    return False
