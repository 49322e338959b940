"""The plan as typed data: a goal and its tasks, each a tool call or an agent's sub-goal.

**Two kinds of task**, one type each, sharing :class:`BaseTask` (``id``, ``depends_on``,
``when``, ``retries``, ``timeout_s``, ``description``, the map options): a :class:`ToolTask` calls a
registered ``tool`` with ``args``; an :class:`AgentTask` gives an ``instruction`` to the ReAct
micro-agent, with an optional ``tools`` subset; with ``"solve": true`` its sub-goal is reached
by a solve of its own instead (a *sub-solve*, which runs only inside a solve: see
:mod:`dagagent.workflows.subsolve`). :data:`Task` is their union. A plan file has no
key naming the kind: a task with a ``tool`` (not ``null``) is a tool task, any other an agent
task. A task that mixes the kinds (``tool`` and ``instruction``, an agent task with ``args``, a
tool task with ``tools`` or ``solve``) is reported as an issue of that task
(``tool_and_instruction``, ``agent_args``, ``tool_tools``, ``tool_solve``) when the plan is
read (see :mod:`._loading`).

**Task ids** must match ``[A-Za-z0-9_][A-Za-z0-9_-]{0,63}``: letters, digits, ``_`` and ``-``,
at most 64 characters, not starting with ``-``. Dots are reserved: in a reference
``${fetch.items.0}`` the first segment is the task id and the rest is a path into its output.

**Map tasks.** Either kind of task may carry ``for_each``: a ``${ref}`` to a list an upstream
task returns, or a literal list. The task then runs once per element (an *element run*), and
its output is the list of the elements' outputs, in order. In its ``args`` (or instruction)
``${@item}`` is the current element and ``${@index}`` its position from 0 (see
:mod:`dagagent.references`). ``max_concurrency`` bounds how many of its elements run at once;
with ``allow_partial`` the task succeeds when some elements fail, its output holding ``null``
for them.

**Conditions.** Either kind of task may carry ``when``: a condition over references
(``"${search.count} > 0"``, ``"not ${check.ok}"``; see :mod:`dagagent.conditions`). The task
runs only if it holds once the tasks it reads have succeeded; otherwise it is ``skipped``,
and so is every task that depends on a skipped task.

**Fingerprints.** :func:`task_fingerprint` is what makes a task's output reusable by a later run:
its id, what it calls, and its resolved input.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError

from ..errors import Issue
from ..text import jsonable

__all__ = [
    "ID_PATTERN",
    "ID_RE",
    "MAX_RETRIES",
    "TASK_TAGS",
    "AgentTask",
    "BaseTask",
    "KindIssues",
    "Plan",
    "Task",
    "ToolTask",
    "element_key",
    "same_call",
    "task_fingerprint",
]

ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}"
ID_RE = re.compile(rf"{ID_PATTERN}\Z")  # \Z, not $: "a\n" is not an id
MAX_RETRIES = 100  # a plan asking for more (a model's 1e20, say) would retry practically forever

# The order of a task's keys in plan JSON, whichever class declares them.
_KEY_ORDER = {
    k: i
    for i, k in enumerate(
        (
            "id",
            "tool",
            "instruction",
            "args",
            "depends_on",
            "when",
            "retries",
            "timeout_s",
            "description",
            "tools",
            "solve",
            "for_each",
            "max_concurrency",
            "allow_partial",
        )
    )
}


_JSON_KINDS = {dict: "an object", int: "a number", float: "a number", bool: "true or false"}


class BaseTask(BaseModel):
    """What every task has, whatever it does: an id, what it waits for, retries, a timeout."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: ClassVar[Literal["tool", "agent"]]

    id: str = Field(description="Unique id; see the id rule in the module docstring.")
    depends_on: list[str] = Field(default_factory=list, description="Ids this task waits for.")
    when: str | None = Field(
        default=None,
        description=(
            'Run the task only if this condition holds, e.g. "${search.count} > 0"; '
            "else it is skipped (see dagagent.conditions)."
        ),
    )
    retries: int | None = Field(
        default=None, ge=0, le=MAX_RETRIES, description="Extra attempts after a failure."
    )
    timeout_s: float | None = Field(default=None, gt=0, description="Per-attempt timeout.")
    description: str | None = None
    for_each: str | list[Any] | None = Field(
        default=None,
        description=(
            "Run the task once per element of this list: a ${task_id.path} reference or a "
            "literal list; ${@item} is the element and ${@index} its position."
        ),
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, description="A map task: at most this many elements at once."
    )
    allow_partial: bool = Field(
        default=False,
        description="A map task: succeed with null for the elements that failed.",
    )

    @field_validator("for_each", mode="before")
    @classmethod
    def _list_or_reference(cls, value: Any) -> Any:
        if value is None or isinstance(value, (str, list)):
            return value
        raise PydanticCustomError(
            "for_each",
            "for_each must be a list, or one ${task_id.path} reference to a list, not {kind}",
            {"kind": _JSON_KINDS.get(type(value), type(value).__name__)},
        )

    @property
    def is_map(self) -> bool:
        """Whether the task runs once per element of a list (it has ``for_each``)."""
        return self.for_each is not None

    @property
    @abstractmethod
    def template_source(self) -> Any:
        """What may hold ``${...}`` references: a tool task's args, an agent's instruction."""

    @property
    @abstractmethod
    def label(self) -> str:
        """What the task does, in a word: its tool's name, or ``agent``."""

    @property
    @abstractmethod
    def tool_names(self) -> tuple[str, ...] | None:
        """The tools the task may call; ``None``: any tool of the registry."""

    @abstractmethod
    def fingerprint(self, resolved: Any) -> str:
        """See :func:`task_fingerprint`."""

    @model_serializer(mode="wrap")
    def _in_plan_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: data[k] for k in sorted(data, key=_KEY_ORDER.__getitem__)}


