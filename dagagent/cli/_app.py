"""The typer app, shared helpers, and the mapping from errors to exit codes."""

from __future__ import annotations

import copy
import gc
import importlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import typer
from rich.console import Console
from rich.segment import Segment
from typer.core import TyperArgument, TyperGroup

from ..errors import (
    BudgetExceededError,
    ClusterError,
    ConfigError,
    DagagentError,
    DeadlineError,
    DecisionError,
    LLMError,
    PlanError,
    PlanLoadError,
    PlanningError,
    PlanValidationError,
    StoreError,
    ToolError,
)

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = [
    "COMMAND_MODULES",
    "EXIT_BUDGET",
    "EXIT_CLUSTER",
    "EXIT_DEADLINE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PAUSED",
    "EXIT_PLANNING",
    "EXIT_RECORD",
    "EXIT_REFUSED",
    "EXIT_STORE",
    "EXIT_USAGE",
    "Interrupted",
    "app",
    "check_output_path",
    "deadline_left",
    "err",
    "guard",
    "load_commands",
    "load_registry",
    "main",
    "out",
    "tools_spec",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PLANNING = 3
EXIT_STORE = 4
EXIT_RECORD = 5  # the run ran, but the run store could not write all of its record
EXIT_PAUSED = 6
EXIT_REFUSED = 7
EXIT_DEADLINE = 8  # --deadline passed: what ran was cancelled, what finished is kept
EXIT_BUDGET = 9  # the budget (--max-tokens-total, --max-cost, ...) ran out before an answer
EXIT_CLUSTER = 10  # the executor's cluster (Temporal) cannot be reached, or serves no worker
EXIT_INTERRUPTED = 130

DEFAULT_TOOLS = "dagagent.toolkits.demo:registry"

#: When this module was first imported (``time.monotonic()``): for the console script, the
#: start of its command, the command line's own imports included.
IMPORTED = time.monotonic()
#: When the command being run started: a ``--deadline`` counts from here, the loading of tools
#: and models included. Set as each command is invoked (see ``_root``), so that a program that
#: invokes ``app`` more than once (typer's test runner, say) gives each its own deadline.
_started = IMPORTED
_console_script = False  # main() runs the command: it started when this module was imported


def deadline_left(deadline: float | None) -> float | None:
    """What is left of ``--deadline`` seconds since the command started (never 0 or less: a
    deadline already past stops the work at its first step)."""
    if deadline is None:
        return None
    return max(0.001, deadline - (time.monotonic() - _started))


class _Argument(TyperArgument):
    """A positional argument shown in usage lines as ``PLAN`` (or ``[RUN]`` when optional),
    not ``{PLAN}``."""

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.metavar or (self.name or "").upper()
        return [name if self.required else f"[{name}]"]


class _Group(TyperGroup):
    """The command group: its commands' positional arguments read as in the documentation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            for param in command.params:
                if type(param) is TyperArgument:
                    param.__class__ = _Argument


app = typer.Typer(
    name="dagagent",
    cls=_Group,
    help="Plan-and-execute DAG orchestration for LLM agents.\n\n"
    "Exit codes: 0 success, 1 run failed, 2 invalid plan or usage, 3 planning failed, "
    "4 run/store not found or unusable, 5 run not fully recorded, 6 paused (tasks wait for "
    "approval), 7 decision or resume refused, 8 the deadline passed (--deadline), 9 the "
    "budget ran out (--max-tokens-total, --max-cost, ...), 10 the cluster cannot run it "
    "(--executor temporal: server unreachable, no worker), 130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class TerminalConsole(Console):
    """The one way the command line prints: text is never read as rich markup (``[/bold]``
    in a goal stays those characters) nor highlighted, and every control or format character
    in what is printed (ANSI and OSC escapes, C1 controls, bidi overrides) is shown escaped
    (:func:`dagagent.text.printable`), whatever renderable carried it; only the styles and
    cursor moves rich itself emits reach the terminal."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        # Rich's last step before writing: text segments are what was printed, control
        # segments are rich's own cursor moves; styles are rendered from Style objects.
        from ..text import printable  # here, not on import: `dagagent --help` needs no pydantic

        return super()._render_buffer(
            seg if seg.control else Segment(printable(seg.text, lines=True), seg.style)
            for seg in buffer
        )


out = TerminalConsole(soft_wrap=True)
err = TerminalConsole(stderr=True, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"dagagent {__version__}", markup=False, highlight=False)
        raise typer.Exit(EXIT_OK)


# Commands that read records or a plan and run nothing: they log nothing of their own, so they
# do not pay for setting up logging (importing structlog) unless asked to (-v), and they run
# without the cyclic garbage collector (_runs_nothing).
_QUIET_COMMANDS = frozenset({"validate", "runs", "show", "graph", "report"})


@app.callback()
def _root(
    ctx: typer.Context,
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="More logs on stderr."),
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
) -> None:
    global _started
    _started = IMPORTED if _console_script else time.monotonic()
    settings = sys.modules.get(f"{__package__}.project")
    if settings is not None:  # found for an earlier command of this process
        settings.forget()
    if verbose or ctx.invoked_subcommand not in _QUIET_COMMANDS:
        import logging

        from ..events import configure_logging

        level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
        if verbose:
            configure_logging(level)  # the records as they are
        else:
            from .logs import human_line

            configure_logging(level, renderer=human_line)  # a line for a person
    name = ctx.invoked_subcommand
    if name in _PROJECT_COMMANDS:
        _apply_project(ctx, name)


