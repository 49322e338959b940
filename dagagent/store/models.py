"""The records a run store gives back: :class:`RunSummary` (one line of ``dagagent runs``) and
:class:`RunRecord` (a whole run)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..graph import finished_critical_path, recorded_graph
from ..llm import Usage
from ..plan import Plan
from ..results import (
    ApprovalState,
    DecisionSource,
    ModelCall,
    PersonDecision,
    RoundOutcome,
    RunResult,
    RunStatus,
    SolveStatus,
    StatusCounts,
    TaskResult,
)

__all__ = [
    "ApprovalRecord",
    "ChildSolve",
    "DamagedRun",
    "EffectRecord",
    "RoundRecord",
    "RunRecord",
    "RunSummary",
    "SessionRecord",
    "SessionSummary",
    "SessionTurnRecord",
    "SolveLink",
    "SolveRecord",
    "SolveSummary",
]

# The three run models share their names: run_id, status (a RunStatus), counts (a member
# holding {status value: n}), parent_id, goal, executor, started_at, finished_at.


class RunSummary(BaseModel):
    """One line of ``dagagent runs``."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    parent_id: str | None
    created: float
    goal: str
    status: RunStatus = Field(
        description="running, succeeded, failed, cancelled, or interrupted "
        "(the process that ran it is gone without finishing it)"
    )
    executor: str
    started_at: float | None
    finished_at: float | None
    n_tasks: int
    counts: dict[str, int]
    in_doubt: int = Field(
        default=0,
        description="calls of tools with side effects that started and have no outcome on "
        "record, in a run that is not running: whether they happened is unknown",
    )

    @property
    def unrecorded(self) -> int:
        """Tasks of the plan without a recorded result (the run did not get to finish)."""
        return max(0, self.n_tasks - sum(self.counts.values()))


class DamagedRun(BaseModel):
    """A run whose record cannot be read (``dagagent runs`` names it and lists the others)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    problem: str


class RunRecord(BaseModel):
    """A recorded run: its plan and every recorded task result (in plan order)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    run_id: str
    parent_id: str | None
    created: float
    goal: str
    status: RunStatus
    executor: str
    started_at: float | None
    finished_at: float | None
    critical_path: list[str]
    critical_path_s: float | None
    plan: Plan
    tasks: dict[str, TaskResult]
    fingerprints: dict[str, str] = Field(
        default_factory=dict,
        description="task_fingerprint(task, args) of every task with recorded arguments "
        "(not redacted ones)",
    )
    context: dict[str, Any] = Field(default_factory=dict)
    planned_at: dict[str, float] = Field(
        default_factory=dict,
        description="a plan written while it ran (streamed): when each task joined the plan "
        "(Unix times; a task held until the plan was whole joined it then)",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="the settings the run was started with, or last resumed with "
        "(RunSettings.to_record() without the executor, which `executor` names: on_failure, "
        "max_concurrency, max_elements, in_doubt, retry); a resume goes on with them unless "
        "given others. Empty for a run recorded before dagagent kept them (a resume then "
        "uses the defaults)",
    )

    @property
    def counts(self) -> StatusCounts:
        """How many recorded tasks ended in each status."""
        return StatusCounts.of(self.tasks.values())

    @property
    def unrecorded(self) -> list[str]:
        """Plan tasks without a result: the run was killed before they finished."""
        return [t.id for t in self.plan.tasks if t.id not in self.tasks]

    def measured_critical_path(self) -> tuple[float, list[str]]:
        """``(seconds, task ids)`` of the run's critical path: the recorded one, or, for a run
        that did not finish (so none was recorded), the one its recorded durations give
        (tasks that finished; reused tasks take no time: see
        :func:`~dagagent.graph.finished_critical_path`)."""
        if self.critical_path:
            return self.critical_path_s or 0.0, self.critical_path
        graph = recorded_graph(self.plan)  # the graph only: no tools are needed to measure it
        return finished_critical_path(graph.order, graph.dependencies, self.tasks)

    @property
    def wall_time_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def as_result(self) -> RunResult:
        """The run as the :class:`~dagagent.RunResult` it ended with (a run that did not end
        gets its creation time as its start and end)."""
        started = self.started_at if self.started_at is not None else self.created
        return RunResult(
            run_id=self.run_id,
            status=self.status,
            goal=self.goal,
            executor=self.executor,
            tasks=self.tasks,
            started_at=started,
            finished_at=self.finished_at if self.finished_at is not None else started,
            critical_path=list(self.critical_path),
            critical_path_s=self.critical_path_s or 0.0,
            parent_id=self.parent_id,
        )

    def to_json_dict(self) -> dict[str, Any]:
        # what not every run has (streamed plans; runs recorded since settings are kept)
        optional: dict[str, Any] = {"planned_at": self.planned_at} if self.planned_at else {}
        if self.settings:
            optional["settings"] = self.settings
        return {
            "run_id": self.run_id,
            "parent_id": self.parent_id,
            "created": self.created,
            "status": self.status.value,
            "goal": self.goal,
            "executor": self.executor,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_time_s": self.wall_time_s,
            "critical_path": self.critical_path,
            "critical_path_s": self.critical_path_s,
            "counts": dict(self.counts),
            "unrecorded": self.unrecorded,
            "context": self.context,
            **optional,
            "plan": self.plan.model_dump(mode="json", exclude_defaults=True),
            "tasks": {
                k: {**r.to_json_dict(), "fingerprint": self.fingerprints.get(k)}
                for k, r in self.tasks.items()
            },
        }


