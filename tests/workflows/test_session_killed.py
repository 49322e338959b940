"""A session whose process is killed (SIGKILL) in the middle of a turn: opened again from
another process, the session says the turn did not end and refuses the next question;
``Session.resume`` continues the turn (its run in place: the planner is not asked again, the
earlier turn's output is still reused, not looked up again), then the conversation goes on."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

import dagagent
from dagagent.errors import SessionError
from dagagent.llm import ScriptedLLM, wire
from dagagent.results import SolveStatus

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.asyncio_only("a real process is killed: once is enough, the engine is the same"),
]

TOOLS = textwrap.dedent(
    """
    import os, signal
    from pathlib import Path
    import dagagent

    LOG = Path(__file__).with_name("calls.log")
    registry = dagagent.Registry()

    def log(line):
        with LOG.open("a") as f:
            f.write(line + "\\n")

    @registry.tool
    def get_weather(city: str) -> dict:
        '''Current temperature of a city.'''
        log(f"get_weather {city}")
        return {"city": city, "temp_c": 18.0}

    @registry.tool
    def report(city: str) -> str:
        '''A report about a city.'''
        log(f"report {city}")
        if os.environ.get("DIE_IN_REPORT"):
            os.kill(os.getpid(), signal.SIGKILL)
        return f"report on {city}"
    """
)

TURN_1 = [
    json.dumps({"tasks": [{"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}}]}),
    json.dumps({"action": "finish", "answer": "18 C", "cites": ["paris"]}),
]
TURN_2_PLAN = json.dumps(
    {"tasks": [{"id": "rep", "tool": "report", "args": {"city": "${turn1.paris.city}"}}]}
)
CHILD = textwrap.dedent(
    """
    import json, sys
    import anyio, dagagent
    import dagagent.llm.openai
    from dagagent.llm import ScriptedLLM, wire
    from sessiontools import registry

    async def main():
        answers = json.loads(sys.argv[2])
        llm = ScriptedLLM.openai([wire.openai_text(a) for a in answers])
        async with llm, dagagent.Session("trip", registry, llm, store=sys.argv[1]) as s:
            await s.ask("Weather in Paris?")
            await s.ask("A report on that city?")

    anyio.run(main)
    """
)


async def test_a_killed_turn_resumes_and_the_conversation_goes_on(tmp_path: Path):
    (tmp_path / "sessiontools.py").write_text(TOOLS)
    (tmp_path / "child.py").write_text(CHILD)
    db, log = tmp_path / "runs.db", tmp_path / "calls.log"
    env = {"DIE_IN_REPORT": "1", "PYTHONPATH": f"{tmp_path}:{Path.cwd()}"}
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "child.py", str(db), json.dumps([*TURN_1, TURN_2_PLAN])],
            cwd=tmp_path,
            env={**_environ(), **env},
            check=False,
        )
    assert proc.returncode == -9, proc.stderr.decode()
    assert log.read_text().splitlines() == ["get_weather Paris", "report Paris"]

    spec = importlib.util.spec_from_file_location("sessiontools", tmp_path / "sessiontools.py")
    assert spec is not None and spec.loader is not None
    tools = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tools)
    registry = tools.registry
    llm = ScriptedLLM.openai(
        [
            wire.openai_text(json.dumps({"action": "finish", "answer": "ok", "cites": []})),
            *(wire.openai_text(a) for a in TURN_1[:1]),
            wire.openai_text(json.dumps({"action": "finish", "answer": "again", "cites": []})),
        ]
    )
    async with llm, dagagent.Session("trip", registry, llm, store=db) as s:
        assert s.unfinished == 2
        assert s.record is not None and s.record.turns[1].status is SolveStatus.INTERRUPTED
        with pytest.raises(SessionError, match="turn 2 of session 'trip' has not ended"):
            await s.ask("And London?")
        resumed = await s.resume()
        assert resumed is not None and resumed.ok and resumed.answer == "ok"
        (rnd,) = resumed.rounds
        assert rnd.result is not None
        # turn 1's outputs, as recorded (stood from before the kill, or read from the
        # record by the session's earlier_turn tool): never looked up again
        assert rnd.result.tasks["turn1"].status.ok
        assert rnd.result.tasks["turn1"].output == {"paris": {"city": "Paris", "temp_c": 18.0}}
        assert rnd.result.tasks["rep"].output == "report on Paris"
        assert s.unfinished is None
        third = await s.ask("And Paris again?")
        assert third.ok and [t.number for t in s.turns] == [1, 2, 3]
    # the report ran again (it was killed mid-call), Paris was looked up in turns 1 and 3 only
    assert log.read_text().splitlines() == [
        "get_weather Paris",
        "report Paris",
        "report Paris",
        "get_weather Paris",
    ]


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")}
