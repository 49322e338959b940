"""Provider-neutral types for talking to a language model.

Everything a planner or agent needs to speak to a model lives here: typed messages, tool
specs, structured-output formats, the response and stream events. Token usage is
:mod:`dagagent.llm.usage`, the :class:`~dagagent.llm.LLM` protocol every client implements
:mod:`dagagent.llm.protocol` (both names are still importable from here). Nothing in this
module does I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypedDict

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.dataclasses import dataclass as pydantic_dataclass
from typing_extensions import Unpack

from dagagent.errors import ConfigError, LLMResponseError

from ..text import shorten
from ._json import dumps_json, fix_surrogate_escapes, loads_json
from .usage import Usage, UsageTracker

if TYPE_CHECKING:
    from .protocol import LLM

__all__ = [
    "LLM",
    "AssistantMessage",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "MessagesInput",
    "RequestOptions",
    "ResponseFormat",
    "StreamEnd",
    "StreamEvent",
    "SystemMessage",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UsageTracker",
    "UserMessage",
    "collect_stream",
    "dumps_json",
    "fix_surrogate_escapes",
    "loads_json",
    "normalize_messages",
    "parse_tool_arguments",
]

# ---------------------------------------------------------------------------- tool calls


def parse_tool_arguments(raw: str | Mapping[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Turn a model's tool-call arguments into a dict, never raising.

    Returns ``(arguments, error)``. When the text is not a JSON object, ``arguments`` is
    ``{}`` and ``error`` says what is wrong and quotes the raw text, so an agent can show
    the model its own mistake. Empty text means "no arguments".
    """
    if raw is None:
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    if not raw.strip():
        return {}, None
    quoted = shorten(raw, 2000, one_line=False, fit=False)
    try:
        value = loads_json(raw)
    except ValueError as exc:
        return {}, f"arguments are not valid JSON ({exc}): {quoted}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}: {quoted}"
    return value, None


class ToolCall(BaseModel):
    """One tool call requested by the model.

    If the model produced arguments that are not a JSON object, ``arguments`` is ``{}``,
    ``arguments_error`` explains the problem (quoting the text) and ``raw_arguments``
    keeps the text exactly as received (it is ``None`` for arguments that parsed).

    ``signature`` is an opaque token a provider sent with the call and wants back with it in
    the history (Gemini's ``thoughtSignature``); it is neither shown nor stored.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    raw_arguments: str | None = None
    signature: str | None = Field(default=None, repr=False, exclude=True)

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str | Mapping[str, Any] | None) -> ToolCall:
        """Build a call from wire-format arguments (JSON text or an object)."""
        arguments, error = parse_tool_arguments(raw)
        return cls(
            id=id,
            name=name,
            arguments=arguments,
            arguments_error=error,
            raw_arguments=raw if error is not None and isinstance(raw, str) else None,
        )

    def arguments_json(self) -> str:
        """The arguments as JSON text, as they go back to a provider in the history.

        A call whose arguments did not parse is sent back verbatim, so the model sees
        what it actually wrote.
        """
        if self.arguments_error is not None and self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(self.arguments, ensure_ascii=False)


# ---------------------------------------------------------------------------- messages


class SystemMessage(BaseModel):
    """Instructions for the model. ``SystemMessage("You are ...")``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system"] = "system"
    content: str

    def __init__(self, content: str, **data: Any) -> None:
        super().__init__(content=content, **data)


class UserMessage(BaseModel):
    """What the user (or the engine on its behalf) says. ``UserMessage("...")``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["user"] = "user"
    content: str

    def __init__(self, content: str, **data: Any) -> None:
        super().__init__(content=content, **data)


class AssistantMessage(BaseModel):
    """A model turn: text, tool calls, or both."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)

    def __init__(
        self, content: str = "", tool_calls: Sequence[ToolCall] | None = None, **data: Any
    ) -> None:
        super().__init__(content=content, tool_calls=list(tool_calls or []), **data)


