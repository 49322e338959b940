"""Run events, listeners, and structlog binding.

Listeners are plain callables ``(event) -> None`` given to ``execute(listeners=[...])``; they
run on the event loop, so they must be quick (the run store and the live progress display
are listeners). Nothing is built for events when no listener is registered.

Logging goes through structlog. When the application has not configured structlog, dagagent
logs only warnings and errors (to stderr), so a library user never sees debug noise; configure
structlog to see ``task.started`` / ``task.finished`` at debug level.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from .text import printable

if TYPE_CHECKING:
    from .llm import LiveCall
    from .plan import Plan, Task
    from .results import ModelCall, RunResult, TaskResult

__all__ = [
    "Emitter",
    "Event",
    "InSubSolve",
    "JoinerDecided",
    "Listener",
    "ModelCallFinished",
    "ModelCallRejected",
    "ModelCallStarted",
    "PlanExtended",
    "RoundFinished",
    "RoundStarted",
    "RunFinished",
    "RunStarted",
    "SubSolveFinished",
    "SubSolveStarted",
    "TaskAgentEvent",
    "TaskDecision",
    "TaskElementFinished",
    "TaskFinished",
    "TaskParsed",
    "TaskRetrying",
    "TaskStarted",
    "configure_logging",
    "get_logger",
]


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    plan: Plan
    executor: str
    parent_id: str | None = None
    kind: str = field(default="run.started", init=False)


@dataclass(frozen=True, slots=True)
class TaskStarted:
    run_id: str
    task_id: str
    at: float
    kind: str = field(default="task.started", init=False)


@dataclass(frozen=True, slots=True)
class TaskRetrying:
    run_id: str
    task_id: str
    attempt: int
    error: str
    delay_s: float
    kind: str = field(default="task.retrying", init=False)


@dataclass(frozen=True, slots=True)
class TaskDecision:
    """An approval decision (allow / deny / edit) about one tool call of a task."""

    run_id: str
    task_id: str
    tool: str
    decision: str
    decided_by: str
    reason: str | None = None
    kind: str = field(default="task.decision", init=False)


@dataclass(frozen=True, slots=True)
class TaskFinished:
    run_id: str
    result: TaskResult
    kind: str = field(default="task.finished", init=False)


@dataclass(frozen=True, slots=True)
class TaskElementFinished:
    """One element of a map task finished (its ``result.task_id`` is ``"<task>[<index>]"``);
    the map task's own :class:`TaskFinished`, holding every element, follows when the last
    one is done."""

    run_id: str
    task_id: str
    index: int
    result: TaskResult
    kind: str = field(default="task.element_finished", init=False)


@dataclass(frozen=True, slots=True)
class RunFinished:
    run_id: str
    result: RunResult
    kind: str = field(default="run.finished", init=False)


@dataclass(frozen=True, slots=True)
class TaskAgentEvent:
    """One thing the ReAct agent of an agent task did (``action``): a ``thought`` (``text``),
    a ``tool_call`` (``tool``, ``call_id``, ``args``), a ``tool_result`` (``text`` is the
    observation, ``is_error`` marks a failed call), its ``answer`` (``text``) or an ``error``
    (``text``; with a ``stop_reason`` the agent stopped without an answer), at ``step``."""

    run_id: str
    task_id: str
    action: str
    step: int
    text: str | None = None
    tool: str | None = None
    call_id: str | None = None
    args: Any = None
    is_error: bool = False
    stop_reason: str | None = None
    kind: str = field(default="task.agent", init=False)


@dataclass(frozen=True, slots=True)
class RoundStarted:
    """A round of :func:`dagagent.solve` begins: planning (round 1) or replanning the run
    ``parent_id`` with the joiner's ``feedback``. ``at``: Unix time."""

    solve_id: str
    round: int
    goal: str
    at: float
    parent_id: str | None = None
    feedback: str | None = None
    kind: str = field(default="round.started", init=False)


@dataclass(frozen=True, slots=True)
class JoinerDecided:
    """The joiner's decision about a round's run: ``finish`` (``answer``, ``cites``) or
    ``replan`` (``feedback``)."""

    solve_id: str
    round: int
    run_id: str
    action: str
    answer: Any = None
    cites: tuple[str, ...] = ()
    feedback: str = ""
    kind: str = field(default="joiner.decided", init=False)


