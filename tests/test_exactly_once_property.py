"""A model of approvals, calls in doubt and resumes across parallel branches (Hypothesis,
stateful): any interleaving of allow / deny / "it happened" decisions, resumes (two at
once, too), and crashes in the middle of a call (before or after its effect) ends with the
same records: each allowed payment made exactly once, each denied one never, each task as
its decisions say, whatever the order.

Three parallel branches each make one payment that an ``ask`` rule leaves for a person. A
crash is reproduced in process as in ``test_exactly_once.py``: the run is stopped while a
call is in flight, and its record made what a SIGKILL leaves."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import HealthCheck, event, example, given, settings, strategies as st

import dagagent
from dagagent.store import RunStore

TASKS = ("a", "b", "c")
PLAN = {
    "goal": "pay three",
    "tasks": [{"id": t, "tool": "pay", "args": {"who": t}} for t in TASKS],
}


def _dead_pid() -> int:
    """A process id no process can have (above Linux's largest, 2**22): the record of a run
    whose process is gone names one like it."""
    return 2**22 + 1


class Payments:
    """The system under test and its model: the store, the run, the payments made (outside
    the run), and what the model expects of each task."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.store = Path(self.dir.name) / "runs.db"
        self.effects: list[tuple[str, str]] = []  # (task, key), outside the run
        self.hang: tuple[str, str] | None = None  # (task, "before" | "after")
        self.entered: anyio.Event | None = None
        self.registry = dagagent.Registry()
        machine = self

        @self.registry.tool(side_effects=True)
        async def pay(who: str) -> str:
            key = dagagent.current_call().idempotency_key
            hang = machine.hang
            if hang == (who, "before"):
                assert machine.entered is not None
                machine.entered.set()
                await anyio.sleep_forever()
            machine.effects.append((who, key))
            if hang == (who, "after"):
                assert machine.entered is not None
                machine.entered.set()
                await anyio.sleep_forever()
            return key

        self.policy = dagagent.Policy(
            [dagagent.Rule(tool="pay", action="ask", name="payments")], ask=dagagent.ask_later
        )
        # The model: what a person decided about each task ("allow", "deny", "happened"),
        # which tasks are done (succeeded / denied), and which call is in doubt.
        self.decided: dict[str, str] = {}
        self.done: dict[str, str] = {}
        self.in_doubt: dict[str, str] = {}  # task -> "before" | "after"
        result = anyio.run(self._execute)
        self.run_id = result.run_id
        assert result.status.value == "paused"

    async def _execute(self) -> dagagent.RunResult:
        return await dagagent.execute(
            PLAN, self.registry, store=self.store, interceptors=[self.policy]
        )

    def teardown(self) -> None:
        self.dir.cleanup()

    # -- what the store says waits ----------------------------------------------------------

    def _waiting(self) -> dict[str, str]:
        with RunStore(self.store) as s:
            return {a.task_id: a.rule or "" for a in s.approvals(self.run_id, states=("waiting",))}

    def decide(self, task: str, decision: str) -> None:
        waiting = self._waiting()
        if task not in waiting or task in self.decided:
            return
        in_doubt = waiting[task] == "in doubt"
        if decision == "happened" and not in_doubt:
            return  # only a call in doubt can be said to have happened
        if decision == "happened" and self.in_doubt.get(task) == "before":
            decision = "allow"  # a person who checks finds it did not happen
        if in_doubt and self.in_doubt.get(task) == "after":
            # a person who checks finds it happened: allowing it again (the same key, which the
            # bank would have to dedupe) or denying it would record what the world did not do,
            # which no engine can see
            decision = "happened"
        with RunStore(self.store) as s:
            if decision == "happened":
                key = next(k for t, k in self.effects if t == task)
                s.decide(self.run_id, task, "happened", by="ann", output=key)
            else:
                s.decide(self.run_id, task, decision, by="ann")
        self.decided[task] = decision
        if in_doubt:
            event(f"a person decided about a call in doubt: {decision}")

    def resume(self, twice: bool) -> None:
        async def one() -> Any:
            try:
                return await dagagent.resume(
                    self.run_id, self.registry, store=self.store, interceptors=[self.policy]
                )
            except dagagent.DecisionError:
                return None  # the other resume holds the run

        async def both() -> list[Any]:
            results: list[Any] = []

            async def go() -> None:
                results.append(await one())

            async with anyio.create_task_group() as tg:
                tg.start_soon(go)
                if twice:
                    tg.start_soon(go)
            return results

        with RunStore(self.store) as s:
            before = s.get_run(self.run_id).status.value
        results = [r for r in anyio.run(both) if r is not None]
        # One resume claims a paused (or interrupted) run; a second one at once is refused, as
        # is any resume of a run that ended (a denial ends it failed).
        assert len(results) == (1 if before in ("paused", "interrupted") else 0)
        if results:
            self._learn(results[0])

    def allow_then_crash(self, task: str, where: str) -> None:
        """A person allows ``task``'s payment, and the resume that makes it is killed."""
        if self._waiting().get(task) == "payments" and task not in self.decided:
            with RunStore(self.store) as s:
                s.decide(self.run_id, task, "allow", by="ann")
            self.decided[task] = "allow"
        self.crash_during(task, where)

    def crash_during(self, task: str, where: str) -> None:
        """Resume, and kill the process while ``task``'s call is in flight."""
        if self.decided.get(task) != "allow" or task in self.done:
            return
        with RunStore(self.store) as s:
            if s.get_run(self.run_id).status.value not in ("paused", "interrupted"):
                return  # a denial ended the run: nothing resumes it
        self.hang, self.entered = (task, where), anyio.Event()
        ended: list[dagagent.RunResult] = []

        async def go() -> None:
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    ended.append(
                        await dagagent.resume(
                            self.run_id, self.registry, store=self.store, interceptors=[self.policy]
                        )
                    )
                    assert self.entered is not None
                    self.entered.set()  # the resume ended without making the call

                tg.start_soon(run)
                assert self.entered is not None
                await self.entered.wait()
                tg.cancel_scope.cancel()

        anyio.run(go)
        self.hang = None
        if ended:  # the call was never made (a denial decided earlier ended the run first)
            self._learn(ended[0])
            event("a resume meant to crash ended without the call")
            return
        with sqlite3.connect(self.store) as conn:  # what a SIGKILL leaves
            conn.execute(
                "UPDATE effects SET state = 'started' WHERE run_id = ? AND state = 'cancelled'",
                (self.run_id,),
            )
            conn.execute(
                "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
                (_dead_pid(), self.run_id),
            )
            conn.execute(
                "DELETE FROM tasks WHERE run_id = ? AND status NOT IN ('succeeded', 'denied')",
                (self.run_id,),
            )
        with RunStore(self.store) as s:
            self._learn_record(s.get_run(self.run_id))
        self.in_doubt[task] = where
        self.decided.pop(task, None)  # asked again: a person decides about the doubt
        event(f"a crash {where} a payment's effect")

    def _learn(self, result: dagagent.RunResult) -> None:
        for t, r in result.tasks.items():
            if r.status.value in ("succeeded", "denied"):
                self.done[t] = r.status.value
                self.in_doubt.pop(t, None)
            elif r.status.value == "waiting":
                self.decided.pop(t, None)  # nobody decided yet, or asked again

    def _learn_record(self, record: Any) -> None:
        for t, r in record.tasks.items():
            if r.status.value in ("succeeded", "denied"):
                self.done[t] = r.status.value

    # -- what must hold whatever the order -------------------------------------------------

    def no_payment_twice(self) -> None:
        keys = [k for _, k in self.effects]
        assert len(keys) == len(set(keys))
        per_task = [t for t, _ in self.effects]
        assert len(per_task) == len(set(per_task))  # one key per task, one payment

    def records_agree_with_decisions(self) -> None:
        paid = {t for t, _ in self.effects}
        for t, status in self.done.items():
            assert (status == "succeeded") == (t in paid), (t, status, paid)
            if status == "denied":
                assert t not in paid


_CRASH = st.tuples(
    st.just("allow_then_crash"), st.sampled_from(TASKS), st.sampled_from(["before", "after"])
)
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("decide"),
            st.sampled_from(TASKS),
            st.sampled_from(["allow", "deny", "happened"]),
        ),
        st.tuples(st.just("resume"), st.booleans()),
        _CRASH,
        _CRASH,  # twice as likely: crashes are what the model is about
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
# Always: a crash after a payment took effect, found by a person, with a second resume racing;
# and a crash before it, made again, while another branch is denied.
@example(
    ops=[
        ("allow_then_crash", "a", "after"),
        ("decide", "a", "happened"),
        ("decide", "b", "allow"),
        ("resume", True),
    ]
)
@example(
    ops=[
        ("allow_then_crash", "b", "before"),
        ("decide", "b", "allow"),
        ("decide", "c", "deny"),
        ("resume", False),
    ]
)
# A call found to have happened (by a person) whose run a denial elsewhere ends before its task
# is scheduled: its task succeeds with that output, it is not left "cancelled".
@example(
    ops=[
        ("decide", "c", "allow"),
        ("allow_then_crash", "c", "after"),
        ("resume", False),
        ("decide", "a", "deny"),
    ]
)
# The same, resumed once more after the denial: the run ends failed with the call still in
# doubt (on record for a person, its task's record saying so), not "not run".
@example(
    ops=[
        ("decide", "c", "allow"),
        ("allow_then_crash", "c", "after"),
        ("resume", False),
        ("decide", "a", "deny"),
        ("resume", False),
    ]
)
def test_payments_exactly_once_in_any_order(ops: list[tuple[Any, ...]]) -> None:
    """Any interleaving of decisions, resumes (two at once) and crashes; then everyone left
    waiting is answered and the run resumed to its end: each payment allowed (or found to
    have happened) was made exactly once, each denied one never."""
    m = Payments()
    try:
        for op, *args in ops:
            getattr(m, op)(*args)
            m.no_payment_twice()
            m.records_agree_with_decisions()
        for _ in range(8):  # the end: every question answered, as a person checking would
            with RunStore(m.store) as s:
                if s.get_run(m.run_id).status.value not in ("paused", "interrupted"):
                    break
            for task in TASKS:
                m.decide(task, "happened" if m.in_doubt.get(task) == "after" else "allow")
            m.resume(False)
        with RunStore(m.store) as s:
            record = s.get_run(m.run_id)
            doubts = {e.task_id: e.key for e in s.in_doubt_of_ended(m.run_id)}
        assert record.status.value in ("succeeded", "failed")
        paid = dict(m.effects)
        for task in TASKS:
            r = record.tasks[task]
            if r.status.value == "succeeded":
                assert task in paid and r.output == paid[task]
            else:
                # a denial ends the run failed: the others are left as they were, and a call left in
                # doubt is still in doubt, on record for a person to resolve (it may have
                # happened: that is what in doubt says, and the record claims neither)
                assert r.status.value in ("denied", "waiting", "cancelled")
                if task in paid:
                    assert m.in_doubt.get(task) == "after" and doubts.get(task) == paid[task]
                    assert r.error is not None and "is in doubt" in r.error
                    assert not r.error.startswith("not run:")
        m.no_payment_twice()
    finally:
        m.teardown()
