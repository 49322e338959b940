"""Watching model calls as they happen: :class:`LiveCall` (one call: what was asked, what the
model has written so far, when, and how it ended) and :class:`CallObserver` (who is told).

The model layer knows nothing of what a call is for. Whoever does (the workflows: a solve
knows its round, the role a client serves, its budget) wraps a client in a
:class:`~dagagent.llm.MeteredLLM` with an observer, and hears of every call made through it::

    class Printer:
        def started(self, call): ...        # before the request; raising refuses the call
        def wrote(self, call): ...          # after each piece of the answer; raising cuts it
        def ended(self, call): ...          # answered, failed, cancelled, cut or refused
        def rejected(self, call, issues): ...  # its reader could not use the answer

    llm = MeteredLLM(OpenAIChat("gpt-4o-mini"), observer=Printer())

**Tokens.** ``call.usage`` is what the provider reported once the answer is whole; when it
reported nothing (a stream cut off, a server that sends no usage), or an output count no
answer of that length could have (a server lying about usage), the tokens are estimated
from the characters sent and written (:func:`estimate_tokens`) and ``call.estimated`` says
so: a call that wrote something never counts 0 tokens.

**Notes.** A caller that knows something about the calls it is about to make (the planner:
which tools it showed the model) says so with :func:`noting`; each call started inside the
block carries the notes in its ``options`` (and so in its record).

**Readers.** A planner or a joiner that reads an answer and cannot use it tells the call's
observer so with :func:`reject_last_call`, right after the call, in the same task: the call
a task made last through an observed client is that task's (a context variable holds it).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from typing_extensions import Unpack

from .usage import Usage

if TYPE_CHECKING:  # at run time only Usage: the run store's records import this module
    from .protocol import LLM
    from .router import Fallback
    from .types import LLMRequest, LLMResponse, Message, RequestOptions, ToolCall

__all__ = [
    "CallObserver",
    "CallOutcome",
    "LiveCall",
    "ask_streamed",
    "estimate_tokens",
    "last_call",
    "noting",
    "reject_last_call",
    "request_options",
]

CallOutcome: TypeAlias = Literal["running", "answered", "failed", "cancelled", "cut", "refused"]
"""How a model call ended: ``answered`` (the whole answer came), ``failed`` (an error of the
model or the server), ``cancelled`` (its caller was cancelled: a deadline, Ctrl-C), ``cut``
(its reader stopped reading before the end: a streamed plan with an invalid task, or an
observer that cut it), ``refused`` (an observer refused it before it was sent: a budget);
``running`` while under way."""

#: Characters per token when tokens are estimated (English prose and JSON average about 4).
CHARS_PER_TOKEN = 4
#: Tokens a message costs beyond its text (roles, separators), as providers count them.
_TOKENS_PER_MESSAGE = 4
#: An output count below one token per this many characters written is not believed.
_LEAST_CHARS_PER_TOKEN = 12


def estimate_tokens(chars: int) -> int:
    """Tokens in ``chars`` characters of text, estimated (about 4 characters a token)."""
    return math.ceil(max(0, chars) / CHARS_PER_TOKEN)


def _message_chars(m: Message) -> int:
    n = len(m.content)
    for call in getattr(m, "tool_calls", ()):
        n += len(call.name) + len(call.arguments_json())
    return n


def prompt_tokens(request: LLMRequest) -> int:
    """The tokens of ``request``'s prompt, estimated: its messages, its tools and its
    response format's schema."""
    import json

    chars = sum(_message_chars(m) for m in request.messages)
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    if request.response_format is not None:
        chars += len(json.dumps(request.response_format.schema))
    return estimate_tokens(chars) + _TOKENS_PER_MESSAGE * len(request.messages)


def request_options(request: LLMRequest, client: object = None) -> dict[str, Any]:
    """What a call asked for besides its messages, as JSON-able values: the output limit
    (the request's, else the client's), temperature, the response format's kind and name,
    tools offered, stop sequences, whether it streamed, and whatever other option the request
    carries (``tool_choice``...). Never a message or a schema."""
    out: dict[str, Any] = {}
    max_tokens = request.max_tokens
    if max_tokens is None:
        max_tokens = getattr(client, "max_tokens", None)
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    temperature = request.temperature
    if temperature is None:
        temperature = getattr(client, "temperature", None)
    if temperature is not None:
        out["temperature"] = temperature
    fmt = request.response_format
    if fmt is not None:
        out["response_format"] = {"type": "json_schema", "name": fmt.name, "strict": fmt.strict}
    if request.tools:
        out["tools"] = [t.name for t in request.tools]
    if request.stop:
        out["stop"] = list(request.stop)
    out["stream"] = request.stream
    skip = {"messages", "tools", "response_format", "stop", "max_tokens", "temperature", "stream"}
    for name, value in vars(request).items():  # options added later (tool_choice, ...)
        if name not in skip and value is not None and isinstance(value, str | int | float | bool):
            out[name] = value
    return out


