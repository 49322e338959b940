"""The plan: tasks with dependencies, and ``${id.path}`` references between them.

A plan is data (pydantic models with ``extra="forbid"``); checking it as a graph is the job
of :mod:`dagagent.graph`.

**Task ids** must match ``[A-Za-z0-9_][A-Za-z0-9_-]{0,63}``: letters, digits, ``_`` and ``-``,
at most 64 characters, not starting with ``-``. Dots are reserved: in a reference
``${fetch.items.0}`` the first segment is the task id and the rest is a path into its output.

**References.** ``${id}`` is the whole output of task ``id``; ``${id.key.0}`` walks into it
(mapping keys, list indexes, and the public data attributes of objects such as pydantic models
and dataclasses: never a name starting with ``_``, never a method). A string that is exactly
one reference takes the referenced value with its type; references inside longer text are
interpolated with ``str()`` (JSON for dicts and lists). ``$${`` writes a literal ``${``. A
reference implies a dependency.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import Issue, PlanLoadError, ReferenceResolutionError

__all__ = [
    "ID_PATTERN",
    "Plan",
    "Reference",
    "Task",
    "Template",
    "load_plan",
]

ID_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}"
ID_RE = re.compile(rf"{ID_PATTERN}\Z")  # \Z, not $: "a\n" is not an id
MAX_DEPTH = 100  # nesting limit for args: deeper JSON is refused, not a RecursionError
MAX_RETRIES = 100  # a plan asking for more (a model's 1e20, say) would retry practically forever
# ${id} or ${id.path.seg}; path segments are anything but '.', '}' and whitespace.
_REF_RE = re.compile(r"\$\$\{|\$\{([A-Za-z0-9_][A-Za-z0-9_-]*)((?:\.[^.}\s]+)*)\}")


class Task(BaseModel):
    """One node of a plan: a tool call (``tool`` + ``args``) or an agent sub-goal
    (``instruction``)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Unique id; see the id rule in the module docstring.")
    tool: str | None = Field(default=None, description="Registered tool to call.")
    instruction: str | None = Field(
        default=None, description="Sub-goal for the ReAct micro-agent (agent task)."
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Tool arguments.")
    depends_on: list[str] = Field(default_factory=list, description="Ids this task waits for.")
    retries: int | None = Field(
        default=None, ge=0, le=MAX_RETRIES, description="Extra attempts after a failure."
    )
    timeout_s: float | None = Field(default=None, gt=0, description="Per-attempt timeout.")
    description: str | None = None
    tools: list[str] | None = Field(
        default=None, description="Agent task: the subset of tools the agent may use."
    )

    @property
    def is_agent(self) -> bool:
        return self.tool is None


class Plan(BaseModel):
    """A goal and the tasks that reach it."""

    model_config = ConfigDict(extra="forbid")

    goal: str = ""
    tasks: list[Task] = Field(default_factory=list)

    @classmethod
    def load(cls, source: Plan | Mapping[str, Any] | str | Path) -> Plan:
        return load_plan(source)

    def to_json(self, *, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent, exclude_defaults=True)


def _issues_from_validation(exc: ValidationError, data: Any) -> list[Issue]:
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    issues = []
    for err in exc.errors():
        loc = err["loc"]
        task_id: str | None = None
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
            msg = "unknown field (not part of the plan format)"
        issues.append(Issue("schema", task_id, f"{where}: {msg}"))
    return issues


def load_plan(source: Plan | Mapping[str, Any] | str | Path) -> Plan:
    """Read a plan from a Plan, a dict, a JSON string or a path to a JSON file.

    Raises :class:`PlanLoadError` naming every problem (with the task id where known).
    """
    if isinstance(source, Plan):
        return source
    data: Any
    if isinstance(source, Path) or (
        isinstance(source, str) and not source.lstrip().startswith(("{", "["))
    ):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is fine
        except FileNotFoundError:
            raise PlanLoadError(f"plan file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PlanLoadError(f"cannot read plan file {path}: {exc}") from None
        origin = str(path)
    else:
        text = source if isinstance(source, str) else None  # type: ignore[assignment]
        origin = "plan"
    if text is not None:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanLoadError(
                f"{origin} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
        except RecursionError:
            raise PlanLoadError(f"{origin} is nested too deeply to be a plan") from None
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise PlanLoadError(f"{origin} is not a usable plan: {exc}") from None
        if _SURROGATE_ESCAPE.search(text):
            _check_unicode(data, origin)
    else:
        data = source
    if isinstance(data, list):
        data = {"tasks": data}
    if not isinstance(data, Mapping):
        raise PlanLoadError(f"{origin} must be a JSON object with 'goal' and 'tasks'")
    try:
        return Plan.model_validate(data)
    except RecursionError:
        raise PlanLoadError(f"{origin} is nested too deeply to be a plan") from None
    except ValidationError as exc:
        issues = _issues_from_validation(exc, data)
        err = PlanLoadError(
            f"{origin} does not fit the plan format:\n" + "\n".join(f"  {i}" for i in issues)
        )
        err.issues = issues  # type: ignore[attr-defined]
        raise err from None


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
# References


class Reference:
    """A parsed ``${task.path}`` reference."""

    __slots__ = ("path", "task_id", "text")

    def __init__(self, task_id: str, path: tuple[str, ...], text: str) -> None:
        self.task_id = task_id
        self.path = path
        self.text = text

    def __repr__(self) -> str:
        return f"Reference({self.text!r})"

    def resolve(self, outputs: Mapping[str, Any]) -> Any:
        try:
            value = outputs[self.task_id]
        except KeyError:
            raise ReferenceResolutionError(
                f"{self.text}: task {self.task_id!r} has no output"
            ) from None
        walked = self.task_id
        for seg in self.path:
            value = _step(value, seg, walked, self.text)
            walked = f"{walked}.{seg}"
        return value


def _step(value: Any, seg: str, walked: str, text: str) -> Any:
    if isinstance(value, Mapping):
        if seg in value:
            return value[seg]
        keys = ", ".join(repr(k) for k in list(value)[:10])
        raise ReferenceResolutionError(f"{text}: {walked} has no key {seg!r} (keys: {keys})")
    if isinstance(value, (list, tuple)):
        try:
            idx = int(seg)
        except ValueError:
            raise ReferenceResolutionError(
                f"{text}: {walked} is a list; {seg!r} is not an index"
            ) from None
        try:
            return value[idx]
        except IndexError:
            raise ReferenceResolutionError(
                f"{text}: index {idx} is out of range for {walked} (length {len(value)})"
            ) from None
    if seg.startswith("_"):
        # A reference reads data, not internals: no private names, no dunders
        # (``${x.__class__.__init__.__globals__}`` would reach a module's globals).
        raise ReferenceResolutionError(
            f"{text}: {seg!r} is a private attribute of {walked} (a {type(value).__name__}); "
            "references may not read names that start with '_'"
        )
    if isinstance(value, BaseModel) or hasattr(value, "__dict__"):
        try:
            found = getattr(value, seg)
        except AttributeError:
            pass
        else:
            if callable(found):
                raise ReferenceResolutionError(
                    f"{text}: {walked}.{seg} is a method, not data (a {type(value).__name__})"
                )
            return found
    raise ReferenceResolutionError(
        f"{text}: cannot look up {seg!r} in {walked} (a {type(value).__name__})"
    )


def _interp_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, default=str)
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return str(value)


class _Interp:
    """A string with embedded references, split into literal parts and references."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[str | Reference]) -> None:
        self.parts = parts

    def resolve(self, outputs: Mapping[str, Any]) -> str:
        return "".join(
            p if isinstance(p, str) else _interp_text(p.resolve(outputs)) for p in self.parts
        )


Resolver = Callable[[Mapping[str, Any]], Any]


def _compile_string(s: str, refs: list[Reference], bad: list[str]) -> Any:
    """Return a literal string, a Reference (whole-string) or an _Interp."""
    if "${" not in s:
        return s
    parts: list[str | Reference] = []
    pos = 0
    for m in _REF_RE.finditer(s):
        if m.start() > pos:
            text = s[pos : m.start()]
            parts.append(text)
            if "${" in text:
                bad.append(s)
        if m.group(0) == "$${":
            parts.append("${")
        else:
            path = tuple(m.group(2)[1:].split(".")) if m.group(2) else ()
            ref = Reference(m.group(1), path, m.group(0))
            refs.append(ref)
            parts.append(ref)
        pos = m.end()
    if pos < len(s):
        tail = s[pos:]
        parts.append(tail)
        if "${" in tail:
            bad.append(s)
    if len(parts) == 1 and isinstance(parts[0], Reference):
        return parts[0]
    if all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    return _Interp(parts)


class Template:
    """Arguments (or an instruction) with their references compiled once.

    ``resolve(outputs)`` builds the concrete value. A template without references returns its
    literal value unchanged, so the hot path pays nothing for plans that use no references.
    """

    __slots__ = ("_compiled", "literal", "malformed", "refs")

    def __init__(self, value: Any) -> None:
        self.refs: list[Reference] = []
        self.malformed: list[str] = []
        self._compiled = self._compile(value)
        self.literal = value if not self.refs else None

    def _compile(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, str):
            return _compile_string(value, self.refs, self.malformed)
        if depth >= MAX_DEPTH:
            if isinstance(value, (dict, list)):
                raise PlanLoadError(f"arguments are nested more than {MAX_DEPTH} levels deep")
            return value
        if isinstance(value, dict):
            return {k: self._compile(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self._compile(v, depth + 1) for v in value]
        return value

    @property
    def has_refs(self) -> bool:
        return bool(self.refs)

    def resolve(self, outputs: Mapping[str, Any]) -> Any:
        if not self.refs:
            return self.literal
        return _resolve(self._compiled, outputs)

    def literal_keys(self) -> dict[str, Any]:
        """For a dict template: the top-level entries that hold no reference at all."""
        if not isinstance(self._compiled, dict):
            return {}
        return {k: v for k, v in self._compiled.items() if not _has_ref(v)}


def _has_ref(c: Any) -> bool:
    if isinstance(c, (Reference, _Interp)):
        return True
    if isinstance(c, dict):
        return any(_has_ref(v) for v in c.values())
    if isinstance(c, list):
        return any(_has_ref(v) for v in c)
    return False


def _resolve(c: Any, outputs: Mapping[str, Any]) -> Any:
    if isinstance(c, (Reference, _Interp)):
        return c.resolve(outputs)
    if isinstance(c, dict):
        return {k: _resolve(v, outputs) for k, v in c.items()}
    if isinstance(c, list):
        return [_resolve(v, outputs) for v in c]
    return c