class RoundRecord(BaseModel):
    """One recorded round of a solve: its run (``None`` if nothing ran), how it ended
    (``answered``, ``replan``, ``gave_up``, ``failed``, ``paused``: its run waits for a
    person's decision; ``running`` while under way,
    ``cancelled`` if stopped, ``interrupted`` if its process died) and why, the joiner's decision
    (``{"action": "finish", "answer", "cites"}`` or ``{"action": "replan", "feedback"}``),
    and the feedback its plan was revised with."""

    model_config = ConfigDict(frozen=True)

    round: int
    run_id: str | None
    outcome: RoundOutcome
    reason: str = ""
    decision: dict[str, Any] | None = None
    feedback: str | None = None
    at: float

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SolveLink(BaseModel):
    """Where a sub-solve comes from: the task ``task_id`` (its element ``element`` when it is
    a map task's, else ``None``) of run ``run_id``, a round of solve ``solve_id``."""

    model_config = ConfigDict(frozen=True)

    solve_id: str
    run_id: str
    task_id: str
    element: int | None = None

    def describe(self) -> str:
        """``"task 'eu' (element 2) of run 1a2b3c4d5e6f, solve 9f8e7d6c5b4a"``."""
        element = f" (element {self.element})" if self.element is not None else ""
        return f"task {self.task_id!r}{element} of run {self.run_id}, solve {self.solve_id}"


class ChildSolve(BaseModel):
    """A sub-solve as its parent lists it: its id, where it comes from (``link``), its goal,
    status and reason, and its answer."""

    model_config = ConfigDict(frozen=True)

    solve_id: str
    link: SolveLink
    goal: str
    status: SolveStatus
    reason: str = ""
    answer: Any = None
    created: float = 0.0


class SolveRecord(BaseModel):
    """A recorded solve: the goal, how it ended (``running`` while under way,
    ``interrupted`` if its process died first, ``paused`` while its last round's run waits
    for a person's decision), the answer in full and the tasks it cites
    (in run ``run_id``), the usage by role, every round recorded so far, and every model call
    (``calls``, in the order they started)."""

    model_config = ConfigDict(frozen=True)

    solve_id: str
    goal: str
    created: float
    status: SolveStatus
    reason: str = ""
    answer: Any = None
    cites: list[str] = Field(default_factory=list)
    run_id: str | None = None
    #: What each role used (``planner``, ``agents``, ``joiner``), as far as it is recorded.
    usage: dict[str, Usage] | None = None
    finished_at: float | None = None
    rounds: list[RoundRecord] = Field(default_factory=list)
    #: The options it was started with (``None`` for a solve recorded before they were).
    options: dict[str, Any] | None = None
    calls: list[ModelCall] = Field(default_factory=list)
    #: A sub-solve's task (``None`` for a solve no task started), and how deep it is.
    parent: SolveLink | None = None
    depth: int = 0
    #: The sub-solves its tasks started, oldest first.
    children: list[ChildSolve] = Field(default_factory=list)

    def children_of(self, run_id: str, task_id: str) -> list[ChildSolve]:
        """The sub-solves task ``task_id`` of run ``run_id`` started (one per element of a
        map task; a retried task's again), oldest first."""
        return [c for c in self.children if c.link.run_id == run_id and c.link.task_id == task_id]

    def round_of(self, run_id: str) -> RoundRecord | None:
        """The round whose run is ``run_id``."""
        return next((r for r in self.rounds if r.run_id == run_id), None)

    def calls_of(self, round: int | None) -> list[ModelCall]:
        """The model calls of round ``round`` (``None``: those of no round)."""
        return [c for c in self.calls if c.round == round]

    @property
    def spent(self) -> Usage:
        """What its recorded model calls used, all roles together."""
        return sum((c.usage for c in self.calls), Usage())

    def spent_by_role(self) -> dict[str, Usage]:
        """What its recorded model calls used, by role (in the order roles first came)."""
        out: dict[str, Usage] = {}
        for c in self.calls:
            out[c.role] = out.get(c.role, Usage()) + c.usage
        return out

    @property
    def models(self) -> list[str]:
        """The models its calls used, in the order they first came."""
        return list(dict.fromkeys(c.model for c in self.calls if c.model))

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "solve_id": self.solve_id,
            "goal": self.goal,
            "created": self.created,
            "status": self.status.value,
            "reason": self.reason,
            "answer": self.answer,
            "cites": list(self.cites),
            "run_id": self.run_id,
            "usage": None
            if self.usage is None
            else {role: u.to_json_dict() for role, u in self.usage.items()},
            "finished_at": self.finished_at,
            "rounds": [r.to_json_dict() for r in self.rounds],
            "spent": self.spent.to_json_dict(),
            "calls": [c.to_json_dict() for c in self.calls],
            "parent": self.parent.model_dump() if self.parent is not None else None,
            "depth": self.depth,
            "children": [
                {
                    "solve_id": c.solve_id,
                    **c.link.model_dump(exclude={"solve_id"}),
                    "status": c.status.value,
                    "reason": c.reason,
                }
                for c in self.children
            ],
        }


