"""The ReAct loop: ask the model, run the tools it asks for, show it what happened, repeat.

Two ways to talk to the model:

- ``mode="tools"`` (default) uses native function calling: every tool goes to the model as a
  :class:`~dagagent.llm.ToolSpec`; several calls in one turn run concurrently and their
  results go back as :class:`~dagagent.llm.ToolResultMessage` s matched to the call ids, in
  the order of the calls. A turn with text and no tool call is the final answer.
- ``mode="text"`` uses the classic format (``Thought:`` / ``Action:`` / ``Action Input:`` /
  ``Final Answer:``, stop sequence ``Observation:``), read by :mod:`dagagent.agent.parsing`;
  for models or servers without function calling. One action per turn.

Whatever goes wrong with a call — an unknown tool, arguments that do not validate or are not
JSON, a tool that raises or times out, a call an approval rule denies — becomes an
observation the model can react to (``is_error=True`` in tools mode), never a crash.
The run stops with a ``stop_reason`` (see :data:`~dagagent.agent.budget.STOP_REASONS`);
errors of the model client itself (:class:`~dagagent.errors.LLMError`) and cancellation
propagate, leaving :attr:`ReActAgent.state` at the last whole step, ready to resume.

Over 400 lines for one concern, the loop: the two modes share every step of a turn (the
budget, the calls, the observations, the state a stop or a cancellation leaves), so each
mode's part is a branch of the same turn rather than a module of its own. Parsing the text
format is :mod:`dagagent.agent.parsing`, the budget :mod:`dagagent.agent.budget`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio

from dagagent import telemetry
from dagagent.errors import (
    AgentError,
    TaskDeniedError,
    TaskTimeoutError,
    TaskWaitingError,
    ToolArgumentsError,
    UnknownToolError,
)
from dagagent.events import debug_enabled, get_logger
from dagagent.llm import (
    LLM,
    AssistantMessage,
    LLMResponse,
    Message,
    SystemMessage,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from dagagent.text import jsonable, shorten
from dagagent.tools import Registry, Tool

from .budget import Budget, call_signature
from .continuing import observations_of, open_calls, reply_of, step_messages
from .parsing import ReActFormatError, cut_observation, parse_react
from .state import AgentEvent, AgentResult, AgentState, CallRecord, Mode, Step

__all__ = ["CallTool", "ReActAgent"]

CallTool = Callable[[Tool, dict[str, Any]], Awaitable[Any]]
"""``async (tool, args) -> output``: validates ``args`` and calls ``tool``. Plan nodes pass the
runner's, so that calls go through the run's interceptors (approval rules) and invoker."""

_STOP_SEQUENCES = ("Observation:",)
_WIRE_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")

_TOOLS_PROMPT = """\
You are an agent solving one task. Call the tools when they help; calls that do not depend \
on each other can be made in the same turn. A tool result that starts with "Error" tells you \
what went wrong: fix the call or take another way. When you know the answer, reply with the \
final answer only, without calling a tool."""

_TEXT_PROMPT = """\
You are an agent solving one task step by step, using tools when they help.

Tools:
{tools}

Use exactly this format:

Thought: what you know so far and what to do next
Action: the tool to use, one of [{names}]
Action Input: the tool's arguments as a JSON object, e.g. {example}
Observation: the tool's result (it is written for you: never write it yourself)
... (Thought / Action / Action Input / Observation can repeat)
Thought: I now know the answer
Final Answer: the answer to the task

Write one Action with its Action Input, or a Final Answer, never both in one reply."""

_TEXT_PROMPT_NO_TOOLS = """\
You are an agent solving one task. No tools are available: think, then answer.

Use exactly this format:

Thought: your reasoning
Final Answer: the answer to the task"""

_TEXT_CORRECTION = (
    "Your reply could not be used: {problem}. Reply again in the format: 'Thought: ...' then "
    "either 'Action: <tool name>' and 'Action Input: <JSON object>', or 'Final Answer: ...'."
)
_EMPTY_PROBLEM = "the reply was empty (no text, no tool call)"
_EMPTY_CORRECTION = "Your reply was empty. Call a tool, or reply with the final answer to the task."

# How a cut observation ends: the model is told how much it is not seeing.
_CUT = "… [cut: {rest} more characters]"


@dataclass
class _Call:
    """A tool call the model asked for, resolved against the tools."""

    id: str
    name: str
    args: Any  # as the model wrote them
    tool: Tool | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # set: the call is not made, this is its observation


@dataclass
class _Turn:
    """One model reply, read: an answer, tool calls, or a problem to correct."""

    message: AssistantMessage
    thought: str = ""
    answer: str | None = None
    calls: list[_Call] = field(default_factory=list)
    problem: str | None = None
    empty: bool = False


class ReActAgent:
    """A ReAct micro-agent: ``result = await ReActAgent(llm, tools).run(goal)``.

    - ``tools``: a :class:`~dagagent.tools.Registry` or tools (functions are wrapped).
    - ``mode``: ``"tools"`` (native function calling) or ``"text"`` (ReAct text format).
    - ``budget``: limits and stop conditions (:class:`~dagagent.agent.Budget`).
    - ``call_tool``: how a call is made (default: validate, then call in-process, bounded by
      the tool's ``timeout_s``); plan nodes route calls through the run's interceptors.
    - ``instructions``: extra text for the system prompt.
    - ``max_observation_chars``: longer tool results are cut to this many characters.
    - ``temperature`` / ``max_tokens_per_call``: passed on every model call.

    :attr:`state` is the current (or last) run's :class:`~dagagent.agent.AgentState` and
    :attr:`result` its :class:`~dagagent.agent.AgentResult`; an agent runs one goal at a time.
    """

    def __init__(
        self,
        llm: LLM,
        tools: Registry | Iterable[Tool | Callable[..., Any]] = (),
        *,
        mode: Mode = "tools",
        budget: Budget | None = None,
        call_tool: CallTool | None = None,
        instructions: str | None = None,
        max_observation_chars: int = 4000,
        temperature: float | None = None,
        max_tokens_per_call: int | None = None,
        logger: Any = None,
    ) -> None:
        if llm is None:
            raise AgentError("the agent needs a model: pass llm=... (see dagagent.llm)")
        if mode not in get_args(Mode):
            raise AgentError(f"agent mode must be 'tools' or 'text', not {mode!r}")
        if max_observation_chars < 100:
            raise AgentError("max_observation_chars must be at least 100")
        self.llm = llm
        self.tools = tools if isinstance(tools, Registry) else Registry(tools)
        self.mode: Mode = mode
        self.budget = budget if budget is not None else Budget()
        self.max_observation_chars = max_observation_chars
        self._call_tool = call_tool
        self._log = logger if logger is not None else get_logger()
        self.state: AgentState | None = None
        self.result: AgentResult | None = None

        # Everything that does not change between steps is worked out once, here.
        self._lookup: dict[str, Tool] = {t.name: t for t in self.tools}
        folded: dict[str, list[Tool]] = {}
        for t in self.tools:
            folded.setdefault(t.name.casefold(), []).append(t)
        self._folded = {k: ts[0] for k, ts in folded.items() if len(ts) == 1}
        self._params: dict[str, list[str]] = {
            t.name: list(t.parameters_schema.get("properties", {})) for t in self.tools
        }
        # The parameter a bare Action Input fills: the only one, or the only required one.
        self._bare: dict[str, str] = {}
        for t in self.tools:
            params = self._params[t.name]
            required = [p for p in params if p in t.parameters_schema.get("required", ())]
            if len(params) == 1 or len(required) == 1:
                self._bare[t.name] = params[0] if len(params) == 1 else required[0]
        specs: list[ToolSpec] = []
        for t in self.tools:
            wire = _WIRE_NAME_RE.sub("_", t.name)[:64]
            self._lookup.setdefault(wire, t)
            specs.append(
                ToolSpec(name=wire, description=t.description, parameters=dict(t.parameters_schema))
            )
        self._options: dict[str, Any] = {}
        if temperature is not None:
            self._options["temperature"] = temperature
        if max_tokens_per_call is not None:
            self._options["max_tokens"] = max_tokens_per_call
        if mode == "tools":
            if specs:
                self._options["tools"] = specs
            prompt = _TOOLS_PROMPT
        else:
            self._options["stop"] = list(_STOP_SEQUENCES)
            prompt = self._text_prompt()
        self.system_prompt = f"{prompt}\n\n{instructions.strip()}" if instructions else prompt

    # -- public API ----------------------------------------------------------------------

    async def run(
        self,
        goal: str,
        context: Mapping[str, Any] | None = None,
        *,
        state: AgentState | None = None,
        steps: Sequence[Step] | None = None,
    ) -> AgentResult:
        """Work on ``goal`` until an answer or a stop condition; ``context`` (e.g. outputs of
        earlier tasks) is shown to the model with the goal. With ``state`` (a checkpoint of
        an earlier run of the same goal), continue from its last step. With ``steps`` (the
        recorded steps of an earlier run of the same goal and context, e.g. an agent task
        whose call waited for a person), continue from them: the calls of the last step that
        have no observation yet are made first (see :mod:`dagagent.agent.continuing`).

        A call that waits for a person's decision (:class:`~dagagent.errors.TaskWaitingError`)
        pauses the agent: the other calls of the turn finish, the step is kept with that call
        unanswered, and the error propagates."""
        async with aclosing(self._loop(goal, context, state, steps)) as events:
            async for _ in events:
                pass
        assert self.result is not None
        return self.result

    async def resume(self, state: AgentState) -> AgentResult:
        """Continue a checkpointed run from its last step (an answered one returns at once)."""
        return await self.run(state.goal, state=state)

    def stream(
        self,
        goal: str,
        context: Mapping[str, Any] | None = None,
        *,
        state: AgentState | None = None,
        steps: Sequence[Step] | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run like :meth:`run`, yielding an :class:`~dagagent.agent.AgentEvent` for every
        thought, tool call, tool result, answer and error; :attr:`result` is set once the
        iteration ends. Stopping the iteration early stops the run (close the iterator, e.g.
        with ``contextlib.aclosing``, to do it at once)."""
        return self._loop(goal, context, state, steps)

    # -- the loop ------------------------------------------------------------------------

    async def _loop(
        self,
        goal: str,
        context: Mapping[str, Any] | None,
        saved: AgentState | None,
        recorded: Sequence[Step] | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        pending: Step | None = None
        if recorded:
            st, pending = self._from_steps(goal, context, recorded)
        else:
            st = self._start(goal, context, saved)
        self.state, self.result = st, None
        if st.finished:
            self._stop(st, "answer", None)
            return
        budget = self.budget
        log = self._log if debug_enabled(self._log) else None
        started = anyio.current_time()
        deadline = started + budget.deadline_s if budget.deadline_s is not None else None
        elapsed_before = st.elapsed_s
        try:
            waited: dict[int, TaskWaitingError] = {}
            if pending is not None:  # continue a step whose call waited for a person
                todo = open_calls(pending)
                in_text = self.mode == "text"
                calls = [self._resolve(c.id, c.tool, c.args, None, in_text) for c in todo]
                outcome = await self._run_calls(calls, deadline, waited)
                if outcome is None:
                    yield self._stop(st, "deadline", self._deadline_detail(), log=log)
                    return
                events = self._observed(st, todo, calls, outcome, waited, log)
                if not waited:
                    st.messages.append(reply_of(self.mode, pending))
                    st.messages.extend(observations_of(self.mode, pending.calls))
                for event in events:
                    yield event
                if waited:
                    raise waited[min(waited)]
            while True:
                over = self._over_budget(st, deadline)
                if over is not None:
                    yield self._stop(st, *over, log=log)
                    return
                try:
                    response = await self._ask(st.messages, deadline)
                except Exception as exc:
                    text = f"the model call failed: {type(exc).__name__}: {exc}"
                    yield self._event(log, AgentEvent("error", st.step + 1, text=text))
                    raise
                if response is None:
                    yield self._stop(st, "deadline", self._deadline_detail(), log=log)
                    return
                st.step += 1
                st.usage = st.usage + response.usage
                turn = self._read(response, st)
                step = Step(step=st.step, thought=turn.thought, usage=response.usage)
                if turn.thought:
                    yield self._event(log, AgentEvent("thought", st.step, text=turn.thought))

                if turn.answer is not None:
                    step.answer = st.answer = turn.answer
                    st.format_failures = 0
                    st.messages.append(turn.message)
                    st.steps.append(step)
                    yield self._stop(st, "answer", None, log=log)
                    return

                if turn.problem is not None:
                    st.format_failures += 1
                    step.error = turn.problem
                    st.steps.append(step)
                    yield self._event(log, AgentEvent("error", st.step, text=turn.problem))
                    if st.format_failures > budget.max_parse_retries:
                        reason = "no_answer" if turn.empty else "parse_error"
                        n = st.format_failures
                        what = "empty replies" if turn.empty else "unusable replies"
                        detail = f"{n} {what} in a row; the last: {turn.problem}"
                        yield self._stop(st, reason, detail, log=log)
                        return
                    if turn.message.content or turn.message.tool_calls:
                        st.messages.append(turn.message)
                    st.messages.append(UserMessage(self._correction(turn)))
                    continue

                st.format_failures = 0
                step.calls = [CallRecord(id=c.id, tool=c.name, args=c.args) for c in turn.calls]
                st.steps.append(step)
                over = self._over_budget(st, deadline) or self._check_loop(st, turn.calls)
                if over is not None:  # nobody would read the results: do not make the calls
                    yield self._stop(st, *over, log=log)
                    return
                for c in turn.calls:
                    yield self._event(
                        log,
                        AgentEvent("tool_call", st.step, tool=c.name, call_id=c.id, args=c.args),
                    )
                waited = {}
                outcome = await self._run_calls(turn.calls, deadline, waited)
                if outcome is None:
                    yield self._stop(st, "deadline", self._deadline_detail(), log=log)
                    return
                events = self._observed(st, step.calls, turn.calls, outcome, waited, log)
                if not waited:
                    st.messages.append(turn.message)
                    st.messages.extend(self._observations(turn.calls, outcome))
                for event in events:
                    yield event
                if waited:  # a person decides about a call later: the agent pauses here
                    raise waited[min(waited)]
        finally:
            st.elapsed_s = elapsed_before + (anyio.current_time() - started)

    def _observed(
        self,
        st: AgentState,
        records: list[CallRecord],
        calls: list[_Call],
        outcome: list[tuple[str, bool]],
        waited: Mapping[int, TaskWaitingError],
        log: Any,
    ) -> list[AgentEvent]:
        """Keep what each call returned in its record (a call that waits for a person keeps
        none), and the ``tool_result`` events to report."""
        events = []
        for i, (rec, c, (text, is_error)) in enumerate(zip(records, calls, outcome, strict=True)):
            if i in waited:
                continue
            rec.observation, rec.is_error = text, is_error
            events.append(
                self._event(
                    log,
                    AgentEvent(
                        "tool_result",
                        st.step,
                        text=text,
                        tool=c.name,
                        call_id=c.id,
                        is_error=is_error,
                    ),
                )
            )
        return events

    def _from_steps(
        self, goal: str, context: Mapping[str, Any] | None, recorded: Sequence[Step]
    ) -> tuple[AgentState, Step | None]:
        """A state rebuilt from recorded steps (see :mod:`dagagent.agent.continuing`), and
        the last step if some of its calls have not returned yet."""
        st = self._start(goal, context, None)
        steps = [s.model_copy(deep=True) for s in recorded]
        last = steps[-1]
        pending = last if last.calls and open_calls(last) else None
        text = self.mode == "text"
        for s in steps:
            if s is not pending:
                st.messages.extend(step_messages(self.mode, s, self._correction_text))
            st.usage = st.usage + s.usage
            st.format_failures = st.format_failures + 1 if s.error else 0
            seen: set[str] = set()
            for c in s.calls:  # as _check_loop counted them
                key = self._signature(self._resolve(c.id, c.tool, c.args, None, text))
                if key not in seen:
                    seen.add(key)
                    st.call_counts[key] = st.call_counts.get(key, 0) + 1
        st.steps = steps
        st.step = last.step
        return st, pending

    def _start(
        self, goal: str, context: Mapping[str, Any] | None, saved: AgentState | None
    ) -> AgentState:
        if saved is None:
            messages: list[Message] = [
                SystemMessage(self.system_prompt),
                UserMessage(self._task_message(goal, context)),
            ]
            return AgentState(goal=goal, mode=self.mode, messages=messages)
        if saved.mode != self.mode:
            raise AgentError(
                f"the saved agent state is for {saved.mode!r} mode; this agent runs in "
                f"{self.mode!r} mode"
            )
        if goal != saved.goal:
            raise AgentError(
                f"the saved agent state is for another goal "
                f"({shorten(saved.goal, 80, one_line=False)!r}); "
                "resume it with agent.resume(state)"
            )
        st = saved.model_copy(deep=True)
        if not st.finished:
            st.stop_reason = st.stop_detail = None
        return st

    def _over_budget(self, st: AgentState, deadline: float | None) -> tuple[str, str] | None:
        b = self.budget
        if b.max_steps is not None and st.step >= b.max_steps:
            return "max_steps", f"used all {b.max_steps} steps without reaching an answer"
        if b.max_tokens is not None and st.usage.total_tokens >= b.max_tokens:
            return "max_tokens", (
                f"used {st.usage.total_tokens} tokens; the budget is {b.max_tokens}"
            )
        if deadline is not None and anyio.current_time() >= deadline:
            return "deadline", self._deadline_detail()
        return None

    def _deadline_detail(self) -> str:
        return f"ran past the deadline of {self.budget.deadline_s:g} s"

    def _check_loop(self, st: AgentState, calls: list[_Call]) -> tuple[str, str] | None:
        limit = self.budget.max_repeats
        if limit is None:
            return None
        stuck: _Call | None = None
        seen: set[str] = set()
        for c in calls:
            key = self._signature(c)
            if key in seen:  # the same call twice in one turn is not being stuck
                continue
            seen.add(key)
            n = st.call_counts[key] = st.call_counts.get(key, 0) + 1
            if n >= limit and stuck is None:
                stuck = c
        if stuck is None:
            return None
        args = shorten(json.dumps(jsonable(stuck.args), ensure_ascii=False), 200, one_line=False)
        return "loop", f"stuck: asked for {stuck.name}({args}) {limit} times"

    @staticmethod
    def _signature(c: _Call) -> str:
        """What makes two calls the same: the tool and the arguments it would get, so that
        ``{"a": 1}`` / ``{"a": 1.0}`` / ``{"a": "1"}`` for an int, or a bare ``Paris`` and
        ``{"city": "Paris"}`` in text mode, count as one call."""
        if c.tool is None or c.problem is not None:
            return call_signature(c.name, c.args)
        try:
            return call_signature(c.tool.name, c.tool.validate_args(c.arguments))
        except ToolArgumentsError:
            return call_signature(c.tool.name, c.arguments)

    def _stop(
        self, st: AgentState, reason: str, detail: str | None, *, log: Any = None
    ) -> AgentEvent:
        st.stop_reason, st.stop_detail = reason, detail
        answer = st.answer if reason == "answer" else None
        self.result = AgentResult(
            answer=answer,
            stop_reason=reason,
            detail=detail,
            steps=list(st.steps),
            usage=st.usage,
            state=st,
        )
        if reason == "answer":
            return self._event(log, AgentEvent("answer", st.step, text=answer, stop_reason=reason))
        return self._event(log, AgentEvent("error", st.step, text=detail, stop_reason=reason))

    @staticmethod
    def _event(log: Any, event: AgentEvent) -> AgentEvent:
        if log is not None:
            fields = event.as_dict()
            del fields["kind"]
            log.debug(f"agent.{event.kind}", **fields)
        return event

    # -- the model -----------------------------------------------------------------------

    async def _ask(self, messages: list[Message], deadline: float | None) -> LLMResponse | None:
        if deadline is None:
            return await self.llm.complete(messages, **self._options)
        with anyio.move_on_after(deadline - anyio.current_time()):
            return await self.llm.complete(messages, **self._options)
        return None

    def _read(self, response: LLMResponse, st: AgentState) -> _Turn:
        step = st.step
        if self.mode == "text":
            return self._read_text(response, step)
        message = response.to_message()
        if response.tool_calls:
            calls = []
            # Ids must be unique in the whole conversation, not only in this turn: some
            # servers number the calls of each reply from 0 again.
            seen = {
                tc.id for m in st.messages if isinstance(m, AssistantMessage) for tc in m.tool_calls
            }
            fixed = False
            for i, tc in enumerate(response.tool_calls, 1):
                call_id = tc.id
                if not call_id or call_id in seen:  # the results must match unique ids
                    call_id, n, fixed = f"call_{step}_{i}", 1, True
                    while call_id in seen:
                        n += 1
                        call_id = f"call_{step}_{i}_{n}"
                seen.add(call_id)
                args: Any = tc.raw_arguments if tc.arguments_error else tc.arguments
                call = self._resolve(call_id, tc.name, args, tc.arguments_error, False)
                fixed = fixed or call.args is not args  # too deep to keep: not sent back either
                calls.append(call)
            if fixed:
                message = AssistantMessage(
                    response.content,
                    [
                        tc.model_copy(update={"id": c.id})
                        if c.args is not _TOO_DEEP
                        else tc.model_copy(update={"id": c.id, "arguments": {}})
                        for tc, c in zip(response.tool_calls, calls, strict=True)
                    ],
                )
            return _Turn(message, thought=response.content.strip(), calls=calls)
        text = response.content.strip()
        if not text:
            return _Turn(message, problem=_EMPTY_PROBLEM, empty=True)
        return _Turn(message, answer=text)

    def _read_text(self, response: LLMResponse, step: int) -> _Turn:
        text = cut_observation(response.content).strip()
        message = AssistantMessage(text)
        try:
            reply = parse_react(text)
        except ReActFormatError as exc:
            return _Turn(message, problem=str(exc), empty=not text)
        if reply.final_answer is not None:
            return _Turn(message, thought=reply.thought, answer=reply.final_answer)
        assert reply.action is not None
        call = self._resolve(
            f"step_{step}", reply.action, reply.action_input, reply.input_error, True
        )
        return _Turn(message, thought=reply.thought, calls=[call])

    def _correction(self, turn: _Turn) -> str:
        if turn.empty:
            return _EMPTY_CORRECTION
        return _TEXT_CORRECTION.format(problem=turn.problem)

    @staticmethod
    def _correction_text(problem: str) -> str:
        """What the model was told about a recorded unusable reply."""
        if problem == _EMPTY_PROBLEM:
            return _EMPTY_CORRECTION
        return _TEXT_CORRECTION.format(problem=problem)

    # -- tools ---------------------------------------------------------------------------

    def _resolve(
        self, call_id: str, name: str, args: Any, args_error: str | None, text: bool
    ) -> _Call:
        if _too_deep(args):  # nobody could store, show or send it back
            call = _Call(call_id, name, _TOO_DEEP)
            call.problem = f"the arguments of {name!r} are {_TOO_DEEP}"
            return call
        call = _Call(call_id, name, args)
        tool = self._lookup.get(name)
        if tool is None:
            tool = self._folded.get(name.casefold())  # "Search" for "search", if unambiguous
        if tool is None:
            call.problem = str(UnknownToolError(name, self.tools.names or None))
            if not self.tools.names:
                call.problem += " (no tools are available: answer directly)"
            return call
        call.tool = tool
        if args_error is not None:
            call.problem = f"tool {tool.name!r}: {args_error}"
        elif isinstance(args, dict):
            call.arguments = args
        elif not text:
            call.problem = f"tool {tool.name!r}: arguments must be a JSON object"
        else:
            params = self._params[tool.name]
            if args is None or (not params and args == ""):
                call.arguments = {}
            elif tool.name in self._bare:
                call.arguments = {self._bare[tool.name]: args}
            else:
                wanted = ", ".join(params) if params else "none"
                call.problem = (
                    f"the Action Input of {tool.name!r} must be a JSON object of its arguments "
                    f"(parameters: {wanted})"
                )
        return call

    async def _run_calls(
        self,
        calls: list[_Call],
        deadline: float | None,
        waited: dict[int, TaskWaitingError],
    ) -> list[tuple[str, bool]] | None:
        """Make the calls (concurrently); ``None`` if the deadline passed first. A call that
        waits for a person's decision goes into ``waited`` (by position), its siblings run
        to their end."""
        results: list[tuple[str, bool]] = [("", False)] * len(calls)

        async def one(i: int) -> None:
            try:
                results[i] = await self._call_one(calls[i])
            except TaskWaitingError as exc:
                waited[i] = exc

        remaining = None if deadline is None else deadline - anyio.current_time()
        with anyio.move_on_after(remaining) as scope:
            if len(calls) == 1:
                await one(0)
            else:
                async with anyio.create_task_group() as tg:
                    for i in range(len(calls)):
                        tg.start_soon(one, i)
        if scope.cancelled_caught:
            return None
        return results

    async def _call_one(self, call: _Call) -> tuple[str, bool]:
        if call.problem is not None or call.tool is None:
            return call.problem or f"unknown tool {call.name!r}", True
        tool = call.tool
        try:
            with telemetry.tool_call_id(call.id):  # for the call's span, when tracing
                if self._call_tool is not None:
                    output = await self._call_tool(tool, call.arguments)
                else:
                    output = await _default_call(tool, call.arguments)
        except TaskDeniedError as exc:
            return f"denied: {exc.reason}", True
        except TaskWaitingError:
            raise  # not an observation: the agent pauses until a person decides
        except TaskTimeoutError as exc:  # "timed out after N s"
            return f"tool {tool.name!r} {exc}", True
        except (ToolArgumentsError, UnknownToolError) as exc:
            return str(exc), True
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return f"tool {tool.name!r} failed: {detail}", True
        return self._render(output), False

    def _observations(self, calls: list[_Call], outcome: list[tuple[str, bool]]) -> list[Message]:
        if self.mode == "tools":
            return [
                ToolResultMessage(c.id, text, is_error)
                for c, (text, is_error) in zip(calls, outcome, strict=True)
            ]
        return [
            UserMessage(f"Observation: {'Error: ' if is_error else ''}{text}")
            for text, is_error in outcome
        ]

    # -- text ----------------------------------------------------------------------------

    def _render(self, value: Any) -> str:
        return shorten(value, self.max_observation_chars, one_line=False, ellipsis=_CUT, fit=False)

    def _task_message(self, goal: str, context: Mapping[str, Any] | None) -> str:
        if not context:
            return goal
        lines = [goal, "", "Context (results of earlier steps):"]
        lines += [f"- {key}: {self._render(value)}" for key, value in context.items()]
        return "\n".join(lines)

    def _text_prompt(self) -> str:
        if not len(self.tools):
            return _TEXT_PROMPT_NO_TOOLS
        lines = []
        for t in self.tools:
            props = t.parameters_schema.get("properties", {})
            lines.append(f"- {t.name}: {t.description or '(no description)'}")
            lines.append(f"  arguments: {json.dumps(props, ensure_ascii=False)}")
        first = next(iter(self.tools))
        example = json.dumps({p: "..." for p in self._params[first.name]}) or "{}"
        return _TEXT_PROMPT.format(
            tools="\n".join(lines), names=", ".join(self.tools.names), example=example
        )


async def _default_call(tool: Tool, args: dict[str, Any]) -> Any:
    validated = tool.validate_args(args)
    if tool.timeout_s is None:
        return await tool.acall(validated)
    try:
        with anyio.fail_after(tool.timeout_s):
            return await tool.acall(validated)
    except TimeoutError:
        raise TaskTimeoutError(f"timed out after {tool.timeout_s:g} s") from None


_MAX_ARGS_DEPTH = 64
_TOO_DEEP = f"nested more than {_MAX_ARGS_DEPTH} levels deep"


def _too_deep(value: Any, limit: int = _MAX_ARGS_DEPTH) -> bool:
    """Whether ``value`` nests lists / dicts more than ``limit`` levels (without recursing)."""
    if not isinstance(value, (dict, list)):
        return False
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            v
            for item in level
            for v in (item.values() if isinstance(item, dict) else item)
            if isinstance(v, (dict, list))
        ]
        if not level:
            return False
    return True