# The commands a project file gives defaults to (see dagagent.cli.project).
_PROJECT_COMMANDS = frozenset({"run", "validate", "plan", "ask", "tools", "graph", "replan"})


def _apply_project(ctx: typer.Context, name: str) -> None:
    """The defaults the project file (if any) gives command ``name``'s options, as click's
    ``default_map``: the command line still wins."""
    from .project import project

    try:
        found = project()
    except DagagentError as exc:  # a project file that cannot be used: said as any error
        raise typer.Exit(report_error(exc)) from None
    if found is None:
        return
    command = ctx.command.get_command(ctx, name) if hasattr(ctx.command, "get_command") else None
    if command is None:
        return
    params = {p.name for p in command.params if p.name}
    defaults = found.defaults(name, params)
    if defaults:
        ctx.default_map = {name: defaults}


_SQLITE_HEADER = b"SQLite format 3\x00"


def check_output_path(path: Path, store: str | Path | None, what: str) -> None:
    """Refuse to write ``what`` (a plan, a report) over the run store, its WAL files, or any
    other SQLite database: ``replan --out .dagagent/runs.db`` would destroy every record."""
    from ..store import default_store_path

    if not path.exists():
        return
    store_path = default_store_path(store)
    targets = [store_path, *(Path(f"{store_path}{x}") for x in ("-wal", "-shm", "-journal"))]
    same = False
    for target in targets:
        try:
            same = same or path.samefile(target)
        except OSError:
            continue
    header = b""
    if not same and path.is_file():
        try:
            with open(path, "rb") as f:
                header = f.read(len(_SQLITE_HEADER))
        except OSError:
            pass
    if same or header == _SQLITE_HEADER:
        kind = "the run store" if same else "a SQLite database (a run store?)"
        raise ConfigError(
            f"{path} is {kind}: writing the {what} there would destroy it; choose another file"
        )


def exit_code_for(exc: DagagentError) -> int:
    """The exit code of a user-caused error: the one place that maps errors to exit codes."""
    if isinstance(exc, PlanningError):
        return EXIT_PLANNING
    if isinstance(exc, StoreError):
        return EXIT_STORE
    if isinstance(exc, DecisionError):
        return EXIT_REFUSED
    if isinstance(exc, DeadlineError):
        return EXIT_DEADLINE
    if isinstance(exc, BudgetExceededError):
        return EXIT_BUDGET
    if isinstance(exc, ClusterError):
        return EXIT_CLUSTER
    if isinstance(exc, (PlanError, ConfigError, ToolError, LLMError)):
        return EXIT_USAGE
    return EXIT_FAILED


