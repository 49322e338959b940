"""Calls with side effects, exactly once: the intent of each call of a tool declared
``side_effects=True`` is committed before it starts and its outcome after it ends; a resumed
run finds each call by its identity and never makes one again that took effect, or may have.

For each such call (:meth:`Effects.identify`), a :class:`~dagagent.tools.CallIdentity`: run,
task, map element, tool, the fingerprint of its arguments, the occurrence of that call in
its task (an agent may make the same call twice), and the idempotency key derived from them,
which the tool reads with :func:`dagagent.current_call` and passes on. Retries, and resumes
in other processes, make the same call with the same key.

Before the call (:meth:`Effects.before`), what is on record about it decides:

- an outcome ``succeeded`` (this run's earlier attempt, or a process that died after it): its
  output stands and the call is not made (a ``replayed`` decision says so in the task's
  record; ``happened`` when a reconciler or a person said so);
- no outcome (in doubt: its process died, or the run was stopped, during it): a person's
  decision about it (``dagagent approve``), else the tool's reconciler, else the run's
  ``in_doubt`` policy: ``ask`` (the default: the task waits for a person, as for an approval,
  with :class:`~dagagent.errors.CallInDoubtError`), ``retry`` (it is made again, with the same
  key: for tools whose service drops a key it has seen), or ``deny`` (it is not made; the
  task is denied). It never runs again silently;
- nothing, or ``failed``: the call is made.

Around the call (:meth:`Effects.invoke`): the intent, committed to the store's side-effect
journal (one synchronous commit, shared by calls that come at once); the call, with the
identity as the current call; the outcome, committed. A call whose intent cannot be recorded
is not made (its task fails, saying why). Calls of tools without side effects go none of
this way: they cost what they always did.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio
from pydantic_core import to_json

from ..errors import (
    IN_DOUBT_RULE,
    CallInDoubtError,
    MCPServerLostError,
    StoreError,
    TaskDeniedError,
    WorkerLostError,
)
from ..results import (
    WAIT,
    ApprovalAnswer,
    CallDecision,
    Decision,
    DecisionSource,
    InDoubtPolicy,
)
from ..text import jsonable, shorten
from ..tools import CallIdentity, Reconciled, args_fingerprint, idempotency_key
from ..tools._effects import reset_call, using_call

if TYPE_CHECKING:
    from ..store import EffectRecord
    from ..store._effects import EffectJournal
    from ..tools import Tool
    from ._redaction import Redaction

__all__ = ["Effects", "TookEffect"]

_IN_DOUBT_STATES = ("started", "cancelled")


class _Known:
    """What this run knows of a call: its state, output and how a doubt was resolved (and
    when, if before this run)."""

    __slots__ = ("lost", "output", "reason", "resolution", "resolved_at", "resolved_by", "state")

    def __init__(
        self,
        state: str,
        output: Any = None,
        resolution: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        at: float | None = None,
    ) -> None:
        self.state = state
        self.output = output
        self.resolution = resolution
        self.resolved_by = by
        self.reason = reason
        self.resolved_at = at
        #: Cut off with a worker that was lost (see :meth:`Effects.lost_during`).
        self.lost = False


class TookEffect:
    """The call of a tool task (or of one element of a map task) that took effect, as the
    record knows it: its ``output``, the ``args`` (validated) and ``attempt`` it was made
    with, their ``fingerprint``, and the decision that says why the task has that output
    without the call being made (see :meth:`Effects.took_effect`)."""

    __slots__ = ("_fingerprint_of", "args", "attempt", "decision", "fingerprint", "output")

    def __init__(
        self,
        output: Any,
        args: Any,
        attempt: int,
        fingerprint: str,
        decision: CallDecision,
        fingerprint_of: Callable[[str, Any], str] = args_fingerprint,
    ) -> None:
        self.output = output
        self.args = args
        self.attempt = attempt
        self.fingerprint = fingerprint
        self.decision = decision
        self._fingerprint_of = fingerprint_of

    def args_of(self, tool: Tool, resolve: Callable[[], Any]) -> Any:
        """The arguments a task's record keeps for this call: its arguments as the plan
        resolves them now (``resolve()``), as they are recorded when the task runs (a
        revision's reuse compares them), when they make this very call; else the call's
        own (validated) arguments."""
        try:
            args = resolve()
            if self._fingerprint_of(tool.name, tool.validate_args(args)) == self.fingerprint:
                return args
        except Exception:  # not resolvable now (an upstream output is not there): the call's
            pass
        return self.args


class _Call:
    """Who made a call and with what (for :meth:`Effects.took_effect`)."""

    __slots__ = ("args", "attempt", "fingerprint", "key", "tool")

    def __init__(self, key: str, tool: str, args: Any, attempt: int, fingerprint: str) -> None:
        self.key = key
        self.tool = tool
        self.args = args
        self.attempt = attempt
        self.fingerprint = fingerprint


def _slot(r: EffectRecord) -> tuple[str, int | None, str, str, int]:
    """Who made a call on record and what it was (its key aside)."""
    return (r.task_id, r.element, r.source, r.fingerprint, r.occurrence)


def _slot_of(call: CallIdentity) -> tuple[str, int | None, str, str, int]:
    return (call.task_id, call.element, call.source, call.fingerprint, call.occurrence)


def _json(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return to_json(value, fallback=str).decode()
    except Exception:  # not JSON at all: its text, as the task's row would keep it
        return to_json(str(value)).decode()


class Effects:
    """The side effects of one run (see the module docstring). ``journal``: the store's,
    or ``None`` for a run without a store (keys and the current call still work); ``prior``:
    what the store holds about the run's calls (a resumed run), by idempotency key;
    ``redaction``: the run's redacting interceptors (see :meth:`recorded_args`)."""

    def __init__(
        self,
        run_id: str,
        journal: EffectJournal | None = None,
        prior: Sequence[EffectRecord] = (),
        *,
        in_doubt: InDoubtPolicy = "ask",
        revised: Sequence[EffectRecord] = (),
        redaction: Redaction | None = None,
    ) -> None:
        self.run_id = run_id
        self.journal = journal
        self.in_doubt = in_doubt
        self._redaction = redaction if redaction else None
        self._known: dict[str, _Known] = {
            r.key: _Known(r.state, r.output, r.resolution, r.resolved_by, r.reason, r.resolved_at)
            for r in prior
        }
        self._prior = tuple(prior)
        #: What the runs this one revises have on record about their calls (``revised``):
        #: a run whose calls are made elsewhere (on Temporal workers) sends them there.
        self.revised = tuple(revised)
        #: The calls of tool tasks (and of the elements of map tasks), by task and element:
        #: the last one started of each (a tool task makes one call per attempt, all with
        #: the same key unless its arguments changed).
        self._plan_calls: dict[tuple[str, int | None], _Call] = {
            (r.task_id, r.element): _Call(r.key, r.tool, r.args, r.attempt, r.fingerprint)
            for r in prior  # in the order they started: the last one stays
            if r.source == "plan"
        }
        #: The map tasks with calls of their elements on record or made.
        self._mapped: set[str] = {r.task_id for r in prior if r.element is not None}
        #: Calls of tool tasks that took effect before this run (a record of that survived
        #: when the task's did not), by task and element: the last of each.
        self._plan_effects: dict[tuple[str, int | None], _Call] = {
            (r.task_id, r.element): _Call(r.key, r.tool, r.args, r.attempt, r.fingerprint)
            for r in prior
            if r.source == "plan" and r.state == "succeeded"
        }
        #: Calls in doubt in the runs this one revises that a person resolved after their
        #: run ended (:meth:`~dagagent.store.RunStore.resolve_in_doubt`): found not to have
        #: happened (the same call here is made with the key it had: if it did take effect,
        #: the service sees the key again) or not to be made (its task here is denied).
        self._settled: dict[tuple[str, int | None, str, str, int], EffectRecord] = {
            _slot(r): r
            for r in revised
            if r.state in _IN_DOUBT_STATES and r.resolution in ("not_happened", "denied")
        }
        again = {r.key: r for r in self._settled.values() if r.resolution == "not_happened"}
        #: Calls that took effect in the runs this one revises (its parent, the parent's
        #: parent, ...), by who made them and what they were: the same call here is taken
        #: over, never made again under a new key (whether their task records hold it or
        #: not). Also a call found not to have happened that another revision made since
        #: under the key it had (a sibling of this run).
        self._revised: dict[tuple[str, int | None, str, str, int], EffectRecord] = {}
        #: Calls found not to have happened that another run is making under the key they
        #: had, or may have made (it has no outcome): in doubt here too.
        self._held: dict[tuple[str, int | None, str, str, int], EffectRecord] = {}
        for r in revised:
            inherited = again.get(r.key)
            if inherited is not None and r is not inherited:  # another run's call, same key
                slot = _slot(inherited)
                if r.state == "succeeded":
                    self._revised[slot] = r
                    self._held.pop(slot, None)
                elif (
                    r.state in _IN_DOUBT_STATES
                    and r.resolution is None
                    and slot not in self._revised
                ):
                    self._held[slot] = r
            elif r.state == "succeeded":
                self._revised.setdefault(_slot(r), r)
        #: The keys this run makes calls under that it inherited (see ``_settled``): other
        #: runs may hold them too, so their intents are written only where none does.
        self._inherited: set[str] = set()
        #: Whether anything on record may decide about a call (then the runner keeps the
        #: decisions of every task, interceptors or not).
        self.has_prior = bool(self._known) or bool(self._revised) or bool(self._settled)
        self._occurrences: dict[tuple[str, int | None, int, str], int] = {}
        #: Calls on record with their arguments unredacted (see :meth:`_as_recorded`):
        #: their rows get the redacted ones before anything is decided about them.
        self._unredacted: set[str] = set()
        #: Tasks whose worker was lost during them (a Temporal activity run again), with why
        #: in words when the workflow said it (which worker, how it was noticed).
        self._lost: dict[str, str | None] = {}
        #: The calls in doubt this run left for a person (:class:`CallInDoubtError`), as
        #: their records hold them: a run whose calls are made elsewhere (on a Temporal
        #: worker, without the store) hands them to the process that records the run.
        self.asked: list[dict[str, Any]] = []
        #: Whether a call in doubt that nobody decided about goes to its tool's reconciler
        #: (``False``: straight to the ``in_doubt`` policy; the calls a Temporal workflow
        #: left when it ended under its driver are named for the record, never made).
        self.reconciling = True

    def lost_during(self, task_id: str, why: str | None = None) -> None:
        """The worker that ran task ``task_id`` was lost during it (a Temporal activity run
        again): its calls with nothing on record here were cut off, and are in doubt.
        ``why``: how they were cut off, in words (which worker, how it was noticed), as the
        task's record and a person asked about them read it."""
        self._lost[task_id] = why
        self.has_prior = True

    def recorded_args(self, tool: str, args: Mapping[str, Any]) -> Any:
        """``args`` of a call of ``tool`` as the record keeps them: as JSON values, with what
        the run's redacting interceptors hide hidden (as they pass them on to the tool). Its
        intent's row, its fingerprint (and so its key), and the questions about it hold these,
        never a secret; what compares calls with their records compares these."""
        if self._redaction is None:
            return jsonable(args)
        return jsonable(self._redaction.args(tool, dict(args)))

    def fingerprint(self, tool: str, args: Mapping[str, Any]) -> str:
        """The fingerprint of a call of ``tool`` with (validated) ``args``: that of its
        :meth:`recorded_args`. The fingerprint of a secret would give it away (a PIN is
        found by trying them all), and a resume resolves a tool task's arguments from the
        stored plan, where what a redaction hides is hidden already: it finds its calls by
        these fingerprints."""
        if self._redaction is None:
            return args_fingerprint(tool, args)
        return args_fingerprint(tool, self.recorded_args(tool, args))

    def identify(
        self,
        task_id: str,
        element: int | None,
        tool: Tool,
        args: Mapping[str, Any],
        attempt: int,
        source: DecisionSource,
    ) -> CallIdentity:
        """The identity of a call about to be made (each call of the same tool with the same
        arguments within one attempt of a task is the next occurrence). ``args`` (the
        identity's, which a reconciler and the tool's :func:`~dagagent.current_call` see)
        stay as they are; its fingerprint and key are those of its :meth:`recorded_args`."""
        fingerprint = recorded = self.fingerprint(tool.name, args)
        if self._redaction is not None and self._known:
            fingerprint = self._as_recorded(task_id, element, tool.name, args, recorded)
        if source == "plan":
            occurrence = 1  # a tool task makes one call per attempt
        else:
            slot = (task_id, element, attempt, fingerprint)
            occurrence = self._occurrences.get(slot, 0) + 1
            self._occurrences[slot] = occurrence
        key = idempotency_key(self.run_id, task_id, element, fingerprint, occurrence)
        settled = self._settled.get((task_id, element, source, fingerprint, occurrence))
        if settled is not None and settled.resolution == "not_happened":
            key = settled.key  # the one it had: made again under the key it was made with
            self._inherited.add(key)
        if fingerprint != recorded and key in self._known:
            self._unredacted.add(key)
        return CallIdentity(
            run_id=self.run_id,
            task_id=task_id,
            element=element,
            tool=tool.name,
            fingerprint=fingerprint,
            occurrence=occurrence,
            idempotency_key=key,
            args=dict(args),
            attempt=attempt,
            source=source,
        )

    def _as_recorded(
        self, task_id: str, element: int | None, tool: str, args: Mapping[str, Any], fp: str
    ) -> str:
        """``fp``, or the fingerprint of the unredacted ``args`` when only that one is on
        record for this task (a run started without the redacting interceptors, resumed with
        them): a call on record is found whichever way it was recorded."""
        if idempotency_key(self.run_id, task_id, element, fp, 1) in self._known:
            return fp
        plain = args_fingerprint(tool, args)
        if idempotency_key(self.run_id, task_id, element, plain, 1) in self._known:
            return plain
        return fp

    def took_effect(self, task_id: str, element: int | None = None) -> TookEffect | None:
        """The call of tool task ``task_id`` (its element ``element``, for a map task) that
        took effect, if the record knows one: committed with its output (in this run or
        before a crash), or found to have happened by a reconciler or a person. A task that
        the run ends without running (stopped by a failure elsewhere first) or that is
        cancelled after its call took effect ends with that output, never as if nothing
        happened. ``None``: no call of the task is known to have taken effect."""
        slot = (task_id, element)
        call = self._plan_calls.get(slot)
        known = self._known.get(call.key) if call is not None else None
        if call is None or known is None or known.state != "succeeded":
            call = self._plan_effects.get(slot)  # an earlier call (other arguments) did
            known = self._known.get(call.key) if call is not None else None
            if call is None or known is None or known.state != "succeeded":
                return None
        if known.resolution == "happened":
            who = known.resolved_by or "record"
            decision: Decision = "happened"
            why = known.reason or f"it took effect before the run stopped, said {who}"
        else:
            who, decision = "record", "replayed"
            why = "its outcome was on record: the call was not made again"
        note = CallDecision(
            tool=call.tool,
            decision=decision,
            decided_by=who,
            reason=why,
            args=call.args,
            at=time.time(),
            source="plan",
        )
        return TookEffect(
            known.output, call.args, call.attempt, call.fingerprint, note, self.fingerprint
        )

    def in_doubt_of(self, task_id: str) -> list[EffectRecord]:
        """The calls of tool task ``task_id`` (and of its elements, for a map task) on record
        whose outcome was unknown when the run stopped: in doubt still, or resolved since
        (``resolution``: a person's, a reconciler's or a policy's finding)."""
        return [
            r
            for r in self._prior
            if r.task_id == task_id
            and r.source == "plan"
            and (r.state in _IN_DOUBT_STATES or r.resolution is not None)
        ]

    def has_element_calls(self, task_id: str) -> bool:
        """Whether elements of map task ``task_id`` made calls with side effects (on record,
        or in this run)."""
        return task_id in self._mapped

    def _made(self, call: CallIdentity) -> None:
        """Remember who makes ``call`` (a tool task's own)."""
        if call.source == "plan":
            if call.element is not None:
                self._mapped.add(call.task_id)
            slot = (call.task_id, call.element)
            self._plan_calls[slot] = _Call(
                call.idempotency_key,
                call.tool,
                self.recorded_args(call.tool, call.args),
                call.attempt,
                call.fingerprint,
            )

    # -- before the call ------------------------------------------------------------------

    async def before(
        self,
        call: CallIdentity,
        tool: Tool,
        decisions: list[CallDecision] | None,
        answers: Sequence[ApprovalAnswer],
    ) -> tuple[bool, Any]:
        """What the record says about ``call`` before it is made: ``(True, output)`` when it
        took effect already (it is not made again), ``(False, None)`` when it is to be made.
        Raises :class:`~dagagent.errors.CallInDoubtError` (the task waits for a person) or
        :class:`~dagagent.errors.TaskDeniedError` for a call in doubt that is not made."""
        self._made(call)
        if call.idempotency_key in self._unredacted:
            self._unredacted.discard(call.idempotency_key)
            if self.journal is not None:  # a question about it is matched by these
                await self.journal.redact(
                    self.run_id,
                    call.idempotency_key,
                    _json(self.recorded_args(call.tool, call.args)),
                )
        known = self._known.get(call.idempotency_key)
        if known is None and self._revised:
            before = self._revised.get(_slot_of(call))
            if before is not None:
                return True, await self._take_over(call, before, decisions)
        settled = None
        if known is None and self._settled:
            settled = self._settled.get(_slot_of(call))
        held = self._held.get(_slot_of(call)) if settled is not None else None
        if held is not None and settled is not None:
            stopped = (
                f"it was in doubt in run {settled.run_id} and found not to have happened; run "
                f"{held.run_id} made it again since, under the same key, and its outcome is "
                "not on record"
            )
            done, output = await self._in_doubt(
                call, tool, _Known("started"), decisions, answers, stopped
            )
            # Decided (a person, the reconciler, the policy): made under the key whoever holds it
            self._inherited.discard(call.idempotency_key)
            return done, output
        if settled is not None:
            who = settled.resolved_by or "record"
            if settled.resolution == "denied":
                why = (
                    f"it was in doubt in run {settled.run_id} (key {settled.key}), which this "
                    f"run revises, and is not to be made: {settled.reason or 'denied'}"
                )
                self._note(
                    decisions, call, "deny", who, why, rule=IN_DOUBT_RULE, at=settled.resolved_at
                )
                raise TaskDeniedError(why, decided_by=who)
            why = (
                f"it was in doubt in run {settled.run_id}, which this run revises, and {who} "
                f"found that it did not happen: made again with its key {settled.key}"
            )
            self._note(
                decisions, call, "allow", who, why, rule=IN_DOUBT_RULE, at=settled.resolved_at
            )
        if known is None and call.task_id in self._lost:
            known = _Known("cancelled")
            known.lost = True
        if known is None or known.state == "failed":
            return False, None
        who = known.resolved_by or "record"
        if known.state == "succeeded":
            if known.resolution == "happened":
                why = known.reason or f"it took effect before the run stopped, said {who}"
                self._note(decisions, call, "happened", who, why, at=known.resolved_at)
            else:
                why = "its outcome was on record: the call was not made again"
                self._note(decisions, call, "replayed", "record", why)
            return True, known.output
        if known.state not in _IN_DOUBT_STATES:
            return False, None
        who = known.resolved_by or "record"
        if known.resolution == "not_happened":  # a person (or a resume before) said so
            why = known.reason or "it was in doubt; it is made again, with the same key"
            at = known.resolved_at
            self._note(decisions, call, "allow", who, why, rule=IN_DOUBT_RULE, at=at)
            return False, None
        if known.resolution == "denied":
            why = known.reason or "it was in doubt and is not made"
            at = known.resolved_at
            self._note(decisions, call, "deny", who, why, rule=IN_DOUBT_RULE, at=at)
            raise TaskDeniedError(why, decided_by=who)
        return await self._in_doubt(call, tool, known, decisions, answers)

    async def _in_doubt(
        self,
        call: CallIdentity,
        tool: Tool,
        known: _Known,
        decisions: list[CallDecision] | None,
        answers: Sequence[ApprovalAnswer],
        stopped: str | None = None,
    ) -> tuple[bool, Any]:
        lost = self._lost.get(call.task_id) if known.lost else None
        stopped = stopped or lost  # its worker was lost, said the workflow (see lost_during)
        if stopped is None:
            stopped = (
                "it was cut off (the run stopped, or its worker or MCP server was lost)"
                if known.state == "cancelled"
                else "its process ended during it"
            )
        # A person's decision first: they were asked because nothing else could tell.
        args = self.recorded_args(call.tool, call.args)  # as the question holds them
        answer = next(
            (
                a
                for a in answers
                if a.rule == IN_DOUBT_RULE and a.tool == call.tool and a.args == args
            ),
            None,
        )
        if answer is not None and answer.decision != "happened":
            who = answer.decided_by
            taken = answer.at or None  # when the person decided, not when it is used
            if answer.decision == "deny":
                why = answer.reason or f"{stopped}; {who} decided it is not made again"
                await self._resolve(call, "denied", who, why)
                self._note(decisions, call, "deny", who, why, at=taken)
                raise TaskDeniedError(why, decided_by=who)
            why = answer.reason or f"{stopped}; {who} decided it did not happen: made again"
            await self._resolve(call, "not_happened", who, why)
            self._note(decisions, call, "allow", who, why, rule=IN_DOUBT_RULE, at=taken)
            return False, None
        reconcile = tool.reconcile if self.reconciling else None
        unknown = "the tool has no reconciler"
        if tool.reconcile is not None and reconcile is None:
            unknown = "its reconciler was not asked"
        if reconcile is not None:
            name = f"reconcile:{getattr(reconcile, '__name__', type(reconcile).__name__)}"
            verdict = await _ask_reconciler(reconcile, call)
            if verdict.verdict == "happened":
                why = f"{stopped}; its reconciler found that it took effect"
                await self._resolve(call, "happened", name, why, output=verdict.output)
                self._note(decisions, call, "happened", name, why)
                return True, verdict.output
            if verdict.verdict == "not_happened":
                why = verdict.reason or f"{stopped}; its reconciler found that it did not happen"
                await self._resolve(call, "not_happened", name, why)
                self._note(decisions, call, "allow", name, why, rule=IN_DOUBT_RULE)
                return False, None
            unknown = f"its reconciler could not tell ({verdict.reason or 'no reason given'})"
        if self.in_doubt == "retry":
            why = f"{stopped}; {unknown}: made again with the same key (in_doubt='retry')"
            await self._resolve(call, "not_happened", "policy", why)
            self._note(decisions, call, "allow", "policy", why, rule=IN_DOUBT_RULE)
            return False, None
        if self.in_doubt == "deny":
            why = f"{stopped} and whether it took effect is unknown ({unknown}; in_doubt='deny')"
            await self._resolve(call, "denied", "policy", why)
            self._note(decisions, call, "deny", "policy", why, rule=IN_DOUBT_RULE)
            raise TaskDeniedError(why, decided_by="in_doubt policy")
        why = f"{stopped}; {unknown}: a person decides whether it happened"
        self._note(decisions, call, WAIT, IN_DOUBT_RULE, why, rule=IN_DOUBT_RULE)
        self.asked.append(
            {
                "key": call.idempotency_key,
                "task_id": call.task_id,
                "element": call.element,
                "occurrence": call.occurrence,
                "tool": call.tool,
                "fingerprint": call.fingerprint,
                "source": call.source,
                "args": self.recorded_args(call.tool, call.args),
                "attempt": call.attempt,
                **({"why": lost} if lost else {}),
            }
        )
        raise CallInDoubtError(why, tool=call.tool, key=call.idempotency_key)

    async def _take_over(
        self, call: CallIdentity, before: EffectRecord, decisions: list[CallDecision] | None
    ) -> Any:
        """``call`` took effect in the run this one revises (``before``): its output, on
        record here as found to have happened (so that a resume of this run finds it too)."""
        who = f"run {before.run_id}"
        why = f"it took effect in run {before.run_id} (key {before.key}): not made again"
        if self.journal is not None:
            try:
                await self.journal.taken_over(
                    self.run_id,
                    call.idempotency_key,
                    task_id=call.task_id,
                    element=call.element,
                    occurrence=call.occurrence,
                    tool=call.tool,
                    fingerprint=call.fingerprint,
                    source=call.source,
                    args=_json(self.recorded_args(call.tool, call.args)),
                    attempt=call.attempt,
                    output=_json(before.output),
                    by=who,
                    reason=why,
                )
            except StoreError as exc:
                raise StoreError(
                    f"the call of {call.tool!r} by {call.where} took effect in run "
                    f"{before.run_id}; it is not made again, and its output could not be "
                    f"recorded for this run ({exc})"
                ) from None
        self._known[call.idempotency_key] = _Known("succeeded", before.output, "happened", who, why)
        self._note(decisions, call, "replayed", who, why)
        return before.output

    async def _resolve(
        self, call: CallIdentity, resolution: str, by: str, why: str, *, output: Any = None
    ) -> None:
        state = "succeeded" if resolution == "happened" else "resolved"
        self._known[call.idempotency_key] = _Known(state, output, resolution, by)
        if self.journal is not None:
            await self.journal.resolved(
                self.run_id,
                call.idempotency_key,
                resolution,
                by=by,
                reason=why,
                output=_json(output) if resolution == "happened" else None,
            )

    # -- the call -------------------------------------------------------------------------

    async def invoke(self, call: CallIdentity, make: Callable[[], Awaitable[Any]]) -> Any:
        """Make ``call`` (``make()``) between its intent and its outcome, as the current
        call."""
        journal, key = self.journal, call.idempotency_key
        if journal is not None:
            try:
                alone = await journal.intent(
                    self.run_id,
                    key,
                    task_id=call.task_id,
                    element=call.element,
                    occurrence=call.occurrence,
                    tool=call.tool,
                    fingerprint=call.fingerprint,
                    source=call.source,
                    args=_json(self.recorded_args(call.tool, call.args)),
                    attempt=call.attempt,
                    exclusive=key in self._inherited,
                )
            except StoreError as exc:
                raise StoreError(
                    f"the call of {call.tool!r} by {call.where} was not made: its intent could "
                    f"not be recorded first ({exc})"
                ) from None
            if not alone:
                raise StoreError(
                    f"the call of {call.tool!r} by {call.where} was not made: another run "
                    f"made it under the same key ({key}), inherited from the run both revise, "
                    "or is making it now; a later revision takes its output over, or asks "
                    "about it"
                )
        self._known[key] = _Known("started")
        token = using_call(call)
        try:
            output = await make()
        except BaseException as exc:
            # Stopped during the call (a cancellation, its timeout), its worker lost under it
            # or its MCP server gone while it ran: whether it took effect is unknown.
            cut = isinstance(exc, (anyio.get_cancelled_exc_class(), WorkerLostError)) or (
                isinstance(exc, MCPServerLostError) and exc.mid_call
            )
            state = "cancelled" if cut else "failed"
            # In this run, the task's retry policy decides about a call stopped by its
            # timeout: a retry makes it again, with the same key. On record it stays
            # cancelled: in doubt if the run is resumed.
            self._known[key] = _Known("failed")
            if journal is not None:
                error = shorten(f"{type(exc).__name__}: {exc}", 2000)
                # Not on record: the call stays in doubt there, and a resume asks about it.
                with contextlib.suppress(StoreError):
                    await journal.outcome(self.run_id, key, state, output=None, error=error)
            raise
        finally:
            reset_call(token)
        self._known[key] = _Known("succeeded", output)
        if journal is not None:
            # Not on record: it stays in doubt there, and is never made again silently.
            with contextlib.suppress(StoreError):
                await journal.outcome(
                    self.run_id, key, "succeeded", output=_json(output), error=None
                )
        return output

    def _note(
        self,
        decisions: list[CallDecision] | None,
        call: CallIdentity,
        decision: Decision,
        by: str,
        why: str,
        *,
        rule: str | None = None,
        at: float | None = None,
    ) -> None:
        """Add a decision about ``call`` to ``decisions`` (with its recorded arguments: a
        question about it is matched with its record by them), taken ``at`` (default: now; a
        decision on record from before this run: when it was taken)."""
        if decisions is None:
            return
        decisions.append(
            CallDecision(
                tool=call.tool,
                decision=decision,
                decided_by=by,
                reason=why,
                args=self.recorded_args(call.tool, call.args),
                at=time.time() if at is None else at,
                rule=rule,
                source=call.source,
            )
        )


async def _ask_reconciler(reconcile: Any, call: CallIdentity) -> Reconciled:
    """The reconciler's answer; one that fails or answers something else cannot tell."""
    try:
        answer = reconcile(call)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:
        return Reconciled.unknown(f"it raised {type(exc).__name__}: {shorten(str(exc), 300)}")
    if not isinstance(answer, Reconciled):
        return Reconciled.unknown(
            f"it returned {type(answer).__name__}, not Reconciled.happened(...), "
            "Reconciled.not_happened() or Reconciled.unknown(...)"
        )
    return answer
