"""A solve killed while its sub-solves ran resumes them from their records: a child that had
answered gives its recorded answer, a child under way goes on from where it was, and no model
call that had completed is made again."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.errors import DecisionError
from dagagent.events import InSubSolve
from dagagent.results import SolveStatus, TaskStatus

from .test_subsolve import GOAL, Router, World, scripted

pytestmark = pytest.mark.anyio

EU, US = "Find the best steel supplier in EU", "Find the best steel supplier in US"


def _dead_pid() -> int:
    """A process id no process can have (above Linux's largest, 2**22)."""
    return 2**22 + 1


def _killed_while_us_ran(store: Path, parent: str, run_id: str, us: str) -> None:
    """Make the record what a kill leaves when the US child's run had ended and its joiner
    had not decided yet (the EU child had answered; the parent's map task had not ended)."""
    with sqlite3.connect(store) as conn:
        for solve_id in (parent, us):
            conn.execute(
                "UPDATE solves SET status = 'running', pid = ?, answer = NULL, cites = NULL, "
                "reason = NULL, finished_at = NULL, run_id = NULL, usage = NULL WHERE id = ?",
                (_dead_pid(), solve_id),
            )
            conn.execute(
                "UPDATE solve_rounds SET outcome = 'running', decision = NULL, reason = '' "
                "WHERE solve_id = ?",
                (solve_id,),
            )
            conn.execute(
                "DELETE FROM model_calls WHERE solve_id = ? AND role = 'joiner'", (solve_id,)
            )
        conn.execute(
            "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
            (_dead_pid(), run_id),
        )
        conn.execute("DELETE FROM tasks WHERE run_id = ? AND task_id = 'best'", (run_id,))


async def test_a_parent_killed_while_a_child_ran_resumes_the_child(tmp_path: Path) -> None:
    world = World()
    store = tmp_path / "runs.db"
    async with scripted(Router(), 6) as llm:
        first = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=store, stream=False
        )
    assert first.status is SolveStatus.ANSWERED, first.reason
    run_id = first.run_id or ""
    with dagagent.RunStore(store) as st:
        children = {
            st.get_solve(c.solve_id).goal: c.solve_id for c in st.child_solves(first.solve_id)
        }
    _killed_while_us_ran(store, first.solve_id, run_id, children[US])
    with dagagent.RunStore(store) as st:
        assert st.get_solve(children[US]).status == "interrupted"
    # a sub-solve is resumed by its parent, which keeps it within its budget
    with pytest.raises(DecisionError, match=r"is a sub-solve of task 'best' \(element 1\)"):
        await dagagent.resume_solve(
            children[US], world.registry, scripted(Router(), 0), store=store
        )

    world.calls.clear()
    router = Router()
    events: list[Any] = []
    async with scripted(router, 2) as later:  # the US child's joiner, then the parent's
        solution = await dagagent.resume_solve(
            first.solve_id, world.registry, later, store=store, listeners=[events.append]
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    # the resumed child's events reach the parent's listeners, saying whose they are
    resumed = [e for e in events if e.kind == "subsolve.started"]
    assert [(e.child_id, e.resumed) for e in resumed] == [(children[US], True)]
    decided = [e for e in events if isinstance(e, InSubSolve) and e.event.kind == "joiner.decided"]
    assert [(e.child_id, e.element, e.depth) for e in decided] == [(children[US], 1, 1)]
    assert router.seen == Counter({(US, "join"): 1, (GOAL, "join"): 1})
    assert world.calls == Counter()  # every tool call had been made and recorded
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.SUCCEEDED and best.output == ["Acme", "Bolt"]
    # every call of the children counts, each once: 2 of EU's, 2 of US's (1 before the kill)
    assert solution.usage.sub_solves.calls == 4
    assert solution.usage.total.calls == 6
    with dagagent.RunStore(store) as st:
        parent = st.get_solve(first.solve_id)
        us = st.get_solve(children[US])
        eu = st.get_solve(children[EU])
    assert parent.status == "answered"
    assert [c.solve_id for c in parent.children] == [children[EU], children[US]] or sorted(
        c.solve_id for c in parent.children
    ) == sorted(children.values())  # no child was started again
    assert us.status == "answered" and us.answer == "Bolt"
    assert [c.role for c in us.calls] == ["planner", "joiner"]  # the planner's not made again
    assert eu.status == "answered" and [c.role for c in eu.calls] == ["planner", "joiner"]


async def test_a_child_waiting_for_a_person_pauses_its_parent_until_it_is_decided(
    tmp_path: Path,
) -> None:
    from dagagent import Policy, Rule, ask_later

    def policy() -> Policy:
        return Policy(
            [Rule(tool="suppliers", args={"region": "US"}, action="ask", name="us")],
            ask=ask_later,
        )

    world = World()
    store = tmp_path / "runs.db"
    router = Router()
    async with scripted(router, 4) as llm:  # the parent's plan; EU's plan and join; US's plan
        paused = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=store, stream=False, policy=policy()
        )
    assert paused.status is SolveStatus.PAUSED, paused.reason
    best = paused.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.WAITING and best.elements is not None
    us_element = best.elements[1]
    assert us_element.status is TaskStatus.WAITING
    assert us_element.error_type == "SubSolveWaitingError"
    with dagagent.RunStore(store) as st:
        children = {st.get_solve(c.solve_id).goal: c for c in st.child_solves(paused.solve_id)}
        us = st.get_solve(children[US].solve_id)
        assert us.status == "paused" and us.run_id is not None
        assert f"sub-solve {us.solve_id} waits for a person" in (us_element.error or "")
        (waiting,) = st.approvals(us.run_id)
        assert waiting.task_id == "s" and waiting.state == "waiting"
        st.decide(us.run_id, "s", "allow", by="ann")

    later = Router()
    async with scripted(later, 2) as llm:  # US's joiner, then the parent's
        solution = await dagagent.resume_solve(
            paused.solve_id, world.registry, llm, store=store, policy=policy()
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert later.seen == Counter({(US, "join"): 1, (GOAL, "join"): 1})
    assert world.calls == Counter({"list_regions": 1, "suppliers EU": 1, "suppliers US": 1})
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.output == ["Acme", "Bolt"]
    with dagagent.RunStore(store) as st:
        assert st.get_solve(children[US].solve_id).status == "answered"
        assert len(st.child_solves(paused.solve_id)) == 2  # no child started again
