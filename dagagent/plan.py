"""The plan: a goal and its tasks, each a tool call or an agent's sub-goal, as typed data.

A plan is data (pydantic models with ``extra="forbid"``); checking it as a graph is the job
of :mod:`dagagent.graph`, and ``${id.path}`` references are :mod:`dagagent.references`.

**Two kinds of task**, one type each, sharing :class:`BaseTask` (``id``, ``depends_on``,
``retries``, ``timeout_s``, ``description``): a :class:`ToolTask` calls a registered ``tool``
with ``args``; an :class:`AgentTask` gives an ``instruction`` to the ReAct micro-agent, with an
optional ``tools`` subset. :data:`Task` is their union. A plan file has no key naming the kind:
a task with a ``tool`` (not ``null``) is a tool task, any other an agent task. A task that mixes
the kinds (``tool`` and ``instruction``, an agent task with ``args``, a tool task with ``tools``)
is reported as an issue of that task (``tool_and_instruction``, ``agent_args``, ``tool_tools``).

**Task ids** must match ``[A-Za-z0-9_][A-Za-z0-9_-]{0,63}``: letters, digits, ``_`` and ``-``,
at most 64 characters, not starting with ``-``. Dots are reserved: in a reference
``${fetch.items.0}`` the first segment is the task id and the rest is a path into its output.

**Map tasks.** Either kind of task may carry ``for_each``: a ``${ref}`` to a list an upstream
task returns, or a literal list. The task then runs once per element (an *element run*), and
its output is the list of the elements' outputs, in order. In its ``args`` (or instruction)
``${@item}`` is the current element and ``${@index}`` its position from 0 (see
:mod:`dagagent.references`; ``@`` is never part of a task id, so these never name a task).
``max_concurrency`` bounds how many of its elements run at once (the run's own bound holds
too); with ``allow_partial`` the task succeeds when some elements fail, its output holding
``null`` for them.

**Fingerprints.** :func:`task_fingerprint` is what makes a task's output reusable by a later run:
its id, what it calls, and its resolved input.

Over 400 lines: the task models and the reader that tells their kinds apart and reports
every issue of a plan file at once (:func:`read_plan`) change together whenever the plan
format does. The fast road for plain plans (:func:`_plain_plan`) repeats the
models' construction, so it sits beside them.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
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
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
)
from pydantic_core import PydanticCustomError, to_json

from ._models import AVAILABLE, SETTERS, construct_all
from .errors import Issue, PlanLoadError
from .references import Reference, Template
from .text import did_you_mean, jsonable, read_bounded

__all__ = [
    "ID_PATTERN",
    "AgentTask",
    "BaseTask",
    "Plan",
    "Reference",
    "Task",
    "Template",
    "ToolTask",
    "element_key",
    "load_plan",
    "read_plan",
    "read_plan_fields",
    "same_call",
    "task_fingerprint",
]

ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}"
ID_RE = re.compile(rf"{ID_PATTERN}\Z")  # \Z, not $: "a\n" is not an id
#: The most a plan file (or a plan on stdin) may hold: several times a 100,000-task plan.
MAX_PLAN_BYTES = 64 * 1024 * 1024
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
            "retries",
            "timeout_s",
            "description",
            "tools",
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

    @property
    def template_source(self) -> str:
        return self.instruction

    @property
    def label(self) -> str:
        return "agent"

    @property
    def tool_names(self) -> tuple[str, ...] | None:
        return None if self.tools is None else tuple(self.tools)

    def fingerprint(self, resolved: Any) -> str:
        return _fingerprint(self.id, None, self.tools, resolved)


def _fingerprint(task_id: str, tool: str | None, tools: list[str] | None, resolved: Any) -> str:
    payload = {"id": task_id, "tool": tool, "tools": tools, "input": jsonable(resolved)}
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


class _KindIssues(list[Issue]):
    """Validation context of :func:`read_plan`: a task mixing the two kinds is recorded here
    (and the stray key set aside) instead of failing validation."""


def _mixed(info: ValidationInfo, data: dict[str, Any], key: str, code: str, message: str) -> None:
    if not isinstance(info.context, _KindIssues):
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
    data.pop("instruction", None)
    data.pop("tools", None)
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
            return "tool" if "instruction" not in value and "tools" not in value else "tool?"
        if "tool" in value or "args" in value or value.get("instruction") is None:
            return "agent?"
        return "agent"
    if isinstance(value, BaseTask):
        return value.kind
    return None


_TAGS = frozenset({"tool", "agent", "tool?", "agent?"})

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
        return load_plan(source)

    def to_json(self, *, indent: int | None = 2) -> str:
        """The plan as JSON, without the fields left at their defaults (one line when
        ``indent`` is ``None``: what the run store records before a run's first task)."""
        if indent is None:
            compact = _compact_json(self)
            if compact is not None:
                return compact
        return self.model_dump_json(indent=indent, exclude_defaults=True)


# ---------------------------------------------------------------------------------------------
# Loading


def _issues_from_validation(exc: ValidationError, data: Any) -> list[Issue]:
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    issues = []
    for err in exc.errors():
        loc = err["loc"]
        task_id: str | None = None
        if len(loc) >= 3 and loc[0] == "tasks" and loc[2] in _TAGS:
            loc = loc[:2] + loc[3:]  # the union member is no part of where the problem is
        where = ".".join(str(p) for p in loc)
        if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int):
            if (
                isinstance(tasks, list)
                and loc[1] < len(tasks)
                and isinstance(tasks[loc[1]], Mapping)
            ):
                raw_id = tasks[loc[1]].get("id")
                task_id = raw_id if isinstance(raw_id, str) else None
            field = ".".join(str(p) for p in loc[2:]) or "task"
            where = f"tasks[{loc[1]}].{field}" if loc[2:] else f"tasks[{loc[1]}]"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            fields = {*ToolTask.model_fields, *AgentTask.model_fields}
            known = fields if len(loc) == 3 and loc[0] == "tasks" else set()
            hint = did_you_mean(str(loc[-1]), known)
            msg = f"unknown field (not part of the plan format){hint}"
        issues.append(Issue("schema", task_id, f"{where}: {msg}"))
    return issues