def server_of(client: object) -> str | None:
    """Where ``client`` sends its calls (scheme, host, port and path; no credentials, no
    query), or ``None`` when it has no URL (a scripted model)."""
    base = getattr(client, "base_url", None)
    if not isinstance(base, str) or not base:
        return None
    parts = urlsplit(base)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def _new_id() -> str:
    """A call's id: 16 random hex digits, unique across processes and stores."""
    return os.urandom(8).hex()


@dataclass(eq=False)
class LiveCall:
    """One model call as it happens (see the module docstring). Read it, never change it:
    the client that makes the call fills it in."""

    request: LLMRequest
    model: str
    provider: str
    server: str | None
    options: dict[str, Any]
    #: The output limit the call was sent with (``None``: the provider's own).
    max_tokens: int | None
    #: The prompt's tokens, estimated when the call starts.
    prompt_tokens: int
    id: str = field(default_factory=_new_id)
    started_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None
    duration_s: float | None = None
    outcome: CallOutcome = "running"
    response: LLMResponse | None = None
    error: BaseException | None = None
    #: Characters the model has written so far (text and tool-call arguments).
    chars: int = 0
    #: Set by :func:`reject_last_call`: why the reader could not use the answer.
    issues: list[str] = field(default_factory=list)
    observer: CallObserver | None = field(default=None, repr=False)
    #: The models a :class:`~dagagent.llm.FallbackLLM` gave up on before the one that
    #: answered (``model``, ``provider``, ``server`` are then that one's).
    fallbacks: list[Fallback] = field(default_factory=list)
    _pieces: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, client: object, request: LLMRequest) -> LiveCall:
        """A call of ``client`` about to send ``request``."""
        options = {**request_options(request, client), **_NOTES.get()}
        return cls(
            request=request,
            model=str(getattr(client, "model", "") or ""),
            provider=str(getattr(client, "provider_name", "") or ""),
            server=server_of(client),
            options=options,
            max_tokens=options.get("max_tokens"),
            prompt_tokens=prompt_tokens(request),
        )

    # -- as it happens -----------------------------------------------------------------

    def fell_back(self, failure: Fallback, to: object) -> None:
        """A fallback gave up on ``failure.model`` and asks ``to`` now: the call is that
        model's from here on, and ``options["fallback"]`` lists the models given up on."""
        self.fallbacks.append(failure)
        self.model = str(getattr(to, "model", "") or "")
        self.provider = str(getattr(to, "provider_name", "") or "")
        self.server = server_of(to)
        self.options["fallback"] = [f.as_json() for f in self.fallbacks]

    def wrote(self, piece: str) -> None:
        """The model wrote ``piece`` (text, or a fragment of a tool call's arguments)."""
        if not piece:
            return
        if self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started
        self._pieces.append(piece)
        self.chars += len(piece)

    def end(
        self,
        outcome: CallOutcome,
        response: LLMResponse | None = None,
        error: BaseException | None = None,
    ) -> None:
        self.outcome, self.response, self.error = outcome, response, error
        self.duration_s = time.perf_counter() - self.started
        if response is not None and not self._pieces:  # an answer that came whole
            self._pieces.append(_written(response.content, response.tool_calls))
            self.chars = len(self._pieces[0])
            if self.first_token_s is None and self.chars:
                self.first_token_s = self.duration_s

    # -- what it was -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.outcome == "running"

    @property
    def elapsed_s(self) -> float:
        """Seconds since the call started (its duration once it ended)."""
        if self.duration_s is not None:
            return self.duration_s
        return time.perf_counter() - self.started

    @property
    def text(self) -> str:
        """What the model wrote (so far): the answer's text, and its tool calls as
        ``name(arguments)`` lines once the answer is whole."""
        if self.response is not None and self.response.tool_calls:
            return _written(self.response.content, self.response.tool_calls)
        return "".join(self._pieces)

    @property
    def finish_reason(self) -> str | None:
        return self.response.finish_reason if self.response is not None else None

    @property
    def output_tokens_so_far(self) -> int:
        """The tokens written so far, estimated (while the call runs)."""
        return estimate_tokens(self.chars)

    @property
    def usage(self) -> Usage:
        """The call's tokens (see :attr:`estimated`) as one call's usage (``calls=1``).
        A call refused before it was sent used nothing."""
        if self.outcome == "refused":
            return Usage(calls=0)
        input_tokens, output_tokens, estimated = self._tokens()
        return Usage(
            input_tokens=input_tokens, output_tokens=output_tokens, calls=1, estimated=estimated
        )

    @property
    def estimated(self) -> bool:
        """Whether :attr:`usage` is (partly) estimated, not what the provider reported."""
        return self._tokens()[2]

    def _tokens(self) -> tuple[int, int, bool]:
        reported = self.response.usage if self.response is not None else None
        written = estimate_tokens(self.chars)
        if reported is None:  # no whole answer: what was sent, and what came before the end
            return self.prompt_tokens, written, True
        estimated = False
        input_tokens, output_tokens = reported.input_tokens, reported.output_tokens
        if input_tokens <= 0:
            input_tokens, estimated = self.prompt_tokens, True
        floor = self.chars // _LEAST_CHARS_PER_TOKEN
        if (output_tokens <= 0 and self.chars) or output_tokens < floor:
            output_tokens, estimated = max(written, output_tokens), True
        return input_tokens, output_tokens, estimated

    def reject(self, issues: Sequence[object]) -> None:
        """Its reader could not use the answer, for ``issues``: the observer hears of it."""
        self.issues = [str(i) for i in issues]
        if self.observer is not None:
            self.observer.rejected(self, self.issues)


