"""Reading JSON in a model's answer: a plan while it streams, each task as soon as it is
complete (:class:`JsonTaskStream`), or the first JSON value of a whole answer
(:func:`extract_json`). Both read the same way.

::

    tasks = JsonTaskStream()
    for piece in pieces:              # text deltas, or a tool call's argument deltas
        for raw in tasks.feed(piece):
            ...                       # a complete task object, as parsed JSON
    rest = tasks.finish()             # the last task(s); raises StreamedPlanError if bad

**What is read.** Prose or a code fence before the JSON is skipped, and what follows the
JSON's end is not read. Inside the JSON, the habits of models that do not change what the
JSON means are taken as they are meant: ``//`` and ``/* */`` comments are dropped, and so is
a comma before a closing bracket (``[1, 2,]``). Anything else must be JSON (no single quotes,
no ``NaN``): what is not is an :class:`~dagagent.errors.Issue` for the model. A plan may be an
object with ``tasks``, a bare list of tasks, or an object with one member holding either
(``{"plan": {"tasks": [...]}}``, ``{"steps": [...]}``).

**How.** :class:`JsonScanner` reads the JSON from its first bracket, piece by piece, into the
same text without comments and trailing commas, and sees where the value ends; pydantic-core's
JSON parser reads that text (``from_json(..., allow_partial=True)`` while it is incomplete).
The last element of a partially read array may be cut (an object missing its last fields, a
number missing its last digits), so a task counts as complete only once the next task has
begun or the plan's JSON value has ended.

Work is bounded: the answer is parsed again only when a piece holds a bracket (a task can
only begin or end there), and :class:`StreamedPlanError` (an
:class:`~dagagent.errors.Issue` with code ``runaway``) stops a task that keeps growing past
``max_task_chars`` without ending, so that output that never closes is cut off early.
"""

from __future__ import annotations

import re
from typing import Any

import pydantic_core

from ..errors import Issue
from ..text import shorten

__all__ = ["JsonScanner", "JsonTaskStream", "StreamedPlanError", "extract_json", "tasks_of"]

_BRACKETS = frozenset("{}[]")
_MAX_DEPTH = 64  # a plan needs a few levels; deeper JSON is refused
_SCAN_BUDGET = 1_000_000  # characters scanned looking for the JSON, plus 4x the answer length
_IN_STRING = re.compile(r'["\\]')
_SPACE = frozenset(" \t\r\n")


class StreamedPlanError(Exception):
    """The answer cannot be a plan; ``issue`` says why (for the model)."""

    def __init__(self, issue: Issue) -> None:
        super().__init__(str(issue))
        self.issue = issue


def looks_like_json(text: str, start: int, *, final: bool = False) -> bool | None:
    """Whether the bracket at ``start`` opens JSON rather than prose like ``[1 of 3]``;
    ``None`` while the text after it has not arrived (``final``: it never will)."""
    rest = text[start + 1 : start + 200].lstrip()
    if not rest or rest == "/":
        return True if final and not rest else None
    if rest.startswith(("//", "/*")):
        return True  # a comment: JSON as a model writes it
    if text[start] == "{":
        return rest[0] in ('"', "}")
    return rest[0] in ("{", "]")


