"""The limits a run has unless told otherwise, apart from the code that applies them, so that a
command line's ``--help`` can show them without importing the runner."""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_ELEMENTS"]

#: At most this many elements in one map task's list (``for_each``) unless ``max_elements``
#: says otherwise: a longer list is a :class:`~dagagent.errors.MapError`.
DEFAULT_MAX_ELEMENTS = 10_000
