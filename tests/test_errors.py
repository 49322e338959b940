"""The error tree is whole: every exception class of ``dagagent.errors`` is drawn in the
module's docstring, under its real parent, and exported from ``dagagent``."""

from __future__ import annotations

import builtins
import inspect
import re

import pytest

import dagagent
import dagagent.agent
import dagagent.llm
from dagagent import errors


def _exception_classes() -> list[type[BaseException]]:
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
    ]


def _drawing() -> dict[str, str | None]:
    """Each class drawn in the docstring's tree, mapped to the class drawn as its parent
    (None for a root of the drawing)."""
    doc = errors.__doc__ or ""
    tree = doc[doc.index("The tree::") + len("The tree::") : doc.index("Messages always")]
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name)
    for line in tree.splitlines():
        match = re.match(r"^(\s*(?:[│ ]*[├└]── )?)([A-Z]\w*Error)\b", line)
        if not match:
            continue
        column, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    return parents


def test_the_module_defines_exceptions() -> None:
    assert len(_exception_classes()) >= 28


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__name__)
def test_every_error_is_drawn_under_its_parent(cls: type[BaseException]) -> None:
    parents = _drawing()
    assert cls.__name__ in parents, f"{cls.__name__} is not drawn in the errors docstring"
    drawn_parent = parents[cls.__name__]
    if drawn_parent is None:  # a root: only builtin exceptions are above it
        assert all(base.__module__ == "builtins" for base in cls.__bases__)
        return
    assert drawn_parent in {base.__name__ for base in cls.__bases__}, (
        f"{cls.__name__} is drawn under {drawn_parent}, but its bases are {cls.__bases__}"
    )


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__name__)
def test_every_error_is_exported(cls: type[BaseException]) -> None:
    assert cls.__name__ in errors.__all__
    assert cls.__name__ in dagagent.__all__
    assert getattr(dagagent, cls.__name__) is cls


def test_the_drawing_names_no_class_that_does_not_exist() -> None:
    names = {cls.__name__ for cls in _exception_classes()}
    for name in _drawing():
        assert name in names or isinstance(getattr(builtins, name, None), type), name


def test_errors_are_the_same_classes_where_they_used_to_live() -> None:
    assert dagagent.agent.AgentStoppedError is errors.AgentStoppedError
    assert dagagent.agent.ReActFormatError is errors.ReActFormatError
    assert dagagent.llm.ScriptError is errors.ScriptError
    assert issubclass(errors.ReActFormatError, ValueError)
