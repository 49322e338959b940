"""Ready-made interceptors: tracing, caching, argument redaction.

Each is a few lines on the runner's interceptor seam (see :class:`~dagagent.runner.ToolInvocation`)
and is given to ``execute(..., interceptors=[...])``; the first interceptor is the outermost.

    spans: list[Span] = []
    result = await dagagent.execute(
        plan, registry,
        interceptors=[tracing(spans.append), redacting(args=["*token*"]), caching()],
    )

Approval rules (:class:`dagagent.approval.Policy`) are interceptors too.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .errors import ConfigError
from .events import debug_enabled, get_logger
from .results import (
    REDACT,
    # what redacting() records; re-exported here,
)
from .text import SECRET_NAMES, jsonable

if TYPE_CHECKING:
    from .runner import CallNext, Interceptor, ToolInvocation

__all__ = [
    "REDACT",
    "SECRET_ARG_NAMES",
    "Redacting",
    "Span",
    "Stamped",
    "cache_key",
    "caching",
    "redacting",
    "tracing",
]


def _name_filter(tools: str | Iterable[str]) -> Callable[[str], bool]:
    pats = [tools] if isinstance(tools, str) else list(tools)
    rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in pats) or "(?!)")
    return lambda name: rx.match(name) is not None


# -- tracing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """One tool call as the tracing interceptor saw it (times: Unix seconds)."""

    run_id: str
    task_id: str
    tool: str
    source: str
    attempt: int
    args: dict[str, Any]
    started_at: float
    duration_s: float
    ok: bool
    error: str | None = None


def tracing(sink: Callable[[Span], None] | None = None) -> Interceptor:
    """Time every call and hand a :class:`Span` to ``sink`` (e.g. ``spans.append``) when it
    ends, failed, denied or cancelled alike. Without a sink, spans are logged at debug level
    (``tool.call``); nothing is built when debug logging is off. ``args`` are the arguments
    the inner layers and the tool saw (after any rewrite)."""
    if sink is None:
        log = get_logger()
        if not debug_enabled(log):

            async def passthrough(call: ToolInvocation, call_next: CallNext) -> Any:
                return await call_next(call)

            return passthrough

        def sink(span: Span) -> None:
            log.debug(
                "tool.call",
                run_id=span.run_id,
                task_id=span.task_id,
                tool=span.tool,
                duration_s=round(span.duration_s, 6),
                ok=span.ok,
                error=span.error,
            )

    emit = sink

    async def trace(call: ToolInvocation, call_next: CallNext) -> Any:
        started, t0 = time.time(), time.perf_counter()
        error: str | None = None
        try:
            return await call_next(call)
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise
        finally:
            emit(
                Span(
                    call.run_id,
                    call.task_id,
                    call.tool.name,
                    call.source,
                    call.attempt,
                    call.args,
                    started,
                    time.perf_counter() - t0,
                    error is None,
                    error,
                )
            )

    return trace


# -- caching --------------------------------------------------------------------------------------


def cache_key(tool: str, args: Any) -> str:
    """The cache key of a call: the tool name and its arguments as canonical JSON."""
    return json.dumps([tool, jsonable(args)], sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True, slots=True)
class Stamped:
    """A cached output with the time it was stored (what ``caching(ttl_s=...)`` keeps)."""

    output: Any
    at: float


def caching(
    cache: MutableMapping[str, Any] | None = None,
    *,
    tools: str | Iterable[str] = "*",
    side_effects: bool = False,
    ttl_s: float | None = None,
    clock: Callable[[], float] | None = None,
) -> Interceptor:
    """Answer a repeated call (same tool, same validated arguments) from ``cache`` instead of
    calling the tool again. Only successful outputs are cached; the cached object itself is
    returned (do not mutate it). ``tools``: globs of the tool names to cache. Tools that
    declared side effects are never cached unless ``side_effects=True``. ``cache``: any
    mutable mapping (default: a new dict; pass a shared one to cache across runs).

    ``ttl_s``: how long an output stays fresh, in seconds; an older one is called for again
    (and replaced). The cache then keeps each output with the time it was stored (a
    :class:`Stamped`), read from ``clock`` (default ``time.time``, comparable across
    processes, so a shared, lasting cache works too; tests give a clock they move). An entry
    stored without a time (by a ``caching()`` without ``ttl_s`` sharing the mapping) is of no
    known age, so it is called for again. A cache hit is not a call of the tool: it does not
    count against the tool's ``max_calls`` nor its ``cooldown_s``."""
    store: MutableMapping[str, Any] = {} if cache is None else cache
    wanted = _name_filter(tools)
    if ttl_s is not None and not ttl_s > 0:
        raise ConfigError(f"caching ttl_s must be a positive number of seconds, not {ttl_s!r}")
    now = clock or time.time

    async def cached(call: ToolInvocation, call_next: CallNext) -> Any:
        tool = call.tool
        if (tool.side_effects and not side_effects) or not wanted(tool.name):
            return await call_next(call)
        key = cache_key(tool.name, call.args)
        if key in store:
            entry = store[key]
            if ttl_s is None:
                return entry.output if type(entry) is Stamped else entry
            if type(entry) is Stamped and now() - entry.at < ttl_s:
                return entry.output
        out = await call_next(call)
        store[key] = out if ttl_s is None else Stamped(out, now())
        return out

    return cached


