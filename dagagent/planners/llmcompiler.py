"""Reading plans written in the LLMCompiler text format.

::

    Thought: I need both market caps first.
    1. search("Microsoft Market Cap")
    2. search("Apple Market Cap")
    3. math("$1 / $2")
    4. join()<END_OF_PLAN>

Each numbered line is one tool call; its number becomes the task id (``"1"``, ``"2"``...).
Arguments are Python-style literals (strings, numbers, booleans, ``None``, lists, tuples,
dicts), read with :func:`ast.literal_eval` -- never evaluated. Positional arguments map to
the tool's parameters in order; keyword arguments by name. ``$1`` and ``${1}`` -- inside
strings or bare -- become ``${1}`` references (so a value that is exactly ``"$1"`` keeps the
referenced output's type). Only numbers of tasks in the plan are references: ``"$100
budget"`` stays text when there is no task 100. A ``Thought:`` line is kept as the
``description`` of the task that follows it. The ``join()`` line (or ``<END_OF_PLAN>``)
ends the plan and is not a task. Code fence lines (```` ``` ````) and lines of prose are
skipped; a line that begins like a task (``3.`` or ``search(``) but is not one is a
:class:`PlanLoadError` naming it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from ..errors import PlanLoadError
from ..plan import Plan, Task, ToolTask
from ..text import shorten

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["LLMCompilerStream", "parse_llmcompiler"]

_END = "<END_OF_PLAN>"
_ACTION_RE = re.compile(r"^(\d+)\s*[.):]\s*([A-Za-z_][\w.-]*)\s*\((.*)\)\s*(?:#.*)?$")
_THOUGHT_RE = re.compile(r"^thought\s*:\s*(.*)$", re.IGNORECASE)
_REF_RE = re.compile(r"\$\{(\d+)\}|\$(\d+)(?![\d.]*\d)")
_BARE_REF_RE = re.compile(r"\$\{(\d+)\}|\$(\d+)")
_JOIN = "join"
_FENCE_RE = re.compile(r"^(?:```|~~~)")
# A line that means to be a task (a number, or a call), as opposed to prose.
_TASK_LIKE_RE = re.compile(r"^(?:\d+\s*[.):]|(?:\d+\s+)?[A-Za-z_][\w.-]*\s*\()")


def _quote_bare_refs(args: str) -> str:
    """Put bare ``$1`` / ``${1}`` (outside string literals) in quotes."""
    out: list[str] = []
    i = 0
    quote: str | None = None
    while i < len(args):
        c = args[i]
        if quote is not None:
            out.append(c)
            if c == "\\" and i + 1 < len(args):
                out.append(args[i + 1])
                i += 2
                continue
            if args.startswith(quote, i):
                out.append(args[i + 1 : i + len(quote)])
                i += len(quote)
                quote = None
                continue
            i += 1
            continue
        if c in "'\"":
            quote = c * 3 if args.startswith(c * 3, i) else c
            out.append(quote)
            i += len(quote)
            continue
        m = _BARE_REF_RE.match(args, i) if c == "$" else None
        if m:
            out.append(f'"${{{m.group(1) or m.group(2)}}}"')
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _convert_refs(value: Any, ids: Container[str], braced: Container[str] | None = None) -> Any:
    """``$N`` → ``${N}`` when ``N`` is in ``ids``; ``${N}`` (and a bare ``$N`` outside
    quotes) when it is in ``braced`` (default: ``ids``)."""
    braced = ids if braced is None else braced
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            n = m.group(1) or m.group(2)
            known = braced if m.group(1) else ids
            return f"${{{n}}}" if n in known else m.group(0)

        return _REF_RE.sub(sub, value)
    if isinstance(value, (list, tuple)):
        return [_convert_refs(v, ids, braced) for v in value]
    if isinstance(value, dict):
        return {k: _convert_refs(v, ids, braced) for k, v in value.items()}
    return value


def _call_args(text: str, where: str) -> tuple[list[Any], dict[str, Any]]:
    source = f"_({_quote_bare_refs(text)})"
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise PlanLoadError(f"{where}: the arguments do not parse: {exc.msg}") from None
    call = tree.body
    if not isinstance(call, ast.Call):  # pragma: no cover - "_(...)" always parses to a call
        raise PlanLoadError(f"{where}: not a call")
    positional: list[Any] = []
    for node in call.args:
        if isinstance(node, ast.Starred):
            raise PlanLoadError(f"{where}: *arguments are not supported")
        positional.append(_literal(node, where))
    keywords: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise PlanLoadError(f"{where}: **arguments are not supported")
        if kw.arg in keywords:
            raise PlanLoadError(f"{where}: argument {kw.arg!r} is given twice")
        keywords[kw.arg] = _literal(kw.value, where)
    return positional, keywords


def _literal(node: ast.expr, where: str) -> Any:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        shown = ast.unparse(node)
        shown = shorten(shown, 60, one_line=False)
        raise PlanLoadError(
            f"{where}: {shown!r} is not a literal (use strings, numbers, lists, dicts, "
            "True/False/None or $N references)"
        ) from None
    if isinstance(value, (set, frozenset, bytes, complex)):
        raise PlanLoadError(f"{where}: {type(value).__name__} values are not supported")
    return list(value) if isinstance(value, tuple) else value


_Entry = tuple[int, str, str, str, "str | None"]  # line number, id, tool, args text, thought


class _LineReader:
    """Reads plan lines one at a time: keeps the pending ``Thought:``, returns an entry for
    each action line, and notes the end of the plan (``join()`` or ``<END_OF_PLAN>``)."""

    def __init__(self) -> None:
        self.thought: str | None = None
        self.ended = False

    def read(self, lineno: int, raw_line: str) -> _Entry | None:
        if self.ended:
            return None
        line = raw_line.strip()
        ended = _END in line
        line = line.replace(_END, "").strip()
        self.ended = ended
        if not line or _FENCE_RE.match(line):
            return None
        where = f"line {lineno} ({_shown(raw_line)})"
        m_thought = _THOUGHT_RE.match(line)
        if m_thought:
            self.thought = m_thought.group(1).strip() or None
            return None
        m = _ACTION_RE.match(line)
        if m is None:
            bare = re.match(r"^(?:\d+\s*[.):]\s*)?([A-Za-z_]\w*)\s*\(.*\)\s*$", line)
            if bare and bare.group(1) == _JOIN:
                self.ended = True
                return None
            if not _TASK_LIKE_RE.match(line):
                return None  # prose: it means nothing to the plan
            raise PlanLoadError(
                f"{where}: expected 'N. tool(arguments)', 'Thought: ...' or 'join()'"
            )
        number, name, args = m.group(1), m.group(2), m.group(3)
        if name == _JOIN:
            self.ended = True
            return None
        thought, self.thought = self.thought, None
        return (lineno, str(int(number)), name, args, thought)


def _task_from(
    entry: _Entry, registry: Registry, ids: Container[str], braced: Container[str] | None = None
) -> Task:
    """The task of one action line; ``$N`` becomes a reference when ``N`` is in ``ids``,
    ``${N}`` when it is in ``braced`` (default: ``ids``)."""
    lineno, tid, name, args_text, description = entry
    where = f"line {lineno} (task {tid})"
    if name not in registry:
        known = ", ".join(sorted(registry.names)) or "none"
        raise PlanLoadError(f"{where}: unknown tool {name!r} (known: {known})")
    params = list(registry.get(name).parameters_schema.get("properties", {}))
    positional, keywords = _call_args(args_text, where)
    if len(positional) > len(params):
        raise PlanLoadError(
            f"{where}: tool {name!r} takes {len(params)} argument"
            f"{'s' if len(params) != 1 else ''} ({', '.join(params)}), "
            f"got {len(positional)} positional"
        )
    args = dict(zip(params, positional, strict=False))
    for key, value in keywords.items():
        if key in args:
            raise PlanLoadError(f"{where}: argument {key!r} is given twice")
        args[key] = value
    args = {k: _convert_refs(v, ids, braced) for k, v in args.items()}
    return ToolTask(id=tid, tool=name, args=args, description=description)


def parse_llmcompiler(text: str, registry: Registry, *, goal: str = "") -> Plan:
    """Read LLMCompiler plan text (see the module docstring) into a :class:`Plan`.

    The plan is not validated here: pass it to :func:`dagagent.validate` for the graph and
    argument checks. Raises :class:`PlanLoadError` naming the line for malformed lines,
    unknown tools and argument lists that do not fit the tool's parameters.
    """
    reader = _LineReader()
    entries: list[_Entry] = []
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        entry = reader.read(lineno, raw_line)
        if entry is not None:
            entries.append(entry)
        if reader.ended:
            break
    ids = {e[1] for e in entries}
    tasks = [_task_from(entry, registry, ids) for entry in entries]
    if not tasks:
        raise PlanLoadError("the LLMCompiler plan has no tasks (no 'N. tool(...)' line)")
    return Plan(goal=goal, tasks=tasks)


class LLMCompilerStream:
    """:func:`parse_llmcompiler` for text that arrives in pieces: ``feed`` returns the tasks
    of the lines completed by the piece, ``finish`` those of the last line.

    A task can only refer to tasks of the lines before it: ``$N`` with ``N`` a task seen
    already is a reference, any other ``$N`` inside a string stays text (``"under $100"``).
    ``${N}``, or a bare ``$N`` outside quotes, with ``N`` at least the line's own number is
    a reference too (to the task itself or a later one), which the checks then report.
    ``ended`` turns true at ``join()`` or ``<END_OF_PLAN>``; what follows is ignored.
    A malformed line raises :class:`PlanLoadError` naming it.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._reader = _LineReader()
        self._pending = ""
        self._lineno = 0
        self._seen: set[str] = set()
        self.tasks = 0

    @property
    def ended(self) -> bool:
        return self._reader.ended

    @property
    def pending(self) -> str:
        """The text of the line not complete yet."""
        return self._pending

    def feed(self, piece: str) -> list[Task]:
        if self.ended:
            return []
        text = self._pending + piece
        *lines, self._pending = text.split("\n")
        return self._read(lines)

    def finish(self) -> list[Task]:
        """The task of the last line (the stream ended without a newline)."""
        if self.ended:
            return []
        lines, self._pending = [self._pending], ""
        return self._read(lines)

    def _read(self, lines: list[str]) -> list[Task]:
        out: list[Task] = []
        for line in lines:
            if self.ended:
                break
            self._lineno += 1
            entry = self._reader.read(self._lineno, line)
            if entry is None:
                continue
            tid = entry[1]
            braced = _SeenOrLater(self._seen, int(tid))
            task = _task_from(entry, self.registry, self._seen, braced)
            self._seen.add(tid)
            self.tasks += 1
            out.append(task)
        return out


class _SeenOrLater:
    """Task numbers that ``${N}`` refers to while streaming: those seen, and those not
    before the current line's own (a forward or self reference, reported by the checks)."""

    __slots__ = ("number", "seen")

    def __init__(self, seen: set[str], number: int) -> None:
        self.seen = seen
        self.number = number

    def __contains__(self, n: object) -> bool:
        return n in self.seen or (isinstance(n, str) and n.isdigit() and int(n) >= self.number)


def _shown(line: str) -> str:
    line = line.strip()
    return repr(shorten(line, 60, one_line=False))