def load_plan(source: Plan | Mapping[str, Any] | str | Path) -> Plan:
    """Read a plan from a Plan, a dict, a JSON string or a path to a JSON file
    (``Path("-")``: the JSON on standard input).

    Raises :class:`PlanLoadError` naming every problem (with the task id where known).
    """
    plan, issues = read_plan(source)
    if issues:
        raise PlanLoadError(_not_a_plan(_origin(source), issues), issues)
    return plan


def read_plan(source: Plan | Mapping[str, Any] | str | Path) -> tuple[Plan, list[Issue]]:
    """:func:`load_plan`, except that a task mixing the two kinds does not stop the reading: the
    stray key is set aside and the task's issue returned with the plan, so that
    :func:`dagagent.validate` can report it together with every other issue of the plan."""
    plan, issues, _ = read_plan_fields(source)
    return plan, issues


def read_plan_fields(
    source: Plan | Mapping[str, Any] | str | Path,
) -> tuple[Plan, list[Issue], list[dict[str, Any]] | None]:
    """:func:`read_plan`, and for a plain plan read from JSON or a dict (see
    :func:`_plain_plan`) each task's fields: its model's ``__dict__``, to be read, not
    changed. :mod:`dagagent.graph` checks a plain plan from them, without reading its models'
    attributes (each read costs several dict lookups: pydantic models have a ``__getattr__``)."""
    if isinstance(source, Plan):
        return source, [], None
    origin = _origin(source)
    data = _parse(source, origin)
    if isinstance(data, list):
        data = {"tasks": data}
    if not isinstance(data, Mapping):
        raise PlanLoadError(f"{origin} must be a JSON object with 'goal' and 'tasks'")
    plain = _read_plain(data)
    if plain is not None:
        return plain[0], [], plain[1]
    mixed = _KindIssues()
    try:
        return Plan.model_validate(data, context=mixed), list(mixed), None
    except RecursionError:
        raise PlanLoadError(f"{origin} is nested too deeply to be a plan") from None
    except ValidationError as exc:
        issues = _issues_from_validation(exc, data)
        raise PlanLoadError(_not_a_plan(origin, issues), issues) from None


