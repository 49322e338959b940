"""Terminal approval for ``dagagent run``: the plan shown before a run (``--approve``) and
questions before tool calls (``--ask TOOL``, ``--policy FILE``); without a terminal those
questions wait for a person (``dagagent approve``), or are denied with ``--no-wait``.

Questions and the plan go to stderr, so that ``--json`` output on stdout stays clean. Answers
are read from stdin in a daemon thread, so the event loop keeps running other tasks while a
question waits, and a question left unanswered never keeps the process alive.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.to_thread
import typer
from rich.console import Console

from ..approval import (
    Approval,
    ApprovalRequest,
    AskCallback,
    Policy,
    Rule,
    ask_later,
)
from ..errors import ConfigError, ToolArgumentsError, UnknownToolError
from ..plan import ToolTask
from ..text import jsonable
from ._app import EXIT_FAILED, err
from .progress import question_on_terminal
from .render import plan_table

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import Interceptor
    from ..tools import Registry
    from .rules import ApprovalRules

__all__ = [
    "LineReader",
    "TerminalAsker",
    "confirm_plan",
    "dag_drawing",
    "deny_without_terminal",
    "run_interceptors",
    "stdin_is_terminal",
]


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed or detached stdin
        return False


class LineReader:
    """Reads answers line by line from a stream without blocking the event loop.

    Each read happens in a daemon thread (a blocked read never keeps the process alive); the
    waiting question sleeps in a worker thread that is released as soon as the line arrives
    or the question is withdrawn. A read whose question was withdrawn (its task was
    cancelled) is kept and serves the next question; a line typed before that next question
    was shown is discarded, so that it cannot answer a question it was not meant for.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._pending: Future[tuple[str, float]] | None = None

    def _read(self, fut: Future[tuple[str, float]]) -> None:
        try:
            line = (self._stream or sys.stdin).readline()
        except BaseException as exc:  # reported to the waiting question
            fut.set_exception(exc)
        else:
            fut.set_result((line, time.monotonic()))

    async def readline(self, *, since: float = float("-inf")) -> str | None:
        """The next line typed after ``since`` (``time.monotonic()``), without its newline;
        ``None`` at end of input."""
        while True:
            fut = self._pending
            if fut is None:
                fut = self._pending = Future()
                threading.Thread(
                    target=self._read, args=(fut,), name="dagagent-answer", daemon=True
                ).start()
            if not fut.done():
                await _wait_for(fut)
            self._pending = None
            try:
                line, at = fut.result()
            except Exception:
                return None
            if not line:
                return None
            if at >= since:
                return line.rstrip("\r\n")


async def _wait_for(fut: Future[Any]) -> None:
    arrived = threading.Event()
    fut.add_done_callback(lambda _: arrived.set())
    try:
        await anyio.to_thread.run_sync(arrived.wait, abandon_on_cancel=True)
    finally:
        arrived.set()  # releases the worker thread when the question is withdrawn


