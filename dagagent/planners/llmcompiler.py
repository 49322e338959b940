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
ends the plan and is not a task. Any other line is a :class:`PlanLoadError` naming it.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from ..errors import PlanLoadError
from ..plan import Plan, Task

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["parse_llmcompiler"]

_END = "<END_OF_PLAN>"
_ACTION_RE = re.compile(r"^(\d+)\s*[.):]\s*([A-Za-z_][\w.-]*)\s*\((.*)\)\s*(?:#.*)?$")
_THOUGHT_RE = re.compile(r"^thought\s*:\s*(.*)$", re.IGNORECASE)
_REF_RE = re.compile(r"\$\{(\d+)\}|\$(\d+)(?![\d.]*\d)")
_BARE_REF_RE = re.compile(r"\$\{(\d+)\}|\$(\d+)")
_JOIN = "join"


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


def _convert_refs(value: Any, ids: set[str]) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            n = m.group(1) or m.group(2)
            return f"${{{n}}}" if n in ids else m.group(0)

        return _REF_RE.sub(sub, value)
    if isinstance(value, (list, tuple)):
        return [_convert_refs(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _convert_refs(v, ids) for k, v in value.items()}
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
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise PlanLoadError(
            f"{where}: {shown!r} is not a literal (use strings, numbers, lists, dicts, "
            "True/False/None or $N references)"
        ) from None
    if isinstance(value, (set, frozenset, bytes, complex)):
        raise PlanLoadError(f"{where}: {type(value).__name__} values are not supported")
    return list(value) if isinstance(value, tuple) else value


def parse_llmcompiler(text: str, registry: Registry, *, goal: str = "") -> Plan:
    """Read LLMCompiler plan text (see the module docstring) into a :class:`Plan`.

    The plan is not validated here: pass it to :func:`dagagent.validate` for the graph and
    argument checks. Raises :class:`PlanLoadError` naming the line for malformed lines,
    unknown tools and argument lists that do not fit the tool's parameters.
    """
    entries: list[tuple[int, str, str, str, str | None]] = []  # line, id, tool, args, thought
    thought: str | None = None
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        ended = _END in line
        line = line.replace(_END, "").strip()
        if not line:
            if ended:
                break
            continue
        where = f"line {lineno} ({_shown(raw_line)})"
        m_thought = _THOUGHT_RE.match(line)
        if m_thought:
            thought = m_thought.group(1).strip() or None
        else:
            m = _ACTION_RE.match(line)
            if m is None:
                bare = re.match(r"^(?:\d+\s*[.):]\s*)?([A-Za-z_]\w*)\s*\(.*\)\s*$", line)
                if bare and bare.group(1) == _JOIN:
                    break
                raise PlanLoadError(
                    f"{where}: expected 'N. tool(arguments)', 'Thought: ...' or 'join()'"
                )
            number, name, args = m.group(1), m.group(2), m.group(3)
            if name == _JOIN:
                break
            entries.append((lineno, str(int(number)), name, args, thought))
            thought = None
        if ended:
            break
    ids = {e[1] for e in entries}
    tasks = []
    for lineno, tid, name, args_text, description in entries:
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
        args = {k: _convert_refs(v, ids) for k, v in args.items()}
        tasks.append(Task(id=tid, tool=name, args=args, description=description))
    if not tasks:
        raise PlanLoadError("the LLMCompiler plan has no tasks (no 'N. tool(...)' line)")
    return Plan(goal=goal, tasks=tasks)


def _shown(line: str) -> str:
    line = line.strip()
    return repr(line if len(line) <= 60 else line[:57] + "...")