# -- redaction ------------------------------------------------------------------------------------

SECRET_ARG_NAMES: tuple[str, ...] = SECRET_NAMES
"""Argument-name globs whose values :func:`redacting` hides by default."""


def redacting(
    *,
    args: Iterable[str] = SECRET_ARG_NAMES,
    patterns: Iterable[str | re.Pattern[str]] = (),
    replacement: str = "[redacted]",
    tools: str | Iterable[str] = "*",
) -> Interceptor:
    """Rewrite string arguments before inner layers and the tool see them.

    - ``args``: globs on argument names (case-insensitive), also matched against the keys of
      dicts inside arguments and the fields of models (``config.password``,
      ``headers.Authorization``); every string and every number in such a value (also inside
      lists, dicts and models) becomes ``replacement`` (a tool whose schema wants a number
      there then fails with bad arguments: leave it out with ``tools=``).
    - ``patterns``: regular expressions; every match inside any string argument becomes
      ``replacement`` (e.g. e-mail addresses before text goes to a third-party tool).

    The rewritten arguments are validated again by the runner. Put it before (outside) a
    tracing interceptor or an approval policy to keep secrets out of their records.

    Each rewrite is recorded in the task's ``decisions`` (``decision="redact"``, the names
    of the redacted arguments as ``reason``, the redacted ``args``). The in-memory
    ``TaskResult.args`` still holds the arguments as resolved *before* any interceptor; the
    run store records the redacted ones instead, and such a task is not reused by a replan
    (its real arguments are not on record to compare). The run's plan is stored with the
    arguments it would pass on too, and every decision of a policy outside it with the
    arguments redacted, so a secret it hides never reaches the store. So is the intent of a
    call with side effects, whose fingerprint and idempotency key are those of the arguments
    it would pass on (see :meth:`dagagent.runner.Effects.recorded_args`).

    A task that fails before its call reaches this interceptor (its resolved arguments do not
    fit the tool, or an interceptor before it refused the call) is redacted all the same when
    it is recorded: the runner asks :meth:`Redacting.redact_args` for its arguments and
    :meth:`Redacting.redact_text` for its error message. So are the calls an agent task's
    model wrote into its steps (every call, also one whose arguments did not fit its tool or
    whose tool does not exist), and the errors those calls saw back."""
    return Redacting(args, patterns, replacement, tools)


