"""Shipping tools to the workers: pickled by name or by value, loaded once per worker, and
checked on every worker before a run starts.

Before any task runs, every tool the plan can call is pickled once with cloudpickle and
loaded on every worker (:func:`ship_tools`); a tool that cannot be pickled or loaded there
raises :class:`~dagagent.errors.ConfigError` naming the tool and its tasks. Workers cache the
loaded functions, so a task ships only its arguments and a few hundred bytes of pickled
function. Workers living in the driver's process (``processes=False``) call the very function
object registered on the driver.
"""

from __future__ import annotations

import importlib
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import ConfigError
from ._worker import _acall, _brief, _call

if TYPE_CHECKING:
    from ...tools import Tool
    from ._calls import _Session

# token -> function registered by a driver living in this process (in-process workers).
_LOCAL: dict[str, Callable[..., Any]] = {}
# token -> function unpickled on this worker, so that each tool is unpickled once per worker.
_LOADED: dict[str, Callable[..., Any]] = {}
_LOADED_MAX = 1024


class _Fn:
    """A tool function as it travels to the workers: a token, the pickled function, a name.

    Small on the wire, shown as ``<tool 'name'>`` in Dask's task reprs and logs, and
    unpickled at most once per worker process.
    """

    __slots__ = ("blob", "name", "token")

    def __init__(self, token: str, blob: bytes, name: str) -> None:
        self.token = token
        self.blob = blob
        self.name = name

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Fn, (self.token, self.blob, self.name))

    def load(self) -> Callable[..., Any]:
        fn = _LOCAL.get(self.token)
        if fn is None:
            fn = _LOADED.get(self.token)
            if fn is None:
                import cloudpickle  # type: ignore[import-untyped]

                fn = cloudpickle.loads(self.blob)
                if len(_LOADED) >= _LOADED_MAX:
                    _LOADED.clear()
                _LOADED[self.token] = fn
        return fn


def _load_all(fns: list[_Fn]) -> dict[str, str]:
    """On a worker: load every tool; return ``{token: problem}`` for those that fail."""
    problems: dict[str, str] = {}
    for fn in fns:
        try:
            fn.load()
        except Exception as exc:
            problems[fn.token] = _brief(exc)
    return problems


@dataclass(frozen=True)
class _Shipped:
    """A tool ready to be called on workers."""

    caller: Callable[..., Any]
    fn: _Fn
    prefix: str  # Dask key prefix: the tool name, so the dashboard groups calls by tool


def ship(tool: Tool) -> _Shipped:
    """Pickle ``tool`` for the workers (raises what pickling raises); workers in this
    process will call the function itself, until :func:`unship`."""
    blob = _dumps_function(tool.fn)
    token = uuid.uuid4().hex
    _LOCAL[token] = tool.fn
    caller = _acall if tool.is_async else _call
    return _Shipped(caller, _Fn(token, blob, tool.name), f"{tool.name}-{token[:8]}-")


def unship(shipped: _Shipped) -> None:
    _LOCAL.pop(shipped.fn.token, None)


# -- pickling by name or by value -----------------------------------------------------------


def _importable_by_name(module_name: str) -> bool:
    """Whether a fresh interpreter with the same ``sys.path`` could import ``module_name``.

    Asks the import system's finders directly: ``importlib.util.find_spec`` would answer from
    ``sys.modules``, where a module loaded from a file under a made-up name also sits.
    """
    top = module_name.partition(".")[0]
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            if find_spec(top, None) is not None:
                return True
        except Exception:  # a finder that cannot answer for this name
            continue
    return False


def _dumps_function(fn: Callable[..., Any]) -> bytes:
    """Pickle a tool function for the workers.

    - A function reachable by name from an importable module (directly, or as the ``fn`` of a
      :class:`~dagagent.tools.Tool` bound to that name by ``@tool``) travels *by name*: the
      worker imports the module, so module-level state (clients, tables) is the worker's own
      and need not be picklable.
    - Anything else travels *by value* with cloudpickle: functions of ``__main__``, local
      functions and closures, and functions of a module loaded from a file under a name that
      cannot be imported again (``dagagent run --tools path/file.py:attr``), so that workers
      need not see the file.
    """
    import cloudpickle

    module_name = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or ""
    module = sys.modules.get(module_name)
    importable = (
        module is not None and module_name != "__main__" and _importable_by_name(module_name)
    )
    if importable and "<" not in qualname and _resolve(module_name, qualname) is fn:
        return bytes(cloudpickle.dumps(_ByName(module_name, qualname)))
    if importable or module is None or module_name == "__main__":
        return bytes(cloudpickle.dumps(fn))
    if module_name in cloudpickle.list_registry_pickle_by_value():
        return bytes(cloudpickle.dumps(fn))
    cloudpickle.register_pickle_by_value(module)
    try:
        return bytes(cloudpickle.dumps(fn))
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _resolve(module_name: str, qualname: str) -> Any:
    """``module.qualname``, unwrapping a :class:`~dagagent.tools.Tool` to its function."""
    from ...tools import Tool

    obj: Any = importlib.import_module(module_name)
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        return None
    return obj.fn if isinstance(obj, Tool) else obj