# ---------------------------------------------------------------------------------------------
# Reading a plain plan (hot path)
#
# Plans written by programs and by most models are plain: tool tasks whose every field already
# has its type (a str id and tool, a dict of args, a list of str ids...). For those, pydantic's
# validation would only copy each value, at about 2 microseconds a task (a third of what
# running a no-op task costs; this road takes a sixth less, measured at 10,000 tasks with
# CPython 3.11 and pydantic 2.14). _plain_plan builds exactly what it would (the same values,
# copied the same way, the same fields set) and gives up, returning None, at the first value
# that is not plain, so that pydantic reads the plan and reports what is wrong.
# benchmarks/overhead.py measures it; tests/test_plain_plans.py checks it against pydantic.

_TOOL_KEYS = frozenset({"id", "tool", "args", "depends_on", "retries", "timeout_s", "description"})
_TOOL_FIELDS = (
    "id",
    "depends_on",
    "retries",
    "timeout_s",
    "description",
    "for_each",
    "max_concurrency",
    "allow_partial",
    "tool",
    "args",
)
_PLAN_KEYS = frozenset({"goal", "tasks"})
# A model's four slots, set as model_construct sets them (see dagagent._models).
_set_dict, _set_fields, _set_extra, _set_private = SETTERS
# Building the models directly is exactly model_construct while both stay plain models.
_PLAIN_OK = (
    all(
        not cls.__pydantic_post_init__
        and not cls.__pydantic_root_model__
        and cls.model_config.get("extra") == "forbid"
        and all(f.alias is None and f.validation_alias is None for f in cls.model_fields.values())
        for cls in (ToolTask, Plan)
    )
    and tuple(ToolTask.model_fields) == _TOOL_FIELDS
    and tuple(Plan.model_fields) == ("goal", "tasks")
    and AVAILABLE
)

# Every field in field order (__dict__'s order), as a task that does not give it has it (args
# and depends_on get a new {} or [] each); a plain task is no map task.
_TOOL_DEFAULTS = {**dict.fromkeys(_TOOL_FIELDS), "allow_partial": False}


def _plain_plan(data: Mapping[str, Any]) -> Plan | None:
    """``data`` read as a :class:`Plan` without pydantic, if every value in it is plain."""
    read = _read_plain(data)
    return None if read is None else read[0]


def _read_plain(data: Mapping[str, Any]) -> tuple[Plan, list[dict[str, Any]]] | None:
    """:func:`_plain_plan`, and each task's fields (its ``__dict__``)."""
    if not _PLAIN_OK or type(data) is not dict or not _PLAN_KEYS.issuperset(data):
        return None
    goal = data.get("goal", "")
    raw = data.get("tasks", [])
    if type(goal) is not str or type(raw) is not list:
        return None
    tool_keys, defaults = _TOOL_KEYS, _TOOL_DEFAULTS
    str_, dict_, list_, int_, float_ = str, dict, list, int, float
    fields: list[dict[str, Any]] = []  # each task's __dict__
    add = fields.append
    for t in raw:
        if type(t) is not dict_ or not tool_keys.issuperset(t):
            return None
        values = {**defaults, **t}  # every field, in field order
        if type(values["id"]) is not str_ or type(values["tool"]) is not str_:
            return None
        args = values["args"]
        if args is None:
            if "args" in t:
                return None
            values["args"] = {}
        elif type(args) is dict_:
            for k in args:
                if type(k) is not str_:
                    return None
            values["args"] = args.copy()
        else:
            return None
        deps = values["depends_on"]
        if type(deps) is list_:
            for d in deps:
                if type(d) is not str_:
                    return None
            values["depends_on"] = deps.copy()
        elif deps is None and "depends_on" not in t:
            values["depends_on"] = []
        else:
            return None
        retries = values["retries"]
        if retries is not None and (type(retries) is not int_ or not 0 <= retries <= MAX_RETRIES):
            return None
        timeout = values["timeout_s"]
        if timeout is not None:
            if type(timeout) is int_:
                timeout = values["timeout_s"] = float(timeout)
            elif type(timeout) is not float_:
                return None
            if not timeout > 0:  # also NaN
                return None
        description = values["description"]
        if description is not None and type(description) is not str_:
            return None
        add(values)
    # The models, made as model_construct makes them; each slot set for every task in one
    # go (map calls the setters without a Python-level call each).
    tasks: list[Task] = list(construct_all(ToolTask, fields, map(set, raw)))
    plan = object.__new__(Plan)
    _set_dict(plan, {"goal": goal, "tasks": tasks})
    _set_fields(plan, set(data))
    _set_extra(plan, None)
    _set_private(plan, None)
    return plan, fields