class Redacting:
    """The interceptor :func:`redacting` makes (see there)."""

    def __init__(
        self,
        args: Iterable[str],
        patterns: Iterable[str | re.Pattern[str]],
        replacement: str,
        tools: str | Iterable[str],
    ) -> None:
        self._names = re.compile(
            "|".join(f"(?:{fnmatch.translate(p.lower())})" for p in args) or "(?!)"
        )
        self._rxs = [p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns]
        self.replacement = replacement
        self._wanted = _name_filter(tools)

    def _secret(self, key: Any) -> bool:
        return isinstance(key, str) and self._names.match(key.lower()) is not None

    def _scrub_all(self, value: Any, hidden: list[str] | None) -> Any:
        """``value`` under a secret name: every string, and every number, in it hidden."""
        if isinstance(value, (str, bytes)):
            if hidden is not None:
                hidden.append(value if isinstance(value, str) else value.decode("utf-8", "replace"))
            return self.replacement
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if hidden is not None:
                hidden.append(str(value))
            return self.replacement  # a PIN or a numeric password is a secret too
        if isinstance(value, BaseModel):
            return self._scrub_model(value, self._scrub_all, hidden)
        if isinstance(value, (list, tuple)):
            return [self._scrub_all(v, hidden) for v in value]
        if isinstance(value, dict):
            return {k: self._scrub_all(v, hidden) for k, v in value.items()}
        return value

    def _scrub_text(self, value: Any, hidden: list[str] | None) -> Any:
        if isinstance(value, str):
            for rx in self._rxs:
                value = rx.sub(self.replacement, value)
            return value
        if isinstance(value, BaseModel):  # its fields are keys like a dict's
            return self._scrub_model(value, self._scrub_text, hidden)
        if isinstance(value, (list, tuple)):
            return [self._scrub_text(v, hidden) for v in value]
        if isinstance(value, dict):
            # nested keys count too: config.password, headers.Authorization
            return {
                k: self._scrub_all(v, hidden) if self._secret(k) else self._scrub_text(v, hidden)
                for k, v in value.items()
            }
        return value

    @staticmethod
    def _scrub_model(
        value: BaseModel, scrub: Callable[[Any, list[str] | None], Any], hidden: list[str] | None
    ) -> Any:
        """A model argument as the dict of its fields, scrubbed (the runner validates it into
        the model again); the model itself when there is nothing in it to hide."""
        data = value.model_dump()
        new = scrub(data, hidden)
        return value if new == data else new

    def _redacted(self, args: MutableMapping[str, Any] | Any, hidden: list[str] | None) -> Any:
        return {
            k: self._scrub_all(v, hidden) if self._secret(k) else self._scrub_text(v, hidden)
            for k, v in args.items()
        }

    def redact_args(self, tool: str, args: Any) -> dict[str, Any] | None:
        """``args`` (of a call of ``tool``) as this interceptor would pass them on, or
        ``None`` if it would leave them as they are."""
        if not self._wanted(tool) or not isinstance(args, dict):
            return None
        new = self._redacted(args, None)
        return None if new == args else new

    def redact_text(self, tool: str, args: Any, text: str) -> str:
        """``text`` (an error message about a call of ``tool`` with ``args``) without the
        values this interceptor hides in ``args``, nor the matches of its patterns."""
        if not self._wanted(tool) or not isinstance(args, dict):
            return text
        hidden: list[str] = []
        self._redacted(args, hidden)
        for secret in sorted(set(hidden), key=len, reverse=True):
            if len(secret) >= 4:  # shorter ones would blank out ordinary words
                text = text.replace(secret, self.replacement)
        for rx in self._rxs:
            text = rx.sub(self.replacement, text)
        return text

    async def __call__(self, call: ToolInvocation, call_next: CallNext) -> Any:
        if self._wanted(call.tool.name):
            new = self._redacted(call.args, None)
            if new != call.args:
                hidden = [k for k, v in new.items() if v != call.args.get(k)]
                call.args = new
                # Recorded with the task (no values, only which arguments): the run store
                # then keeps these redacted arguments, not the secrets (see dagagent.store).
                call.decide(REDACT, "redacting", f"redacted: {', '.join(hidden)}")
        return await call_next(call)
