"""``${id.path}`` references between tasks, and templates: values with their references
compiled once.

``${id}`` is the whole output of task ``id``; ``${id.key.0}`` walks into it (mapping keys, list
indexes, and the public data attributes of objects such as pydantic models and dataclasses:
never a name starting with ``_``, never a method). A string that is exactly one reference takes
the referenced value with its type; references inside longer text are interpolated with
:func:`reference_text`. ``$${`` writes a literal ``${``.

**The element of a map.** In a task with ``for_each`` (see :mod:`dagagent.plan`),
``${@item}`` is the current element of the list and ``${@index}`` its position (0-based);
``${@item.key}`` walks into the element like any reference. The ``@`` keeps these names apart
from task ids, which cannot contain it: a plan may well have a task called ``item``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel

from .errors import PlanLoadError, ReferenceResolutionError

__all__ = [
    "ELEMENT_NAMES",
    "INDEX",
    "ITEM",
    "MAX_DEPTH",
    "ElementScope",
    "Reference",
    "Template",
    "reference_text",
]

MAX_DEPTH = 100  # nesting limit for args: deeper JSON is refused, not a RecursionError
ITEM = "@item"
"""The name of a map task's current element: ``${@item}``."""
INDEX = "@index"
"""The name of a map task's current element's position (from 0): ``${@index}``."""
ELEMENT_NAMES = frozenset({ITEM, INDEX})
# ${id} or ${id.path.seg}, or ${@name...} (a map's element); path segments are anything but
# '.', '}' and whitespace.
_REF_RE = re.compile(r"\$\$\{|\$\{(@?[A-Za-z0-9_][A-Za-z0-9_-]*)((?:\.[^.}\s]+)*)\}")
# A string that is one reference and nothing else (most references are): a reference ends at
# its first '}', so this matches exactly when _REF_RE's first match is the whole string.
_WHOLE_REF_RE = re.compile(r"\$\{(@?[A-Za-z0-9_][A-Za-z0-9_-]*)((?:\.[^.}\s]+)*)\}")


class Reference:
    """A parsed ``${task.path}`` reference."""

    __slots__ = ("path", "task_id", "text")

    def __init__(self, task_id: str, path: tuple[str, ...], text: str) -> None:
        self.task_id = task_id
        self.path = path
        self.text = text

    def __repr__(self) -> str:
        return f"Reference({self.text!r})"

    @property
    def element(self) -> bool:
        """Whether this names a map's element (``${@item}``, ``${@index}``), not a task."""
        return self.task_id.startswith("@")

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


class ElementScope(Mapping[str, Any]):
    """The outputs a map element's references read: the run's outputs, and the element
    itself as ``@item`` and its position as ``@index``."""

    __slots__ = ("_index", "_item", "_outputs")

    def __init__(self, outputs: Mapping[str, Any], item: Any, index: int) -> None:
        self._outputs = outputs
        self._item = item
        self._index = index

    def __getitem__(self, key: str) -> Any:
        if key == ITEM:
            return self._item
        if key == INDEX:
            return self._index
        return self._outputs[key]

    def __contains__(self, key: object) -> bool:
        return key in ELEMENT_NAMES or key in self._outputs

    def __iter__(self) -> Iterator[str]:
        yield ITEM
        yield INDEX
        yield from self._outputs

    def __len__(self) -> int:
        return len(self._outputs) + 2


def _step(value: Any, seg: str, walked: str, text: str) -> Any:
    if isinstance(value, Mapping):
        if seg in value:
            return value[seg]
        keys = ", ".join(repr(k) for k in list(value)[:10])
        raise ReferenceResolutionError(f"{text}: {walked} has no key {seg!r} (keys: {keys})")
    if isinstance(value, (list, tuple)):
        # An index is plain ASCII digits: int() would also take '-1', '1_0', ' 3' and '٣'.
        if not (seg.isascii() and seg.isdigit()):
            raise ReferenceResolutionError(
                f"{text}: {walked} is a list; {seg!r} is not an index "
                "(an index is written in the digits 0-9)"
            )
        idx = int(seg)
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


