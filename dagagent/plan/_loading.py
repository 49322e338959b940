"""Reading a plan from a file, standard input, JSON text or a dict, with every problem named.

A plan that cannot be read as one raises :class:`~dagagent.errors.PlanLoadError`, whose
message names each problem and, where it is known, its task: not JSON (with the line, and
a word when it is YAML or has a trailing comma), not an object, a field the format does not
know (with the closest one it does), a value of the wrong type, a lone UTF-16 surrogate.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import Issue, PlanLoadError
from ..text import did_you_mean, read_bounded
from ._models import TASK_TAGS, AgentTask, KindIssues, Plan, ToolTask

__all__ = ["MAX_PLAN_BYTES", "load_plan", "read_plan"]

#: The most a plan file (or a plan on stdin) may hold: several times a 100,000-task plan.
MAX_PLAN_BYTES = 64 * 1024 * 1024


def _issues_from_validation(exc: ValidationError, data: Any) -> list[Issue]:
    tasks = data.get("tasks") if isinstance(data, Mapping) else None
    issues = []
    for err in exc.errors():
        loc = err["loc"]
        task_id: str | None = None
        if len(loc) >= 3 and loc[0] == "tasks" and loc[2] in TASK_TAGS:
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
    if isinstance(source, Plan):
        return source, []
    origin = _origin(source)
    data = _parse(source, origin)
    if isinstance(data, list):
        data = {"tasks": data}
    if not isinstance(data, Mapping):
        raise PlanLoadError(f"{origin} must be a JSON object with 'goal' and 'tasks'")
    mixed = KindIssues()
    try:
        return Plan.model_validate(data, context=mixed), list(mixed)
    except RecursionError:
        raise PlanLoadError(f"{origin} is nested too deeply to be a plan") from None
    except ValidationError as exc:
        issues = _issues_from_validation(exc, data)
        raise PlanLoadError(_not_a_plan(origin, issues), issues) from None


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
