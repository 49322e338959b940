"""Helpers and fixtures of the MCP tests: the servers of mcp_servers.py over stdio (a
subprocess the client starts) or streamable HTTP (a subprocess serving a free loopback port)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

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
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"the {kind} MCP server exited with {proc.returncode}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {kind} MCP server did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def kit_url() -> Iterator[str]:
    with http_server("kit") as (url, _):
        yield url


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest) -> Connect:
    """``connect(kind, name=None, **options)``: a client of a fresh ``kind`` server over the
    parametrized transport (for HTTP, a server per test but the kit shared by the module)."""
    if request.param == "stdio":
        return stdio_client

    def http(kind: str, name: str | None = None, **options: Any) -> MCPClient:
        options.setdefault("connect_timeout_s", START_TIMEOUT_S)
        if kind == "kit":
            url = request.getfixturevalue("kit_url")
        else:
            cm = http_server(kind)
            url, _ = cm.__enter__()
            request.addfinalizer(lambda: cm.__exit__(None, None, None))
        return MCPClient.http(name or kind, url, **options)

    return http