def report_error(exc: DagagentError) -> int:
    """Print a user-caused error as one clear message per issue; return the exit code."""
    from ..text import printable

    if isinstance(exc, PlanValidationError):
        n = len(exc.issues)
        err.print(f"error: invalid plan ({n} issue{'s' if n != 1 else ''}):", markup=False)
        for issue in exc.issues:
            err.print(f"  {printable(str(issue))}", markup=False, highlight=False)
    elif isinstance(exc, PlanLoadError) and exc.issues:
        err.print("error: the plan does not fit the plan format:", markup=False)
        for issue in exc.issues:
            err.print(f"  {printable(str(issue))}", markup=False, highlight=False)
    elif isinstance(exc, PlanningError):
        err.print(f"error: {exc}", markup=False, highlight=False)
        for i, (_raw, issues) in enumerate(exc.attempts, 1):
            err.print(f"  attempt {i}:", markup=False)
            for issue in issues:
                err.print(f"    {issue}", markup=False, highlight=False)
    elif isinstance(exc, LLMError):  # e.g. an unreachable server, a refused key: one line
        message = " ".join(str(exc).split())
        err.print(f"error: the model could not be used: {message}", markup=False, highlight=False)
    else:
        err.print(f"error: {exc}", markup=False, highlight=False)
    return exit_code_for(exc)


def error_json(exc: DagagentError, exit_code: int) -> dict[str, Any]:
    """What ``--json`` prints on stdout for a user-caused error: its kind (the error class),
    the message, every issue (code, task, message) and the exit code."""
    issues: list[Any] = list(getattr(exc, "issues", None) or ())
    if isinstance(exc, PlanningError):
        issues = [issue for _raw, attempt in exc.attempts for issue in attempt]
    return {
        "ok": False,
        "error": {
            "code": type(exc).__name__,
            "message": str(exc),
            "issues": [
                {"code": i.code, "task_id": i.task_id, "message": i.message}
                if hasattr(i, "code")
                else {"code": None, "task_id": None, "message": str(i)}
                for i in issues
            ],
            "exit_code": exit_code,
        },
    }


def interrupted_json(message: str) -> dict[str, Any]:
    """What ``--json`` prints on stdout for a command stopped by a signal that kept nothing
    to show: an error object as for any other error, with exit code 130."""
    from .signals import interrupted_document

    return interrupted_document(message)


def usage_json(message: str, exit_code: int) -> dict[str, Any]:
    """What ``--json`` prints on stdout when the command line itself is wrong (an unknown
    option, a value out of range): the error object, code ``UsageError``."""
    return {
        "ok": False,
        "error": {"code": "UsageError", "message": message, "issues": [], "exit_code": exit_code},
    }


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped a command that has more to say than
    ``interrupted``: what was kept and how to go on (``message``, printed by :func:`guard`),
    and what ``--json`` prints for it (``document``: the stopped run's result, status
    ``cancelled``; ``None``: an error object)."""

    def __init__(self, message: str, document: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.document = document


def guard(fn: F) -> F:
    """Turn user-caused errors into messages and exit codes, never tracebacks."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("json_out"):
            from .signals import json_owed

            json_owed()  # until its object is printed, a second Ctrl-C prints one
        try:
            return fn(*args, **kwargs)
        except DagagentError as exc:
            code = report_error(exc)
            if kwargs.get("json_out"):  # --json: stdout still carries one JSON object
                from .render import print_json

                print_json(out, error_json(exc, code))
            raise typer.Exit(code) from None
        except BaseException as exc:
            if not _interrupted(exc):
                raise
            # Ctrl-C. On Python 3.11+ the event loop turns it into KeyboardInterrupt once the
            # run is cancelled; on 3.10 the cancellation itself comes out of anyio.run.
            said = exc.message if isinstance(exc, Interrupted) else "interrupted"
            err.print(said, markup=False, highlight=False)
            if kwargs.get("json_out"):  # --json: stdout still carries one JSON object
                from .render import print_json

                kept = exc.document if isinstance(exc, Interrupted) else None
                print_json(out, kept if kept is not None else interrupted_json(said))
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or the cancellation of an asyncio run (asyncio is
    imported only by the commands that run something, so one that never imported it was not
    cancelled)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


@overload
def tools_spec(spec: str | None) -> str: ...
@overload
def tools_spec(spec: str | None, mcp: Sequence[str]) -> str | None: ...
def tools_spec(spec: str | None, mcp: Sequence[str] = ()) -> str | None:
    """The module tools a command loads: ``--tools``, else ``$DAGAGENT_TOOLS``, else the demo
    tools; none of them (``None``) when MCP servers (``mcp``) give the tools instead."""
    spec = spec or os.environ.get("DAGAGENT_TOOLS")
    if spec:
        return spec
    return None if mcp else DEFAULT_TOOLS