class _ByName:
    """Unpickles as :func:`_resolve` of a module and a qualified name, on the worker."""

    __slots__ = ("module", "qualname")

    def __init__(self, module: str, qualname: str) -> None:
        self.module = module
        self.qualname = qualname

    def __reduce__(self) -> tuple[Any, ...]:
        return (_resolve_or_fail, (self.module, self.qualname))


def _resolve_or_fail(module_name: str, qualname: str) -> Any:
    fn = _resolve(module_name, qualname)
    if fn is None:
        raise AttributeError(f"module {module_name!r} has no attribute {qualname!r}")
    return fn


# -- the checks before a run ----------------------------------------------------------------


async def ship_tools(
    state: _Session,
    used: Mapping[Tool, Sequence[str]],
    *,
    timeout: float,
    say: Callable[[str], None],
    since: float,
) -> None:
    """Ship every tool the plan can call to the workers of ``state``'s cluster, or say which
    cannot go (tools shipped already, and tools called on the driver, are left as they are).
    ``timeout``: for the workers to answer; ``say``: progress; ``since``: when getting ready
    began (for the progress line)."""
    problems: list[str] = []
    fresh: dict[str, Tool] = {}
    for tool, task_ids in used.items():
        if tool in state.shipped or tool.connection is not None:
            continue  # shipped already, or called here (its session lives on the driver)
        try:
            fresh[state.ship(tool).fn.token] = tool
        except Exception as exc:
            problems.append(
                f"tool {tool.name!r} ({_tasks(task_ids)}) cannot be pickled: {_brief(exc)}"
            )
    try:
        if fresh and not problems:
            problems = await _check_workers(state, fresh, used, timeout, say, since)
    finally:
        if problems or sys.exc_info()[0] is not None:
            for tool in fresh.values():  # a later run checks these tools again
                shipped = state.shipped.pop(tool, None)
                if shipped is not None:
                    unship(shipped)
    if problems:
        raise ConfigError(
            "cannot run this plan on Dask:\n  "
            + "\n  ".join(problems)
            + "\ntools must be picklable with cloudpickle and importable on every worker "
            "(define them in a module the workers can import, not around local state)"
        )


async def _check_workers(
    state: _Session,
    fresh: dict[str, Tool],
    used: Mapping[Tool, Sequence[str]],
    timeout: float,
    say: Callable[[str], None],
    since: float,
) -> list[str]:
    """Load the new tools on every worker (out of band, not queued behind tasks)."""
    client = state.client
    fns = [state.shipped[tool].fn for tool in fresh.values()]
    try:
        with anyio.fail_after(timeout):
            info = await client.scheduler.identity()
            if not info.get("workers"):
                say("waiting for a Dask worker...")
                await client.wait_for_workers(1)
                info = await client.scheduler.identity()
            workers = info.get("workers") or {}
            threads = sum(int(w.get("nthreads", 0) or 0) for w in workers.values())
            say(
                f"Dask ready after {time.monotonic() - since:.1f}s: "
                f"{len(workers)} worker{'s' if len(workers) != 1 else ''}, {threads} "
                f"thread{'s' if threads != 1 else ''}; shipping {len(fns)} "
                f"tool{'s' if len(fns) != 1 else ''}"
            )
            replies = await client.run(_load_all, fns, on_error="return")
    except TimeoutError:
        raise ConfigError(
            f"dask executor: no worker of the scheduler at {client.scheduler.address} "
            f"answered within {timeout:g} s"
        ) from None
    problems: list[str] = []
    for worker, reply in sorted(replies.items()):
        if isinstance(reply, BaseException):
            problems.append(
                f"worker {worker} cannot run dagagent tool calls: {_brief(reply)} "
                "(install dagagent and the tools' dependencies on every worker)"
            )
            continue
        for token, problem in reply.items():
            tool = fresh[token]
            problems.append(
                f"tool {tool.name!r} ({_tasks(used[tool])}) cannot be loaded on worker "
                f"{worker}: {problem}"
            )
    return problems


def _tasks(task_ids: Sequence[str]) -> str:
    if not task_ids:
        return "for the tasks of a plan still arriving"
    shown = ", ".join(repr(t) for t in task_ids[:5])
    more = f" and {len(task_ids) - 5} more" if len(task_ids) > 5 else ""
    return f"task{'s' if len(task_ids) > 1 else ''} {shown}{more}"
