"""``Joiner``: after a round's tasks are done, answer the goal or ask for another plan.

::

    joiner = Joiner(llm)
    report = await joiner.join(goal, plan, run_result.tasks)
    report.decision.action         # "finish" or "replan"
    report.decision.answer, report.decision.cites, report.decision.feedback

One model call sees the goal, the plan, the outputs of the tasks that succeeded and the
errors of those that did not (shortened as the replanner shows them, but longer: the answer
is made from them) and returns, as structured output (a JSON schema response format),
either ``finish(answer, cites)`` or ``replan(feedback)``. The answer goes through the same
healing loop as a plan (:func:`~dagagent.planners.heal.ask_until_valid`): a reply that
cannot be used is sent back with its problems, up to ``max_attempts`` replies, then
:class:`~dagagent.errors.JoinerError`. With ``must_finish=True`` (the last round) only
``finish`` is accepted.

The decision and its format are in :mod:`._join_decision`, what the model is told in
:mod:`._join_prompts`, and how its answer is read, with the problems fed back, in
:mod:`._join_parsing` (:func:`parse_join_answer`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .. import telemetry
from ..errors import ConfigError, Issue, JoinerError
from ..limits import DEFAULT_ANSWER_CHARS, answer_tokens
from ..llm import LLM, LLMResponse, Message, ModelSettings, SystemMessage, Usage, UserMessage
from ..plan import Plan
from ..results import TaskResult
from ._join_decision import JoinDecision, join_response_format
from ._join_parsing import parse_join_answer
from ._join_prompts import JOIN_SYSTEM_PROMPT, join_feedback_prompt, join_user_prompt
from .conversation import Conversation, in_conversation
from .heal import PlanAttempt, ask_until_valid

__all__ = [
    "JoinDecision",
    "JoinReport",
    "Joiner",
    "join_response_format",
    "parse_join_answer",
]


@dataclass(frozen=True)
class JoinReport:
    """A decision and how it was obtained: every attempt (the last one was accepted)."""

    decision: JoinDecision
    attempts: tuple[PlanAttempt, ...]

    @property
    def usage(self) -> Usage:
        return sum((a.usage for a in self.attempts), Usage())

    @property
    def calls(self) -> int:
        return len(self.attempts)


class Joiner:
    """Reads a round's results with ``llm`` and answers the goal or asks for another plan.

    - ``max_attempts``: replies to try (the first one plus repairs) before
      :class:`~dagagent.errors.JoinerError`.
    - ``output_chars``: how much of each task's output (or error) the model sees.
    - ``answer_chars``: how long an answer may be; the output limit of each call follows
      from it (:func:`dagagent.limits.answer_tokens`) unless ``settings`` sets ``max_tokens``.
    - ``structured=False``: send no response format. A server that refuses it is asked
      again without it, and the joiner sends none from then on (a warning is logged).
    - ``settings``: a :class:`~dagagent.llm.ModelSettings` whose ``max_tokens`` and
      ``temperature`` go with every call.
    - ``system_prompt``: replace the joiner's system prompt.
    """

    def __init__(
        self,
        llm: LLM,
        *,
        max_attempts: int = 3,
        output_chars: int = 2000,
        answer_chars: int = DEFAULT_ANSWER_CHARS,
        structured: bool = True,
        settings: ModelSettings | None = None,
        system_prompt: str | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, not {max_attempts}")
        self.llm = llm
        self.max_attempts = max_attempts
        self.output_chars = output_chars
        self.structured = structured
        self.settings = settings or ModelSettings()
        self.max_tokens = self.settings.max_tokens or answer_tokens(answer_chars)
        self.temperature = self.settings.temperature
        self.system_prompt = system_prompt if system_prompt is not None else JOIN_SYSTEM_PROMPT
        #: The turns before this one, in a session: shown before the round's results.
        self.conversation: Conversation | None = None

    def _without_format(self, warning: Issue) -> None:
        self.structured = False  # the server refused it: the prompt describes the format

    def messages(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        must_finish: bool = False,
    ) -> list[Message]:
        """The conversation the first attempt sends."""
        text = join_user_prompt(
            goal, plan, results, output_chars=self.output_chars, must_finish=must_finish
        )
        return [
            SystemMessage(self.system_prompt),
            UserMessage(in_conversation(self.conversation, text)),
        ]

    async def join(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        must_finish: bool = False,
    ) -> JoinReport:
        """The decision about ``plan`` and its ``results`` (``must_finish``: only ``finish``
        is accepted). Raises :class:`~dagagent.errors.JoinerError` when no reply could be
        used; model errors (``LLMError``) propagate as themselves."""
        goal = (goal or plan.goal).strip()

        def parse(raw: str, response: LLMResponse) -> tuple[JoinDecision | None, list[Issue]]:
            return parse_join_answer(raw, plan, results, response=response, must_finish=must_finish)

        with telemetry.operation("invoke_agent joiner", telemetry.JOINING, role="joiner"):
            decision, attempts = await ask_until_valid(
                self.llm,
                self.messages(goal, plan, results, must_finish=must_finish),
                parse,
                feedback=lambda issues: join_feedback_prompt(issues, must_finish=must_finish),
                max_attempts=self.max_attempts,
                response_format=join_response_format(must_finish=must_finish)
                if self.structured
                else None,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                what="join decision",
                without_format=self._without_format,
            )
        if decision is None:
            n = len(attempts)
            raise JoinerError(
                f"the joiner gave no usable decision after {n} attempt{'s' if n != 1 else ''} "
                f"(goal: {json.dumps(' '.join(goal.split())[:80], ensure_ascii=False)})",
                attempts=[(a.raw, list(a.issues)) for a in attempts],
            )
        return JoinReport(decision, tuple(attempts))
