"""Tools for the Temporal executor tests, served by ``dagagent worker`` *processes*.

An importable module (``tests/`` is on the workers' ``PYTHONPATH``), as a real deployment's
tools module would be. ``hold`` and ``hold_effect`` let a test catch a call mid-way: each
writes ``<dir>/<name>.<pid>.started`` when it starts, then returns once ``<dir>/<name>.go``
exists, so a test can kill the worker running it at a moment it knows.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dagagent import CallIdentity, Reconciled, Registry, current_call

registry = Registry()


@registry.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


@registry.tool
def big(i: int, n: int) -> str:
    """A long text: ``n`` copies of ``i``'s digits."""
    return str(i) * n


@registry.tool
def boom(x: int) -> int:
    """Fail, naming x."""
    raise ValueError(f"boom {x}")


@registry.tool(blocking=False)
def double(x: int) -> int:
    """Twice x (declared never to block, without side effects: a local activity)."""
    return 2 * x


def _hold(name: str, where: str) -> dict[str, Any]:
    here = Path(where)
    (here / f"{name}.{os.getpid()}.started").touch()
    go = here / f"{name}.go"
    while not go.exists():  # the tool's own wait (it stands for a long call)
        time.sleep(0.02)
    return {"pid": os.getpid()}


@registry.tool
def hold(name: str, where: str) -> dict[str, Any]:
    """Mark the start, then wait for the go file; the process id that ran it."""
    return _hold(name, where)


@registry.tool(side_effects=True)
def hold_effect(name: str, where: str) -> dict[str, Any]:
    """``hold``, declared to have side effects."""
    return _hold(name, where)


@registry.tool(side_effects=True)
def whoami_effect(n: int) -> dict[str, Any]:
    """The call this is, as :func:`dagagent.current_call` tells it on the worker, and the
    process id that made it."""
    call = current_call()
    return {
        "key": call.idempotency_key,
        "run_id": call.run_id,
        "task_id": call.task_id,
        "element": call.element,
        "attempt": call.attempt,
        "pid": os.getpid(),
    }


def _paid(call: CallIdentity) -> Path:
    return Path(call.args["where"]) / f"{call.args['name']}.paid"


def check_paid(call: CallIdentity) -> Reconciled:
    """Whether the payment of ``call`` was made: its file, holding its key."""
    found = _paid(call)
    if found.exists() and json.loads(found.read_text())["key"] == call.idempotency_key:
        return Reconciled.happened(json.loads(found.read_text()))
    return Reconciled.not_happened()


@registry.tool(side_effects=True, reconcile=check_paid)
def hold_paid(name: str, where: str, pay_first: bool) -> dict[str, Any]:
    """``hold`` around a payment (a file ``<name>.paid`` holding the call's key), made before
    the wait (``pay_first``) or after it; its reconciler looks for that file."""
    call = current_call()
    paid = {"pid": os.getpid(), "key": call.idempotency_key}
    if pay_first:
        with open(_paid(call), "x") as out:  # "x": a second payment would fail
            json.dump(paid, out)
    _hold(name, where)
    if not pay_first:
        with open(_paid(call), "x") as out:
            json.dump(paid, out)
    return paid


def cannot_tell(call: CallIdentity) -> Reconciled:
    """A reconciler with nothing to look at."""
    return Reconciled.unknown("the service keeps no record of its calls")


@registry.tool(side_effects=True, reconcile=cannot_tell)
def hold_unsure(name: str, where: str) -> dict[str, Any]:
    """``hold``, with side effects and a reconciler that cannot tell."""
    return _hold(name, where)


@registry.tool(side_effects=True)
def tally_effect(name: str, where: str) -> int:
    """An effect counted outside the worker: a line (this process's id) appended to
    ``<where>/<name>.effects``; how many lines there are."""
    path = Path(where) / f"{name}.effects"
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")
    return len(path.read_text().splitlines())


def started(where: Path, name: str) -> list[int]:
    """The process ids that started ``hold(name)``."""
    return sorted(int(p.name.split(".")[-2]) for p in where.glob(f"{name}.*.started"))


