"""A solve whose process is killed (SIGKILL) while one of its sub-solves makes a payment
resumes from another process: the sub-solve goes on in place, the payment is not made again
(its reconciler finds it), neither planner is asked again, and both joiners answer."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

import dagagent
from dagagent.llm import ScriptedLLM, wire
from dagagent.results import SolveStatus

from .test_solve_killed import TOOLS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.asyncio_only("a real process is killed: once is enough, the engine is the same"),
]

GOAL = "settle the accounts"
PLAN = {"tasks": [{"id": "ann", "instruction": "pay ann 700 cents", "solve": True}]}
CHILD_PLAN = {"tasks": [{"id": "pay", "tool": "pay", "args": {"account": "ann", "cents": 700}}]}
PARENT = textwrap.dedent(
    """
    import sys
    import anyio, dagagent
    import dagagent.llm.openai  # the client ScriptedLLM.openai speaks through
    from dagagent.llm import ScriptedLLM, wire
    from subsolve_paytools import registry

    async def main():
        llm = ScriptedLLM.openai([wire.openai_text(a) for a in sys.argv[2:4]])
        async with llm:
            await dagagent.solve(
                "settle the accounts", registry, llm, store=sys.argv[1], solve_id=sys.argv[4],
                sub_solves=True, stream=False,
            )

    anyio.run(main)
    """
)


def _decision(answer: str, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


async def test_a_solve_killed_in_a_sub_solve_resumes_it_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module name of its own: the tools bind their log's path when imported, and another
    # test's module of the same name may already be imported in this process.
    (tmp_path / "subsolve_paytools.py").write_text(TOOLS)
    log, store = tmp_path / "paid.log", tmp_path / "runs.db"
    solve_id = dagagent.new_run_id()
    proc = await anyio.run_process(
        [
            sys.executable,
            "-c",
            PARENT,
            str(store),
            json.dumps(PLAN),
            json.dumps(CHILD_PLAN),
            solve_id,
        ],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": ":".join([str(tmp_path), *sys.path]),
            "PAID_LOG": str(log),
            "DIE_AFTER_PAYING": "1",
        },
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    with dagagent.RunStore(store) as st:
        parent = st.get_solve(solve_id)
        (child,) = parent.children
        before = st.get_solve(child.solve_id)
    assert parent.status == "interrupted" and child.status == "interrupted"
    assert [(r.round, r.outcome) for r in before.rounds] == [(1, "interrupted")]

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PAID_LOG", str(log))
    monkeypatch.delitem(sys.modules, "subsolve_paytools", raising=False)  # imported afresh
    paytools = importlib.import_module("subsolve_paytools")

    answers = [_decision("paid ann 700", ["pay"]), _decision("ann is settled", ["ann"])]
    llm = ScriptedLLM.openai([wire.openai_text(a) for a in answers])  # the joiners, only
    async with llm:
        solution = await dagagent.resume_solve(solve_id, paytools.registry, llm, store=store)
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert solution.answer == "ann is settled"
    assert len(log.read_text().splitlines()) == 1  # paid once, across both processes
    task = solution.rounds[0].result.tasks["ann"]  # type: ignore[union-attr]
    assert task.output == "paid ann 700"
    with dagagent.RunStore(store) as st:
        after = st.get_solve(child.solve_id)
        assert [c.solve_id for c in st.child_solves(solve_id)] == [child.solve_id]
    assert after.status == "answered"
    assert [(r.round, r.run_id) for r in after.rounds] == [(1, before.rounds[0].run_id)]
    run = after.rounds[0].run_id or ""
    with dagagent.RunStore(store) as st:
        (decision,) = st.get_run(run).tasks["pay"].decisions or []
    assert (decision.decision, decision.decided_by) == ("happened", "reconcile:check")
