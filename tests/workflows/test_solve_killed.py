"""A solve whose process is killed (SIGKILL) while its round's run makes a payment resumes as
a solve from another process: the payment is not made again (its reconciler finds it), the
planner is not asked again, the joiner answers, and the round keeps its number and run."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

import dagagent
from dagagent.llm import ScriptedLLM, wire
from dagagent.results import SolveStatus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.asyncio_only("a real process is killed: once is enough, the engine is the same"),
]

TOOLS = textwrap.dedent(
    """
    import json, os, signal
    from pathlib import Path
    import dagagent

    LOG = Path(os.environ["PAID_LOG"])
    registry = dagagent.Registry()

    def paid(key):
        for line in LOG.read_text().splitlines() if LOG.exists() else []:
            if json.loads(line)["key"] == key:
                return json.loads(line)
        return None

    def check(call):
        found = paid(call.idempotency_key)
        if found is None:
            return dagagent.Reconciled.not_happened()
        return dagagent.Reconciled.happened(found)

    @registry.tool(side_effects=True, reconcile=check)
    def pay(account: str, cents: int) -> dict:
        '''Pay an account.'''
        out = {"account": account, "cents": cents, "key": dagagent.current_call().idempotency_key}
        with LOG.open("a") as f:
            f.write(json.dumps(out) + "\\n")
        if os.environ.get("DIE_AFTER_PAYING"):
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    """
)
PLAN = {
    "goal": "pay ann",
    "tasks": [{"id": "ann", "tool": "pay", "args": {"account": "ann", "cents": 700}}],
}
FINISH = {"action": "finish", "answer": "paid ann 700", "cites": ["ann"]}
CHILD = textwrap.dedent(
    """
    import json, sys
    import anyio, dagagent
    import dagagent.llm.openai  # the client ScriptedLLM.openai speaks through
    from dagagent.llm import ScriptedLLM, wire
    from paytools import registry

    async def main():
        llm = ScriptedLLM.openai([wire.openai_text(sys.argv[2])])
        async with llm:
            await dagagent.solve("pay ann", registry, llm, store=sys.argv[1], solve_id=sys.argv[3])

    anyio.run(main)
    """
)


async def test_a_killed_solve_resumes_without_paying_or_planning_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "paytools.py").write_text(TOOLS)
    log, store = tmp_path / "paid.log", tmp_path / "runs.db"
    solve_id = dagagent.new_run_id()
    proc = await anyio.run_process(
        [sys.executable, "-c", CHILD, str(store), json.dumps(PLAN), solve_id],
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
        record = st.get_solve(solve_id)
    assert record.status == "interrupted"
    assert [(r.round, r.outcome) for r in record.rounds] == [(1, "interrupted")]

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PAID_LOG", str(log))
    import paytools

    llm = ScriptedLLM.openai([wire.openai_text(json.dumps(FINISH))])  # the joiner, only
    async with llm:
        solution = await dagagent.resume_solve(solve_id, paytools.registry, llm, store=store)
    assert solution.status is SolveStatus.ANSWERED and solution.answer == "paid ann 700"
    assert len(log.read_text().splitlines()) == 1  # paid once, across both processes
    (rnd,) = solution.rounds
    assert rnd.run_id == record.rounds[0].run_id  # the round's run went on in place
    assert rnd.result is not None
    (decision,) = rnd.result.tasks["ann"].decisions or []
    assert (decision.decision, decision.decided_by) == ("happened", "reconcile:check")
    with dagagent.RunStore(store) as st:
        after = st.get_solve(solve_id)
    assert after.status == "answered"
    # The planner was asked once (the script above holds the joiner's answer alone); its
    # call's record is written a batch at a time, and the kill may have come first.
    roles = sorted(c.role for c in after.calls)
    assert roles in (["joiner"], ["joiner", "planner"])