class ToolTask(BaseTask):
    """A call of a registered tool with arguments (which may hold references)."""

    kind: ClassVar[Literal["tool"]] = "tool"

    tool: str = Field(description="Registered tool to call.")
    args: dict[str, Any] = Field(default_factory=dict, description="Tool arguments.")

    @property
    def template_source(self) -> dict[str, Any]:
        return self.args

    @property
    def label(self) -> str:
        return self.tool

    @property
    def tool_names(self) -> tuple[str, ...]:
        return (self.tool,)

    def fingerprint(self, resolved: Any) -> str:
        return _fingerprint(self.id, self.tool, None, resolved)


class AgentTask(BaseTask):
    """A sub-goal for the ReAct micro-agent, which may use the registry's tools (or a subset)."""

    kind: ClassVar[Literal["agent"]] = "agent"

    instruction: str = Field(description="Sub-goal for the ReAct micro-agent (agent task).")
    tools: list[str] | None = Field(
        default=None, description="Agent task: the subset of tools the agent may use."
    )
    solve: bool = Field(
        default=False,
        description=(
            "Reach the sub-goal with a solve of its own (plan, run, join rounds) instead of "
            "the ReAct agent: a sub-solve (see dagagent.workflows.subsolve)."
        ),
    )

    @property
    def template_source(self) -> str:
        return self.instruction

    @property
    def label(self) -> str:
        return "sub-solve" if self.solve else "agent"

    @property
    def tool_names(self) -> tuple[str, ...] | None:
        return None if self.tools is None else tuple(self.tools)

    def fingerprint(self, resolved: Any) -> str:
        return _fingerprint(self.id, None, self.tools, resolved, solve=self.solve)


def _fingerprint(
    task_id: str, tool: str | None, tools: list[str] | None, resolved: Any, *, solve: bool = False
) -> str:
    payload = {"id": task_id, "tool": tool, "tools": tools, "input": jsonable(resolved)}
    if solve:  # a sub-solve's answer is not an agent's, nor the other way round
        payload["solve"] = True
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def task_fingerprint(task: Task, resolved: Any) -> str:
    """What makes a task's output reusable: its id, tool (or instruction and tool subset) and
    its resolved inputs. Equal fingerprints → the earlier output may be reused."""
    return task.fingerprint(resolved)


def element_key(task_id: str, fingerprint: str) -> str:
    """Where a reuse map (``execute(reuse=...)``) keeps an element of map task ``task_id`` whose
    fingerprint (:func:`task_fingerprint` of its resolved input) is ``fingerprint``: an element
    is reused for the same input wherever it stands in the list. ``@`` is never in a task id."""
    return f"{task_id}@{fingerprint}"


