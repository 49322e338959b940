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
The run stops with a ``stop_reason`` (see :data:`~dagagent.agent.limits.STOP_REASONS`);
errors of the model client itself (:class:`~dagagent.errors.LLMError`) and cancellation
propagate, leaving :attr:`ReActAgent.state` at the last whole step, ready to resume.

This module is the loop: a turn, its state and when it stops. The two modes differ in what
the model is told (:mod:`._prompts`) and how its reply is read (:mod:`._turns`); making the
calls and telling their outcomes back is :mod:`._calls`, the limits :mod:`.limits`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, get_args

import anyio

from dagagent.errors import AgentError, TaskWaitingError
from dagagent.events import debug_enabled, get_logger
from dagagent.llm import (
    LLM,
    LLMResponse,
    Message,
    ModelSettings,
    SystemMessage,
    UserMessage,
    ask_streamed,
)
from dagagent.text import jsonable, shorten
from dagagent.tools import FIND_TOOLS, Registry, Tool, find_tools_tool, found_names

from ._calls import Call, CallTool, Toolbox, wire_name
from ._prompts import correction, model_options, system_prompt, task_message
from ._turns import read_turn
from .continuing import observations_of, open_calls, reply_of, step_messages
from .limits import AgentLimits
from .state import AgentEvent, AgentResult, AgentState, CallRecord, Mode, Step

__all__ = ["CallTool", "ReActAgent"]