@dataclass(frozen=True, slots=True)
class RoundFinished:
    """A round of :func:`dagagent.solve` ended. ``outcome``: ``answered``, ``replan`` (another
    round follows), ``gave_up`` or ``failed``; ``reason`` says why for the last two.
    ``run_id`` is the round's run (``None`` if nothing ran)."""

    solve_id: str
    round: int
    run_id: str | None
    outcome: str
    reason: str = ""
    kind: str = field(default="round.finished", init=False)


@dataclass(frozen=True, slots=True)
class SubSolveStarted:
    """Task ``task_id`` (its element ``element`` of a map, else ``None``) of run ``run_id``,
    a round of solve ``solve_id``, started sub-solve ``child_id`` (at ``depth``) for ``goal``;
    ``resumed``: one on record goes on. These two reach the listeners of every solve above
    it, and so do the sub-solve's own events, wrapped in :class:`InSubSolve`."""

    solve_id: str
    child_id: str
    run_id: str
    task_id: str
    element: int | None
    goal: str
    depth: int
    resumed: bool = False
    kind: str = field(default="subsolve.started", init=False)


@dataclass(frozen=True, slots=True)
class SubSolveFinished:
    """Sub-solve ``child_id`` of task ``task_id`` ended: ``status`` (``answered``,
    ``gave_up``...) and ``reason``."""

    solve_id: str
    child_id: str
    run_id: str
    task_id: str
    element: int | None
    status: str
    reason: str = ""
    kind: str = field(default="subsolve.finished", init=False)


@dataclass(frozen=True, slots=True)
class InSubSolve:
    """An event of sub-solve ``child_id`` (at ``depth``: 1 for a child of a top-level solve,
    2 for a child of that child...), started by task ``task_id`` (its element ``element`` of
    a map, else ``None``) of run ``run_id``, a round of solve ``solve_id``. ``event`` is the
    sub-solve's own event (its rounds, runs, tasks, model calls), as a listener given to it
    would have heard it. The listeners of every solve above it hear it so wrapped, once (the
    event of a grandchild is not wrapped twice: its ``child_id`` and ``depth`` are the
    grandchild's); ``SubSolveStarted`` and ``SubSolveFinished`` come unwrapped."""

    solve_id: str
    child_id: str
    run_id: str
    task_id: str
    element: int | None
    depth: int
    event: Event
    kind: str = field(default="subsolve.event", init=False)


@dataclass(frozen=True, slots=True)
class TaskParsed:
    """A task of a streamed plan, read and checked the moment the model finished writing it,
    ``since_s`` seconds after planning began. ``held``: it waits for the whole plan to
    validate before it may run (side effects, or an approval rule may ask or deny)."""

    run_id: str
    task_id: str
    task: Task
    since_s: float
    held: bool = False
    kind: str = field(default="task.parsed", init=False)


@dataclass(frozen=True, slots=True)
class PlanExtended:
    """The plan of a run that is still being written gained tasks; ``plan`` is the plan so
    far (a copy: it does not change afterwards), ``planned_at`` when each of its tasks
    joined it (Unix times: a task held until the plan was whole joined it then). The run
    store keeps its record up to date."""

    run_id: str
    plan: Plan
    planned_at: Mapping[str, float] = field(default_factory=dict)
    kind: str = field(default="run.plan_extended", init=False)


@dataclass(frozen=True, slots=True)
class ModelCallStarted:
    """A model call of a solve began: its ``role`` (planner, replanner, joiner, agent), the
    ``round``, the agent task it serves (``task_id``). ``call`` is the call as it happens
    (a :class:`~dagagent.llm.LiveCall`: what the model has written so far, how long it took):
    it keeps changing until :class:`ModelCallFinished` comes."""

    solve_id: str
    call: LiveCall
    role: str
    round: int | None = None
    task_id: str | None = None
    kind: str = field(default="model_call.started", init=False)


@dataclass(frozen=True, slots=True)
class ModelCallFinished:
    """A model call of a solve ended; ``record`` is what the run store keeps of it."""

    solve_id: str
    record: ModelCall
    kind: str = field(default="model_call.finished", init=False)


