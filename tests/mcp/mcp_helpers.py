"""Helpers and fixtures of the MCP tests: the servers of mcp_servers.py over stdio (a
subprocess the client starts) or streamable HTTP (a subprocess serving a free loopback port;
one of each kind per test process, shared by the tests, unless a test needs its own to kill).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from eventually import wait_until

from dagagent.mcp import MCPClient

SERVERS = str(Path(__file__).with_name("mcp_servers.py"))
START_TIMEOUT_S = 60.0  # a busy 2-core CI machine can take seconds to start Python

Connect = Callable[..., MCPClient]


def stdio_client(kind: str, name: str | None = None, **options: Any) -> MCPClient:
    options.setdefault("connect_timeout_s", START_TIMEOUT_S)
    return MCPClient.stdio(name or kind, sys.executable, [SERVERS, kind, "stdio"], **options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(kind: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Serve ``kind`` over streamable HTTP on a free loopback port; yield (url, process)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVERS, kind, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: _listening(port),
            f"the {kind} MCP server listens on port {port}",
            timeout=START_TIMEOUT_S,
            unless=lambda: None if proc.poll() is None else f"it exited with {proc.returncode}",
        )
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class HTTPServers:
    """The MCP servers over HTTP that tests share: each kind started when first asked for,
    stopped at the end of the session."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._urls: dict[str, str] = {}

    def url(self, kind: str) -> str:
        if kind not in self._urls:
            self._urls[kind], _ = self._stack.enter_context(http_server(kind))
        return self._urls[kind]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def mcp_http() -> Iterator[HTTPServers]:
    servers = HTTPServers()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def kit_url(mcp_http: HTTPServers) -> str:
    return mcp_http.url("kit")


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, mcp_http: HTTPServers) -> Connect:
    """``connect(kind, name=None, **options)``: a client of a ``kind`` server over the
    parametrized transport (over stdio a server of its own, over HTTP the shared one)."""
    if request.param == "stdio":
        return stdio_client

    def http(kind: str, name: str | None = None, **options: Any) -> MCPClient:
        options.setdefault("connect_timeout_s", START_TIMEOUT_S)
        return MCPClient.http(name or kind, mcp_http.url(kind), **options)

    return http