def reference_text(value: Any) -> str:
    """How a referenced value reads inside longer text: a string as it is, dicts and lists as
    JSON, a pydantic model as its JSON, anything else as ``str()``."""
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
            p if isinstance(p, str) else reference_text(p.resolve(outputs)) for p in self.parts
        )


def _compile_string(s: str, refs: list[Reference], bad: list[str]) -> Any:
    """Return a literal string (with every ``$${`` written as ``${``), a Reference
    (whole-string) or an _Interp."""
    if "${" not in s:
        return s
    whole = _WHOLE_REF_RE.fullmatch(s)
    if whole is not None:
        path = whole.group(2)
        ref = Reference(whole.group(1), tuple(path[1:].split(".")) if path else (), s)
        refs.append(ref)
        return ref
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

    ``resolve(outputs)`` builds the concrete value. A template without references returns
    ``literal``, built once: the value itself, or a copy with each ``$${`` written as ``${`` (an
    escape means the same in a task with references and in one without), so the hot path pays
    nothing for plans that use no references.
    """

    __slots__ = ("_compiled", "literal", "malformed", "refs")

    def __init__(self, value: Any) -> None:
        self.refs: tuple[Reference, ...]
        self.malformed: tuple[str, ...]
        self.literal: Any
        if type(value) is dict and not value:
            # No arguments at all (a common case, compiled once per task of a plan): nothing
            # to do, and nothing made (the empty tuples are shared).
            self._compiled = self.literal = value
            self.refs = self.malformed = ()
            return
        refs: list[Reference] = []
        malformed: list[str] = []
        self._compiled = _compile(value, refs, malformed)
        self.refs = tuple(refs)
        self.malformed = tuple(malformed)
        if refs:
            self.literal = None
        elif _has_escape(value):
            self.literal = self._compiled
        else:
            self.literal = value

    @property
    def has_refs(self) -> bool:
        return bool(self.refs)

    def resolve(self, outputs: Mapping[str, Any]) -> Any:
        if not self.refs:
            return self.literal
        return _resolve(self._compiled, outputs)

    def whole_references(self) -> list[tuple[tuple[str | int, ...], Reference]]:
        """Every value that is exactly one reference (and so keeps the referenced value's
        type), with where it is: the keys and list indexes leading to it (``()``: the whole
        template is one reference)."""
        found: list[tuple[tuple[str | int, ...], Reference]] = []
        if self.refs:
            _whole(self._compiled, (), found)
        return found

    def literal_keys(self) -> dict[str, Any]:
        """For a dict template: the top-level entries that hold no reference at all."""
        if not isinstance(self._compiled, dict):
            return {}
        return {k: v for k, v in self._compiled.items() if not _has_ref(v)}


def _compile(value: Any, refs: list[Reference], bad: list[str], depth: int = 0) -> Any:
    if isinstance(value, str):
        return _compile_string(value, refs, bad)
    if depth >= MAX_DEPTH:
        if isinstance(value, (dict, list)):
            raise PlanLoadError(f"arguments are nested more than {MAX_DEPTH} levels deep")
        return value
    if isinstance(value, dict):
        return {k: _compile(v, refs, bad, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_compile(v, refs, bad, depth + 1) for v in value]
    return value


def _whole(
    c: Any, path: tuple[str | int, ...], found: list[tuple[tuple[str | int, ...], Reference]]
) -> None:
    if isinstance(c, Reference):
        found.append((path, c))
    elif isinstance(c, dict):
        for k, v in c.items():
            _whole(v, (*path, k), found)
    elif isinstance(c, list):
        for i, v in enumerate(c):
            _whole(v, (*path, i), found)


def _has_escape(value: Any) -> bool:
    if isinstance(value, str):
        return "$${" in value
    if isinstance(value, dict):
        return any(_has_escape(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_escape(v) for v in value)
    return False


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
