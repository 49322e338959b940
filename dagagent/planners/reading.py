"""One reader for every answer of the planner's model, streamed or not.

A plan comes as JSON (:mod:`dagagent.planners.incremental`: prose and code fences around it,
comments and trailing commas in it) or in LLMCompiler's text format
(:mod:`dagagent.planners.llmcompiler`: ``1. search("...")`` lines, with or without
``Thought:`` lines). :class:`PlanText` tells them apart by what comes first: a task line of
an LLMCompiler plan (``1. tool(``), or the opening bracket of the JSON; lines of prose (and
thoughts) before either are skipped, except that an LLMCompiler plan keeps the ``Thought:``
lines before its first task. It reads the answer piece by piece and
returns each task as soon as it is complete; :func:`read_tasks` reads a whole answer the same
way. Streamed planning (:mod:`dagagent.planners._answer`) and the planner that waits for
whole answers (:func:`~dagagent.planners.parse_plan_answer`) both read with it, so an answer
means the same plan whichever way it came.

What cannot be read is a :class:`~dagagent.planners.incremental.StreamedPlanError` whose
issue (``empty_answer``, ``not_json``, ``truncated``, ``schema``, ``runaway``) goes back to
the model.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import Issue, PlanLoadError
from .incremental import JsonTaskStream, StreamedPlanError, looks_like_json
from .llmcompiler import LLMCompilerStream

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["PlanText", "plan_format", "read_tasks"]

# A task line of an LLMCompiler plan ("1. tool("), and a thought before it ("Thought:").
_LLMCOMPILER_TASK = re.compile(r"\s*\d+\s*[.):]\s*[A-Za-z_][\w.-]*\s*\(")
_THOUGHT = re.compile(r"\s*thought\s*:", re.I)


def _json_start(text: str, pos: int) -> int | None:
    """Where the JSON begins, from ``pos``: ``-1`` when no bracket there opens JSON, ``None``
    while a bracket's next characters have not come."""
    while True:
        hits = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not hits:
            return -1
        start = min(hits)
        looks = looks_like_json(text, start)
        if looks is None:
            return None
        if looks:
            return start
        pos = start + 1


def plan_format(text: str) -> tuple[str, int] | None:
    """How the answer ``text`` (so far) writes its plan: ``("llmcompiler", where its first
    line begins)`` (its first task line, or the ``Thought:`` line before it),
    ``("json", where the JSON begins)``, or ``None`` while it cannot tell. A ``Thought:``
    line alone does not tell: JSON may follow it."""
    json_at = _json_start(text, 0)
    thought_at: int | None = None
    pos = 0
    while True:
        end = text.find("\n", pos)
        complete = end >= 0
        line = text[pos:end] if complete else text[pos:]
        if json_at is not None and json_at >= 0 and json_at < pos + len(line) + 1:
            # the JSON begins on this line: the line is LLMCompiler's if it begins like one
            if _LLMCOMPILER_TASK.match(line) and _LLMCOMPILER_TASK.match(text[pos:json_at]):
                return "llmcompiler", pos if thought_at is None else thought_at
            return "json", json_at
        if _LLMCOMPILER_TASK.match(line):
            return "llmcompiler", pos if thought_at is None else thought_at
        if thought_at is None and _THOUGHT.match(line):
            thought_at = pos
        if not complete:
            return None  # the line may still become a plan line, or the JSON may begin
        pos = end + 1


class PlanText:
    """The text of an answer, read piece by piece: a JSON plan, or LLMCompiler's numbered
    lines (see the module docstring).

    - ``feed(piece)``: the tasks the piece completed (parsed JSON values, or
      :class:`~dagagent.plan.ToolTask` s read from LLMCompiler lines: ``1. search("...")``
      is task ``"1"``).
    - ``finish()``: the tasks not returned yet, at the end of the answer.
    - ``closed``: the plan has ended (its JSON closed, or ``join()`` / ``<END_OF_PLAN>``);
      what follows is not read. ``started``: the plan has begun.

    Raises :class:`~dagagent.planners.incremental.StreamedPlanError`.
    """

    def __init__(self, registry: Registry, *, max_task_chars: int = 20_000) -> None:
        self.max_task_chars = max_task_chars
        self.json = JsonTaskStream(max_task_chars=max_task_chars)
        self.lines = LLMCompilerStream(registry)
        self.mode: str | None = None
        self.text = ""

    @property
    def started(self) -> bool:
        return self.json.started if self.mode == "json" else self.mode == "llmcompiler"

    @property
    def closed(self) -> bool:
        if self.mode == "llmcompiler":
            return self.lines.ended
        return self.json.closed

    def feed(self, piece: str) -> list[Any]:
        self.text += piece
        if self.mode is None:
            found = plan_format(self.text)
            if found is None:
                self._check(len(self.text), "the text before the plan")
                return []
            self.mode, at = found
            piece = self.text if self.mode == "json" else self.text[at:]
        if self.mode == "json":
            return self.json.feed(piece)
        try:
            tasks = self.lines.feed(piece)
        except PlanLoadError as exc:
            raise StreamedPlanError(Issue("schema", None, str(exc))) from None
        self._check(len(self.lines.pending), f"line {self.lines.tasks + 1} of the plan")
        return tasks

    def finish(self) -> list[Any]:
        if self.mode == "llmcompiler":
            try:
                tasks = self.lines.finish()
            except PlanLoadError as exc:
                raise StreamedPlanError(Issue("schema", None, str(exc))) from None
            if not tasks and not self.lines.tasks:
                raise StreamedPlanError(
                    Issue("schema", None, "the plan has no task lines ('1. tool(arguments)')")
                )
            return tasks
        if self.mode is None:
            self.mode = "json"
            self.json.feed(self.text)
        return self.json.finish()

    def _check(self, size: int, what: str) -> None:
        if size > self.max_task_chars:
            raise StreamedPlanError(
                Issue(
                    "runaway",
                    None,
                    f"{what} went on for more than {self.max_task_chars} characters without "
                    "ending: keep each task short",
                )
            )


def read_tasks(text: str, registry: Registry, *, max_task_chars: int = 20_000) -> list[Any]:
    """The tasks of a whole answer, read as :class:`PlanText` reads a streamed one; raises
    :class:`~dagagent.planners.incremental.StreamedPlanError`."""
    reader = PlanText(registry, max_task_chars=max_task_chars)
    tasks = reader.feed(text)
    return tasks + reader.finish()
