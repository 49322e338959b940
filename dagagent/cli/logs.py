"""What the command line's log lines look like when nobody asked for more (no ``-v``): one
line a person reads, ``warning: ...``, not a structlog record. With ``-v`` the records are
printed as they are, fields and time stamps included.

A model request tried again says so in words (``the model did not answer (...): trying again
in 1.2s (retry 1)``); the model's final error is not logged here: the command that used the
model says it, once. Any other warning is its event and its fields, on one line.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

from ..text import printable, shorten

__all__ = ["human_line"]


def _retry(fields: MutableMapping[str, Any]) -> str:
    reason = shorten(str(fields.get("reason") or "no reason given"), 200)
    delay = fields.get("delay_s")
    when = f" in {float(delay):.1f}s" if isinstance(delay, (int, float)) else ""
    attempt = fields.get("attempt")
    retry = f" (retry {attempt})" if attempt is not None else ""
    return f"the model did not answer ({reason}): trying again{when}{retry}"


def _locked(fields: MutableMapping[str, Any]) -> str:
    path, detail = fields.get("path", ""), fields.get("detail", "")
    return f"the run store {path} is locked by another process: {detail}"


def _incomplete(fields: MutableMapping[str, Any]) -> str:
    path, lost = fields.get("path", ""), fields.get("lost", "")
    return f"the run store {path} could not write all of the run: {lost}"


def _task_failing(fields: MutableMapping[str, Any]) -> str:
    workflow, address = fields.get("workflow", ""), fields.get("address", "")
    attempts = fields.get("attempts")
    times = f" (failed {attempts} time{'s' if attempts != 1 else ''} so far)" if attempts else ""
    error = shorten(str(fields.get("error") or "no message"), 500)
    return (
        f"the workflow {workflow} on the Temporal server at {address} is stuck: its workflow "
        f"task fails on the workers{times}: {error}. The server keeps trying it, and it goes "
        "on once a worker can run it (deploy a fixed worker); still following it"
    )


#: Events said in words; ``None``: not said at all (the command says it its own way).
_SAID: dict[str, Callable[[MutableMapping[str, Any]], str] | None] = {
    "llm.retry": _retry,
    "llm.error": None,
    "store.locked": _locked,
    "store.record_incomplete": _incomplete,
    "temporal.workflow_task_failing": _task_failing,
}
_NOT_SHOWN = ("timestamp", "level", "event", "provider", "model", "run_id", "solve_id")


def human_line(_logger: Any, method: str, fields: MutableMapping[str, Any]) -> str:
    """A structlog renderer: the record as one line for a person (see the module
    docstring); an event said nowhere renders as nothing (structlog's ``DropEvent``)."""
    import structlog

    event = str(fields.get("event", ""))
    level = str(fields.get("level", method))
    say = _SAID.get(event, _generic)
    if say is None:
        raise structlog.DropEvent
    return printable(f"{level}: {say(fields)}")


def _generic(fields: MutableMapping[str, Any]) -> str:
    extra = ", ".join(
        f"{k}={shorten(str(v), 120)}" for k, v in fields.items() if k not in _NOT_SHOWN
    )
    return f"{fields.get('event', '')}" + (f" ({extra})" if extra else "")