def _written(content: str, tool_calls: Sequence[ToolCall]) -> str:
    lines = [content] if content else []
    lines += [f"{c.name}({c.arguments_json()})" for c in tool_calls]
    return "\n".join(lines)


@runtime_checkable
class CallObserver(Protocol):
    """Told about every call of the clients it watches (see the module docstring). It runs
    on the event loop, in the task that makes the call: it must be quick. ``started`` may
    raise to refuse the call (nothing is sent; the error reaches the caller), ``wrote`` to
    cut it short (the stream is closed; the error reaches its reader)."""

    def started(self, call: LiveCall) -> None: ...

    def wrote(self, call: LiveCall) -> None: ...

    def ended(self, call: LiveCall) -> None: ...

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None: ...


_NOTES: ContextVar[Mapping[str, Any]] = ContextVar(
    "dagagent_call_notes", default=MappingProxyType({})
)


@contextmanager
def noting(**notes: Any) -> Iterator[None]:
    """Within the block, each call started through an observed client carries ``notes``
    (JSON-able values) in its ``options``, beside (and over) what its request asked for."""
    token = _NOTES.set(MappingProxyType({**_NOTES.get(), **notes}))
    try:
        yield
    finally:
        _NOTES.reset(token)


#: The last call the current task made through an observed client.
_LAST: ContextVar[LiveCall | None] = ContextVar("dagagent_last_model_call", default=None)


def last_call() -> LiveCall | None:
    """The last call the current task made through a client with an observer, if any."""
    return _LAST.get()


def set_last_call(call: LiveCall | None) -> None:
    """Make ``call`` the last call the current task made (``None``: an answer that no call
    gave, such as a recorded one given again: nobody to tell if its reader rejects it)."""
    _LAST.set(call)


def reject_last_call(issues: Sequence[object]) -> None:
    """Tell the observer of the last call the current task made that its answer could not be
    used, and why (nothing happens when the call had no observer)."""
    call = _LAST.get()
    if call is not None and issues:
        call.reject(issues)


async def ask_streamed(
    llm: LLM, messages: Sequence[Message], **options: Unpack[RequestOptions]
) -> LLMResponse:
    """``llm``'s whole answer to ``messages``, asked for as a stream: the answer is the one
    ``complete`` would give, but its observer (and whoever shows progress) sees it being
    written, and a call cut short (a deadline) keeps what came. The planners, the joiner and
    the agent ask this way."""
    from .types import closing_stream, collect_stream

    async with closing_stream(llm.stream(messages, **options)) as events:
        return await collect_stream(events)