def _interceptors() -> list[Any]:
    """The interceptors of ``dagagent worker --interceptors temporal_tools:interceptors``:
    approval rules decided on the worker (a deny, and an ask that waits for a person)."""
    from dagagent.approval import Policy, Rule, ask_later

    return [
        Policy(
            [
                Rule(tool="add", args={"a": "13"}, action="deny", reason="unlucky"),
                Rule(tool="echo", action="ask", name="ask echo"),
            ],
            default="allow",
            ask=ask_later,
        )
    ]


interceptors = _interceptors()


def _redactors() -> list[Any]:
    """The interceptors of ``dagagent worker --interceptors temporal_tools:redactors``: what
    looks like an API key is hidden (in tool arguments, and in what agents wrote)."""
    from dagagent.interceptors import redacting

    return [redacting(patterns=[r"sk-[a-z0-9]+"])]


redactors = _redactors()


# Tools of their own (``temporal_tools:extra``, served by workers a test starts for them),
# apart from ``registry``, whose catalogue the planner tests of solves on Temporal size their
# budgets by.
extra = Registry([registry.get("echo")])


@extra.tool(side_effects=True)
def pay_hold(name: str, where: str, pay_first: bool, note: str = "") -> dict[str, Any]:
    """A payment around ``hold``, made before the wait (``pay_first``) or after it, without
    a reconciler: each payment is a line (the call's idempotency key) appended to
    ``<where>/<name>.payments``; ``note`` stands for an argument a redaction hides."""
    key = current_call().idempotency_key

    def pay() -> None:
        with open(Path(where) / f"{name}.payments", "a") as out:
            out.write(f"{key}\n")

    if pay_first:
        pay()
    _hold(name, where)
    if not pay_first:
        pay()
    return {"key": key, "pid": os.getpid()}


def payments(where: Path, name: str) -> list[str]:
    """The keys of the payments ``pay_hold(name)`` made, in order."""
    path = where / f"{name}.payments"
    return path.read_text().splitlines() if path.exists() else []


@extra.tool(max_calls=2)
def metered(name: str, where: str, i: int = 0) -> int:
    """A call counted outside the worker (a line, this process's id, appended to
    ``<where>/<name>.calls``), at most twice in a run: how many lines there are."""
    path = Path(where) / f"{name}.calls"
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")
    return len(path.read_text().splitlines())


@extra.tool(cooldown_s=3600)
def rested(n: int) -> int:
    """n, at most once an hour."""
    return n


@extra.tool
def crowd(name: str, where: str, i: int, n: int, bound: int) -> int:
    """Element ``i`` of ``n`` of a map meant to run ``bound`` at once: marks itself in
    (``<where>/<name>.<i>.in``) and appends how many are in now to ``<where>/<name>.seen``;
    goes once ``bound`` more have come in after it (so more than ``bound`` at once, if the
    map lets them, all come in together) or once ``<where>/<name>.go`` exists; i."""
    here = Path(where)
    mark = here / f"{name}.{i}.in"
    mark.touch()
    with open(here / f"{name}.seen", "a") as out:
        out.write(f"{len(list(here.glob(f'{name}.*.in')))}\n")
    (here / f"{name}.{i}.came").touch()
    go = here / f"{name}.go"
    while not go.exists() and len(list(here.glob(f"{name}.*.came"))) < min(n, i + bound + 1):
        time.sleep(0.01)  # the tool's own wait (it stands for a long call)
    mark.unlink()
    return i


def crowded(where: Path, name: str) -> int:
    """How many elements of ``crowd(name)`` are in it now."""
    return len(list(where.glob(f"{name}.*.in")))


def let_go(where: Path, name: str) -> None:
    """Let the elements of ``crowd(name)`` go without waiting for more."""
    (where / f"{name}.go").touch()


# The tools of the OpenTelemetry tests (``temporal_tools:traced``, on a worker with --otel).
traced = Registry([registry.get("add"), registry.get("boom")])


@traced.tool
def trace_context() -> dict[str, Any]:
    """The trace and span the call runs under, as the worker process sees them: what a
    tool's own instrumentation (an HTTP client's, say) nests its spans under."""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return {"pid": os.getpid(), "trace_id": ctx.trace_id, "span_id": ctx.span_id}
