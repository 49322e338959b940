"""Conditions: the small predicate language of a task's ``when``.

A task with ``"when": "${search.count} > 0"`` runs only if the condition holds once the tasks
it reads have succeeded; otherwise it is ``skipped``, with the reason on record. The language
is read by its own parser (:func:`parse_condition`) and decided by walking what it read
(:meth:`Condition.decide`): nothing in it is ever evaluated as code.

The language, loosest binding first::

    condition  := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | comparison
    comparison := value [("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "not in") value]
    value      := ${task.path} | number | 'text' | "text" | true | false | null
                | [value, ...] | "(" condition ")"

- **References** are those of arguments (see :mod:`dagagent.references`): ``${id}`` is task
  ``id``'s whole output, ``${id.key.0}`` walks into it. A reference in a condition is a
  dependency of the task, like one in its arguments.
- **Literals**: numbers (``3``, ``-1.5``, ``2e3``), text in single or double quotes
  (``\\'``, ``\\"``, ``\\\\``, ``\\n`` and ``\\t`` escapes), ``true``/``false``/``null``
  (``True``/``False``/``None`` too), and lists of them (``['pdf', 'html']``).
- **Comparisons**: ``==`` and ``!=`` compare any values (``true`` is not ``1``: a boolean
  equals only a boolean); ``<``, ``<=``, ``>``, ``>=`` compare two numbers or two texts;
  ``a in b`` is true when ``b`` is a list holding ``a``, a text containing the text ``a``,
  or an object with the key ``a``. Comparisons do not chain (``0 < x < 5``: write
  ``0 < x and x < 5``).
- **A value alone** is its truth: ``null``, ``false``, ``0``, ``""``, ``[]`` and ``{}`` are
  false, every other value true. So ``"${check.ok}"`` and ``"not ${found.items}"`` read as
  they would be said.
- ``and`` and ``or`` stop as soon as the answer is known: ``${r.ok} and ${r.count} > 0``
  never reads ``count`` when ``ok`` is false.

A condition that cannot be decided (a reference that does not resolve, a number compared
with a text) fails its task with a :class:`~dagagent.errors.ConditionError` saying why: it is
not taken for false.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from .errors import ConditionError, ConditionSyntaxError, ReferenceResolutionError
from .references import Reference
from .text import shorten

__all__ = [
    "MAX_CONDITION_CHARS",
    "MAX_CONDITION_DEPTH",
    "Condition",
    "condition_references",
    "parse_condition",
]

#: The longest condition read (a longer one is a syntax issue, not a slow parse).
MAX_CONDITION_CHARS = 2000
#: How deep parentheses, ``not`` and lists may nest.
MAX_CONDITION_DEPTH = 32

_REF_RE = re.compile(r"\$\{(@?[A-Za-z0-9_][A-Za-z0-9_-]*)((?:\.[^.}\s]+)*)\}")
_NUMBER_RE = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
_LITERAL_WORDS: dict[str, Any] = {
    "true": True,
    "True": True,
    "false": False,
    "False": False,
    "null": None,
    "None": None,
}
_KEYWORDS = frozenset({"and", "or", "not", "in"})
# What other languages write, and what this one writes instead.
_HINTS = {
    "=": "'=' is not a comparison: write '=='",
    "&&": "write 'and', not '&&'",
    "||": "write 'or', not '||'",
    "!": "write 'not', not '!'",
}
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}


# ---------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "ref", "literal", "op", "word", "(", ")", "[", "]", ",", "end"
    value: Any
    at: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("${", i):
            m = _REF_RE.match(text, i)
            if m is None:
                raise ConditionSyntaxError(
                    text, i, "malformed reference: write ${task_id} or ${task_id.path}"
                )
            path = tuple(m.group(2)[1:].split(".")) if m.group(2) else ()
            out.append(_Token("ref", Reference(m.group(1), path, m.group(0)), i))
            i = m.end()
            continue
        if c in "'\"":
            value, end = _string(text, i)
            out.append(_Token("literal", value, i))
            i = end
            continue
        m = _NUMBER_RE.match(text, i)
        if m is not None and (c != "-" or not out or out[-1].kind in ("op", "word", "(", "[", ",")):
            raw = m.group(0)
            number: float = float(raw) if any(ch in raw for ch in ".eE") else int(raw)
            if isinstance(number, float) and not math.isfinite(number):
                raise ConditionSyntaxError(text, i, f"{raw} is not a finite number")
            out.append(_Token("literal", number, i))
            i = m.end()
            continue
        m = _WORD_RE.match(text, i)
        if m is not None:
            word = m.group(0)
            if word in _LITERAL_WORDS:
                out.append(_Token("literal", _LITERAL_WORDS[word], i))
            elif word in _KEYWORDS:
                out.append(_Token("word", word, i))
            else:
                raise ConditionSyntaxError(
                    text,
                    i,
                    f"unknown word {word!r}: a value is a ${{reference}}, a number, a 'text' "
                    "in quotes, true, false or null",
                )
            i = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                out.append(_Token("op", op, i))
                i += len(op)
                break
        else:
            for bad, hint in _HINTS.items():
                if text.startswith(bad, i):
                    raise ConditionSyntaxError(text, i, hint)
            if c in "()[],":
                out.append(_Token(c, c, i))
                i += 1
                continue
            raise ConditionSyntaxError(text, i, f"unexpected character {c!r}")
    out.append(_Token("end", None, n))
    return out


def _string(text: str, start: int) -> tuple[str, int]:
    quote = text[start]
    parts: list[str] = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(parts), i + 1
        if c == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt not in _ESCAPES:
                raise ConditionSyntaxError(
                    text, i, f"unknown escape '\\{nxt}' (use \\\\, \\', \\\", \\n or \\t)"
                )
            parts.append(_ESCAPES[nxt])
            i += 2
            continue
        parts.append(c)
        i += 1
    raise ConditionSyntaxError(text, start, f"text opened with {quote} is never closed")


# ---------------------------------------------------------------------------- the tree


@dataclass(frozen=True, slots=True)
class _Literal:
    value: Any


@dataclass(frozen=True, slots=True)
class _Ref:
    ref: Reference


@dataclass(frozen=True, slots=True)
class _List:
    items: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Not:
    operand: _Node


@dataclass(frozen=True, slots=True)
class _Both:  # and / or, of two or more operands (a chain is one node, not a deep tree)
    op: str
    operands: tuple[_Node, ...]


@dataclass(frozen=True, slots=True)
class _Compare:
    op: str  # one of _OPERATORS, "in", "not in"
    left: _Node
    right: _Node
    at: int


_Node: TypeAlias = "_Literal | _Ref | _List | _Not | _Both | _Compare"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.pos]

    def fail(self, problem: str, at: int | None = None) -> ConditionSyntaxError:
        return ConditionSyntaxError(self.text, self.token.at if at is None else at, problem)

    def is_word(self, word: str) -> bool:
        t = self.token
        return t.kind == "word" and t.value == word

    def _next_is(self, word: str) -> bool:
        t = self.tokens[self.pos + 1]
        return t.kind == "word" and t.value == word

    def parse(self) -> _Node:
        if self.token.kind == "end":
            raise self.fail("the condition is empty")
        node = self.either()
        t = self.token
        if t.kind != "end":
            if t.kind == "op" and isinstance(node, _Compare):
                raise self.fail(
                    f"comparisons do not chain: join them with 'and' (a < b and b < c), "
                    f"not {t.value!r} after a comparison"
                )
            raise self.fail(f"expected 'and', 'or' or the end, found {self.shown(t)}")
        return node

    def either(self) -> _Node:
        nodes = [self.both()]
        while self.is_word("or"):
            self.pos += 1
            nodes.append(self.both())
        return nodes[0] if len(nodes) == 1 else _Both("or", tuple(nodes))

    def both(self) -> _Node:
        nodes = [self.negation()]
        while self.is_word("and"):
            self.pos += 1
            nodes.append(self.negation())
        return nodes[0] if len(nodes) == 1 else _Both("and", tuple(nodes))

    def negation(self) -> _Node:
        if self.is_word("not"):
            self.pos += 1
            with self.deeper():
                return _Not(self.negation())
        return self.comparison()

    def comparison(self) -> _Node:
        left = self.value()
        t = self.token
        if t.kind == "op":
            op, at = t.value, t.at
            self.pos += 1
        elif self.is_word("in"):
            op, at = "in", t.at
            self.pos += 1
        elif self.is_word("not") and self._next_is("in"):
            op, at = "not in", t.at
            self.pos += 2
        else:
            return left
        return _Compare(op, left, self.value(), at)

    def value(self) -> _Node:
        t = self.token
        if t.kind == "ref":
            self.pos += 1
            return _Ref(t.value)
        if t.kind == "literal":
            self.pos += 1
            return _Literal(t.value)
        if t.kind == "(":
            self.pos += 1
            with self.deeper():
                node = self.either()
            if self.token.kind != ")":
                raise self.fail(f"expected ')' to close the '(' at {t.at + 1}")
            self.pos += 1
            return node
        if t.kind == "[":
            return self.list_()
        raise self.fail(f"expected a value, found {self.shown(t)}")

    def list_(self) -> _Node:
        opened = self.token.at
        self.pos += 1
        items: list[_Node] = []
        with self.deeper():
            while self.token.kind != "]":
                items.append(self.value())
                if self.token.kind == ",":
                    self.pos += 1
                elif self.token.kind != "]":
                    raise self.fail(f"expected ',' or ']' in the list opened at {opened + 1}")
        self.pos += 1
        return _List(tuple(items))

    def deeper(self) -> _Depth:
        return _Depth(self)

    def shown(self, t: _Token) -> str:
        if t.kind == "end":
            return "the end of the condition"
        if t.kind == "ref":
            return t.value.text  # type: ignore[no-any-return]
        if t.kind == "literal":
            return repr(self.text[t.at : self.tokens[self.pos + 1].at].strip())
        return repr(t.value)


class _Depth:
    def __init__(self, parser: _Parser) -> None:
        self.parser = parser

    def __enter__(self) -> None:
        self.parser.depth += 1
        if self.parser.depth > MAX_CONDITION_DEPTH:
            raise self.parser.fail(f"nested more than {MAX_CONDITION_DEPTH} levels deep")

    def __exit__(self, *exc: object) -> None:
        self.parser.depth -= 1


# ---------------------------------------------------------------------------- deciding


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


def _truth(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, list, tuple, Mapping)):
        return bool(value)
    return True  # an object (a model, a dataclass): there is something


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool(a == b)


class Condition:
    """A parsed ``when``: :meth:`decide` it against the run's outputs; ``refs`` are the
    references it reads (each a dependency of its task)."""

    __slots__ = ("_tree", "refs", "text")

    def __init__(self, text: str, tree: _Node, refs: tuple[Reference, ...]) -> None:
        self.text = text
        self._tree = tree
        self.refs = refs

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

    def decide(self, outputs: Mapping[str, Any]) -> bool:
        """Whether the condition holds for ``outputs`` (task id → output; a map element's
        scope for an element). Raises :class:`~dagagent.errors.ConditionError` when it
        cannot be decided."""
        return _truth(self._value(self._tree, outputs))

    def explain(self, outputs: Mapping[str, Any], *, width: int = 80) -> str:
        """The values the condition read, for a record of why it held or not:
        ``${search.count} = 0, ${search.kind} = "pdf"`` (each shortened to ``width``; a
        reference that does not resolve is left out)."""
        shown: list[str] = []
        seen: set[str] = set()
        for ref in self.refs:
            if ref.text in seen:
                continue
            seen.add(ref.text)
            try:
                value = ref.resolve(outputs)
            except ReferenceResolutionError:
                continue
            shown.append(f"{ref.text} = {shorten(_shown(value), width)}")
        return ", ".join(shown)

    def _value(self, node: _Node, outputs: Mapping[str, Any]) -> Any:
        if isinstance(node, _Literal):
            return node.value
        if isinstance(node, _Ref):
            try:
                return node.ref.resolve(outputs)
            except ReferenceResolutionError as exc:
                raise ConditionError(f"condition {self.text!r}: {exc}") from None
        if isinstance(node, _List):
            return [self._value(item, outputs) for item in node.items]
        if isinstance(node, _Not):
            return not _truth(self._value(node.operand, outputs))
        if isinstance(node, _Both):
            wanted = node.op == "or"  # the value that settles it: one true for 'or'
            for operand in node.operands:
                if _truth(self._value(operand, outputs)) is wanted:
                    return wanted
            return not wanted
        return self._compare(node, outputs)

    def _compare(self, node: _Compare, outputs: Mapping[str, Any]) -> bool:
        a = self._value(node.left, outputs)
        b = self._value(node.right, outputs)
        op = node.op
        if op == "==":
            return _equal(a, b)
        if op == "!=":
            return not _equal(a, b)
        if op in ("in", "not in"):
            found = self._contains(b, a, node)
            return found if op == "in" else not found
        if not ((_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str))):
            raise ConditionError(
                f"condition {self.text!r}: {op!r} at character {node.at + 1} compares two "
                f"numbers or two texts, not {_kind(a)} ({shorten(_shown(a), 40)}) with "
                f"{_kind(b)} ({shorten(_shown(b), 40)})"
            )
        if op == "<":
            return bool(a < b)
        if op == "<=":
            return bool(a <= b)
        if op == ">":
            return bool(a > b)
        return bool(a >= b)

    def _contains(self, container: Any, item: Any, node: _Compare) -> bool:
        if isinstance(container, (list, tuple)):
            return any(_equal(item, x) for x in container)
        if isinstance(container, str) and isinstance(item, str):
            return item in container
        if isinstance(container, Mapping) and isinstance(item, str):
            return item in container
        raise ConditionError(
            f"condition {self.text!r}: {node.op!r} at character {node.at + 1} looks for a "
            f"value in a list, a text in a text or a key in an object, not {_kind(item)} in "
            f"{_kind(container)}"
        )


def _shown(value: Any) -> str:
    from .references import reference_text

    if isinstance(value, str):
        return '"' + value + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return reference_text(value)


def _refs(node: _Node, found: list[Reference]) -> None:
    if isinstance(node, _Ref):
        found.append(node.ref)
    elif isinstance(node, _List):
        for item in node.items:
            _refs(item, found)
    elif isinstance(node, _Not):
        _refs(node.operand, found)
    elif isinstance(node, _Both):
        for operand in node.operands:
            _refs(operand, found)
    elif isinstance(node, _Compare):
        _refs(node.left, found)
        _refs(node.right, found)


@functools.lru_cache(maxsize=1024)
def parse_condition(text: str) -> Condition:
    """Read ``text`` as a condition (see the module docstring). Raises
    :class:`~dagagent.errors.ConditionSyntaxError` naming the character where reading
    stopped and why. Conditions are immutable, so a text read before is not read again."""
    if len(text) > MAX_CONDITION_CHARS:
        raise ConditionSyntaxError(
            text, MAX_CONDITION_CHARS, f"longer than {MAX_CONDITION_CHARS} characters"
        )
    tree = _Parser(text).parse()
    refs: list[Reference] = []
    _refs(tree, refs)
    return Condition(text, tree, tuple(refs))


def condition_references(text: str | None) -> Sequence[Reference]:
    """The references of a ``when`` (none for no condition, or one that does not parse:
    validation reports that)."""
    if text is None:
        return ()
    try:
        return parse_condition(text).refs
    except ConditionSyntaxError:
        return ()
