"""Starting one MCP server: the SDK's transport and session for a command or a URL, the
server's stderr kept for error messages, and why a start (or a call) failed, in a user's words.
What the server sends is bounded as it is read (:mod:`._bounded`).

A server run as a subprocess gets the MCP SDK's minimal environment plus the client's ``env``;
its stderr goes to the caller's stream when one is given, else to a temporary file whose last
lines end the messages of :class:`~dagagent.errors.MCPConnectError` and
:class:`~dagagent.errors.MCPServerLostError`, removed when the session ends. A server reached
by URL gets its own HTTP client, with the client's ``headers`` on every request.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import ConfigError
from ._bounded import http_client, stdio_transport

if TYPE_CHECKING:
    from mcp import Client

    from ._client import MCPClient

__all__ = ["INSTALL_HINT", "ServerStderr", "brief", "connect", "import_sdk", "startup_failure"]

INSTALL_HINT = 'MCP servers need the MCP SDK: pip install "dagagent[mcp]"'

_STDERR_TAIL = 400  # characters of a failed server's stderr shown in the error


def import_sdk() -> None:
    """Fail with the install hint, as a configuration error, when the SDK is missing."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})") from None


async def connect(server: MCPClient, stack: AsyncExitStack, stderr: ServerStderr) -> Client:
    """Start ``server`` (or reach it) and open the SDK's session to it, both entered on
    ``stack``: the owner task that calls this leaves them when it ends."""
    from mcp import Client, Implementation, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    limits = server.limits
    transport: Any
    if server.url is not None:
        http = http_client(server.headers, limits)
        await stack.enter_async_context(http)
        transport = streamable_http_client(
            server.url, http_client=http, max_sse_event_size=limits.max_bytes
        )
    else:
        assert server.command is not None
        params = StdioServerParameters(
            command=server.command, args=list(server.args), env=server.env, cwd=server.cwd
        )
        transport = stdio_transport(params, stderr.open(stack, server.name), limits)
    info = Implementation(name="dagagent", version=_version())
    return await stack.enter_async_context(Client(transport, cache=None, client_info=info))


class ServerStderr:
    """Where a subprocess server's stderr goes: ``stream`` if given, else a temporary file
    whose last lines :meth:`tail` gives for an error message."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._path: Path | None = None

    def open(self, stack: AsyncExitStack, name: str) -> TextIO:
        """The stream for the server's stderr (a new file, closed by ``stack``)."""
        if self._stream is not None:
            return self._stream
        self.forget()
        fd, path = tempfile.mkstemp(prefix=f"dagagent-mcp-{name}-", suffix=".log")
        self._path = Path(path)
        f = os.fdopen(fd, "w")
        stack.callback(f.close)
        return f

    def tail(self) -> str:
        """The end of what the server wrote, to end an error message with (or ``""``)."""
        path = self._path
        if path is None:
            return ""
        try:
            with path.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4 * _STDERR_TAIL))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        text = text.strip()[-_STDERR_TAIL:].strip()
        return f"; its stderr ends with:\n{text}" if text else ""

    def forget(self) -> None:
        """Remove the file (the session ended)."""
        path, self._path = self._path, None
        if path is not None:
            with suppress(OSError):
                path.unlink()


def startup_failure(exc: BaseException) -> str:
    """Why a server could not be connected to, in a user's words where the SDK's are terse."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    leaf = _leaf(exc)
    if isinstance(leaf, MCPError) and leaf.code == CONNECTION_CLOSED:
        return "it closed the connection before the MCP handshake was done (it exited?)"
    return brief(leaf)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside exception groups."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def brief(exc: BaseException) -> str:
    """The first real error inside (exception groups unwrapped), as ``Type: message``."""
    exc = _leaf(exc)
    from mcp import MCPError

    if isinstance(exc, MCPError):
        return exc.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version() -> str:
    try:
        return importlib.metadata.version("dagagent")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "0"
