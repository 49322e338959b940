"""A scriptable HTTP server on 127.0.0.1 for the LLM client tests (real sockets).

Each test queues replies with ``server.push(...)``; each incoming request takes the next
one. Replies can be plain (status, headers, JSON or raw body, delay), SSE streams
(optionally cut off mid-way, chunked or close-delimited) or a hang-up without answer.
Every request is recorded. ``check()`` (run by the fixtures) fails when a reply was left
unused or a request arrived that nothing was queued for.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dagagent.llm import (
    LLM,
    AnthropicChat,
    GeminiChat,
    HTTPChatClient,
    HTTPRetryPolicy,
    ModelSettings,
    OpenAIChat,
    StreamEvent,
    ToolSpec,
    wire,
)
from dagagent.llm.wire import encode_sse


@dataclass
class Reply:
    """A plain HTTP answer. ``json`` wins over ``body``."""

    status: int = 200
    json: Any = None
    body: bytes | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class SSEReply:
    """A ``text/event-stream`` answer.

    ``cut_after=n`` closes the connection after n events, without finishing the body.
    ``chunked=False`` sends no length and ends the body by closing the connection.
    ``pause`` waits before each event from number ``pause_from`` on.
    ``gate=(n, wait)`` calls ``wait()`` (which returns once a state holds) before event
    number n: the rest of the answer is held until then.
    """

    events: list[tuple[str | None, Any]]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    cut_after: int | None = None
    chunked: bool = True
    pause: float = 0.0
    pause_from: int = 0
    gate: tuple[int, Callable[[], object]] | None = None


@dataclass
class Hangup:
    """Close the connection without answering."""

    delay: float = 0.0


@dataclass
class RawReply:
    """Bytes written to the socket exactly as given (status line and headers included).

    ``parts`` are written in order; a number is a pause in seconds instead. The connection
    is closed after the last part, so a body without a length ends there.
    """

    parts: list[bytes | float]
    delay: float = 0.0


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_port: int

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    owner: LLMTestServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):  # a client going away is normal here
            self.owner.unexpected.append(f"server error: {error!r}")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10
    disable_nagle_algorithm = True  # or every reply waits ~40 ms for a delayed ACK
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.server.owner._serve(self)

    do_GET = do_POST


Responder = Callable[["Recorded"], "Reply | SSEReply | Hangup | RawReply"]


class LLMTestServer:
    """``responder``, when given, answers every request that finds no queued reply."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder
        self._replies: deque[Reply | SSEReply | Hangup | RawReply] = deque()
        self.requests: list[Recorded] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified as connections close
        self._stop = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._wake, self._woken = socket.socketpair()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def push(self, *replies: Reply | SSEReply | Hangup | RawReply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        return len(self._replies)

    def check(self) -> None:
        problems = list(self.unexpected)
        if self._replies:
            problems.append(f"{len(self._replies)} queued replies were never requested")
        assert not problems, "; ".join(problems)

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> LLMTestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        """Take connections until :meth:`close`. The thread wakes for a connection or for
        close(), never on a timer: an idle server (shared by the tests of a session) runs no
        code meanwhile, not even to allocate."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in selector.select()]
                if self._woken in ready:
                    return
                self._server.handle_request()

    def close(self) -> None:
        self._stop.set()
        self._wake.send(b"x")
        self._thread.join()
        self._hang_up()
        self._server.server_close()  # joins the handler threads
        self._wake.close()
        self._woken.close()

    def reset(self, responder: Responder | None = None) -> None:
        """Ready for another test, as if new: what the last one left in flight (a delayed
        reply, a trickling stream, an idle keep-alive connection) is stopped and waited for,
        and nothing of it is remembered (replies, requests, problems, responder)."""
        self._stop.set()
        self._hang_up()
        with self._idle:
            ended = self._idle.wait_for(lambda: not self._connections, timeout=30)
            assert ended, "the LLM test server is still answering the last test's requests"
            self._replies.clear()
            self.requests.clear()
            self.unexpected.clear()
            self.responder = responder
            self._stop = threading.Event()

    def _hang_up(self) -> None:
        """Close every open connection (their handlers then end)."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
                self._idle.notify_all()

    # -- serving -------------------------------------------------------------------

    def _serve(self, h: _Handler) -> None:
        length = int(h.headers.get("content-length") or 0)
        body = h.rfile.read(length) if length else b""
        record = Recorded(
            method=h.command,
            path=h.path,
            headers={k.lower(): v for k, v in h.headers.items()},
            body=body,
            client_port=h.client_address[1],
        )
        with self._lock:
            self.requests.append(record)
            reply = self._replies.popleft() if self._replies else None
        try:
            if reply is None and self.responder is not None:
                reply = self.responder(record)
            if reply is None:
                self.unexpected.append(f"unexpected request #{len(self.requests)}: {h.path}")
                self._write_plain(h, Reply(418, json={"error": {"message": "nothing queued"}}))
                return
            if reply.delay and self._stop.wait(reply.delay):
                h.close_connection = True
                return
            if isinstance(reply, Hangup):
                h.close_connection = True
            elif isinstance(reply, SSEReply):
                self._write_sse(h, reply)
            elif isinstance(reply, RawReply):
                self._write_raw(h, reply)
            else:
                self._write_plain(h, reply)
        except OSError:  # the client went away (timeouts, early close)
            h.close_connection = True

    def _write_raw(self, h: _Handler, reply: RawReply) -> None:
        h.close_connection = True
        for part in reply.parts:
            if isinstance(part, bytes):
                h.wfile.write(part)
                h.wfile.flush()
            elif self._stop.wait(part):
                return

    @staticmethod
    def _write_plain(h: _Handler, reply: Reply) -> None:
        headers = dict(reply.headers)
        if reply.json is not None:
            payload = json.dumps(reply.json).encode()
            headers.setdefault("Content-Type", "application/json")
        else:
            raw = reply.body or b""
            payload = raw.encode() if isinstance(raw, str) else raw
            headers.setdefault("Content-Type", "text/plain")
        h.send_response(reply.status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    def _write_sse(self, h: _Handler, reply: SSEReply) -> None:
        h.send_response(reply.status)
        h.send_header("Content-Type", "text/event-stream")
        for key, value in reply.headers.items():
            h.send_header(key, value)
        if reply.chunked:
            h.send_header("Transfer-Encoding", "chunked")
        else:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        for i, event in enumerate(reply.events):
            if reply.cut_after is not None and i >= reply.cut_after:
                h.close_connection = True
                return
            if reply.pause and i >= reply.pause_from and self._stop.wait(reply.pause):
                return
            if reply.gate is not None and i == reply.gate[0]:
                reply.gate[1]()
            raw = encode_sse([event])
            if reply.chunked:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
            else:
                h.wfile.write(raw)
        if reply.cut_after is not None:
            h.close_connection = True
            return
        if reply.chunked:
            h.wfile.write(b"0\r\n\r\n")


class Sleeps:
    """A stand-in for the retry sleep that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def record_sleeps(client: HTTPChatClient) -> Sleeps:
    sleeps = Sleeps()
    client.retry = replace(client.retry, sleep=sleeps)
    return sleeps


def record_command_line_sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    """The model clients the command line makes (``--model``) record their retry waits
    instead of waiting: a test skips the back-off's seconds and can count the retries."""
    from dagagent.cli.options import ModelChoice

    sleeps = Sleeps()
    made = ModelChoice.settings

    def settings(choice: ModelChoice) -> ModelSettings:
        given = made(choice)
        return replace(given, retry=replace(given.retry, sleep=sleeps))

    monkeypatch.setattr(ModelChoice, "settings", settings)
    return sleeps


@dataclass
class Flavor:
    """What differs between the providers, so one test can run against both."""

    name: str
    client_cls: type[OpenAIChat] | type[AnthropicChat] | type[GeminiChat]
    path: str
    key_env: str
    text: Callable[..., dict[str, Any]]
    tool_calls: Callable[..., dict[str, Any]]
    events: Callable[..., list[tuple[str | None, Any]]]
    error: Callable[..., dict[str, Any]]

    def client(
        self, server: LLMTestServer, **options: Any
    ) -> OpenAIChat | AnthropicChat | GeminiChat:
        options["settings"] = quick_retries(options.get("settings"))
        base = server.url + _BASE_PATH.get(self.name, "")
        return self.client_cls("test-model", base_url=base, **options)

    def sse(self, body: dict[str, Any], **options: Any) -> SSEReply:
        return SSEReply(self.events(body), **options)


OPENAI = Flavor(
    "openai",
    OpenAIChat,
    "/v1/chat/completions",
    "OPENAI_API_KEY",
    wire.openai_text,
    wire.openai_tool_calls,
    wire.openai_events,
    wire.openai_error,
)
ANTHROPIC = Flavor(
    "anthropic",
    AnthropicChat,
    "/v1/messages",
    "ANTHROPIC_API_KEY",
    wire.anthropic_text,
    wire.anthropic_tool_use,
    wire.anthropic_events,
    wire.anthropic_error,
)
# The error types the provider tests name, as Gemini's statuses.
_GEMINI_STATUS = {
    "rate_limit_error": "RESOURCE_EXHAUSTED",
    "authentication_error": "UNAUTHENTICATED",
    "permission_error": "PERMISSION_DENIED",
    "api_error": "INTERNAL",
    "overloaded_error": "UNAVAILABLE",
}


def _gemini_error(message: str, *, type: str = "invalid_request_error") -> dict[str, Any]:
    return wire.gemini_error(message, status=_GEMINI_STATUS.get(type, "INVALID_ARGUMENT"))


GEMINI = Flavor(
    "gemini",
    GeminiChat,
    "/v1beta/models/test-model:generateContent",
    "GEMINI_API_KEY",
    wire.gemini_text,
    wire.gemini_function_calls,
    wire.gemini_events,
    _gemini_error,
)
_BASE_PATH = {"openai": "/v1", "gemini": "/v1beta"}
FLAVORS = [OPENAI, ANTHROPIC, GEMINI]

# What the provider tests send, the same for both.
TOOLS = [
    ToolSpec(
        "get_weather",
        "Weather for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    ToolSpec(
        "get_time", "Local time", {"type": "object", "properties": {"tz": {"type": "string"}}}
    ),
]
PLAN_SCHEMA = {
    "type": "object",
    "properties": {"tasks": {"type": "array", "items": {"type": "string"}}},
    "required": ["tasks"],
    "additionalProperties": False,
}


async def events_of(llm: LLM, *args: Any, **kwargs: Any) -> list[StreamEvent]:
    """Every event of ``llm.stream(*args, **kwargs)``."""
    return [event async for event in llm.stream(*args, **kwargs)]


def quick_retries(settings: ModelSettings | None) -> ModelSettings:
    """``settings`` whose retries wait a millisecond, unless they set their own delay."""
    settings = settings or ModelSettings()
    if settings.retry.base_delay_s != HTTPRetryPolicy().base_delay_s:
        return settings
    return settings.but(retry=replace(settings.retry, base_delay_s=0.001))
