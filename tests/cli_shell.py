"""A user's shell for tests that drive the ``dagagent`` command line.

Every CLI journey (tests/test_journeys.py, tests/cli/test_ask.py, tests/cli/test_waiting.py,
...) runs the command the same way: in a temporary working directory, with a store under it
(``$DAGAGENT_HOME``), none of the machine's ``DAGAGENT_*``/``OPENAI_*``/``ANTHROPIC_*``
variables, no terminal on stdin. Each call checks that the command printed no traceback (and
raised nothing) and, unless told otherwise, its exit code.

``shell(ARGS)`` runs ``dagagent ARGS`` in this process (:func:`run_in_process`: typer's
``CliRunner`` with the working directory, the environment, ``sys.path``, the modules a
``--tools`` file brought, the signal handlers and structlog's configuration put back
afterwards), as a user's shell would run it but without starting an interpreter.
``shell.start(...)`` and ``shell.argv(...)`` start a real ``python -m dagagent`` process, for
the tests where a real process is the point: signals, SIGKILL, processes racing each other.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

TIMEOUT = 60

#: What a crash prints. A failed task's recorded traceback shows up in ``--json`` output too,
#: but as a JSON string, whose line breaks are escaped.
CRASH = "Traceback (most recent call last):\n"

_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def clean_environment(home: Path, **env: str) -> dict[str, str]:
    """This process's environment without the machine's dagagent and model settings, with a
    store under ``home``, no colours, wide lines, and ``env`` on top."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DAGAGENT_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_API"))
    }
    return {
        **clean,
        "DAGAGENT_HOME": str(home),
        "DAGAGENT_DEMO_LATENCY": "0",
        "NO_COLOR": "1",
        "COLUMNS": "200",
        **env,
    }


@contextlib.contextmanager
def _process_state(cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    """``cwd`` and exactly ``env`` while the command runs; afterwards the working directory,
    the environment, ``sys.path``, the modules imported from the working directory or from a
    ``--tools`` file, the stop signals' handlers and structlog's configuration as they were."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_path = list(sys.path)
    saved_modules = set(sys.modules)
    saved_handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    structlog = sys.modules.get("structlog")
    saved_log = (structlog.is_configured(), structlog.get_config()) if structlog else None
    _set_environment(env)
    os.chdir(cwd)
    importlib.invalidate_caches()  # a tools module the test just wrote is found
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        _set_environment(saved_env)
        sys.path[:] = saved_path
        known = _directories(saved_path)
        for name in set(sys.modules) - saved_modules:
            if _brought_by_the_command(name, cwd, known):
                del sys.modules[name]
        changed = [
            sig for sig, handler in saved_handlers.items() if signal.getsignal(sig) != handler
        ]
        for sig in changed:
            signal.signal(sig, saved_handlers[sig])
        structlog = sys.modules.get("structlog")
        if structlog is not None:
            structlog.reset_defaults()
            if saved_log is not None and saved_log[0]:
                structlog.configure(**saved_log[1])
        assert not changed, f"the command left its handler of {changed} behind"


def _set_environment(env: Mapping[str, str]) -> None:
    """Make ``os.environ`` exactly ``env``, changing only what differs (a thread reading it
    meanwhile never finds it empty)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _directories(path: Sequence[str]) -> list[Path]:
    """The directories of ``sys.path`` entries, resolved ('' is the working directory)."""
    found = []
    for entry in path:
        try:
            found.append(Path(entry or ".").resolve())
        except OSError:
            continue
    return found


def _brought_by_the_command(name: str, cwd: Path, known: Sequence[Path]) -> bool:
    """A module a command imported from its working directory, a ``--tools`` file, or a
    folder it looked in that this process's ``sys.path`` did not name (a project's): another
    command (another test) must import its own, not find this one."""
    if name.startswith("_dagagent_tools_"):
        return True
    if name.partition(".")[0] == "dagagent":  # the package itself, even run from its checkout
        return False
    origin = getattr(sys.modules.get(name), "__file__", None)
    if not origin:
        return False
    try:
        where = Path(origin).resolve()
        return where.is_relative_to(cwd.resolve()) or not any(
            where.is_relative_to(d) for d in known
        )
    except OSError:
        return False


def app_for(args: Sequence[str]) -> typer.Typer:
    """The command line's app as its console script runs ``dagagent ARGS``: holding the named
    command alone. (typer builds the options of every command an app holds before it runs one:
    a tenth of a second a call, most of an in-process command's time.)"""
    from dagagent.cli._app import _for_command

    return _for_command(list(args))


def run_in_process(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``dagagent ARGS`` in this process, as its console script would run it: its exit code,
    stdout and stderr. An exception the command let out fails the test with its traceback."""
    from typer.testing import CliRunner

    runner = CliRunner()
    with _process_state(cwd, env):
        result = runner.invoke(app_for(args), list(args), input=stdin, prog_name="dagagent")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        shown = "".join(traceback.format_exception(*result.exc_info))
        raise AssertionError(f"dagagent {' '.join(args)} crashed:\n{shown}\n{result.stderr}")
    return subprocess.CompletedProcess(list(args), result.exit_code, result.stdout, result.stderr)


class Shell:
    """A working directory, a clean environment (plus ``env``) and the calls made from it."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.dir = tmp_path
        self.env = clean_environment(tmp_path / "home", **env)

    def argv(self, *args: str) -> list[str]:
        """The command line of a real ``dagagent ARGS`` process (see :meth:`start`)."""
        return [sys.executable, "-m", "dagagent", *args]

    def __call__(
        self, *args: str, code: int | None = 0, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """Run ``dagagent ARGS`` to its end (in this process); ``code=None`` accepts any exit
        code."""
        proc = run_in_process(args, self.dir, self.env, stdin)
        assert CRASH not in proc.stderr + proc.stdout, proc.stderr
        if code is not None:
            assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def json(self, *args: str, code: int | None = 0) -> Any:
        """``dagagent ARGS --json``, its output parsed."""
        return json.loads(self(*args, "--json", code=code).stdout)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start a real ``dagagent ARGS`` process in the background; its stderr goes to the
        file ``name.err``."""
        with open(self.dir / f"{name}.err", "wb") as err:
            return subprocess.Popen(
                self.argv(*args),
                cwd=self.dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def stderr(self, name: str) -> str:
        """What the background command started as ``name`` printed on stderr."""
        return (self.dir / f"{name}.err").read_text()

    def write_plan(self, plan: dict[str, Any], name: str = "plan.json") -> str:
        (self.dir / name).write_text(json.dumps(plan))
        return name


def tool_starts(log: Path) -> list[str]:
    """The tool calls a counted tools module logged: ``tool arg`` per ``start`` line, sorted."""
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return sorted(x[len("start ") :] for x in lines if x.startswith("start "))
