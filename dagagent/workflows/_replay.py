"""The model calls of a resumed solve that completed before its process died, given again
instead of being made again: :class:`RecordedAnswers` and :class:`ReplayingLLM`.

A solve killed after a call of its planner, replanner or joiner completed (and was recorded,
see :mod:`dagagent.workflows._calls`) but before what it decided was (the round's run not
started, the joiner's decision not written) goes through that step again when it resumes.
The step asks its model the same questions in the same order; the k-th call of a role in a
round gets the k-th recorded answer of that role in that round, as long as each one is
faithful:

- it was ``answered`` (whole: not failed, cancelled or cut off);
- its text is all there (a record keeps :data:`~._calls.MAX_TEXT_CHARS` characters) and
  it is plain text (an answer of tool calls is recorded as ``name(arguments)`` lines);
- the solve has no redacting interceptors (they change what the record keeps).

From the first answer that is not (or when the record has no more), the calls are made. An
answer given again is already on record and its usage already counted: it is neither
recorded again nor spent again. A reader that rejects it (an invalid plan) asks again, as it
did the first time, and gets the next recorded answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..llm.observe import set_last_call
from ..llm.types import LLMResponse, StreamEnd, StreamEvent, TextDelta

if TYPE_CHECKING:
    from ..llm import LLM
    from ..results import ModelCall, ModelRole

__all__ = ["RecordedAnswers", "ReplayingLLM"]

_REPLAYED_ROLES = ("planner", "replanner", "joiner")


class RecordedAnswers:
    """The answers of a solve's planner, replanner and joiner on record, by role and round,
    in the order the calls started; empty for a solve that is not resumed."""

    def __init__(self) -> None:
        self._left: dict[tuple[str, int], list[ModelCall]] = {}
        #: How many answers were given again (for the record of the resume).
        self.given = 0

    def load(self, calls: Sequence[ModelCall], *, faithful: bool) -> None:
        """Take the solve's recorded ``calls``; ``faithful``: what the records keep is what
        the model wrote (no redaction)."""
        self._left.clear()
        if not faithful:
            return
        for call in sorted(calls, key=lambda c: c.seq):
            if call.role in _REPLAYED_ROLES and call.round is not None:
                self._left.setdefault((call.role, call.round), []).append(call)

    def take(self, role: ModelRole, round_: int | None) -> str | None:
        """The text of the next recorded answer of ``role`` in round ``round_``, if it can
        stand for a call; ``None``: the call is made (and so are those after it)."""
        if round_ is None:
            return None
        left = self._left.get((role, round_))
        if not left:
            return None
        call = left.pop(0)
        if (
            call.status != "answered"
            or call.text_chars != len(call.text)
            or call.finish_reason == "tool_calls"
        ):
            left.clear()  # from here the record and the calls part ways
            return None
        self.given += 1
        return call.text


class ReplayingLLM:
    """``llm`` (a role's metered client), whose calls take a recorded answer of ``role`` in
    the round ``round_of()`` says when there is one (see the module docstring)."""

    def __init__(
        self,
        llm: LLM,
        answers: RecordedAnswers,
        role: ModelRole,
        round_of: Callable[[], int | None],
    ) -> None:
        self.llm = llm
        self._answers = answers
        self._role = role
        self._round_of = round_of

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)  # the model's name, provider, settings...

    def _recorded(self) -> LLMResponse | None:
        text = self._answers.take(self._role, self._round_of())
        if text is None:
            return None
        set_last_call(None)  # a reader's rejection concerns no call of this process
        return LLMResponse(
            content=text, finish_reason="stop", model=str(getattr(self.llm, "model", ""))
        )

    async def complete(self, messages: Any, **options: Any) -> LLMResponse:
        recorded = self._recorded()
        if recorded is not None:
            return recorded
        return await self.llm.complete(messages, **options)

    def stream(self, messages: Any, **options: Any) -> AsyncIterator[StreamEvent]:
        recorded = self._recorded()
        if recorded is None:
            return self.llm.stream(messages, **options)
        return _as_stream(recorded)


async def _as_stream(response: LLMResponse) -> AsyncIterator[StreamEvent]:
    if response.content:
        yield TextDelta(response.content)
    yield StreamEnd(response)