class TerminalAsker:
    """An ``ask`` callback that asks on the terminal: ``y`` approves, ``n`` denies (with an
    optional reason), ``e`` edits the arguments as a JSON object (its keys replace those
    arguments; they are checked before the question ends). End of input denies."""

    decided_by = "user"

    def __init__(self, console: Console | None = None, reader: LineReader | None = None) -> None:
        self.console = console or err
        self.reader = reader or LineReader()
        self._lock = anyio.Lock()  # one question at a time, even across several policies

    def _say(self, text: str, *, end: str = "\n") -> None:
        self.console.print(text, end=end, markup=False, highlight=False)

    async def _read(self, prompt: str) -> str | None:
        self._say(prompt, end="")
        return await self.reader.readline(since=time.monotonic())

    async def __call__(self, request: ApprovalRequest) -> Approval:
        async with self._lock:
            with question_on_terminal():  # no progress line lands on the prompt
                return await self._ask(request)

    async def _ask(self, request: ApprovalRequest) -> Approval:
        by = self.decided_by
        self._say("")
        self._say(f"approval needed: {request.describe()} ({request.rule_label})")
        self._say(f"  arguments: {_json(request.args)}")
        try:
            while True:
                answer = await self._read("approve? [y]es / [n]o / [e]dit arguments: ")
                if answer is None:
                    self._say("")
                    return Approval.deny("no answer (end of input)", by=by)
                choice = answer.strip().lower()
                if choice in ("y", "yes"):
                    return Approval.approve(by=by)
                if choice in ("n", "no"):
                    why = await self._read("reason (optional, Enter to skip): ")
                    return Approval.deny((why or "").strip() or "not approved", by=by)
                if choice in ("e", "edit"):
                    edited = await self._edit(request)
                    if edited is not None:
                        return Approval.edit(edited, by=by)
                    continue
                self._say("please answer y, n or e")
        except anyio.get_cancelled_exc_class():
            self._say(f"\n(question withdrawn: task {request.task_id!r} was cancelled)")
            raise

    async def _edit(self, request: ApprovalRequest) -> dict[str, Any] | None:
        while True:
            text = await self._read("arguments as JSON (keys replace; Enter to go back): ")
            if text is None or not text.strip():
                return None
            try:
                given = json.loads(text)
            except json.JSONDecodeError as exc:
                self._say(f"not valid JSON: {exc.msg} (column {exc.colno})")
                continue
            if not isinstance(given, dict):
                self._say('give a JSON object, e.g. {"city": "Lyon"}')
                continue
            edited = {**request.args, **given}
            try:
                request.tool.validate_args(edited)
            except ToolArgumentsError as exc:
                self._say(f"{exc}; try again")
                continue
            return edited


async def deny_without_terminal(request: ApprovalRequest) -> Approval:
    """The ``ask`` callback when stdin is not a terminal: deny, and say why."""
    return Approval.deny(
        f"approval needed for tool {request.tool_name!r} but no terminal is attached "
        "(stdin is not a terminal)",
        by=request.rule_label,
    )


# -- the plan, before it runs ---------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False)


def dag_drawing(
    graph: PlanGraph, registry: Registry | None = None, policies: Sequence[Policy] = ()
) -> str:
    """The plan as levels with their incoming edges, in plain ASCII::

        level 0  paris (get_weather)
                 tokyo (get_weather)
                   |
        level 1  cmp (compare) <- paris, tokyo

    With policies, each tool task is marked with the first action other than ``allow`` it
    will meet: ``[ask]``, ``[deny]``, or ``[ask?]`` when that depends on arguments not known
    before the run (they come from references).
    """
    lines: list[str] = []
    for i, level in enumerate(graph.levels):
        if i:
            lines.append("           |")
        for j, tid in enumerate(level):
            task = graph.tasks[tid]
            head = f"level {i:<2} " if j == 0 else " " * 9
            line = f"{head}{tid} ({task.label})"
            deps = graph.dependencies[tid]
            if deps:
                line += " <- " + ", ".join(deps)
            mark = _preview(graph, registry, policies, tid)
            if mark:
                line += f"  [{mark}]"
            lines.append(line)
    return "\n".join(lines)


def _preview(
    graph: PlanGraph, registry: Registry | None, policies: Sequence[Policy], task_id: str
) -> str | None:
    task = graph.tasks[task_id]
    if not policies or registry is None or not isinstance(task, ToolTask):
        return None
    try:
        tool = registry.get(task.tool)
    except UnknownToolError:
        return None
    known = graph.templates[task_id].literal_keys()
    for policy in policies:
        action = policy.preview(tool, known, task_id)
        if action != "allow":
            return action
    return None


def confirm_plan(
    graph: PlanGraph,
    registry: Registry | None = None,
    policies: Sequence[tuple[str, Policy]] = (),
    *,
    console: Console | None = None,
    stream: TextIO | None = None,
) -> bool:
    """Show the plan (table, drawing, approval rules) and ask whether to run it.
    ``policies``: ``(title, policy)`` pairs, in the order they check each call."""
    c = console or err
    c.print(plan_table(graph, whole=True))
    c.print(dag_drawing(graph, registry, [p for _, p in policies]), markup=False, highlight=False)
    if policies:
        c.print("approval, checked in this order (first matching rule of each wins):", markup=False)
        for title, policy in policies:
            c.print(f"  {title}:", markup=False, highlight=False)
            for line in policy.describe():
                c.print(f"    {line}", markup=False, highlight=False)
    n = len(graph)
    c.print(f"Run this plan ({n} task{'s' if n != 1 else ''})? [y/N] ", end="", markup=False)
    line = (stream or sys.stdin).readline()
    if not line:
        c.print("", markup=False)
    return line.strip().lower() in ("y", "yes")


