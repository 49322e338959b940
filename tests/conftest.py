"""Shared fixtures: the anyio backend, a private run store, a registry of recording test tools,
a loopback LLM server; and the rule that keeps ``pytest -m "not slow"`` in process.

Test modules mirror the ``dagagent`` packages (``tests/llm/`` guards ``dagagent/llm/``, ...).
The helper modules (``llm_server``, ``cli_shell``, ``eventually``, ``clock``, ``backends``,
``journey_model``, ``dask_tools``) sit in ``tests/``, which pytest puts on ``sys.path`` for this
file, so every test imports them by their plain names. Tests wait for state, not for time:
``eventually`` for state only a poll can see, ``clock`` (``@pytest.mark.skip_time``) for timers
on the event loop."""

from __future__ import annotations

import os
import platform
import signal
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from clock import backend
from hypothesis import settings
from llm_server import LLMTestServer

import dagagent

os.environ.setdefault("DAGAGENT_DEMO_LATENCY", "0")
# The command line's consoles read COLUMNS once, when dagagent.cli is first imported, and
# pytest-xdist's workers start with COLUMNS=80 in their environment: leave the width to each
# command's environment instead (tests/cli_shell.py gives 200), as in a serial run.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
# A Temporal Cloud key in the developer's environment would turn TLS on for every command and
# worker the tests start against the plain local development server: the tests that want a key
# give one themselves.
os.environ.pop("TEMPORAL_API_KEY", None)

# The tests stop dagagent processes with Ctrl-C (SIGINT). Where the suite itself runs with
# SIGINT ignored (started in the background by a shell without job control), every process it
# starts would inherit that and never stop; a handled signal reverts to its default in them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP under nohup: a dagagent process leaves an ignored SIGHUP ignored (as it
# should), so the tests that hang up on one would wait for it in vain.
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# CI explores the same examples every run (a failure there is reproducible, never a fluke of
# the day's random seed); locally hypothesis keeps searching new ones.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# -- the quick loop ---------------------------------------------------------------------------
# `pytest -m "not slow"` runs every test that runs in this process. A test that starts a process
# (a real dagagent command, an MCP server, an interpreter, a browser, a Dask cluster) is marked
# slow; one that is not and starts one anyway fails, naming what it started, so the quick loop
# stays quick. (subprocess and os.posix_spawn say so through audit events; multiprocessing's
# spawn does not, so a test starting a Dask cluster of processes is marked by hand.)
_STARTS_A_PROCESS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.system"})
platform.processor()  # runs `uname -p` once per process (Dask asks): here, not in a test
_started: list[list[str]] = []  # while a quick test runs: what it started


def _note_processes(event: str, args: tuple[Any, ...]) -> None:
    if _started and event in _STARTS_A_PROCESS:
        what = args[1] if event == "subprocess.Popen" else args[:2]
        _started[-1].append(f"{event} {what!r}"[:200])


sys.addaudithook(_note_processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    if item.get_closest_marker("slow") is not None:
        return (yield)
    _started.append([])
    try:
        return (yield)
    finally:
        _started.pop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if _started and _started[-1] and call.when != "setup" and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a process but is not marked slow (the quick loop, "
            f"pytest -m 'not slow', runs in process only): {_started[-1][0]}"
        )
        _started[-1].clear()
    return report


@pytest.fixture(autouse=True)
def _structlog_as_found() -> Iterator[None]:
    """structlog's configuration is the process's: a test that configures it (the CLI's
    ``-v``, ``structlog.testing.capture_logs``, which leaves it configured with the defaults
    that print every level to stdout) must not make later tests log."""
    import structlog

    configured = structlog.is_configured()
    yield
    if not configured and structlog.is_configured():
        structlog.reset_defaults()


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """asyncio; for a test marked ``skip_time``, with a clock that skips the waits (clock.py)."""
    return backend("asyncio", skip_time=request.node.get_closest_marker("skip_time") is not None)


@pytest.fixture(autouse=True)
def _private_run_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLI runs record to a store; keep each test's records out of the working tree."""
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path_factory.mktemp("dagagent-home")))


class Recorder:
    """Records (task name, start, end) intervals and call counts of test tools."""

    def __init__(self) -> None:
        self.intervals: dict[str, tuple[float, float]] = {}
        self.calls: dict[str, int] = {}
        self.order: list[str] = []

    def start(self, name: str) -> float:
        self.calls[name] = self.calls.get(name, 0) + 1
        self.order.append(name)
        return anyio.current_time()

    def end(self, name: str, started: float) -> None:
        self.intervals[name] = (started, anyio.current_time())

    def overlap(self, a: str, b: str) -> bool:
        (s1, e1), (s2, e2) = self.intervals[a], self.intervals[b]
        return s1 < e2 and s2 < e1


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def registry(recorder: Recorder) -> Iterator[dagagent.Registry]:
    reg = dagagent.Registry()

    @reg.tool
    async def work(name: str, seconds: float = 0.0, value: Any = None, fail: bool = False) -> Any:
        """Sleep, record the interval, return value (or name); optionally raise."""
        t0 = recorder.start(name)
        try:
            await anyio.sleep(seconds)
            if fail:
                raise RuntimeError(f"{name} failed on purpose")
            return name if value is None else value
        finally:
            recorder.end(name, t0)

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def echo(value: Any) -> Any:
        """Return the value."""
        return value

    yield reg


@pytest.fixture(scope="session")
def shared_llm_server() -> Iterator[LLMTestServer]:
    """The loopback model server, started once per test process (per xdist worker)."""
    with LLMTestServer() as srv:
        yield srv


@pytest.fixture
def server(shared_llm_server: LLMTestServer) -> Iterator[LLMTestServer]:
    """A loopback server speaking the providers' wire formats, fresh for each test (the shared
    one, reset); it checks its script was used up."""
    shared_llm_server.reset()
    yield shared_llm_server
    try:
        shared_llm_server.check()
    finally:
        shared_llm_server.reset()