def _import_module(target: str, attr: str) -> Any:
    """Import ``target`` the way ``module:attr`` CLIs do: the current directory first, then
    the project's directory (see :mod:`dagagent.cli.project`), then the installed packages;
    when it is not found, say where it looked."""
    from .project import project

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    found = project()
    places = f"the current directory ({cwd})"
    if found is not None and str(found.root) != cwd:
        root = str(found.root)
        if root not in sys.path:
            sys.path.insert(1, root)  # after the working directory
        places += f", the project's ({root})"
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (target == exc.name or target.startswith(exc.name + ".")):
            raise  # the module was found; something it imports was not
        guess = target.replace(".", os.sep) + ".py"
        raise ConfigError(
            f"--tools: no module named {target!r} in {places} nor among the installed "
            f"packages; to load a file, give its path: --tools path/to/{guess}:{attr}"
        ) from None


def load_registry(spec: str | None) -> Registry:
    """Load tools from ``MODULE:ATTR`` or ``path/to/file.py:ATTR``.

    ATTR may be a Registry, a Tool, a list of tools/functions, or a function returning one of
    those. Without a spec: ``$DAGAGENT_TOOLS``, else the bundled demo tools.
    """
    from ..tools import Registry, Tool

    spec = tools_spec(spec)
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(f"--tools must look like MODULE:ATTR or path/file.py:ATTR, got {spec!r}")
    try:
        if target.endswith(".py") or os.sep in target:
            path = Path(target)
            if not path.is_file():
                raise ConfigError(f"--tools: file not found: {target}")
            mod_name = f"_dagagent_tools_{abs(hash(path.resolve()))}"
            loader_spec = importlib.util.spec_from_file_location(mod_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ConfigError(f"--tools: cannot import {target}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[mod_name] = module
            sys.path.insert(0, str(path.parent.resolve()))
            loader_spec.loader.exec_module(module)
        else:
            module = _import_module(target, attr)
    except ConfigError:
        raise
    except ToolError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"--tools: cannot import {target!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"--tools: {target!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, (Registry, Tool, type)):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError(
                f"--tools: calling {spec!r} to get the tools failed: {type(exc).__name__}: {exc}"
            ) from None
    if isinstance(obj, Registry):
        return obj
    if isinstance(obj, Tool):
        return Registry([obj])
    if isinstance(obj, (list, tuple)):
        return Registry(obj)
    raise ConfigError(
        f"--tools: {spec!r} is a {type(obj).__name__}; "
        "expected a Registry, a Tool or a list of tools"
    )


def _abandoned_threads() -> bool:
    """Whether worker threads still run a call the command gave up on (a sync tool that timed
    out or was cancelled, a question nobody answered): Python cannot stop them, and on asyncio
    interpreter shutdown would wait for them (anyio's worker threads are not daemon threads)."""
    threads = sys.modules.get("dagagent.tools._threads")
    if threads is not None and threads.sync_threads.running:
        return True
    # Any other worker thread (an async tool's own to_thread call it gave up on): anyio tells
    # its idle workers to stop when the run ends, so those end within moments; one still alive
    # after that runs a call nobody waits for.
    # So do the threads of the command's event loop's default executor: its idle ones end once
    # the loop closed; one still alive runs what a timed-out async tool handed it
    # (asyncio.to_thread), which nobody waits for (see dagagent.tools._loop).
    deadline = time.monotonic() + _WORKERS_STOPPING_S
    loops = sys.modules.get("dagagent.tools._loop")
    prefix = loops.THREAD_PREFIX if loops is not None else None
    workers = [
        t
        for t in threading.enumerate()
        if t is not threading.current_thread()
        and not t.daemon
        and (t.name == "AnyIO worker thread" or (prefix is not None and t.name.startswith(prefix)))
    ]
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()))
    return any(thread.is_alive() for thread in workers)


_WORKERS_STOPPING_S = 1.0  # how long idle worker threads get to end after the run


# The module of dagagent.cli that defines each command.
COMMAND_MODULES = {
    "run": "run",
    "validate": "run",
    "runs": "runs",
    "show": "runs",
    "graph": "runs",
    "replan": "replan",
    "plan": "plan",
    "ask": "ask",
    "chat": "sessions",
    "sessions": "sessions",
    "attach": "ask",
    "tools": "tools",
    "ui": "view",
    "report": "view",
    "approvals": "waiting",
    "approve": "waiting",
    "resume": "waiting",
    "worker": "worker",
}


