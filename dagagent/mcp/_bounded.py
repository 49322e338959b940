"""What an MCP server may send, bounded before it is parsed: every message in bytes, a call's
result in content blocks, each tool's input schema in bytes.

A server is untrusted: a million content blocks, 300 MB of text or a 40 MB input schema must
not take gigabytes of memory (the SDK parses a whole message into models before anyone sees
it). So the bytes are counted as they arrive, before any parsing:

- over stdio (:func:`stdio_transport`), a line (one JSON-RPC message) longer than
  ``max_bytes`` is not kept: its bytes are dropped as they come, and the request it answers
  gets an error instead (its id is read from the line's start), so the call fails at once
  with :class:`~dagagent.errors.MCPToolError` (a listing, with
  :class:`~dagagent.errors.MCPConnectError`) and the session goes on;
- over HTTP (:func:`http_client`), a JSON response body is cut off past ``max_bytes`` (the
  SDK answers the request with the error), and so is each event of an event stream (the
  SDK's own ``max_sse_event_size``);
- a message of more than :data:`PRECHECK_BYTES` is read as plain JSON first and refused if
  a result holds more than ``max_blocks`` content blocks, before the SDK makes a model of
  each.

The server process is started and stopped as the SDK starts and stops its own (its minimal
environment, its own process group, stdin closed, then the process tree terminated): only
the reading of its output is this module's.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

if TYPE_CHECKING:
    import httpx2
    from mcp import StdioServerParameters
    from mcp.client._transport import TransportStreams

__all__ = [
    "DEFAULT_MAX_BLOCKS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_SCHEMA_BYTES",
    "MCPLimits",
    "http_client",
    "stdio_transport",
]

#: The most bytes one message from an MCP server may hold (a call's result, a tool listing).
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
#: The most content blocks one call's result may hold.
DEFAULT_MAX_BLOCKS = 10_000
#: The most bytes (as JSON) one tool's input or output schema may hold.
DEFAULT_MAX_SCHEMA_BYTES = 256 * 1024
#: Messages longer than this are read as plain JSON first, to count their content blocks.
PRECHECK_BYTES = 256 * 1024

_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')
_HEAD = 64 * 1024  # how much of an oversized line is kept, to find the id of its request
_CLOSE_WAIT_S = 2.0  # as the SDK: a server's time to exit once its stdin is closed
_KILL_WAIT_S = 2.0


@dataclass(frozen=True)
class MCPLimits:
    """The bounds of what one MCP server may send (see the module's docstring)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_blocks: int = DEFAULT_MAX_BLOCKS
    max_schema_bytes: int = DEFAULT_MAX_SCHEMA_BYTES

    def too_large(self, size: int | None = None) -> str:
        more = f" ({size:,} bytes)" if size is not None else ""
        return (
            f"its answer is larger than {self.max_bytes:,} bytes{more}, the most one message "
            "may hold (MCPClient(max_output_bytes=...))"
        )

    def too_many_blocks(self, n: int) -> str:
        return (
            f"its answer holds {n:,} content blocks, more than the {self.max_blocks:,} a call "
            "may return (MCPClient(max_blocks=...))"
        )


def check_blocks(data: Any, limits: MCPLimits) -> str | None:
    """Why a message (as plain JSON) is refused: a result with too many content blocks."""
    result = data.get("result") if isinstance(data, dict) else None
    content = result.get("content") if isinstance(result, dict) else None
    if isinstance(content, list) and len(content) > limits.max_blocks:
        return limits.too_many_blocks(len(content))
    return None


def _error_for(request_id: Any, why: str) -> Any:
    """The message that answers request ``request_id`` with the error ``why``."""
    from mcp.shared.message import SessionMessage
    from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError

    error = ErrorData(code=INTERNAL_ERROR, message=why)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def _id_of(head: bytes) -> Any:
    """The request id a message answers, read from its first bytes (``None``: not found)."""
    m = _ID.search(head)
    if m is None:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None


def _parse(line: bytes, limits: MCPLimits) -> Any:
    """One line from the server as the session takes it: a message, an error answering its
    request, or an exception (a line that is not JSON-RPC, for the session to report)."""
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    if len(line) > PRECHECK_BYTES:
        try:
            data = json.loads(line)
        except ValueError as exc:
            return exc
        why = check_blocks(data, limits)
        if why is not None:
            request_id = data.get("id") if isinstance(data, dict) else None
            return _error_for(request_id, why) if request_id is not None else ValueError(why)
        del data
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


class _Lines:
    """Splits the server's output into lines of at most ``limit`` bytes; a longer line is not
    kept (only its first bytes, to find its request's id)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._size = 0  # of the line being read, kept or not
        self._head: bytes | None = None  # the start of a line too long to keep

    def feed(self, chunk: bytes) -> list[tuple[bytes, int | None]]:
        """The lines ``chunk`` ends: ``(line, None)``, or ``(its first bytes, its size)`` for a
        line that was too long."""
        out: list[tuple[bytes, int | None]] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._size += len(piece)
            if self._head is None:
                if self._size > self.limit:
                    kept = bytes(self._buffer[:_HEAD])
                    self._head = kept + piece[: max(0, _HEAD - len(kept))]
                    self._buffer = bytearray()
                else:
                    self._buffer += piece
            if end < 0:
                return out
            if self._head is not None:
                out.append((self._head, self._size))
            elif self._buffer.strip():
                out.append((bytes(self._buffer), None))
            self._buffer, self._size, self._head = bytearray(), 0, None
            start = end + 1


@asynccontextmanager
async def stdio_transport(
    params: StdioServerParameters, errlog: TextIO, limits: MCPLimits
) -> AsyncIterator[TransportStreams]:
    """A transport (for the SDK's ``Client``) to a server run as ``params`` says, whose
    messages are bounded by ``limits`` as they are read (see the module's docstring)."""
    from mcp.shared.message import SessionMessage

    process = await _spawn(params, errlog)
    reader_in, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, writer_out = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        assert process.stdout is not None
        lines = _Lines(limits.max_bytes)
        delivering = True  # until the session is gone; then the output is drained, unread
        async with reader_in:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                while True:
                    chunk = await process.stdout.receive()
                    if not delivering:
                        continue
                    for line, oversized in lines.feed(chunk):
                        try:
                            await reader_in.send(_message(line, oversized, limits))
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            delivering = False
                            break

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with writer_out:
                async for message in writer_out:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(text.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await reader_in.aclose()  # the server cannot be written to: the session sees the end

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await read_stream.aclose()  # what the server still writes is drained, unread
                await write_stream.aclose()
                await _stop(process)
            tg.cancel_scope.cancel()


def _message(line: bytes, oversized: int | None, limits: MCPLimits) -> Any:
    """What the session gets for a line (``oversized``: the size of a line not kept, of which
    ``line`` is the start)."""
    if oversized is None:
        return _parse(line, limits)
    request_id = _id_of(line)
    why = limits.too_large(oversized)
    return _error_for(request_id, why) if request_id is not None else ValueError(why)


async def _spawn(params: StdioServerParameters, errlog: TextIO) -> anyio.abc.Process:
    """The server's process, started as the SDK starts its own: its minimal environment plus
    ``params.env``, in a process group of its own (so that it is stopped with its children)."""
    from mcp.client.stdio import get_default_environment

    env = {**get_default_environment(), **(params.env or {})}
    if sys.platform == "win32":  # pragma: no cover - the SDK's way on Windows
        from mcp.os.win32.utilities import create_windows_process, get_windows_executable_command

        command = get_windows_executable_command(params.command)
        args = list(params.args)
        process: Any = await create_windows_process(command, args, env, errlog, params.cwd)
        return process  # type: ignore[no-any-return]
    return await anyio.open_process(
        [params.command, *params.args],
        env=env,
        stderr=errlog,
        cwd=params.cwd,
        start_new_session=True,
    )


async def _stop(process: anyio.abc.Process) -> None:
    """Stop the server as the MCP specification says: close its stdin, give it a moment to
    exit, then terminate its process tree."""
    assert process.stdin is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    if not await _exited(process, _CLOSE_WAIT_S):
        if sys.platform == "win32":  # pragma: no cover
            from mcp.os.win32.utilities import terminate_windows_process_tree

            await terminate_windows_process_tree(process)  # type: ignore[arg-type]
        else:
            from mcp.os.posix.utilities import terminate_posix_process_tree

            await terminate_posix_process_tree(process, _KILL_WAIT_S)
        await _exited(process, _KILL_WAIT_S)
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.aclose()


async def _exited(process: anyio.abc.Process, timeout: float) -> bool:
    """Whether the process exited within ``timeout`` (its return code, polled: waiting for it
    would also wait for a pipe a child of it may hold open)."""
    with anyio.move_on_after(timeout):
        while process.returncode is None:  # noqa: ASYNC110 - no event tells it, as the SDK
            await anyio.sleep(0.01)
    return process.returncode is not None


def http_client(headers: dict[str, str] | None, limits: MCPLimits) -> httpx2.AsyncClient:
    """The HTTP client of a server reached by URL: ``headers`` on every request, and a JSON
    response body cut off past ``limits.max_bytes`` (an error the SDK gives the request)."""
    import httpx2

    class Body(httpx2.AsyncByteStream):
        """A JSON body that stops past ``limits.max_bytes``, and whose result, when large, is
        checked for too many content blocks before the SDK parses it."""

        def __init__(self, inner: httpx2.AsyncByteStream) -> None:
            self.inner = inner

        async def __aiter__(self) -> AsyncIterator[bytes]:
            body = bytearray()
            async for chunk in self.inner:
                body += chunk
                if len(body) > limits.max_bytes:
                    raise httpx2.StreamError(limits.too_large())
            if len(body) > PRECHECK_BYTES:
                with suppress(ValueError):  # not JSON: the SDK says so
                    why = check_blocks(json.loads(body), limits)
                    if why is not None:
                        raise httpx2.StreamError(why)
            yield bytes(body)

        async def aclose(self) -> None:
            await self.inner.aclose()

    class Bounded(httpx2.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            response = await self.inner.handle_async_request(request)
            kind = response.headers.get("content-type", "").lower()
            stream = response.stream
            if not kind.startswith("application/json") or not isinstance(
                stream, httpx2.AsyncByteStream
            ):
                return response  # event streams: bounded per event by the SDK
            return httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=Body(stream),
                extensions=response.extensions,
                request=request,
            )

        async def aclose(self) -> None:
            await self.inner.aclose()

    return httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(30.0, read=300.0), transport=Bounded()
    )