class ToolResultMessage(BaseModel):
    """The result of one tool call, answering ``tool_call_id``.

    ``is_error`` marks a failed call: Anthropic has a flag for it; for OpenAI the content
    is prefixed with ``"Error: "``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    is_error: bool = False

    def __init__(
        self, tool_call_id: str, content: str, is_error: bool = False, **data: Any
    ) -> None:
        super().__init__(tool_call_id=tool_call_id, content=content, is_error=is_error, **data)


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage
"""Any chat message; ``role`` tells them apart (``system``/``user``/``assistant``/``tool``)."""

MessagesInput: TypeAlias = str | Sequence[Message | Mapping[str, Any]]
"""What clients accept as ``messages``: typed messages, dicts with a ``role``, or a
plain string (one user message)."""

_MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(
    Annotated[Message, Field(discriminator="role")]
)


def normalize_messages(messages: MessagesInput) -> list[Message]:
    """Return typed messages from any accepted input (see :data:`MessagesInput`)."""
    if isinstance(messages, str):
        return [UserMessage(messages)]
    out: list[Message] = []
    for m in messages:
        if isinstance(m, SystemMessage | UserMessage | AssistantMessage | ToolResultMessage):
            out.append(m)
        else:
            out.append(_MESSAGE_ADAPTER.validate_python(dict(m)))
    return out


# ---------------------------------------------------------------------------- request parts

_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """A tool / format name both providers accept (``[A-Za-z0-9_-]{1,64}``)."""
    return (_NAME_RE.sub("_", name) or "response")[:64]


def _empty_object_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@pydantic_dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: ``ToolSpec(name, description, parameters)``;
    ``parameters`` is a JSON schema for the arguments object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=_empty_object_schema)


@pydantic_dataclass(frozen=True)
class ResponseFormat:
    """Ask for a reply that is JSON matching ``schema``: ``ResponseFormat(name, schema)``.

    OpenAI-compatible servers get ``response_format: {"type": "json_schema", ...}``.
    Anthropic has no such option; it is emulated with a forced tool whose input schema
    is ``schema``, and the tool input comes back as JSON text in ``content``.
    With ``strict=True`` OpenAI requires every property to be listed in ``required`` and
    ``additionalProperties: false``.
    """

    name: str
    schema: dict[str, Any]
    strict: bool = True

    @classmethod
    def coerce(cls, value: ResponseFormat | Mapping[str, Any] | None) -> ResponseFormat | None:
        """Accept a :class:`ResponseFormat` or a plain JSON schema dict.

        A plain schema becomes ``ResponseFormat("response", schema, strict=False)``:
        non-strict because schemas generated by pydantic rarely meet OpenAI's strict rules.
        """
        if value is None or isinstance(value, ResponseFormat):
            return value
        return cls(name="response", schema=dict(value), strict=False)

    @classmethod
    def from_model(cls, model: type[BaseModel], *, strict: bool = False) -> ResponseFormat:
        """A format for a pydantic model's JSON schema, named after the model."""
        return cls(name=wire_name(model.__name__), schema=model.model_json_schema(), strict=strict)


ToolChoice: TypeAlias = str
"""Which tool the model may or must call, when tools are offered: ``"auto"`` (the model
decides: the providers' default), ``"none"`` (no tool: a text answer), ``"required"`` (at
least one tool call), or the name of one of the offered tools (a call of that tool). The
three modes win over a tool of the same name."""

TOOL_CHOICE_MODES = ("auto", "none", "required")


def check_tool_choice(tool_choice: str | None, tools: Sequence[ToolSpec]) -> None:
    """:class:`~dagagent.errors.ConfigError` unless ``tool_choice`` is a mode or names one
    of ``tools``."""
    if tool_choice is None or tool_choice in TOOL_CHOICE_MODES:
        return
    if not isinstance(tool_choice, str):
        raise ConfigError(
            f"tool_choice must be 'auto', 'none', 'required' or a tool's name, not "
            f"{type(tool_choice).__name__}"
        )
    names = [t.name for t in tools]
    if tool_choice not in names:
        offered = ", ".join(repr(n) for n in names[:10]) or "none"
        raise ConfigError(
            f"tool_choice {tool_choice!r} is neither 'auto', 'none' nor 'required', and names "
            f"no tool offered (offered: {offered})"
        )


