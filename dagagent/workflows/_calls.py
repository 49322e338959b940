"""Every model call of a solve, as a record: :class:`SolveCalls`, the observer a solve puts
on each role's client (see :mod:`dagagent.llm.observe` for the seam).

For each call it knows what the model layer does not: the ``round`` (the solve says which
is under way), the ``role`` (each role's client has its own observer), the agent task it
serves (the runner says, see :data:`dagagent.telemetry.AGENT_TASK`) and the run. It

- spends the solve's budget (:class:`~._spending.Spending`): the call's worst case is
  reserved as it starts (a call the budget cannot pay for is refused), and a call that writes
  past its reservation is cut off;
- tells the listeners (:class:`~dagagent.events.ModelCallStarted`, ``ModelCallFinished``,
  ``ModelCallRejected``): the command line shows a call's progress and each rejected attempt;
- keeps the record (:class:`~dagagent.results.ModelCall`): what the model wrote, redacted as
  tool calls are (the values the run's redacting interceptors hide, the matches of their
  patterns) and cut to :data:`MAX_TEXT_CHARS`; priced; and has the store write it
  (:class:`~dagagent.store.ModelCallWriter`, a thread: never the event loop);
- names the call's solve, round, role and task on its ``chat`` span (OpenTelemetry).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import telemetry
from ..errors import BudgetExceededError
from ..events import ModelCallFinished, ModelCallRejected, ModelCallStarted, get_logger
from ..llm import LiveCall, Usage
from ..results import ModelCall, ModelRole
from ..text import shorten
from ._spending import Reservation, Spending

if TYPE_CHECKING:
    from ..runner import Interceptor
    from ..runner._redaction import Redaction
    from ..store import RunStore

__all__ = ["MAX_TEXT_CHARS", "InFlight", "RoleObserver", "SolveCalls", "run_calls"]

#: The most characters of what a model wrote that a record keeps (the rest is cut, and the
#: record says how long it was).
MAX_TEXT_CHARS = 32_000

_LABELS: dict[str, str] = {
    "planner": "the planner's call",
    "replanner": "the replanner's call",
    "joiner": "the joiner's call",
    "agent": "an agent task's call",
    "compress": "the conversation's compression",
}


@dataclass
class InFlight:
    """A call under way, with where it belongs."""

    call: LiveCall
    role: ModelRole
    round: int | None
    run_id: str | None
    task_id: str | None
    seq: int
    reservation: Reservation | None = None

    def describe(self) -> str:
        """``"the planner (round 1) had written 312 characters in 19.8 s"``."""
        who = {"agent": f"agent task {self.task_id}" if self.task_id else "an agent task"}.get(
            self.role, f"the {self.role}"
        )
        where = f" (round {self.round})" if self.round is not None else ""
        return (
            f"{who}{where} had written {self.call.chars:,} characters in "
            f"{self.call.elapsed_s:.1f} s"
        )


class RoleObserver:
    """The observer of one role's client: what it hears goes to :class:`SolveCalls` with the
    role."""

    def __init__(self, calls: SolveCalls, role: ModelRole) -> None:
        self.calls = calls
        self.role = role

    def started(self, call: LiveCall) -> None:
        self.calls.started(call, self.role)

    def wrote(self, call: LiveCall) -> None:
        self.calls.wrote(call)

    def ended(self, call: LiveCall) -> None:
        self.calls.ended(call)

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None:
        self.calls.rejected(call, issues)

    def made_elsewhere(self, records: Sequence[dict[str, Any]]) -> None:
        self.calls.made_elsewhere(records)


class SolveCalls:
    """The model calls of solve ``solve_id`` (see the module docstring). ``emit`` tells the
    listeners; ``store`` (if any) keeps the records; ``interceptors`` are the solve's (their
    redacting ones redact what the model wrote).

    With ``solve_id=None``, the calls of no solve: those the command line's ``plan``,
    ``replan --model`` and ``run`` make (see :func:`run_calls`), each recorded with its run
    (``run_id``) and, for an agent task's, its task; no event is emitted for them."""

    def __init__(
        self,
        solve_id: str | None,
        *,
        spending: Spending,
        emit: Callable[[Any], None],
        store: RunStore | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        from ..runner._redaction import Redaction
        from ..store import ModelCallWriter

        self.solve_id = solve_id
        self.spending = spending
        self.emit = emit
        self.writer = ModelCallWriter(store) if store is not None else None
        self.redaction: Redaction = Redaction(interceptors)
        #: The round under way, and its run (the solve sets them).
        self.round: int | None = None
        self.run_id: str | None = None
        #: The run whose plan the replanner's calls revise (outside a solve: ``replan``).
        self.replan_of: str | None = None
        #: The joiner's next call is its last answer, within the budget's reserve.
        self.final = False
        self.records: list[ModelCall] = []
        self._index: dict[str, int] = {}  # call id -> position in records
        self._flying: dict[str, InFlight] = {}
        #: The calls cancelled while under way (a deadline), as they were when it came.
        self.cancelled: list[InFlight] = []
        self._seq = itertools.count(1)
        self._prior: dict[str, Usage] = {}  # by role: a resumed solve's usage before its calls
        self._log = get_logger(solve_id=solve_id)

    def observer(self, role: ModelRole) -> RoleObserver:
        """The observer for the client of ``role``."""
        return RoleObserver(self, role)

    # -- what the observers hear ---------------------------------------------------------

    def started(self, call: LiveCall, role: ModelRole) -> None:
        task = telemetry.AGENT_TASK.get() if role == "agent" else None
        flying = InFlight(
            call,
            role,
            self.round,
            task[0] if task is not None else self.run_id,
            task[1] if task is not None else None,
            next(self._seq),
        )
        self._flying[call.id] = flying
        flying.reservation = self.spending.reserve(  # may refuse: ended() hears of it
            call, label=_LABELS[role], final=self.final and role == "joiner"
        )
        attributes: dict[str, Any] = {telemetry.ROLE_ATTR: role}
        if self.solve_id is not None:
            attributes[telemetry.SOLVE_ID] = self.solve_id
        if flying.round is not None:
            attributes[telemetry.ROUND] = flying.round
        if flying.task_id is not None:
            attributes[telemetry.TASK_ID] = flying.task_id
        if flying.run_id is not None:
            attributes[telemetry.RUN_ID] = flying.run_id
        telemetry.CALL_ATTRIBUTES.set(attributes)
        if self.solve_id is not None:
            self._tell(ModelCallStarted(self.solve_id, call, role, flying.round, flying.task_id))

    def wrote(self, call: LiveCall) -> None:
        flying = self._flying.get(call.id)
        if flying is None or flying.reservation is None:
            return
        if self.spending.overdrawn(flying.reservation, call):
            raise BudgetExceededError(
                f"{_LABELS[flying.role]} was cut off: it wrote past the "
                f"{flying.reservation.output:,} tokens the budget held for its answer",
                what="tokens",
            )

    def ended(self, call: LiveCall) -> None:
        flying = self._flying.pop(call.id, None)
        if flying is None:  # pragma: no cover - every call that ends was started
            return
        telemetry.CALL_ATTRIBUTES.set(None)
        usage = call.usage
        # A refused call used nothing: it cost nothing when the model has a price (and, as
        # any call of a model without one, has no cost otherwise).
        cost = self.spending.prices.cost(
            call.model, call.provider, usage.input_tokens, usage.output_tokens
        )
        if flying.reservation is not None:
            self.spending.settle(flying.reservation, usage, cost)
        if call.outcome == "cancelled":
            self.cancelled.append(flying)
        record = self._record(flying, usage, cost)
        self._index[call.id] = len(self.records)
        self.records.append(record)
        if self.writer is not None:
            self.writer.put(record)
        if self.solve_id is not None:
            self._tell(ModelCallFinished(self.solve_id, record))

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None:
        at = self._index.get(call.id)
        if at is None:  # not ended yet: ended() takes call.issues
            return
        record = self.records[at].model_copy(update={"issues": list(issues)})
        self.records[at] = record
        if self.writer is not None:
            self.writer.put(record)
        if self.solve_id is not None:
            self._tell(ModelCallRejected(self.solve_id, record))

    def made_elsewhere(self, records: Sequence[dict[str, Any]]) -> None:
        """Calls made on a worker (a run's agent tasks on Temporal), as the JSON of their
        records, which name their run and task: numbered on from these calls, priced at
        these prices, spent, kept and written as a call made here is."""
        for doc in sorted(records, key=lambda d: (d.get("started_at") or 0, d.get("seq") or 0)):
            record = ModelCall.model_validate(doc)
            if record.call_id in self._index:  # heard of already
                continue
            cost = self.spending.prices.cost(
                record.model, record.provider, record.input_tokens, record.output_tokens
            )
            record = record.model_copy(
                update={"seq": next(self._seq), "cost_usd": cost, "solve_id": self.solve_id}
            )
            self.spending.spend(record.usage, cost)
            self._index[record.call_id] = len(self.records)
            self.records.append(record)
            if self.writer is not None:
                self.writer.put(record)

    def seed(self, calls: Sequence[ModelCall], usage: dict[str, Usage] | None = None) -> None:
        """The calls of the solve before a pause (its record's), counted on; ``usage`` by
        role (``planner``, ``agents``, ``joiner``) for a solve recorded before its calls
        were."""
        for record in calls:
            self._index[record.call_id] = len(self.records)
            self.records.append(record)
            self.spending.spend(record.usage, record.cost_usd)
        if calls:
            self._seq = itertools.count(max(c.seq for c in calls) + 1)
        elif usage:
            self._prior = {
                {"agents": "agent"}.get(role, role): u for role, u in usage.items() if u is not None
            }

    # -- what the solve asks ---------------------------------------------------------------

    def running(self) -> list[InFlight]:
        """The calls under way, oldest first."""
        return sorted(self._flying.values(), key=lambda f: f.seq)

    def usage(self, *roles: ModelRole, round: int | None = None) -> Usage:
        """What the recorded calls of ``roles`` (every role when none is named) used, in
        ``round`` (every round when ``None``)."""
        prior = [
            u for role, u in self._prior.items() if (not roles or role in roles) and round is None
        ]
        return sum(
            (
                r.usage
                for r in self.records
                if (not roles or r.role in roles) and (round is None or r.round == round)
            ),
            sum(prior, Usage()),
        )

    def cut_off(self, why: str) -> list[ModelCall]:
        """The records the calls under way would have if they were cut off now, ``why``
        saying how (their process is about to be lost, say): what each had written, its
        tokens as far as they are known (the prompt, estimated; what it had written, or, when
        it had written nothing yet, the answer its reservation held), priced. Nothing is
        spent nor recorded here: whoever learns the calls were lost does that."""
        records = []
        for flying in self.running():
            call = flying.call
            reservation = flying.reservation
            output = call.output_tokens_so_far
            counted = f"~{output:,} tokens it had written" if output else "nothing written"
            if not output and reservation is not None and reservation.output:
                output = reservation.output
                counted = f"the {output:,} output tokens the budget held for it"
            cost = self.spending.prices.cost(call.model, call.provider, call.prompt_tokens, output)
            text = self._redacted(call, flying.role)
            records.append(
                ModelCall(
                    call_id=call.id,
                    solve_id=self.solve_id,
                    round=flying.round,
                    run_id=flying.run_id,
                    role=flying.role,
                    task_id=flying.task_id,
                    seq=flying.seq,
                    model=call.model,
                    provider=call.provider,
                    server=call.server,
                    options=call.options,
                    status="cut",
                    error=f"{why}; counted: its prompt (~{call.prompt_tokens:,} tokens) and "
                    f"{counted}",
                    started_at=call.started_at,
                    first_token_s=call.first_token_s,
                    duration_s=call.elapsed_s,
                    input_tokens=call.prompt_tokens,
                    output_tokens=output,
                    estimated=True,
                    cost_usd=cost,
                    text=text[:MAX_TEXT_CHARS],
                    text_chars=len(text),
                    replan_of=self.replan_of if flying.role == "replanner" else None,
                )
            )
        return records

    def of_round(self, round: int) -> list[ModelCall]:
        return [r for r in self.records if r.round == round]

    def close(self) -> str | None:
        """Write every record given to the store; what could not be written, if anything."""
        writer = self.writer
        if writer is None:
            return None
        writer.close()
        if writer.lost:
            return (
                f"{writer.lost} model call record{'s' if writer.lost != 1 else ''} ({writer.error})"
            )
        return None

    # -- the record ------------------------------------------------------------------------

    def _record(self, flying: InFlight, usage: Usage, cost: float | None) -> ModelCall:
        call = flying.call
        text = self._redacted(call, flying.role)
        response = call.response
        error = call.error
        return ModelCall(
            call_id=call.id,
            solve_id=self.solve_id,
            round=flying.round,
            run_id=flying.run_id,
            role=flying.role,
            task_id=flying.task_id,
            seq=flying.seq,
            model=call.model,
            provider=call.provider,
            server=call.server,
            response_model=response.model if response is not None else "",
            options=call.options,
            status=call.outcome,
            error=_error_text(error) if error is not None else None,
            started_at=call.started_at,
            first_token_s=call.first_token_s,
            duration_s=call.duration_s,
            finish_reason=call.finish_reason,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            estimated=call.estimated and call.outcome != "refused",
            cost_usd=cost,
            text=text[:MAX_TEXT_CHARS],
            text_chars=len(text),
            issues=list(call.issues),
            replan_of=self.replan_of if flying.role == "replanner" else None,
        )

    def _redacted(self, call: LiveCall, role: ModelRole) -> str:
        text = call.text
        redaction = self.redaction
        if not redaction or not text:
            return text
        if call.response is not None:
            for tc in call.response.tool_calls:
                text = redaction.text(tc.name, tc.arguments, text)
        if role in ("planner", "replanner"):
            for tool, args in _plan_calls(text):
                text = redaction.text(tool, args, text)
        return redaction.text("", {}, text)  # the patterns of the redacting interceptors

    def _tell(self, event: Any) -> None:
        try:
            self.emit(event)
        except Exception as exc:  # a broken listener must not break a model call
            self._log.warning("listener.failed", error=repr(exc), event_kind=event.kind)


def run_calls(
    store: RunStore,
    run_id: str,
    *,
    prices: Any = None,
    interceptors: Sequence[Interceptor] = (),
    replan_of: str | None = None,
) -> SolveCalls:
    """The recorder of the model calls made for run ``run_id`` outside a solve (a plan made
    for it, a revision that became it, its agent tasks' calls), priced with ``prices`` (a
    :class:`~dagagent.Prices`; default: the built-in table), written to ``store``. The run
    need not exist yet, nor ever: the calls of a plan that was not run keep the id it would
    have had, and a revision's replanner calls name the run it revised (``replan_of``). Wrap
    each role's client in a :class:`~dagagent.llm.MeteredLLM` with ``.observer(role)``;
    :meth:`SolveCalls.close` once the calls are over."""
    from ..budget import Prices

    calls = SolveCalls(
        None,
        spending=Spending(None, prices if prices is not None else Prices()),
        emit=_ignore,
        store=store,
        interceptors=interceptors,
    )
    calls.run_id = run_id
    calls.replan_of = replan_of
    return calls


def _ignore(event: Any) -> None:
    pass


def _error_text(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, BudgetExceededError):  # the budget's own words say it all
        return shorten(text, 2000)
    return shorten(f"{type(error).__name__}: {text}", 2000)


def _plan_calls(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(tool, args)`` of each task of the JSON plan in ``text``, as far as it reads."""
    from ..planners import extract_json

    try:
        value, _ = extract_json(text)
    except (ValueError, RecursionError):
        return []
    tasks = value.get("tasks") if isinstance(value, dict) else value
    out = []
    for task in tasks if isinstance(tasks, list) else ():
        if isinstance(task, dict) and isinstance(task.get("args"), dict):
            out.append((str(task.get("tool", "")), task["args"]))
    return out
