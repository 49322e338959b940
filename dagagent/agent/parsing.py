"""Reading a text-mode ReAct reply: ``Thought`` / ``Action`` / ``Action Input`` / ``Final Answer``.

The parser is tolerant of what models actually write:

- labels in any case, with extra spaces, ``_`` or no space inside (``Action_Input``,
  ``ActionInput``), wrapped in markdown bold or italics (``**Action:**``, ``**Action**:``),
  or behind a heading or list marker (``## Thought:``, ``- Action:``);
- text before the first label counts as the thought;
- an ``Action Input`` that is a JSON object (bare or in a code fence, with trailing text
  after it), a Python-style dict (``{'city': 'Paris'}``), a JSON string, or a bare string
  (the caller maps it onto the tool's only parameter, or only required one); ``Action:
  tool[input]`` / ``Action: tool(input)`` when there is no ``Action Input`` line;
- a hallucinated ``Observation:`` and everything after it is ignored (the stop sequence
  normally prevents it, but not every server honours stop sequences).

**Final Answer together with an Action**: whichever comes first wins. An Action written
before a Final Answer means the answer was made up without seeing the tool's result, so the
action is run and that answer dropped; a Final Answer written first is the answer, and the
text after it is ignored.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from dagagent.errors import ReActFormatError
from dagagent.text import shorten

__all__ = ["ReActFormatError", "ReActReply", "cut_observation", "parse_input", "parse_react"]

# The emphasis that opens a label ("**Action:**", "**Action**:", "**Final Answer: 42**") is
# closed by the same marks: only those are taken, so "Final Answer: **Paris** is warmer"
# keeps its own bold.
_LABEL_RE = re.compile(
    r"^[ \t]*(?:(?:#{1,6}|[-*>])[ \t]+)?(?P<open>[*_]{0,3})[ \t]*"
    r"(?P<label>thought|action[ \t_]*input|action|final[ \t_]*answer|observation)"
    r"(?:[ \t]*\d+)?[ \t]*(?:(?P<shut>(?P=open))[ \t]*:|:(?:[ \t]*(?P<after>(?P=open)))?)",
    re.IGNORECASE | re.MULTILINE,
)
_FENCE_RE = re.compile(r"^\s*```[\w+-]*[ \t]*\n?(?P<body>.*?)\n?[ \t]*```", re.DOTALL)
_INLINE_CALL_RE = re.compile(r"^(?P<name>[A-Za-z_][\w.-]*)\s*[\[(](?P<arg>.*)[\])]$", re.DOTALL)
_FENCE_OPEN_RE = re.compile(r"```[\w+-]*[ \t]*\n?")
_PY_CONSTANT_RE = re.compile(r"\b(?:True|False|None)\b")
_NAME_STRIP = " \t\r\n`'\"*"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ReActReply:
    """One parsed reply: either an ``action`` (with ``action_input``) or a ``final_answer``.

    ``action_input`` is a dict for a JSON object, a str for bare text or a JSON string,
    another JSON value for a JSON array, or ``None`` when there was no input.
    ``input_error`` is set when the input looked like JSON but did not parse.
    """

    thought: str
    action: str | None = None
    action_input: Any = None
    input_error: str | None = None
    final_answer: str | None = None


def _canonical(label: str) -> str:
    key = re.sub(r"[ \t_]+", "", label.lower())
    return {"actioninput": "action_input", "finalanswer": "final_answer"}.get(key, key)


def cut_observation(text: str) -> str:
    """``text`` up to a hallucinated ``Observation:`` line (the whole text if none)."""
    for m in _LABEL_RE.finditer(text):
        if _canonical(m.group("label")) == "observation":
            return text[: m.start()].rstrip()
    return text


def _sections(text: str) -> list[tuple[str, int, str]]:
    """``(label, position, content)`` for every labelled section before any Observation."""
    matches = list(_LABEL_RE.finditer(text))
    out: list[tuple[str, int, str]] = []
    for i, m in enumerate(matches):
        label = _canonical(m.group("label"))
        if label == "observation":
            break
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        unclosed = "" if m.group("shut") is not None or m.group("after") else m.group("open")
        content = _strip_emphasis(text[m.end() : end].strip(), unclosed)
        out.append((label, m.start(), content))
    return out


def _strip_emphasis(text: str, opened: str) -> str:
    """``text`` without the emphasis its label ``opened`` (and did not close), or wrapping
    all of it in bold.

    "**Final Answer: 42**" leaves "42**" after the label: the label's own "**" is cut. A
    section that is bold as a whole ("Final Answer: **42**") loses the bold; bold inside
    the text ("**Paris** is warmer") stays.
    """
    if opened and text.endswith(opened):
        return text[: -len(opened)].rstrip()
    if len(text) > 4 and text.startswith("**") and text.endswith("**") and "**" not in text[2:-2]:
        return text[2:-2].strip()
    return text


def _tool_name(line: str) -> str:
    """The tool named on an ``Action:`` line, without quotes, backticks or emphasis
    (``**search**``, ``_search_``); underscores that belong to the name stay (``_private``)."""
    name = line.strip(_NAME_STRIP)
    while len(name) > 2 and name[0] == name[-1] == "_":
        name = name[1:-1]
    return name


def _unfence(text: str) -> str:
    m = _FENCE_RE.match(text)
    return m.group("body").strip() if m else text


def _decode(text: str) -> tuple[Any, str | None]:
    """``(value, error)`` for the JSON value at the start of ``text`` (text may follow it)."""
    try:
        return _DECODER.raw_decode(text)[0], None
    except ValueError as exc:
        return None, str(exc)
    except RecursionError:
        return None, "nested too deeply"


def _python_literal(text: str) -> Any:
    """A dict or list written as a Python literal (single quotes, True / None), if ``text``
    is exactly one and holds only JSON types; else ``None``."""
    if "'" not in text and not _PY_CONSTANT_RE.search(text):
        return None
    try:
        value = ast.literal_eval(text)
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def parse_input(raw: str) -> tuple[Any, str | None]:
    """Read an Action Input: ``(value, error)``; see :class:`ReActReply` for the value."""
    text = raw.strip()
    opening = _FENCE_OPEN_RE.match(text)
    if opening is not None:
        # Read the JSON first: a string in it may hold a fence of its own (markdown, code),
        # which would end the block early if the block were cut at the first ``` seen.
        body = text[opening.end() :].lstrip()
        if body[:1] in ("{", "["):
            value, error = _decode(body)
            if error is None:
                return value, None
        text = _unfence(text)
    if not text:
        return None, None
    if text[0] in "{[":
        value, error = _decode(text)  # a JSON value, maybe followed by chatter ("(the city)")
        if error is None:
            return value, None
        literal = _python_literal(text)
        if literal is not None:  # {'city': 'Paris'}: Python, not JSON, but unambiguous
            return literal, None
        shown = shorten(text, 500, one_line=False, fit=False)
        return None, f"Action Input is not valid JSON ({error}): {shown}"
    if text[0] == '"':
        try:
            value = json.loads(text)
        except ValueError:
            return text.strip('"'), None
        return value, None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'":
        text = text[1:-1].strip()
    return text, None


def parse_react(text: str) -> ReActReply:
    """Parse one reply; raise :class:`ReActFormatError` if it has no usable Action or answer."""
    sections = _sections(text)
    first = _LABEL_RE.search(text)
    preamble = text[: first.start()].strip() if first else text.strip()
    thoughts = [preamble] if preamble else []
    thoughts += [c for label, _, c in sections if label == "thought" and c]
    thought = "\n".join(thoughts)

    action = next(((pos, c) for label, pos, c in sections if label == "action"), None)
    answer = next(((pos, c) for label, pos, c in sections if label == "final_answer"), None)

    if answer is not None and (action is None or answer[0] < action[0]):
        if not answer[1]:
            raise ReActFormatError("'Final Answer:' is empty; write the answer after it")
        return ReActReply(thought=thought, final_answer=answer[1])
    if action is None:
        if any(label == "action_input" for label, _, _ in sections):
            raise ReActFormatError("there is an 'Action Input:' but no 'Action:' naming the tool")
        if not text.strip():
            raise ReActFormatError("the reply is empty")
        raise ReActFormatError("the reply has neither an 'Action:' line nor a 'Final Answer:'")

    pos, content = action
    lines = content.splitlines()
    name = _tool_name(lines[0]) if lines else ""
    given = next((c for label, p, c in sections if label == "action_input" and p > pos), None)
    value: Any = None
    error: str | None = None
    inline = _INLINE_CALL_RE.match(name)
    if inline is not None and given is None:
        name = inline.group("name")
        value, error = parse_input(inline.group("arg"))
    elif given is not None:
        value, error = parse_input(given)
    if not name:
        raise ReActFormatError("'Action:' does not name a tool")
    return ReActReply(thought=thought, action=name, action_input=value, input_error=error)