class ReActAgent:
    """A ReAct micro-agent: ``result = await ReActAgent(llm, tools).run(goal)``.

    - ``tools``: a :class:`~dagagent.tools.Registry` or tools (functions are wrapped).
    - ``mode``: ``"tools"`` (native function calling) or ``"text"`` (ReAct text format).
    - ``limits``: limits and stop conditions (:class:`~dagagent.agent.AgentLimits`).
    - ``call_tool``: how a call is made (default: validate, then call in-process, bounded by
      the tool's ``timeout_s``); plan nodes route calls through the run's interceptors.
    - ``instructions``: extra text for the system prompt.
    - ``max_observation_chars``: longer tool results are cut to this many characters.
    - ``settings``: a :class:`~dagagent.llm.ModelSettings` whose ``max_tokens`` (per turn),
      ``temperature``, ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or a tool's
      name) and ``parallel_tool_calls`` (``False``: one call per turn) go with every call.
      Without ``max_tokens``, a turn may write a thought and then an answer or eight calls
      of its longest tool (:func:`dagagent.limits.agent_turn_tokens`).
    - ``catalogue``: a larger registry that ``tools`` are part of. The agent is offered
      ``tools`` and a ``find_tools(query)`` tool that searches the catalogue (BM25 over names,
      descriptions and arguments); the tools it finds are offered from its next turn on, and
      may be called at once (see :mod:`dagagent.tools._discovery`).

    :attr:`state` is the current (or last) run's :class:`~dagagent.agent.AgentState` and
    :attr:`result` its :class:`~dagagent.agent.AgentResult`; an agent runs one goal at a time.
    """

    def __init__(
        self,
        llm: LLM,
        tools: Registry | Iterable[Tool | Callable[..., Any]] = (),
        *,
        mode: Mode = "tools",
        limits: AgentLimits | None = None,
        call_tool: CallTool | None = None,
        instructions: str | None = None,
        max_observation_chars: int = 4000,
        settings: ModelSettings | None = None,
        logger: Any = None,
        catalogue: Registry | None = None,
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
        self.limits = limits if limits is not None else AgentLimits()
        self.max_observation_chars = max_observation_chars
        self._log = logger if logger is not None else get_logger()
        self.state: AgentState | None = None
        self.result: AgentResult | None = None
        self.settings = settings or ModelSettings()
        #: The tools ``find_tools`` searches (a large registry of which ``tools`` is the part
        #: shown first), or ``None``: the agent has ``tools`` and no more.
        self.catalogue = (
            catalogue if catalogue is not None and FIND_TOOLS not in catalogue else None
        )
        callable_tools = self.tools
        if self.catalogue is not None:
            self.tools = self.catalogue.subset(self.tools.names)
            self.tools.add(find_tools_tool(self.catalogue))
            callable_tools = self.catalogue.subset(self.catalogue.names)
            callable_tools.add(self.tools.get(FIND_TOOLS))
        self._tools = Toolbox(
            callable_tools, call_tool=call_tool, max_observation_chars=max_observation_chars
        )
        self._options = model_options(mode, self.tools, self.settings)
        self._offered: dict[frozenset[str], dict[str, Any]] = {}
        self._searched: dict[str, list[str]] = {}  # find_tools' answers, by query
        self.system_prompt = system_prompt(mode, self.tools, instructions)

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
        limits = self.limits
        log = self._log if debug_enabled(self._log) else None
        started = anyio.current_time()
        deadline = started + limits.deadline_s if limits.deadline_s is not None else None
        elapsed_before = st.elapsed_s
        try:
            if pending is not None:  # continue a step whose call waited for a person
                todo = open_calls(pending)
                in_text = self.mode == "text"
                calls = [self._tools.resolve(c.id, c.tool, c.args, None, in_text) for c in todo]
                reply = reply_of(self.mode, pending)
                made = await self._make_calls(st, pending, todo, calls, reply, deadline, log)
                if made is None:
                    yield self._stop(st, "deadline", self._deadline_detail(), log=log)
                    return
                events, waiting = made
                for event in events:
                    yield event
                if waiting is not None:
                    raise waiting
            while True:
                over = self._over_limits(st, deadline)
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
                turn = read_turn(
                    response, mode=self.mode, step=st.step, history=st.messages, tools=self._tools
                )
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
                    if st.format_failures > limits.max_parse_retries:
                        reason = "no_answer" if turn.empty else "parse_error"
                        n = st.format_failures
                        what = "empty replies" if turn.empty else "unusable replies"
                        detail = f"{n} {what} in a row; the last: {turn.problem}"
                        yield self._stop(st, reason, detail, log=log)
                        return
                    if turn.message.content or turn.message.tool_calls:
                        st.messages.append(turn.message)
                    st.messages.append(UserMessage(correction(turn.problem, empty=turn.empty)))
                    continue

                st.format_failures = 0
                step.calls = [CallRecord(id=c.id, tool=c.name, args=c.args) for c in turn.calls]
                st.steps.append(step)
                over = self._over_limits(st, deadline) or self._check_loop(st, turn.calls)
                if over is not None:  # nobody would read the results: do not make the calls
                    yield self._stop(st, *over, log=log)
                    return
                for c in turn.calls:
                    yield self._event(
                        log,
                        AgentEvent("tool_call", st.step, tool=c.name, call_id=c.id, args=c.args),
                    )
                made = await self._make_calls(
                    st, step, step.calls, turn.calls, turn.message, deadline, log
                )
                if made is None:
                    yield self._stop(st, "deadline", self._deadline_detail(), log=log)
                    return
                events, waiting = made
                for event in events:
                    yield event
                if waiting is not None:  # a person decides about a call later: pause here
                    raise waiting
        finally:
            st.elapsed_s = elapsed_before + (anyio.current_time() - started)

    async def _make_calls(
        self,
        st: AgentState,
        step: Step,
        records: list[CallRecord],
        calls: list[Call],
        reply: Message,
        deadline: float | None,
        log: Any,
    ) -> tuple[list[AgentEvent], TaskWaitingError | None] | None:
        """Make ``calls`` (of ``step``, recorded in ``records``); ``None`` if the deadline
        passed first. What each call returned is kept in its record, and once every call of
        the step has returned, the model's ``reply`` and the observations join the
        conversation. Returns the ``tool_result`` events to report, and the first call's
        wait for a person's decision (its record keeps no observation; the step stays out of
        the conversation until it is continued)."""
        waited: dict[int, TaskWaitingError] = {}
        outcome = await self._tools.run(calls, deadline, waited)
        if outcome is None:
            return None
        events = []
        for i, (rec, c, (text, is_error)) in enumerate(zip(records, calls, outcome, strict=True)):
            if i in waited:
                continue
            rec.observation, rec.is_error = text, is_error
            event = AgentEvent(
                "tool_result", st.step, text=text, tool=c.name, call_id=c.id, is_error=is_error
            )
            events.append(self._event(log, event))
        if waited:
            return events, waited[min(waited)]
        st.messages.append(reply)
        st.messages.extend(observations_of(self.mode, step.calls))
        return events, None

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
                st.messages.extend(step_messages(self.mode, s, correction))
            st.usage = st.usage + s.usage
            st.format_failures = st.format_failures + 1 if s.error else 0
            seen: set[str] = set()
            for c in s.calls:  # as _check_loop counted them
                key = self._tools.resolve(c.id, c.tool, c.args, None, text).signature()
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
                UserMessage(task_message(goal, context, self._tools.render)),
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

    # -- stopping ------------------------------------------------------------------------

    def _over_limits(self, st: AgentState, deadline: float | None) -> tuple[str, str] | None:
        b = self.limits
        if b.max_steps is not None and st.step >= b.max_steps:
            return "max_steps", f"used all {b.max_steps} steps without reaching an answer"
        if b.max_tokens is not None and st.usage.total_tokens >= b.max_tokens:
            return "max_tokens", (
                f"used {st.usage.total_tokens} tokens; the limit is {b.max_tokens}"
            )
        if deadline is not None and anyio.current_time() >= deadline:
            return "deadline", self._deadline_detail()
        return None

    def _deadline_detail(self) -> str:
        return f"ran past the deadline of {self.limits.deadline_s:g} s"

    def _check_loop(self, st: AgentState, calls: list[Call]) -> tuple[str, str] | None:
        limit = self.limits.max_repeats
        if limit is None:
            return None
        stuck: Call | None = None
        seen: set[str] = set()
        for c in calls:
            key = c.signature()
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

    def found(self) -> list[str]:
        """The tools ``find_tools`` has found so far (in the order found), beyond those
        offered from the start: the agent may call them, and is offered them from the next
        turn on. Worked out from the steps (the search is deterministic), so an agent
        continued from recorded steps is offered what it had found."""
        if self.catalogue is None or self.state is None:
            return []
        found: dict[str, None] = {}
        for step in self.state.steps:
            for c in step.calls:
                if c.tool not in (FIND_TOOLS, wire_name(FIND_TOOLS)) or c.is_error:
                    continue
                query = c.args.get("query") if isinstance(c.args, dict) else None
                if isinstance(query, str) and query.strip():
                    if query not in self._searched:
                        self._searched[query] = found_names(query, self.catalogue)
                    for name in self._searched[query]:
                        if name not in self.tools:
                            found.setdefault(name, None)
        return list(found)

    def _turn_options(self) -> dict[str, Any]:
        """The keywords of the next call: the tools offered from the start, and (in tools
        mode) the tools found since."""
        found = self.found() if self.mode == "tools" else []
        if not found:
            return self._options
        key = frozenset(found)
        if key not in self._offered:
            assert self.catalogue is not None
            offered = self.catalogue.subset(found)
            tools = Registry([*self.tools, *(t for t in offered if t.name not in self.tools)])
            self._offered = {key: model_options(self.mode, tools, self.settings)}
        return self._offered[key]

    async def _ask(self, messages: list[Message], deadline: float | None) -> LLMResponse | None:
        # Streamed, then collected: whoever watches the model sees each turn being written.
        options = self._turn_options()
        if deadline is None:
            return await ask_streamed(self.llm, messages, **options)
        with anyio.move_on_after(deadline - anyio.current_time()):
            return await ask_streamed(self.llm, messages, **options)
        return None