def load_commands(*names: str) -> None:
    """Register the commands ``names`` on ``app`` (every command without any) by importing
    the modules that define them."""
    package = __name__.rpartition(".")[0]
    for module in sorted({COMMAND_MODULES[n] for n in names or COMMAND_MODULES}):
        importlib.import_module(f"{package}.{module}")


def _for_command(args: Sequence[str]) -> typer.Typer:
    """The app as ``dagagent COMMAND ...`` needs it: typer reads every command's signature and
    builds its options before it runs one, so a command named first gets an app that holds
    only that command, and only the module that defines it is imported (``app`` itself is
    left as it is). Anything else (``--help``, an option first, an unknown name) gets every
    command."""
    name = args[0] if args else None
    if name in COMMAND_MODULES:
        load_commands(name)
    else:
        load_commands()
    chosen = [c for c in app.registered_commands if name is not None and c.name == name]
    if len(chosen) != 1 or app.registered_groups:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands = chosen
    return narrowed


def main() -> None:
    """Console-script entry point."""
    global _console_script
    _console_script = True
    runs_nothing = _runs_nothing(sys.argv[1:])
    if runs_nothing:
        gc.disable()  # see _runs_nothing
    from .signals import stop_signals_interrupt

    stop_signals_interrupt()  # SIGTERM and SIGHUP end every command as Ctrl-C does
    code: int | str | None = 0
    try:
        command = _for_command(sys.argv[1:])
        if "--json" in sys.argv[1:]:
            code = _json_command(command)
        else:
            command()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # pragma: no cover - typer normally handles this
        err.print("interrupted", markup=False)
        code = EXIT_INTERRUPTED
    if _abandoned_threads():
        # The run is over and recorded; do not let a tool thread that ignored its timeout or
        # cancellation keep the process alive (what --otel holds is sent first: exit handlers
        # do not run).
        otel = sys.modules.get(f"{__package__}.otel")
        if otel is not None:
            otel.shutdown_otel()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else EXIT_FAILED)
    if runs_nothing:
        gc.freeze()  # see _runs_nothing
    sys.exit(code)


def _json_command(command: typer.Typer) -> int:
    """Run a command given ``--json``, whose stdout holds one JSON object whatever happens: a
    command line that click refuses before the command runs (an unknown option, a value out
    of range) prints its message on stderr as usual and the error object on stdout."""
    from .render import print_json

    try:
        returned = command(standalone_mode=False)
    except typer.Exit as exc:  # --help, --version
        return int(exc.exit_code)
    except typer.Abort:  # Ctrl-C before the command ran
        err.print("interrupted", markup=False)
        print_json(out, interrupted_json("interrupted"))
        return EXIT_INTERRUPTED
    except typer.TyperException as exc:  # click's usage errors
        show = getattr(exc, "show", None)  # as the command line shows them without --json
        if callable(show):
            show()
        else:
            err.print(f"error: {exc.format_message()}", markup=False, highlight=False)
        code = int(exc.exit_code)
        print_json(out, usage_json(exc.format_message(), code))
        return code
    return returned if isinstance(returned, int) else EXIT_OK


def _runs_nothing(args: Sequence[str]) -> bool:
    """Whether ``dagagent ARGS`` runs nothing: help, the version, or a command that only reads
    a plan or records (the first argument not an option names the command).

    Such a command is mostly its imports: typer, rich, pydantic and the models they build
    are tens of thousands of objects that live until the process ends, nearly all in
    reference cycles (classes, functions and their modules), and it makes little garbage of
    its own. The cyclic garbage collector walked them again and again as they were made (75
    collections for ``dagagent validate``) and, at interpreter exit, once more to free them
    one by one only for the process to end. So the collector is off while the command runs,
    and when it is done :func:`gc.freeze` leaves every object out of the last collection: they
    go with the process. ``dagagent validate`` of a three-task plan took 0.46 s of CPU time
    before, 0.31 s after (best of 20 runs each, alternating, on a 2-core machine at load 3.6;
    the freeze saves most of it). What this skips is what Python never promises at exit anyway,
    ``__del__`` of objects in cycles; atexit handlers still run and threads are still
    joined. Commands that run tools keep the collector, also at exit: a tool's object that
    tidies up in ``__del__`` still gets to.
    """
    name = next((a for a in args if not a.startswith("-")), None)
    return name is None or name in _QUIET_COMMANDS