def run_interceptors(
    graph: PlanGraph | None,
    registry: Registry,
    *,
    approve: bool,
    rules: ApprovalRules,
    no_wait: bool = False,
) -> list[Interceptor]:
    """What ``dagagent run`` does with ``--approve``, ``--ask``, ``--policy`` and
    ``--no-wait`` (``rules``: the policy file's rules as read, and the ``--ask`` globs; for
    ``resume`` and ``replan``, the rules the run was recorded with).

    Each call is checked by the policy file first (its rules, then its default), then by the
    ``--ask`` rules: a call runs only if both let it, so a question on the command line never
    overrides a file's ``deny``, and a file's catch-all ``allow`` never silences ``--ask``.
    Questions go to the terminal; without one, the task waits for a person's decision
    (``dagagent approve``) and the run pauses, or, with ``no_wait``, the call is denied.
    With ``--approve`` the plan is shown and confirmed first (``graph=None``: no plan yet,
    ``approve`` must be false). Exits 2 when ``--approve`` has no terminal to ask on, 1 when
    the plan is not approved."""
    interactive = stdin_is_terminal()
    later: AskCallback = deny_without_terminal if no_wait else ask_later
    ask: AskCallback = TerminalAsker() if interactive else later
    policies: list[tuple[str, Policy]] = []
    policy = rules.policy_with(ask)
    if policy is not None:
        for problem in policy.check(registry):
            err.print(f"warning: policy file {rules.policy_file}: {problem}", markup=False)
        policies.append((f"policy file {rules.policy_file}", policy))
    if rules.asks:
        asked = [Rule(action="ask", tool=p, name=f"--ask {p}") for p in rules.asks]
        policies.append(("--ask", Policy(asked, ask=ask)))
        for pattern in rules.asks:
            if not registry.select(pattern):
                err.print(f"warning: --ask {pattern!r} matches no tool", markup=False)
    if not interactive and any(_may_ask(p) for _, p in policies):
        err.print(
            "warning: no terminal is attached: calls that need approval will be denied"
            if no_wait
            else "no terminal is attached: calls that need approval will wait for a decision "
            "(dagagent approvals; --no-wait denies them)",
            markup=False,
        )
    if approve:
        if not interactive:
            raise ConfigError(
                "--approve needs a terminal to ask on, but stdin is not a terminal "
                "(run without --approve, or from a terminal)"
            )
        assert graph is not None, "--approve needs the plan"
        if not confirm_plan(graph, registry, policies):
            err.print("run not approved: nothing was run", markup=False)
            raise typer.Exit(EXIT_FAILED)
    return [p for _, p in policies]


def rules_to_workers(
    executor: Any,
    rules: ApprovalRules,
    interceptors: list[Interceptor],
    *,
    no_wait: bool,
    what: str = "run",
) -> list[Interceptor]:
    """A run on Temporal (an executor that takes ``approval``): its approval rules go to the
    workers, where its calls are made, as data (:func:`dagagent.approval.run_policies`), and
    none stay in this process; a call they hold waits for a decision (``dagagent approve``,
    then ``resume``), nobody is asked here (``what`` pauses: the run, or the solve whose
    rounds' runs carry the rules); the policy's limits are counted across the run by its
    workflow. Any other run keeps ``interceptors``."""
    if not rules or not hasattr(executor, "approval"):
        return interceptors
    executor.approval = {**(rules.context() or {}), "no_wait": no_wait}
    err.print(
        f"note: {rules.describe()} apply on the Temporal workers: a call "
        + (
            "they hold is denied (--no-wait)"
            if no_wait
            else f"they hold waits for a decision (dagagent approvals), the {what} pauses"
        )
        + "; nobody is asked here",
        markup=False,
        highlight=False,
    )
    return []


def _may_ask(policy: Policy) -> bool:
    return policy.default == "ask" or any(r.action == "ask" for r in policy.rules)
