"""The argument matcher language of approval rules: globs, regular expressions, explicit
``{"glob"|"regex"|"equals": ...}`` forms, predicates and plain values (see
:mod:`dagagent.approval`)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError
from ..text import jsonable, shorten

__all__ = [
    "MATCHER_FORMS",
    "Matcher",
    "compile_glob",
    "compile_matcher",
    "compile_regex",
    "leaves",
    "normal_path",
    "value_text",
]

Matcher = Callable[[Any], bool]


def value_text(value: Any) -> str:
    """What a matcher sees of a value, as the tool receives it: a string as is, a path
    (``os.PathLike``) as its text, anything else whose JSON form is a string (a ``UUID``, a
    ``datetime``) as that string, and other values as their JSON text (``5``, ``true``,
    ``["a"]``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fsdecode(value)
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    try:
        data = jsonable(value)
        if isinstance(data, str):
            return data
        return json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def normal_path(value: Any) -> str:
    """The file a path value names, as ``{"path": glob}`` matchers see it: surrounding
    whitespace dropped, made absolute against the working directory, ``.``, ``..``, repeated
    slashes and symbolic links resolved (``//etc/./x/../passwd`` is ``/etc/passwd``)."""
    text = value_text(value).strip()
    return os.path.realpath(os.path.expanduser(text) if text.startswith("~") else text)


def compile_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; a bad one is a :class:`ConfigError`."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"bad regular expression {pattern!r}: {exc}") from None


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A shell-style glob as a compiled pattern (matched against the whole text)."""
    return re.compile(fnmatch.translate(pattern))


MATCHER_FORMS = ("regex", "glob", "path", "equals")


def leaves(value: Any) -> list[Any]:
    """What a glob looks at in a value: the value itself, or, for a collection (a list, a
    tuple, a set, a dict's values, a model's fields, at any depth), every value in it."""
    if isinstance(value, BaseModel):
        value = dict(value)
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in leaves(v)]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [leaf for v in value for leaf in leaves(v)]
    return [value]


def _each(test: Callable[[Any], bool], every: bool) -> Matcher:
    """A matcher of ``test`` over a value's :func:`leaves`: all of them (``every``: for an
    allow rule, which must not let anything it did not look at through) or any (a deny or
    ask rule, which must catch a single one)."""
    if every:
        return lambda v: all(test(x) for x in leaves(v) or [v])  # [] as its text, as before
    return lambda v: any(test(x) for x in leaves(v) or [v])


def compile_matcher(spec: Any, *, every: bool = False) -> tuple[Matcher, str]:
    """Compile one argument matcher; return it with a short description. A glob (text or
    path) matches a collection by its elements (see :func:`leaves`): any of them, or with
    ``every`` (an allow rule's) all of them."""
    if isinstance(spec, str):
        rx = compile_glob(spec)
        return _each(lambda v: rx.match(value_text(v)) is not None, every), spec
    if isinstance(spec, re.Pattern):
        pat: re.Pattern[str] = spec
        return (lambda v: pat.search(value_text(v)) is not None), f"/{pat.pattern}/"
    if isinstance(spec, Mapping):
        # Only the explicit forms: a typo such as {"regx": ...} would otherwise compare the
        # argument with that dict, never match, and silently disable a deny rule.
        if len(spec) != 1 or next(iter(spec)) not in MATCHER_FORMS:
            raise ConfigError(
                f"argument matcher {shorten(value_text(spec), 60, one_line=False)} is not one of "
                + ", ".join(f'{{"{k}": ...}}' for k in MATCHER_FORMS)
                + ' (to compare with a dict, use {"equals": {...}})'
            )
        ((kind, val),) = spec.items()
        if kind == "regex":
            if not isinstance(val, str):
                raise ConfigError(f"{{'regex': ...}} needs a string, got {val!r}")
            return compile_matcher(compile_regex(val))
        if kind == "glob":
            if not isinstance(val, str):
                raise ConfigError(f"{{'glob': ...}} needs a string, got {val!r}")
            return compile_matcher(val, every=every)
        if kind == "path":
            if not isinstance(val, str):
                raise ConfigError(f"{{'path': ...}} needs a string, got {val!r}")
            prx = compile_glob(val)
            return _each(lambda v: prx.match(normal_path(v)) is not None, every), f"path {val}"
        if kind == "equals":
            return (lambda v: bool(v == val)), f"== {val!r}"
    if callable(spec):
        fn: Callable[[Any], Any] = spec
        name = getattr(fn, "__name__", type(fn).__name__)
        return (lambda v: bool(fn(v))), f"{name}()"
    return (lambda v: bool(v == spec)), f"== {spec!r}"
