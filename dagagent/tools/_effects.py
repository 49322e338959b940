"""What a tool with side effects knows about the call it is in, and how it answers whether an
interrupted call of it happened.

A call of a tool declared ``side_effects=True`` has an identity (:class:`CallIdentity`): the
run, the task, the map element, the tool, a fingerprint of its arguments, and an
**idempotency key** derived from them. The same call has the same key wherever and however
often it is made (a retry, a resume in another process), and two different calls never share
one: pass it to the APIs the tool calls (``Idempotency-Key`` headers, a unique column), and a
call made twice takes effect once. Inside the tool, :func:`current_call` gives it (in async
tools and in sync tools run in worker threads alike: it is a context variable).

A tool may also declare a **reconciler** (``@registry.tool(side_effects=True,
reconcile=check)``): when a resumed run finds a call of it in doubt (started, with no outcome
on record: its process died during it), ``check(call)`` is asked whether it happened and
answers with a :class:`Reconciled`: ``happened(output)`` (the output stands as the call's,
and it is not made again), ``not_happened()`` (it is made again, with the same key), or
``unknown(reason)`` (a person decides, as for a tool without a reconciler).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from ..errors import NoCurrentCallError
from ..text import jsonable

__all__ = [
    "CallIdentity",
    "Reconciled",
    "Reconciler",
    "args_fingerprint",
    "current_call",
    "idempotency_key",
    "using_call",
]


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """One call of a tool with side effects, as its intent is recorded (see the module
    docstring). ``element`` is the map element's index (``None`` for a task that is not a
    map); ``occurrence`` counts calls of the same tool with the same arguments within one task
    (or element): an agent that sends the same message twice makes two calls; ``attempt`` is
    the task's attempt (retries keep the key); ``source`` says whether the call is the plan
    task's own or one its agent made. ``args`` are the call's arguments as the task made it,
    validated, before any interceptor edited them (an approval's edit does not change which
    call it is, nor its key). ``fingerprint`` (and so the key) is that of the arguments as
    the record keeps them: as the run's redacting interceptors pass them on, so that a
    secret they hide is neither stored nor derivable from it."""

    run_id: str
    task_id: str
    element: int | None
    tool: str
    fingerprint: str
    occurrence: int
    idempotency_key: str
    args: dict[str, Any] = field(repr=False, compare=False)
    attempt: int = field(default=1, compare=False)
    source: Literal["plan", "agent"] = field(default="plan", compare=False)

    @property
    def where(self) -> str:
        """``task 'pay'`` / ``element 3 of task 'pay'``, for messages."""
        if self.element is None:
            return f"task {self.task_id!r}"
        return f"element {self.element} of task {self.task_id!r}"


def args_fingerprint(tool: str, args: Any) -> str:
    """A fingerprint of a call: the tool's name and its arguments as JSON with sorted keys (20
    hex digits of their SHA-256). Equal arguments give equal fingerprints, whatever the order
    of their keys."""
    text = json.dumps(
        [tool, jsonable(args)], sort_keys=True, separators=(",", ":"), default=str
    ).encode()
    return hashlib.sha256(text).hexdigest()[:20]


def idempotency_key(
    run_id: str, task_id: str, element: int | None, fingerprint: str, occurrence: int
) -> str:
    """The idempotency key of a call: ``dga-`` and 32 hex digits of a SHA-256 of what
    identifies it (its run, task, element, fingerprint and occurrence)."""
    parts = json.dumps([run_id, task_id, element, fingerprint, occurrence], separators=(",", ":"))
    return "dga-" + hashlib.sha256(parts.encode()).hexdigest()[:32]


_CURRENT: contextvars.ContextVar[CallIdentity | None] = contextvars.ContextVar(
    "dagagent_current_call", default=None
)


def current_call() -> CallIdentity:
    """The call of a tool with side effects that the caller is in: its
    :attr:`~CallIdentity.idempotency_key`, run, task, element, attempt. Raises
    :class:`~dagagent.errors.NoCurrentCallError` outside such a call (a tool without
    ``side_effects=True`` has no intent on record, so no key)."""
    call = _CURRENT.get()
    if call is None:
        raise NoCurrentCallError(
            "dagagent.current_call() is only known inside the call of a tool declared "
            "side_effects=True (such a call's intent is recorded, with its idempotency key)"
        )
    return call


def call_of(tool: str) -> CallIdentity | None:
    """The current call if it is a call of the tool named ``tool``, else ``None`` (for the
    seams that carry a call's identity on: to an MCP server, to a Dask worker). A tool that
    a side-effecting tool calls in turn is not that call, and gets ``None``."""
    call = _CURRENT.get()
    return call if call is not None and call.tool == tool else None


def using_call(call: CallIdentity) -> contextvars.Token[CallIdentity | None]:
    """Make ``call`` the current call (for the runner, around the tool's call); give the
    token back to ``_CURRENT.reset``."""
    return _CURRENT.set(call)


def reset_call(token: contextvars.Token[CallIdentity | None]) -> None:
    _CURRENT.reset(token)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """A reconciler's answer about a call in doubt: it ``happened`` (``output`` is its
    output), it did not (it is made again, with the same idempotency key), or the reconciler
    cannot tell (``reason``: a person decides)."""

    verdict: Literal["happened", "not_happened", "unknown"]
    output: Any = None
    reason: str = ""

    @classmethod
    def happened(cls, output: Any = None) -> Reconciled:
        return cls("happened", output)

    @classmethod
    def not_happened(cls, reason: str = "") -> Reconciled:
        return cls("not_happened", reason=reason)

    @classmethod
    def unknown(cls, reason: str) -> Reconciled:
        return cls("unknown", reason=reason)


Reconciler = Callable[[CallIdentity], Union[Reconciled, Awaitable[Reconciled]]]  # noqa: UP007
"""``(call) -> Reconciled`` (sync or async): whether an interrupted call happened."""