class RequestOptions(TypedDict, total=False):
    """The keyword arguments of a call to a model past its messages (those of
    :meth:`LLM.complete <dagagent.llm.LLM.complete>` and ``stream``), declared once for the
    code that passes them on: :meth:`LLMRequest.build`, :class:`~dagagent.llm.protocol.RequestLLM`,
    :class:`~dagagent.llm.MeteredLLM`."""

    tools: Sequence[ToolSpec] | None
    response_format: ResponseFormat | Mapping[str, Any] | None
    stop: str | Sequence[str] | None
    max_tokens: int | None
    temperature: float | None
    tool_choice: ToolChoice | None
    parallel_tool_calls: bool | None


_REQUEST_OPTIONS = frozenset(RequestOptions.__annotations__)


@dataclass(frozen=True)
class LLMRequest:
    """One call to a model, normalised: what clients send and what ScriptedLLM records.

    ``max_tokens`` bounds the answer (OpenAI's reasoning models get ``max_completion_tokens``,
    see :class:`~dagagent.llm.OpenAIChat`); ``tool_choice`` (a :data:`ToolChoice`) and
    ``parallel_tool_calls`` (``False``: at most one tool call per answer) matter only when
    ``tools`` are offered, and are left out of the request otherwise."""

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    response_format: ResponseFormat | None = None
    stop: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    stream: bool = False
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @classmethod
    def build(
        cls, messages: MessagesInput, *, stream: bool = False, **options: Unpack[RequestOptions]
    ) -> LLMRequest:
        unknown = options.keys() - _REQUEST_OPTIONS
        if unknown:  # as a signature naming each keyword would
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        stop = options.get("stop")
        tools = list(options.get("tools") or [])
        tool_choice = options.get("tool_choice")
        check_tool_choice(tool_choice, tools)
        max_tokens = options.get("max_tokens")
        if max_tokens is not None and (isinstance(max_tokens, bool) or max_tokens < 1):
            raise ConfigError(f"max_tokens must be a positive number of tokens, not {max_tokens!r}")
        return cls(
            messages=normalize_messages(messages),
            tools=tools,
            response_format=ResponseFormat.coerce(options.get("response_format")),
            stop=[stop] if isinstance(stop, str) else list(stop or []),
            max_tokens=max_tokens,
            temperature=options.get("temperature"),
            stream=stream,
            tool_choice=tool_choice,
            parallel_tool_calls=options.get("parallel_tool_calls"),
        )

    @property
    def system(self) -> str:
        """All system messages joined by blank lines."""
        return "\n\n".join(m.content for m in self.messages if isinstance(m, SystemMessage))

    @property
    def last_message(self) -> Message | None:
        return self.messages[-1] if self.messages else None


# ---------------------------------------------------------------------------- response


class LLMResponse(BaseModel):
    """A model's answer.

    ``finish_reason`` is normalised across providers: ``"stop"``, ``"length"``,
    ``"tool_calls"``, ``"content_filter"`` (others are passed through). ``raw`` holds the
    provider's JSON body (or the list of stream events) for debugging; it is left out of
    ``repr`` and of ``model_dump``.
    """

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    raw: Any = Field(default=None, repr=False, exclude=True)

    def to_message(self) -> AssistantMessage:
        """This answer as an :class:`AssistantMessage` for the conversation history."""
        return AssistantMessage(self.content, self.tool_calls)


# ---------------------------------------------------------------------------- streaming


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer's text."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call. ``index`` tells calls apart; ``id`` and ``name`` come
    with the first piece of a call, ``arguments`` is a fragment of its JSON text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class StreamEnd:
    """The last event of every stream: the complete response."""

    response: LLMResponse


StreamEvent: TypeAlias = TextDelta | ToolCallDelta | StreamEnd


async def collect_stream(events: AsyncIterator[StreamEvent]) -> LLMResponse:
    """Drain a stream and return its final response."""
    final: LLMResponse | None = None
    async for event in events:
        if isinstance(event, StreamEnd):
            final = event.response
    if final is None:
        raise LLMResponseError("the stream ended without a final response")
    return final


def __getattr__(name: str) -> Any:
    # LLM and RequestLLM live in .protocol, which imports this module: read lazily.
    if name in ("LLM", "RequestLLM"):
        from . import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@asynccontextmanager
async def closing_stream(stream: AsyncIterator[Any]) -> AsyncIterator[AsyncIterator[Any]]:
    """``stream``, closed (when it can be: an async generator) however reading it ends. A
    reader that stops early must close what it read from, or the generator is left for the
    event loop to finalize (trio warns about each one)."""
    try:
        yield stream
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