def _path_of(source: object) -> Path | None:
    """The file ``source`` names, if it names one (a string that does not begin like JSON)."""
    if isinstance(source, Path):
        return source
    if isinstance(source, str) and not source.lstrip().startswith(("{", "[")):
        return Path(source)
    return None


def _is_stdin(source: object) -> bool:
    return isinstance(source, Path) and str(source) == "-"


def _origin(source: object) -> str:
    """How messages name the plan: its file, "the plan on stdin", or "plan"."""
    if _is_stdin(source):
        return "the plan on stdin"
    path = _path_of(source)
    return "plan" if path is None else str(path)


def _not_a_plan(origin: str, issues: list[Issue]) -> str:
    return f"{origin} does not fit the plan format:\n" + "\n".join(f"  {i}" for i in issues)


def _parse(source: Mapping[str, Any] | str | Path, origin: str) -> Any:
    """The JSON value of a file (``-``: standard input) or a string; a mapping as it is."""
    path = _path_of(source)
    if _is_stdin(source):
        stream = getattr(sys.stdin, "buffer", None)
        try:
            if stream is not None:
                text = read_bounded(stream, MAX_PLAN_BYTES, what="plan")
            else:  # a text stream put in its place
                text = sys.stdin.read(MAX_PLAN_BYTES + 1)
                if len(text) > MAX_PLAN_BYTES:
                    raise ValueError(f"larger than {MAX_PLAN_BYTES:,} characters")
        except (OSError, ValueError) as exc:
            raise PlanLoadError(f"cannot read the plan on stdin: {exc}") from None
    elif path is not None:
        try:
            # At most MAX_PLAN_BYTES (run /dev/zero ends here, not in a MemoryError); a BOM
            # (Windows editors) is fine.
            text = read_bounded(path, MAX_PLAN_BYTES, what="plan")
        except FileNotFoundError:
            raise PlanLoadError(f"plan file not found: {path}") from None
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise PlanLoadError(f"cannot read plan file {path}: {exc}") from None
    elif isinstance(source, str):
        text = source
    else:
        return source
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanLoadError(_json_error(origin, text, exc)) from None
    except RecursionError:
        raise PlanLoadError(f"{origin} is nested too deeply to be a plan") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise PlanLoadError(f"{origin} is not a usable plan: {exc}") from None
    if _SURROGATE_ESCAPE.search(text):
        _check_unicode(data, origin)
    return data


def _json_error(origin: str, text: str, exc: json.JSONDecodeError) -> str:
    """Why ``text`` is not JSON, saying so when it is YAML or has a trailing comma."""
    before = text[: exc.pos].rstrip()
    if before.endswith(",") and exc.msg.startswith(("Expecting property name", "Expecting value")):
        line = before.count("\n") + 1
        return (
            f"{origin} is not valid JSON: a trailing comma at line {line} (JSON allows no comma "
            "after the last item of a list or object)"
        )
    stripped = text.lstrip()
    if exc.pos == len(text) - len(stripped) and re.match(r"(---|-\s|[\w\"' -]+:)", stripped):
        return (
            f"{origin} is not valid JSON: it looks like YAML (line {exc.lineno}); plans are "
            "JSON: an object with 'goal' and 'tasks'"
        )
    return f"{origin} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"