class SolveSummary(BaseModel):
    """One solve in a list of solves: its goal, status, when, its rounds' runs, and what its
    model calls used (``spent``, with ``models``)."""

    model_config = ConfigDict(frozen=True)

    solve_id: str
    goal: str
    created: float
    finished_at: float | None
    status: SolveStatus
    reason: str = ""
    answer: Any = None
    run_ids: list[str] = Field(default_factory=list)
    spent: Usage = Field(default_factory=Usage)
    models: list[str] = Field(default_factory=list)
    #: A sub-solve's parent solve (``None`` for a solve no task started).
    parent_solve_id: str | None = None


class ApprovalRecord(BaseModel):
    """A call an ``ask`` rule left for a person (what ``dagagent approvals`` lists), and what
    became of it.

    ``state``: ``waiting`` (nobody decided yet), ``decided`` (a decision waits for a resume),
    ``used`` (a resume used the decision; it is never used again) or ``closed`` (the run
    moved on without it: a resume asked again, or the run ended; ``note`` says which).
    ``args`` are the call's arguments when it was asked (after any redaction), ``rule`` the
    rule that asked, ``seq`` counts the questions about the task (a task asked again after a
    resume gets the next one)."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    task_id: str
    seq: int
    tool: str
    args: Any = None
    rule: str | None = None
    source: DecisionSource = "plan"
    asked_at: float
    state: ApprovalState
    decision: PersonDecision | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    edit_args: dict[str, Any] | None = None
    used_at: float | None = None
    note: str | None = None

    @property
    def open(self) -> bool:
        """Whether a person may still decide about it."""
        return self.state == "waiting"

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class EffectRecord(BaseModel):
    """A call of a tool with side effects, as the store keeps it (see
    :mod:`dagagent.store._effects`): who made it (run, task, map ``element``, ``source``),
    what it was (``tool``, ``args``, ``fingerprint``), its ``key`` (the idempotency key its
    tool could read), its last ``attempt`` and ``state`` (``started``, ``succeeded``,
    ``failed``, ``cancelled``), its ``output`` or ``error``, and, for a call that was in
    doubt, how that was resolved (``resolution``: ``happened``, ``not_happened``, ``denied``;
    ``resolved_by``, ``reason``).

    ``in_doubt``: its run is not running and it has no outcome (it started, or was stopped
    during its call) and nothing resolved it yet: whether it happened is unknown."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    key: str
    task_id: str
    element: int | None = None
    occurrence: int = 1
    tool: str
    fingerprint: str
    source: DecisionSource = "plan"
    args: Any = None
    attempt: int = 1
    state: str
    output: Any = None
    error: str | None = None
    started_at: float
    ended_at: float | None = None
    pid: int | None = None
    resolution: str | None = None
    resolved_by: str | None = None
    resolved_at: float | None = None
    reason: str | None = None
    in_doubt: bool = False

    @property
    def where(self) -> str:
        if self.element is None:
            return f"task {self.task_id!r}"
        return f"element {self.element} of task {self.task_id!r}"

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class SessionTurnRecord(BaseModel):
    """One turn of a session: its number, its solve (``solve_id``; its status, answer and
    final run ``run_id`` as recorded), the question, and the summary of turns
    ``1..summarized`` its models saw instead of those turns (``None``: none)."""

    model_config = ConfigDict(frozen=True)

    turn: int
    solve_id: str
    question: str
    created: float
    status: SolveStatus
    answer: Any = None
    run_id: str | None = None
    summary: str | None = None
    summarized: int = 0
    #: Whether its solve is on record: a turn whose process died between taking its number
    #: and starting its solve has none (it is ``interrupted``, and nothing of it ran).
    solve_recorded: bool = True


class SessionRecord(BaseModel):
    """A recorded session: its name, when it began, the options it was opened with, and
    every turn, oldest first."""

    model_config = ConfigDict(frozen=True)

    name: str
    created: float
    options: dict[str, Any] = Field(default_factory=dict)
    turns: list[SessionTurnRecord] = Field(default_factory=list)

    @property
    def last(self) -> SessionTurnRecord | None:
        return self.turns[-1] if self.turns else None


class SessionSummary(BaseModel):
    """One session in a list of sessions: its turns, when it began and last moved, and its
    latest question and status."""

    model_config = ConfigDict(frozen=True)

    name: str
    created: float
    updated: float
    turns: int
    last_question: str = ""
    last_status: SolveStatus | None = None
