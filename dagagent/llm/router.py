"""Provider fallback: :class:`FallbackLLM`, a client that sends a call to the next model of
its list when one fails in a way another model may not.

::

    llm = fallback(from_spec("openai:gpt-4o"), from_spec("anthropic:claude-sonnet-4-5"))

**When it falls back.** A model's failure moves the call on to the next model when its
reason is one of ``on`` (default :data:`DEFAULT_ON`):

- ``rate_limit``: HTTP 429 still, after the client's own retries;
- ``server``: 5xx (an outage, "overloaded") after the retries;
- ``connection``: the server could not be reached;
- ``timeout``: it did not answer in time;
- ``context_length``: the prompt is longer than the model's context window
  (:class:`~dagagent.errors.LLMContextLengthError`);

and, only when named in ``on``, ``auth`` (401/403: a key of one provider that is wrong says
nothing of the next) and ``response`` (an answer that breaks the wire format, a stream cut
short). Nothing else falls back: a request the provider rejects for what the caller sent
(:class:`~dagagent.errors.LLMBadRequestError`, an option it does not take) would be rejected
by the next model too, and a cancelled call (a deadline, Ctrl-C, a budget's refusal) is the
caller's decision, not a failure.

**Streams** fall back only until the first event of the answer arrives: once a piece of
the answer has reached the reader, another model's answer cannot be joined to it, and a
failure after that is raised as it is.

**Which model answered.** Each fallback is logged (``llm.fallback`` on the ``dagagent.llm``
logger) and, for a call made through a :class:`~dagagent.llm.MeteredLLM` (the workflows
record every call that way), the call's record names the model that answered (or failed
last) and lists the models given up on, with why, under ``options["fallback"]``. When every
model fails, the last model's error is raised (its class, so ``except LLMRateLimitError``
still works), saying what the earlier ones did.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

import structlog
from typing_extensions import Unpack

from dagagent.errors import (
    ConfigError,
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextLengthError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
)

from .types import LLMResponse, Message, RequestOptions, StreamEvent

if TYPE_CHECKING:
    from .protocol import LLM

__all__ = [
    "DEFAULT_ON",
    "Fallback",
    "FallbackLLM",
    "FallbackReason",
    "fallback",
    "fallback_reason",
    "model_label",
]

FallbackReason: TypeAlias = Literal[
    "rate_limit", "server", "connection", "timeout", "context_length", "auth", "response"
]
"""Why a model's failure may send a call to the next model (see the module docstring)."""

#: The reasons a :class:`FallbackLLM` falls back for unless told otherwise.
DEFAULT_ON: frozenset[FallbackReason] = frozenset(
    {"rate_limit", "server", "connection", "timeout", "context_length"}
)

_ALL_REASONS: frozenset[str] = frozenset(get_args(FallbackReason))

#: Longest text of an error kept in a fallback's note.
_ERROR_CHARS = 500


def fallback_reason(error: BaseException) -> FallbackReason | None:
    """The reason ``error`` is, or ``None`` for an error no other model can help with (a
    bad request, an option the server does not take, anything that is not a model error)."""
    if isinstance(error, LLMContextLengthError):
        return "context_length"
    if isinstance(error, LLMBadRequestError):  # the caller's request: the next refuses it too
        return None
    kinds: tuple[tuple[type[LLMError], FallbackReason], ...] = (
        (LLMRateLimitError, "rate_limit"),
        (LLMServerError, "server"),
        (LLMConnectionError, "connection"),
        (LLMTimeoutError, "timeout"),
        (LLMAuthError, "auth"),
        (LLMResponseError, "response"),
    )
    for kind, reason in kinds:
        if isinstance(error, kind):
            return reason
    return None


def model_label(llm: object) -> str:
    """How a model is named in fallback notes: ``provider:model`` (``openai:gpt-4o``)."""
    model = str(getattr(llm, "model", "") or "")
    provider = str(getattr(llm, "spec_provider", "") or getattr(llm, "provider_name", "") or "")
    if provider and provider != "_OTHER" and model:
        return f"{provider}:{model}"
    return model or type(llm).__name__


@dataclass(frozen=True)
class Fallback:
    """One model a call gave up on: ``model`` (its label, see :func:`model_label`),
    ``reason`` and ``error`` (the error's class and text, bounded)."""

    model: str
    reason: FallbackReason
    error: str

    def as_json(self) -> dict[str, str]:
        return {"model": self.model, "reason": self.reason, "error": self.error}


#: Told when a call moves on: the model given up on, and the model asked next.
FallbackWatch: TypeAlias = Callable[[Fallback, Any], None]


def _log(event: str, **fields: Any) -> None:
    with contextlib.suppress(Exception):  # a broken logging setup never breaks a call
        structlog.get_logger("dagagent.llm").warning(event, **fields)


def _error_text(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    text = f"{type(error).__name__}: {text}"
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 1] + "…"