# A JSON escape of a UTF-16 surrogate: the only way a lone surrogate gets into parsed text.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_unicode(data: Any, origin: str) -> None:
    """Refuse strings holding a lone surrogate (half of an escaped emoji, say): they cannot be
    written as UTF-8, so nothing could print or record them."""

    def bad(value: Any) -> bool:
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return True
            return False
        if isinstance(value, dict):
            return any(bad(k) or bad(v) for k, v in value.items())
        if isinstance(value, list):
            return any(bad(v) for v in value)
        return False

    where = "the plan"
    if isinstance(data, dict):
        tasks = data.get("tasks")
        for i, task in enumerate(tasks if isinstance(tasks, list) else ()):
            if bad(task):
                tid = task.get("id") if isinstance(task, dict) else None
                where = f"task {tid!r}" if isinstance(tid, str) and not bad(tid) else f"tasks[{i}]"
                break
    if bad(data):
        raise PlanLoadError(
            f"{origin}: {where} holds an invalid \\u escape (a lone UTF-16 surrogate, such as "
            "half of an emoji): write the character itself or its full surrogate pair"
        )


# ---------------------------------------------------------------------------------------------
# Plan JSON on one line, fast: the run store writes it before a run's first task may start, and
# pydantic's exclude_defaults with the per-task key-order serializer costs several
# microseconds a task. Same text as model_dump_json(exclude_defaults=True) (a test compares).

_NO_DEFAULT: Any = object()


def _defaults(cls: type[BaseTask]) -> tuple[tuple[str, Any], ...]:
    """``(field, default)`` in plan-JSON key order (``_NO_DEFAULT``: a required field)."""
    fields = []
    for name, info in cls.model_fields.items():
        if info.is_required():
            default = _NO_DEFAULT
        elif info.default_factory is not None:
            default = info.default_factory()  # type: ignore[call-arg]  # takes no argument
        else:
            default = info.default
        fields.append((name, default))
    return tuple(sorted(fields, key=lambda f: _KEY_ORDER[f[0]]))


def _changeable(fields: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """The fields that may differ from their default without having been set: required ones
    and those whose default is a list or a dict (which may be changed in place)."""
    return tuple((k, d) for k, d in fields if d is _NO_DEFAULT or isinstance(d, (list, dict)))


# Per task class: every field, and the few to look at when only those were set (most tasks).
_TASK_FIELDS = {
    cls: (every, _changeable(every), frozenset(k for k, _ in _changeable(every)))
    for cls in (ToolTask, AgentTask)
    for every in (_defaults(cls),)
}


def _compact_json(plan: Plan) -> str | None:
    """``plan`` as one line of JSON without default fields, or ``None`` if it is not the plain
    model this knows (a subclass, a field it does not know): then pydantic writes it."""
    if type(plan) is not Plan or plan.__pydantic_extra__:
        return None
    known = _TASK_FIELDS
    required = _NO_DEFAULT
    try:
        tasks: list[dict[str, Any]] = []
        append = tasks.append
        for t in plan.tasks:  # a loop, not a comprehension: no frame per task (3.11)
            every, changeable, names = known[type(t)]
            values = t.__dict__
            task = {}
            for k, default in changeable if t.__pydantic_fields_set__ <= names else every:
                v = values[k]
                if default is required or v != default:
                    task[k] = v
            append(task)
        doc: dict[str, Any] = {}
        if plan.goal != "":
            doc["goal"] = plan.goal
        if tasks:
            doc["tasks"] = tasks
        return to_json(doc).decode()
    except Exception:  # anything unusual: pydantic's own serializer decides
        return None
