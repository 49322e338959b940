"""When a task's output from an earlier run may stand for running it again: the same
:func:`~dagagent.plan.task_fingerprint` (re-exported here) and the same upstream outputs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..plan import task_fingerprint
from ..text import jsonable

__all__ = ["same_upstream", "task_fingerprint"]


def same_upstream(
    dependencies: Sequence[str],
    outputs: Mapping[str, Any],
    reuse: Mapping[str, tuple[str, Any]],
) -> bool:
    """Whether every dependency has the output it had in the run being reused (reused itself,
    or run again with an equal result). Arguments are not all of a task's inputs: an agent
    task sees its dependencies' outputs, and a ``depends_on`` may stand for a side effect (a
    file written upstream)."""
    for d in dependencies:
        before = reuse.get(d)
        if before is None or d not in outputs:
            return False
        now = outputs[d]
        if now is not before[1] and not _same_output(now, before[1]):
            return False
    return True


def _same_output(a: Any, b: Any) -> bool:
    """Equal as recorded: a live output against its JSON record (a set against a list...)."""
    try:
        return _canonical(a) == _canonical(b)
    except Exception:  # cannot be compared: not the same, as far as reuse is concerned
        return False


def _canonical(value: Any) -> str:
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), default=str)