@dataclass(frozen=True, slots=True)
class ModelCallRejected:
    """The answer of a model call was rejected by its reader (a plan or a joiner's decision
    that cannot be used): ``record.issues`` say why; the model is asked again while attempts
    remain."""

    solve_id: str
    record: ModelCall
    kind: str = field(default="model_call.rejected", init=False)


Event = Union[  # noqa: UP007 - a runtime alias, kept valid on 3.10
    RunStarted,
    TaskStarted,
    TaskRetrying,
    TaskDecision,
    TaskFinished,
    TaskElementFinished,
    RunFinished,
    TaskAgentEvent,
    RoundStarted,
    JoinerDecided,
    RoundFinished,
    SubSolveStarted,
    SubSolveFinished,
    InSubSolve,
    TaskParsed,
    PlanExtended,
    ModelCallStarted,
    ModelCallFinished,
    ModelCallRejected,
]
Listener = Callable[[Event], None]


class Emitter:
    """Hands each event to every listener, in order. A listener that raises is logged (with
    ``logger``, if given) and skipped: a broken listener must not break the run."""

    __slots__ = ("_log", "listeners")

    def __init__(self, listeners: Sequence[Listener], logger: Any = None) -> None:
        self.listeners = tuple(listeners)
        self._log = logger

    def __call__(self, event: Event) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as exc:
                if self._log is not None:
                    self._log.warning("listener.failed", error=repr(exc), event_kind=event.kind)


_fallback: Any = None


def get_logger(**bound: Any) -> Any:
    """The dagagent logger: the application's structlog setup if there is one, else a
    warnings-only logger on stderr."""
    import structlog  # imported when first needed: it takes a quarter of a second

    global _fallback
    if structlog.is_configured():
        return structlog.get_logger("dagagent").bind(**bound)
    if _fallback is None:
        _fallback = structlog.wrap_logger(
            structlog.PrintLogger(_Stderr()),  # type: ignore[arg-type]
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            processors=[
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.dev.ConsoleRenderer(colors=False),
            ],
        )
    return _fallback.bind(**bound)


def debug_enabled(logger: Any) -> bool:
    """Whether ``logger.debug`` would emit anything (checked once per run, not per task)."""
    return enabled_for(logger, logging.DEBUG)


def enabled_for(logger: Any, level: int) -> bool:
    """Whether ``logger`` would emit events of ``level``: worth working out what they carry
    (a logger that cannot tell is taken to emit them)."""
    try:
        return bool(logger.is_enabled_for(level))
    except AttributeError:
        return True


class _Stderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing (it may be replaced, e.g.
    by a test harness capturing output, after logging was configured)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _printable_values(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """Text in a log line (a tool's output, a model's answer) with its control characters
    shown escaped, so that a log line cannot drive the terminal."""
    return {k: printable(v, lines=True) if isinstance(v, str) else v for k, v in event.items()}


class _LibraryLines(logging.Handler):
    """The log records of the libraries dagagent uses (the MCP SDK, httpx...) as one line
    each on stderr: control characters escaped, a URL's credentials hidden, and the
    traceback of an exception they log left out unless the level is DEBUG (an error a server
    causes is reported by dagagent's own message; a traceback is for bugs)."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.tracebacks = level <= logging.DEBUG

    def emit(self, record: logging.LogRecord) -> None:
        from .text import strip_url_credentials

        try:
            text = f"{record.levelname.lower()} {record.name}: {record.getMessage()}"
            if self.tracebacks and record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            sys.stderr.write(printable(strip_url_credentials(text), lines=True) + "\n")
        except Exception:
            self.handleError(record)


def configure_logging(
    level: int = logging.WARNING, *, json: bool = False, renderer: Any = None
) -> None:
    """Configure structlog for command-line use: level-filtered, to stderr; ``renderer``
    (a structlog processor returning the line) instead of structlog's console renderer; and
    the standard library's logging (what libraries log) the same way, one line per record."""
    import structlog

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _LibraryLines)]:
        root.removeHandler(handler)
    root.addHandler(_LibraryLines(level))
    if root.level > level:  # lowered for -v, never raised (an application's own setting)
        root.setLevel(level)

    if renderer is None:
        renderer = (
            structlog.processors.JSONRenderer()
            if json
            else structlog.dev.ConsoleRenderer(colors=False)
        )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            *(() if json else (_printable_values,)),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
