"""Reading a JSON plan while it streams: each task as soon as it is complete.

::

    tasks = JsonTaskStream()
    for piece in pieces:              # text deltas, or a tool call's argument deltas
        for raw in tasks.feed(piece):
            ...                       # a complete task object, as parsed JSON
    rest = tasks.finish()             # the last task(s); raises StreamedPlanError if bad

The growing answer is parsed with pydantic-core's incremental JSON parser
(``from_json(..., allow_partial=True)``), which reads a prefix of a JSON document as far as
it goes. The last element of a partially read array may be cut (an object missing its last
fields, a number missing its last digits), so a task counts as complete only once the next
task has begun or the plan's JSON value has ended. Prose or a code fence before the JSON is
skipped, as :func:`~dagagent.planners.parsing.extract_json` does; the plan may be an object with
``tasks``, a bare list of tasks, or an object wrapping one (``{"plan": {"tasks": [...]}}``).

Work is bounded: the answer is parsed again only when a piece holds a bracket (a task can
only begin or end there), and :class:`StreamedPlanError` (an
:class:`~dagagent.errors.Issue` with code ``runaway``) stops a task that keeps growing past
``max_task_chars`` without ending, so that output that never closes is cut off early.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from ..errors import Issue
from .parsing import extract_json

__all__ = ["JsonTaskStream", "StreamedPlanError"]

_BRACKETS = frozenset("{}[]")


class StreamedPlanError(Exception):
    """The streamed answer cannot be a plan; ``issue`` says why (for the model)."""

    def __init__(self, issue: Issue) -> None:
        super().__init__(str(issue))
        self.issue = issue


def _looks_like_json(text: str, start: int) -> bool | None:
    """Whether the bracket at ``start`` opens JSON rather than prose like ``[1 of 3]``;
    ``None`` while the text after it has not arrived."""
    rest = text[start + 1 : start + 200].lstrip()
    if not rest:
        return None
    if text[start] == "{":
        return rest[0] in ('"', "}")
    return rest[0] in ("{", "]")


def _tasks_of(value: Any) -> list[Any] | None:
    """The list of tasks inside a (partial) plan value; ``None`` when not there (yet)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        tasks = value.get("tasks")
        if isinstance(tasks, list):
            return tasks
        if "tasks" not in value and len(value) == 1:
            (inner,) = value.values()
            if isinstance(inner, dict):
                found = inner.get("tasks")
                return found if isinstance(found, list) else None
    return None


class JsonTaskStream:
    """Turns pieces of a JSON plan into complete task objects, in order (see the module
    docstring).

    - ``feed(piece)``: the tasks completed by this piece (parsed JSON values, usually dicts).
    - ``finish()``: at the end of the answer, the tasks not returned yet; raises
      :class:`StreamedPlanError` (``empty_answer``, ``not_json``, ``truncated``, ``schema``)
      when the answer is not a whole plan.
    - ``closed``: the plan's JSON value has ended; what follows it is not read.
    - ``max_task_chars``: a task (or the text before the first one) longer than this raises
      :class:`StreamedPlanError` with code ``runaway``.
    """

    def __init__(self, *, max_task_chars: int = 20_000) -> None:
        self.max_task_chars = max_task_chars
        self.text = ""
        self.closed = False
        self.emitted = 0
        self._start: int | None = None
        self._search = 0  # where to look for the JSON's first bracket next
        self._mark = 0  # text length when the last task was returned

    @property
    def started(self) -> bool:
        """Whether the plan's JSON has begun."""
        return self._start is not None

    def feed(self, piece: str) -> list[Any]:
        if self.closed or not piece:
            return []
        self.text += piece
        if self._start is None and not self._find_start():
            self._check_runaway()
            return []
        if _BRACKETS.isdisjoint(piece) and len(self.text) - len(piece) > self._start_or_zero:
            self._check_runaway()
            return []
        out = self._complete_tasks(final=False)
        self._check_runaway()
        return out

    def finish(self) -> list[Any]:
        if self._start is None:
            _, issue = extract_json(self.text)
            raise StreamedPlanError(issue or Issue("not_json", None, "no JSON plan in the answer"))
        return self._complete_tasks(final=True)

    # -- internals ---------------------------------------------------------------------------

    @property
    def _start_or_zero(self) -> int:
        return self._start or 0

    def _find_start(self) -> bool:
        text = self.text
        pos = self._search
        while True:
            hits = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
            if not hits:
                self._search = len(text)
                return False
            start = min(hits)
            looks = _looks_like_json(text, start)
            if looks is None:
                self._search = start
                return False
            if looks:
                self._start = self._search = start
                self._mark = start
                return True
            pos = start + 1

    def _complete_tasks(self, *, final: bool) -> list[Any]:
        assert self._start is not None
        doc = self.text[self._start :]
        closed = self._ended(doc)
        if final and not closed:
            raise StreamedPlanError(
                Issue(
                    "truncated",
                    None,
                    "the JSON never ends (the answer was cut off): the plan's brackets are "
                    "not closed",
                )
            )
        try:
            value = pydantic_core.from_json(doc, allow_partial=True, allow_inf_nan=False)
        except ValueError as exc:
            raise StreamedPlanError(
                Issue("not_json", None, f"the plan is not valid JSON: {exc}")
            ) from None
        tasks = _tasks_of(value)
        if tasks is None:
            if closed:
                raise StreamedPlanError(
                    Issue("schema", None, "the JSON holds no 'tasks' list: expected a plan")
                )
            return []
        self.closed = closed
        ready = len(tasks) if closed else len(tasks) - 1
        if ready <= self.emitted:
            return []
        out = tasks[self.emitted : ready]
        self.emitted = ready
        self._mark = len(self.text)
        return out

    @staticmethod
    def _ended(doc: str) -> bool:
        """Whether the JSON value at the start of ``doc`` is complete (text may follow)."""
        try:
            pydantic_core.from_json(doc, allow_inf_nan=False)
        except ValueError as exc:
            return str(exc).startswith("trailing characters")
        return True

    def _check_runaway(self) -> None:
        grown = len(self.text) - self._mark
        if grown > self.max_task_chars:
            what = (
                f"task {self.emitted + 1} of the plan"
                if self._start is not None
                else "the text before the plan's JSON"
            )
            raise StreamedPlanError(
                Issue(
                    "runaway",
                    None,
                    f"{what} went on for more than {self.max_task_chars} characters without "
                    "ending: keep each task short and close the JSON",
                )
            )
