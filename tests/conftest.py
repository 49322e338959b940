"""Shared fixtures: the anyio backend, a private run store, a registry of recording test tools,
a loopback LLM server.

Test modules mirror the ``dagagent`` packages (``tests/llm/`` guards ``dagagent/llm/``, ...).
The helper modules (``llm_server``, ``journey_model``, ``dask_tools``) sit in ``tests/``, which
pytest puts on ``sys.path`` for this file, so every test imports them by their plain names."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import settings
from llm_server import LLMTestServer

import dagagent

os.environ.setdefault("DAGAGENT_DEMO_LATENCY", "0")

# The tests stop dagagent processes with Ctrl-C (SIGINT). Where the suite itself runs with
# SIGINT ignored (started in the background by a shell without job control), every process it
# starts would inherit that and never stop; a handled signal reverts to its default in them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# CI explores the same examples every run (a failure there is reproducible, never a fluke of
# the day's random seed); locally hypothesis keeps searching new ones.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


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
def anyio_backend() -> str:
    return "asyncio"


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


@pytest.fixture
def server() -> Iterator[LLMTestServer]:
    """A loopback server speaking the providers' wire formats; it checks its script was used up."""
    with LLMTestServer() as srv:
        yield srv
        srv.check()