class JsonScanner:
    """Reads one JSON value from its opening bracket, piece by piece.

    ``clean`` is the text read so far without comments and trailing commas; ``ended`` turns
    true at the bracket that closes the value (``end``: how many characters fed up to and
    including it; what follows is not read); ``deepest`` is the deepest nesting seen.
    Everything else goes to ``clean`` as it was written, for the JSON parser to judge.
    """

    __slots__ = (
        "_comma",
        "_mode",
        "_parts",
        "_slash",
        "deepest",
        "depth",
        "end",
        "ended",
        "fed",
    )

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._mode = "code"  # or "string", "escape", "line" (// comment), "block", "block*"
        self._comma = False  # a comma read, not written yet: it may come before a bracket
        self._slash = False  # a '/' read: a comment may begin
        self.depth = 0
        self.deepest = 0
        self.ended = False
        self.end = 0
        self.fed = 0

    @property
    def clean(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def feed(self, piece: str) -> None:
        """Read ``piece`` (nothing once the value has ended)."""
        if self.ended:
            return
        out = self._parts
        i, n = 0, len(piece)
        mode = self._mode
        while i < n:
            if mode == "string":
                m = _IN_STRING.search(piece, i)
                if m is None:
                    out.append(piece[i:])
                    i = n
                    break
                out.append(piece[i : m.end()])
                i = m.end()
                mode = "escape" if m.group() == "\\" else "code"
                continue
            c = piece[i]
            i += 1
            if mode == "escape":
                out.append(c)
                mode = "string"
                continue
            if mode == "line":
                if c == "\n":
                    mode = "code"
                continue
            if mode == "block":
                if c == "*":
                    mode = "block*"
                continue
            if mode == "block*":
                mode = "code" if c == "/" else "block" if c != "*" else "block*"
                continue
            # code
            if self._slash:
                self._slash = False
                if c == "/":
                    mode = "line"
                    continue
                if c == "*":
                    mode = "block"
                    continue
                self._flush_comma(c)
                out.append("/")  # not a comment: not JSON either, for the parser to say
            if c in _SPACE:
                if not self._comma:
                    out.append(c)
                continue
            if c == "/":
                self._slash = True
                continue
            if self._comma:
                self._flush_comma(c)
            if c == ",":
                self._comma = True
                continue
            out.append(c)
            if c == '"':
                mode = "string"
            elif c in "{[":
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            elif c in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.ended = True
                    self.end = self.fed + i
                    break
        self._mode = mode
        self.fed += i

    def _flush_comma(self, following: str) -> None:
        if self._comma:
            self._comma = False
            if following not in "}]":
                self._parts.append(",")


def tasks_of(value: Any) -> list[Any] | None:
    """The list of tasks inside a (partial) plan value; ``None`` when not there (yet)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        tasks = value.get("tasks")
        if isinstance(tasks, list):
            return tasks
        if "tasks" not in value and len(value) == 1:
            (inner,) = value.values()
            if isinstance(inner, list) and inner and all(isinstance(t, dict) for t in inner):
                return inner  # {"plan": [...]}
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
        self.emitted = 0
        self._scanner: JsonScanner | None = None
        self._start: int | None = None
        self._search = 0  # where to look for the JSON's first bracket next
        self._mark = 0  # text length when the last task was returned

    @property
    def started(self) -> bool:
        """Whether the plan's JSON has begun."""
        return self._start is not None

    @property
    def closed(self) -> bool:
        """Whether the plan's JSON has ended."""
        return self._scanner is not None and self._scanner.ended

    def feed(self, piece: str) -> list[Any]:
        if self.closed or not piece:
            return []
        self.text += piece
        if self._scanner is None:
            if not self._find_start():
                self._check_runaway()
                return []
            assert self._scanner is not None and self._start is not None
            self._scanner.feed(self.text[self._start :])
        else:
            self._scanner.feed(piece)
            if _BRACKETS.isdisjoint(piece):
                self._check_runaway()
                return []
        out = self._complete_tasks(final=False)
        self._check_runaway()
        return out

    def finish(self) -> list[Any]:
        if self._scanner is None:
            text = self.text
            if not text.strip():
                raise StreamedPlanError(
                    Issue("empty_answer", None, "the answer is empty: expected a JSON plan")
                )
            if self._search < len(text) and looks_like_json(text, self._search, final=True):
                raise StreamedPlanError(_truncated(self._search))
            raise StreamedPlanError(_no_json(text))
        return self._complete_tasks(final=True)

    # -- internals ---------------------------------------------------------------------------

    def _find_start(self) -> bool:
        text = self.text
        pos = self._search
        while True:
            start = _next_bracket(text, pos)
            if start is None:
                self._search = len(text)
                return False
            looks = looks_like_json(text, start)
            if looks is None:
                self._search = start
                return False
            if looks:
                self._start = self._search = self._mark = start
                self._scanner = JsonScanner()
                return True
            pos = start + 1

    def _complete_tasks(self, *, final: bool) -> list[Any]:
        scanner = self._scanner
        assert scanner is not None and self._start is not None
        closed = scanner.ended
        if final and not closed:
            raise StreamedPlanError(_truncated(self._start))
        if scanner.deepest > _MAX_DEPTH:
            raise StreamedPlanError(_too_deep(scanner.deepest))
        try:
            value = pydantic_core.from_json(scanner.clean, allow_partial=True, allow_inf_nan=False)
        except (ValueError, TypeError) as exc:
            raise StreamedPlanError(
                Issue(
                    "not_json",
                    None,
                    f"the plan is not valid JSON: {json_error(exc, scanner.clean)}",
                )
            ) from None
        tasks = tasks_of(value)
        if tasks is None:
            if closed:
                raise StreamedPlanError(
                    Issue("schema", None, "the JSON holds no 'tasks' list: expected a plan")
                )
            return []
        ready = len(tasks) if closed else len(tasks) - 1
        if ready <= self.emitted:
            return []
        out = tasks[self.emitted : ready]
        self.emitted = ready
        self._mark = len(self.text)
        return out

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


_WHERE_RE = re.compile(r"at line (\d+) column (\d+)")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u([dD][89a-fA-F][0-9a-fA-F]{2})")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def json_error(exc: Exception, text: str) -> str:
    """What is wrong with the JSON ``text``, for the model: the parser's error and the text
    where it is (a string that is not Unicode text is named as such)."""
    if isinstance(exc, TypeError):  # the text holds a lone surrogate: it cannot be UTF-8
        bad = _SURROGATE_RE.search(text)
        code = f"U+{ord(bad.group()):04X}" if bad else "a lone surrogate"
        return f"a string holds {code}, half of a UTF-16 surrogate pair, not a character"
    message = str(exc)
    where = _WHERE_RE.search(message)
    if where is None:
        return message
    line, column = int(where.group(1)), int(where.group(2))
    lines = text.split("\n")
    offset = sum(len(x) + 1 for x in lines[: line - 1]) + column - 1
    if "surrogate" in message or "hex escape" in message:
        escape = _SURROGATE_ESCAPE_RE.search(text, max(0, offset - 12))
        if escape is not None:
            code = f"U+{escape.group(1).upper()}"
            return f"a string holds {code}, half of a UTF-16 surrogate pair, not a character"
    near = text[max(0, offset - 20) : offset + 20]
    return f"{message}, near {near!r}"


def _next_bracket(text: str, pos: int) -> int | None:
    hits = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
    return min(hits) if hits else None


def _truncated(start: int) -> Issue:
    return Issue(
        "truncated",
        None,
        "the JSON never ends (the answer was cut off): brackets opened at "
        f"character {start} are not closed",
    )


def _too_deep(deepest: int) -> Issue:
    return Issue(
        "not_json", None, f"the JSON is nested {deepest} levels deep (at most {_MAX_DEPTH})"
    )


def _no_json(text: str) -> Issue:
    excerpt = shorten(text, 80)
    return Issue("not_json", None, f"the answer holds no JSON object; it begins: {excerpt!r}")


def extract_json(text: str) -> tuple[Any, Issue | None]:
    """The first JSON object or array in ``text``, read as :class:`JsonTaskStream` reads a
    plan (code fences and prose around it, comments and trailing commas are fine). Returns
    ``(value, None)``, or ``(None, issue)`` with code ``empty_answer``, ``truncated`` or
    ``not_json``. A bracketed part that is not JSON is skipped for the next one."""
    if not text.strip():
        return None, Issue("empty_answer", None, "the answer is empty: expected a JSON plan")
    first_error: str | None = None
    pos = 0
    # Bounded work: an answer full of stray brackets must not make the search quadratic.
    budget = _SCAN_BUDGET + 4 * len(text)
    while budget > 0:
        start = _next_bracket(text, pos)
        if start is None:
            break
        looks = looks_like_json(text, start, final=True)
        scanner = JsonScanner()
        scanner.feed(text[start : start + budget])
        budget -= scanner.fed
        if not scanner.ended:
            if budget > 0 and looks:
                return None, _truncated(start)
            pos = start + 1
            continue
        if scanner.deepest > _MAX_DEPTH and looks:
            return None, _too_deep(scanner.deepest)
        try:
            value = pydantic_core.from_json(scanner.clean, allow_inf_nan=False)
        except (ValueError, TypeError) as exc:
            if first_error is None and looks:
                first_error = json_error(exc, scanner.clean)
            pos = start + scanner.fed if looks else start + 1
            continue
        return value, None
    if first_error is not None:
        return None, Issue("not_json", None, f"the plan is not valid JSON: {first_error}")
    return None, _no_json(text)
