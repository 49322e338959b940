"""A solve whose process died resumes from its records in whatever phase it died: while a
round was being planned, while its run ran, before the joiner's decision, between rounds, or
after its last round and before its own end. No model call whose result is on record is made
again, no success runs again, and the rounds keep their numbers.

Each phase is made from the record of a solve that went to its end (two rounds: a plan whose
second city fails, a replan, a revised plan, an answer), cut back to what a SIGKILL in that
phase leaves: the solve and the round under way ``running`` under a process that is gone,
and nothing written after that moment."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

import dagagent
from dagagent.results import SolveStatus

from .test_solve import ATLANTIS, GOAL, PARIS, WARMER, World, finish, openai, plan, replan, weather

pytestmark = pytest.mark.anyio

TOKYO2 = weather("tokyo2", "Tokyo")
CMP2 = {"id": "cmp2", "tool": "warmer", "args": {"a": "${paris}", "b": "${tokyo2}"}}
FEEDBACK = "the second city was Atlantis, not Tokyo: look up Tokyo"
SCRIPT = {
    ("planner", 1): plan(PARIS, ATLANTIS, WARMER),
    ("joiner", 1): replan(FEEDBACK),
    ("replanner", 2): plan(PARIS, TOKYO2, CMP2),
    ("joiner", 2): finish("Tokyo", ["cmp2"]),
}


def _dead_pid() -> int:
    """A process id no process can have (above Linux's largest, 2**22): the record of a run
    whose process is gone names one like it."""
    return 2**22 + 1


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """A solve that went to its end: its store, id and its rounds' runs."""
    import anyio

    store = tmp_path_factory.mktemp("solve") / "runs.db"
    world = World()

    async def go() -> dagagent.Solution:
        async with openai(*SCRIPT.values()) as llm:
            return await dagagent.solve(GOAL, world.registry, llm, stream=False, store=store)

    solution = anyio.run(go)
    assert solution.status is SolveStatus.ANSWERED
    return store, solution.solve_id, [r.run_id or "" for r in solution.rounds]


def _cut(store: Path, solve_id: str, runs: list[str], phase: str) -> None:
    """Make the record what a kill in ``phase`` leaves."""
    _, r2 = runs
    with sqlite3.connect(store) as conn:
        conn.execute(
            "UPDATE solves SET status = 'running', pid = ?, answer = NULL, cites = NULL, "
            "reason = NULL, finished_at = NULL, run_id = NULL WHERE id = ?",
            (_dead_pid(), solve_id),
        )

        def drop_run(run_id: str) -> None:
            for table, column in (
                ("tasks", "run_id"),
                ("run_plans", "run_id"),
                ("effects", "run_id"),
                ("runs", "id"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (run_id,))

        def drop_calls(after_round: int, joiner_too: bool) -> None:
            conn.execute(
                "DELETE FROM model_calls WHERE solve_id = ? AND (round > ? OR (round = ? AND "
                "role = 'joiner' AND ?))",
                (solve_id, after_round, after_round, int(joiner_too)),
            )

        if phase in ("joining 1", "joined 1", "between"):
            conn.execute("DELETE FROM solve_rounds WHERE round = 2")
            drop_run(r2)
            drop_calls(1, joiner_too=phase == "joining 1")
            if phase in ("joining 1", "joined 1"):
                # round 1's run ended; its decision was not written (and, "joined", the
                # joiner's call had completed and was on record)
                conn.execute(
                    "UPDATE solve_rounds SET outcome = 'running', decision = NULL, reason = '' "
                    "WHERE round = 1"
                )
        elif phase in ("planning 2", "planned 2"):
            # round 2 named its run; the plan had not come (or, "planned", the replanner's
            # call had completed and was on record, and the run had not started)
            conn.execute(
                "UPDATE solve_rounds SET outcome = 'running', decision = NULL WHERE round = 2"
            )
            drop_run(r2)
            conn.execute(
                "DELETE FROM model_calls WHERE solve_id = ? AND round = 2 AND role != ?",
                (solve_id, "replanner" if phase == "planned 2" else ""),
            )
        elif phase == "running 2":  # round 2's run was under way: cmp2 had not ended
            conn.execute(
                "UPDATE solve_rounds SET outcome = 'running', decision = NULL WHERE round = 2"
            )
            conn.execute(
                "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
                (_dead_pid(), r2),
            )
            conn.execute("DELETE FROM tasks WHERE run_id = ? AND task_id = 'cmp2'", (r2,))
            drop_calls(2, joiner_too=True)
        else:
            assert phase == "closing"  # round 2 answered; the solve's end was not written


# phase -> (the model calls the resume makes, the tool calls it makes)
PHASES = {
    "joining 1": (
        [("joiner", 1), ("replanner", 2), ("joiner", 2)],
        {"get_weather Tokyo": 1, "warmer": 1},
    ),
    # the joiner's answer on record is given again: not asked for again
    "joined 1": ([("replanner", 2), ("joiner", 2)], {"get_weather Tokyo": 1, "warmer": 1}),
    "between": ([("replanner", 2), ("joiner", 2)], {"get_weather Tokyo": 1, "warmer": 1}),
    "planning 2": ([("replanner", 2), ("joiner", 2)], {"get_weather Tokyo": 1, "warmer": 1}),
    # the replanner's answer on record is given again: the same plan, run now
    "planned 2": ([("joiner", 2)], {"get_weather Tokyo": 1, "warmer": 1}),
    "running 2": ([("joiner", 2)], {"warmer": 1}),
    "closing": ([], {}),
}


@pytest.mark.parametrize("phase", list(PHASES))
async def test_a_solve_killed_in_any_phase_resumes_as_a_solve(
    finished: tuple[Path, str, list[str]], tmp_path: Path, phase: str
) -> None:
    source, solve_id, runs = finished
    store = tmp_path / "runs.db"
    shutil.copy(source, store)
    _cut(store, solve_id, runs, phase)
    with dagagent.RunStore(store) as st:
        assert st.get_solve(solve_id).status == "interrupted"
    calls, tools = PHASES[phase]
    world = World()
    llm = openai(*(SCRIPT[c] for c in calls))
    async with llm:  # leaving it fails unless exactly these calls were made
        solution = await dagagent.resume_solve(solve_id, world.registry, llm, store=store)
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert solution.answer == "Tokyo"
    assert [r.number for r in solution.rounds] == [1, 2]
    assert solution.rounds[0].outcome == "replan"
    assert world.calls == Counter(tools)  # nothing that succeeded before ran again
    with dagagent.RunStore(store) as st:
        record = st.get_solve(solve_id)
    assert record.status == "answered"
    assert [(r.round, r.outcome) for r in record.rounds] == [(1, "replan"), (2, "answered")]
    assert Counter((c.role, c.round) for c in record.calls) == Counter(SCRIPT.keys())  # each once
    if phase == "running 2":
        assert record.rounds[1].run_id == runs[1]  # the same run went on, in place


async def test_a_running_solve_is_not_resumed(
    finished: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    source, solve_id, _ = finished
    store = tmp_path / "runs.db"
    shutil.copy(source, store)
    with pytest.raises(dagagent.DecisionError, match="answered, not paused or interrupted"):
        await dagagent.resume_solve(solve_id, World().registry, openai(), store=store)


async def test_an_answer_whose_record_is_cut_is_asked_for_again(
    finished: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    """A recorded answer is given again only when the record holds all of it: the joiner's,
    cut to the record's bound, is asked for again (and recorded again)."""
    source, solve_id, runs = finished
    store = tmp_path / "runs.db"
    shutil.copy(source, store)
    _cut(store, solve_id, runs, "joined 1")
    with sqlite3.connect(store) as conn:
        conn.execute(
            "UPDATE model_calls SET text_chars = text_chars + 1 WHERE role = 'joiner' AND round = 1"
        )
    world = World()
    calls = [("joiner", 1), ("replanner", 2), ("joiner", 2)]
    async with openai(*(SCRIPT[c] for c in calls)) as llm:
        solution = await dagagent.resume_solve(solve_id, world.registry, llm, store=store)
    assert solution.status is SolveStatus.ANSWERED and solution.answer == "Tokyo"
    with dagagent.RunStore(store) as st:
        record = st.get_solve(solve_id)
    assert Counter((c.role, c.round) for c in record.calls)[("joiner", 1)] == 2
