"""The viewer shows a session as a thread of solves: each turn's question, answer, status,
solve and run, and the earlier outputs its plan reused; the runs page lists the sessions and
a turn's solve page names its session. Served over real HTTP (uvicorn on loopback), hostile
text escaped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx

import dagagent
from dagagent.llm import ScriptedLLM, wire
from ui.conftest import Server

HOSTILE = "Weather in Paris? <script>alert(1)</script>"


def _store(path: Path) -> list[str]:
    registry = dagagent.Registry()

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather."""
        return {"city": city, "temp_c": {"Paris": 18.0, "Tokyo": 24.5}[city]}

    @registry.tool
    def warmer(a: dict[str, Any], b: dict[str, Any]) -> str:
        """The warmer city."""
        return str(a["city"] if a["temp_c"] >= b["temp_c"] else b["city"])

    def plan(*tasks: dict[str, Any]) -> str:
        return json.dumps({"tasks": list(tasks)})

    answers = [
        plan({"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}}),
        json.dumps({"action": "finish", "answer": "18 C <b>in Paris</b>", "cites": ["paris"]}),
        plan(
            {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
            {"id": "cmp", "tool": "warmer", "args": {"a": "${turn1.paris}", "b": "${tokyo}"}},
        ),
        json.dumps({"action": "finish", "answer": "Tokyo is warmer", "cites": ["cmp"]}),
    ]

    async def main() -> list[str]:
        llm = ScriptedLLM.openai([wire.openai_text(a) for a in answers])
        async with llm, dagagent.Session("trip", registry, llm, store=path) as s:
            first = await s.ask(HOSTILE)
            second = await s.ask("Is Tokyo warmer?")
        return [first.solve_id, second.solve_id]

    return anyio.run(main)


def test_a_session_is_a_thread_of_solves(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    first, second = _store(db)
    with Server(db) as server, httpx.Client(base_url=server.url) as http:
        page = http.get("/sessions/trip")
        assert page.status_code == 200
        html = page.text
        assert "<script>alert(1)</script>" not in html and "&lt;b&gt;in Paris" in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert html.index('id="turn-1"') < html.index('id="turn-2"')
        assert f'href="/solves/{first}"' in html and f'href="/solves/{second}"' in html
        assert "reused from earlier turns: <code>turn1.paris</code>" in html
        listing = http.get("/").text
        assert 'href="/sessions/trip"' in listing and "Is Tokyo warmer?" in listing
        solve = http.get(f"/solves/{second}").text
        assert 'href="/sessions/trip#turn-2">session trip</a>, turn 2' in solve
        assert http.get("/sessions/nope").status_code == 404
        assert http.get("/sessions/no%20spaces").status_code == 404


def test_a_turns_compression_is_drawn_before_its_rounds(tmp_path: Path) -> None:
    from dagagent.store import RunStore
    from dagagent.ui._solve import build_solve_view

    registry = dagagent.Registry()

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather."""
        return {"city": city, "temp_c": 18.0}

    def turn(city: str) -> list[str]:
        task = {"id": city.lower(), "tool": "get_weather", "args": {"city": city}}
        answer = {"action": "finish", "answer": "mild " * 80, "cites": [city.lower()]}
        return [json.dumps({"tasks": [task]}), json.dumps(answer)]

    answers = [*turn("Paris"), *turn("Tokyo"), "the summary", *turn("Oslo")]

    async def main() -> str:
        llm = ScriptedLLM.openai([wire.openai_text(a) for a in answers])
        async with (
            llm,
            dagagent.Session(
                "s", registry, llm, store=tmp_path / "r.db", max_tokens=100, keep=1, stream=False
            ) as s,
        ):
            for question in ("Paris?", "Tokyo?", "Oslo?"):
                solution = await s.ask(question)
        return solution.solve_id

    solve_id = anyio.run(main)
    with RunStore(tmp_path / "r.db") as store:
        record = store.get_solve(solve_id)
        runs = {r.run_id: store.get_run(r.run_id) for r in record.rounds if r.run_id}
    view = build_solve_view(record, runs)
    assert [b.label for b in view.bars][:2] == ["compress #1", "r1 planner #2"]
    assert view.by_role["compress"].calls == 1