class FallbackLLM:
    """A model client over ``models``, tried in order (see the module docstring); ``on``
    names the :data:`FallbackReason` values that move a call on (default
    :data:`DEFAULT_ON`). Implements the :class:`~dagagent.llm.LLM` protocol.

    ``model``, ``provider_name``, ``base_url``, ``max_tokens`` and ``temperature`` are the
    first model's. ``async with`` opens (and closes) every model's connection pool."""

    def __init__(self, models: Sequence[LLM], *, on: Iterable[str] | None = None) -> None:
        if len(models) < 2:
            raise ConfigError(
                f"a fallback needs at least two models, got {len(models)}: "
                + ", ".join(model_label(m) for m in models)
            )
        reasons = set(DEFAULT_ON if on is None else on)
        unknown = sorted(reasons - _ALL_REASONS)
        if unknown:
            raise ConfigError(
                f"unknown fallback reason{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}: expected some of "
                f"{', '.join(sorted(_ALL_REASONS))}"
            )
        self.models: tuple[LLM, ...] = tuple(models)
        self.on: frozenset[str] = frozenset(reasons)
        self._stack: AsyncExitStack | None = None

    # -- what it looks like: the first model --------------------------------------------

    @property
    def primary(self) -> LLM:
        return self.models[0]

    @property
    def model(self) -> str:
        return str(getattr(self.primary, "model", "") or "")

    @property
    def provider_name(self) -> str:
        return str(getattr(self.primary, "provider_name", "") or "_OTHER")

    @property
    def base_url(self) -> str | None:
        url = getattr(self.primary, "base_url", None)
        return url if isinstance(url, str) else None

    @property
    def max_tokens(self) -> int | None:
        value = getattr(self.primary, "max_tokens", None)
        return value if isinstance(value, int) else None

    @property
    def temperature(self) -> float | None:
        value = getattr(self.primary, "temperature", None)
        return value if isinstance(value, int | float) else None

    def __repr__(self) -> str:
        names = ", ".join(model_label(m) for m in self.models)
        return f"FallbackLLM([{names}], on={sorted(self.on)})"

    # -- connection pools --------------------------------------------------------------

    async def __aenter__(self) -> FallbackLLM:
        async with AsyncExitStack() as stack:
            for m in self.models:
                if hasattr(m, "__aenter__") and hasattr(m, "__aexit__"):
                    await stack.enter_async_context(m)  # type: ignore[arg-type]
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    # -- deciding ----------------------------------------------------------------------

    def _moves_on(self, error: LLMError, index: int) -> Fallback | None:
        """The note of giving up on model ``index`` for ``error``, or ``None`` when the
        error is to be raised (no reason to move on, or no model left)."""
        reason = fallback_reason(error)
        if reason is None or reason not in self.on or index + 1 >= len(self.models):
            return None
        return Fallback(model_label(self.models[index]), reason, _error_text(error))

    def _moved(self, failure: Fallback, index: int, watch: FallbackWatch | None) -> None:
        nxt = self.models[index + 1]
        _log(
            "llm.fallback",
            model=failure.model,
            reason=failure.reason,
            error=failure.error,
            next_model=model_label(nxt),
        )
        if watch is not None:
            watch(failure, nxt)

    @staticmethod
    def _final(error: LLMError, tried: list[Fallback]) -> LLMError:
        """``error`` (its class and what it carries) saying which models failed before."""
        if not tried:
            return error
        before = "; ".join(f"{f.model}: {f.error}" for f in tried)
        final = type(error)(f"{error} (after falling back from {before})")
        final.__dict__.update(error.__dict__)
        final.__cause__ = error.__cause__
        return final

    # -- the LLM protocol ----------------------------------------------------------------

    async def complete(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> LLMResponse:
        return await self.complete_watched(messages, None, **options)

    def stream(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> AsyncGenerator[StreamEvent, None]:
        return self.stream_watched(messages, None, **options)

    async def complete_watched(
        self,
        messages: Sequence[Message],
        watch: FallbackWatch | None,
        **options: Unpack[RequestOptions],
    ) -> LLMResponse:
        """``complete``, telling ``watch`` of each move to the next model."""
        tried: list[Fallback] = []
        for index, llm in enumerate(self.models):
            try:
                return await llm.complete(messages, **options)
            except LLMError as exc:
                failure = self._moves_on(exc, index)
                if failure is None:
                    raise self._final(exc, tried) from exc.__cause__
                tried.append(failure)
                self._moved(failure, index, watch)
        raise AssertionError("unreachable: the last model's error is raised")  # pragma: no cover

    async def stream_watched(
        self,
        messages: Sequence[Message],
        watch: FallbackWatch | None,
        **options: Unpack[RequestOptions],
    ) -> AsyncGenerator[StreamEvent, None]:
        """``stream``, telling ``watch`` of each move to the next model; a model is given
        up on only before the first event of its answer."""
        tried: list[Fallback] = []
        for index, llm in enumerate(self.models):
            started = False
            try:
                events = llm.stream(messages, **options)
                async with aclosing(events) as inner:  # type: ignore[type-var]
                    async for event in inner:
                        started = True
                        yield event
                return
            except LLMError as exc:
                failure = None if started else self._moves_on(exc, index)
                if failure is None:
                    raise self._final(exc, tried) from exc.__cause__
                tried.append(failure)
            self._moved(failure, index, watch)


def fallback(
    primary: LLM, secondary: LLM, *more: LLM, on: Iterable[str] | None = None
) -> FallbackLLM:
    """A :class:`FallbackLLM` over ``primary``, ``secondary`` and ``more``, in that order;
    ``on`` names the reasons that move a call on (default :data:`DEFAULT_ON`)."""
    return FallbackLLM([primary, secondary, *more], on=on)


if TYPE_CHECKING:

    def _implements_protocol(client: FallbackLLM) -> LLM:
        return client