def same_call(a: Task, b: Task) -> bool:
    """Whether ``a`` and ``b`` make the same call as written, before references resolve: the
    same fingerprint of their unresolved inputs (and, for a map, the same list)."""
    return (
        a.fingerprint(a.template_source) == b.fingerprint(b.template_source)
        and a.for_each == b.for_each
    )


# ---------------------------------------------------------------------------------------------
# Telling the kinds apart in plan JSON


class KindIssues(list[Issue]):
    """Validation context of :func:`~dagagent.plan.read_plan`: a task mixing the two kinds is
    recorded here (and the stray key set aside) instead of failing validation."""


def _mixed(info: ValidationInfo, data: dict[str, Any], key: str, code: str, message: str) -> None:
    if not isinstance(info.context, KindIssues):
        raise PydanticCustomError(code, message)
    task_id = data.get("id")
    info.context.append(Issue(code, task_id if isinstance(task_id, str) else None, message))
    del data[key]


def _as_tool_task(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """A tool task with a null ``instruction`` or ``tools`` key, or a stray one."""
    data = dict(value)
    if data.get("instruction") is not None:
        msg = "a task has either 'tool' or 'instruction', not both"
        _mixed(info, data, "instruction", "tool_and_instruction", msg)
    if data.get("tools") is not None:
        msg = "a tool task takes 'args', not 'tools' (a tools subset is for agent tasks)"
        _mixed(info, data, "tools", "tool_tools", msg)
    if data.get("solve"):
        msg = "a tool task calls its tool: 'solve' is for a task with an 'instruction'"
        _mixed(info, data, "solve", "tool_solve", msg)
    data.pop("instruction", None)
    data.pop("tools", None)
    data.pop("solve", None)
    return data


def _as_agent_task(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
    """An agent task with a null ``tool``, empty ``args`` or no instruction, or stray args.

    A missing instruction reads as an empty one, which :func:`dagagent.validate` reports
    (``missing_instruction``) together with the plan's other issues."""
    data = dict(value)
    data.pop("tool", None)  # None, or the task would be a tool task
    if data.get("args"):
        _mixed(info, data, "args", "agent_args", "an agent task takes an 'instruction', not 'args'")
    data.pop("args", None)
    if data.get("instruction") is None:
        data["instruction"] = ""
    return data


def _kind(value: Any) -> str | None:
    """The union member for ``value``: a task's kind, and whether its keys need tidying first."""
    if isinstance(value, dict):
        if value.get("tool") is not None:
            clean = "instruction" not in value and "tools" not in value and "solve" not in value
            return "tool" if clean else "tool?"
        if "tool" in value or "args" in value or value.get("instruction") is None:
            return "agent?"
        return "agent"
    if isinstance(value, BaseTask):
        return value.kind
    return None


#: The tags of the task union's members (a validation error's location names one).
TASK_TAGS = frozenset({"tool", "agent", "tool?", "agent?"})

Task: TypeAlias = Annotated[
    (
        Annotated[ToolTask, Tag("tool")]
        | Annotated[AgentTask, Tag("agent")]
        | Annotated[ToolTask, BeforeValidator(_as_tool_task), Tag("tool?")]
        | Annotated[AgentTask, BeforeValidator(_as_agent_task), Tag("agent?")]
    ),
    Discriminator(
        _kind,
        custom_error_type="task_type",
        custom_error_message="Input should be a valid dictionary or instance of Task",
    ),
]
"""A task of a plan: a :class:`ToolTask` or an :class:`AgentTask`."""


class Plan(BaseModel):
    """A goal and the tasks that reach it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    goal: str = ""
    tasks: list[Task] = Field(default_factory=list)

    @classmethod
    def load(cls, source: Plan | Mapping[str, Any] | str | Path) -> Plan:
        """:func:`~dagagent.plan.load_plan`: a plan from a dict, JSON text or a file."""
        from ._loading import load_plan

        return load_plan(source)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The plan as JSON, without the fields left at their defaults (one line when
        ``indent`` is ``None``)."""
        return self.model_dump_json(indent=indent, exclude_defaults=True)
