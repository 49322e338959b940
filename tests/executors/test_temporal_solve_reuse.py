"""A solve's later round on Temporal reuses the round before's successes, as a local solve's
does: the same scenario solved locally and on a real development server with ``dagagent
worker`` processes, whose tools count their calls in files (outside every process), and
whose records must be the same.

Nothing waits on a clock: the solves run to their ends.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.llm import wire
from dagagent.review import reuse_map
from dagagent.settings import RunSettings

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from llm_server import LLMTestServer, Recorded, Reply

from dagagent.executors.temporal import workflow_id
from dagagent.workflows.temporal_solve import solve_workflow_id

from .temporal_fixtures import Workers
from .test_temporal_solve import (
    FAST_RETRY,
    Model,
    client_of,
    executor,
    history_of,
    replay,
)
from .test_temporal_subsolve import GOAL, MAP_PLAN, Router, _goal, both, shape

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def plans(where: Path) -> list[dict[str, Any]]:
    """Round 1: ``t`` and ``e`` (effects counted in ``where``), ``c``, a map ``m`` over two
    items and ``f``, which fails. Round 2 keeps ``t`` (reused before the run starts: nothing
    above it), changes ``c`` to the same sum (it runs again, with the same output, so ``e``
    below it is reused by its worker), maps ``m`` over three items (the first two elements
    reused), and adds ``d`` on ``t``'s output. Round 3 keeps round 2's tasks (those round 2
    reused too) and adds ``s``."""
    here = str(where)
    first = {
        "goal": "g",
        "tasks": [
            {"id": "t", "tool": "tally_effect", "args": {"name": "t", "where": here}},
            {"id": "c", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "e", "tool": "tally_effect", "args": {"name": "e-${c}", "where": here}},
            {
                "id": "m",
                "for_each": [1, 2],
                "tool": "tally_effect",
                "args": {"name": "m${@item}", "where": here},
            },
            {"id": "f", "tool": "boom", "args": {"x": 7}},
        ],
    }
    second = {
        "goal": "g",
        "tasks": [
            {"id": "t", "tool": "tally_effect", "args": {"name": "t", "where": here}},
            {"id": "c", "tool": "add", "args": {"a": 2, "b": 1}},
            {"id": "e", "tool": "tally_effect", "args": {"name": "e-${c}", "where": here}},
            {
                "id": "m",
                "for_each": [1, 2, 3],
                "tool": "tally_effect",
                "args": {"name": "m${@item}", "where": here},
            },
            {"id": "d", "tool": "double", "args": {"x": "${t}"}},
        ],
    }
    third = {
        **second,
        "tasks": [*second["tasks"], {"id": "s", "tool": "add", "args": {"a": "${d}", "b": 1}}],
    }
    return [first, second, third]


REPLAN = {"action": "replan", "feedback": "f failed: double t instead, map three items"}
MORE = {"action": "replan", "feedback": "add 1 to d"}
FINISH = {"action": "finish", "answer": "t doubled, plus 1, is 3", "cites": ["s"]}


def calls_made(where: Path) -> dict[str, int]:
    """How many times each counted call was made (``tally_effect``'s files)."""
    return {
        p.name.removesuffix(".effects"): len(p.read_text().splitlines()) for p in where.iterdir()
    }


async def solved(
    server: LLMTestServer, where: Path, store: Path, settings: RunSettings, *, stream: bool = False
) -> dagagent.Solution:
    server.responder = Model(plans(where), [REPLAN, MORE, FINISH])
    async with client_of(server) as llm:
        solution = await dagagent.solve(
            "double t",
            temporal_tools.registry,
            llm,
            settings=settings,
            store=store,
            stream=stream,
        )
    assert solution.status.value == "answered", solution.reason
    return solution


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_later_round_reuses_the_round_before_s_successes_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path, stream: bool
) -> None:
    """Three rounds whose revised plans keep tasks of the round before: on Temporal, as
    locally, each kept success is reused and its tool is not called again (an unchanged task
    settled before its run starts, or as it arrives when the revised plan is streamed, one
    whose upstream ran again with the same output reused by its worker, a map's unchanged
    elements), and the records (statuses, outputs, arguments, rounds, model calls) equal the
    local solve's; the histories replay."""
    where = tmp_path / "calls"
    where.mkdir()
    once = {"t": 1, "e-3": 1, "m1": 1, "m2": 1, "m3": 1}
    local = await solved(
        model_server,
        where,
        tmp_path / "local.db",
        RunSettings(on_failure="continue", retry=FAST_RETRY),
        stream=stream,
    )
    assert calls_made(where) == once
    for counted in where.iterdir():
        counted.unlink()

    ex = executor(workers)
    store = tmp_path / "temporal.db"
    there = await solved(
        model_server,
        where,
        store,
        RunSettings(executor=ex, on_failure="continue", retry=FAST_RETRY),
        stream=stream,
    )
    # each call made once over both rounds: round 2 reused what round 1 made
    assert calls_made(where) == once
    first, second, third = (r.result for r in there.rounds)
    assert first is not None and second is not None and third is not None
    statuses = {t: r.status.value for t, r in second.tasks.items()}
    assert statuses == {
        "t": "reused",
        "c": "succeeded",
        "e": "reused",
        "m": "succeeded",
        "d": "succeeded",
    }
    assert [e.status.value for e in second.tasks["m"].elements or ()] == [
        "reused",
        "reused",
        "succeeded",
    ]
    assert second.tasks["d"].output == 2 and second.tasks["t"].output == 1
    assert second.parent_id == first.run_id
    # round 3 reuses what round 2 ran and what round 2 reused in its turn
    assert {t: r.status.value for t, r in third.tasks.items()} == {
        "t": "reused",
        "c": "reused",
        "e": "reused",
        "m": "reused",
        "d": "reused",
        "s": "succeeded",
    }
    assert third.tasks["s"].output == 3 and third.parent_id == second.run_id
    with dagagent.RunStore(store) as runs:
        recorded = runs.get_run(second.run_id)
        assert recorded.parent_id == first.run_id
        assert {t: r.status.value for t, r in recorded.tasks.items()} == statuses
        # what the round reused stands on record to be reused again by a later revision
        assert set(reuse_map(recorded)) >= {"t", "c", "e", "d", "m"}
        temporal_shape = shape(runs, there.solve_id)
    with dagagent.RunStore(tmp_path / "local.db") as runs:
        local_shape = shape(runs, local.solve_id)
    assert temporal_shape == local_shape
    # the solve's history, and that of a run that starts with reused tasks, replay
    for workflow in (solve_workflow_id(there.solve_id), workflow_id(second.run_id)):
        _, history = await history_of(ex, workflow)
        await replay(ex, history)


class Revising(Router):
    """:class:`Router`, but the top goal's plans and answers come in turn from ``plans`` and
    ``answers`` (again from the first once each is used: the same script for a local solve
    and for one on Temporal)."""

    def __init__(self, plans: list[dict[str, Any]], answers: list[dict[str, Any]]) -> None:
        super().__init__({}, {})
        self.scripts = {"plan": itertools.cycle(plans), "join": itertools.cycle(answers)}

    def __call__(self, request: Recorded) -> Reply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        if _goal(body) != GOAL:
            return super().__call__(request)
        kind = "plan" if "plan" in name else "join"
        with self.lock:
            self.seen[(GOAL, kind)] += 1
            answer = next(self.scripts[kind])
        return Reply(json=wire.openai_text(json.dumps(answer), input_tokens=100, output_tokens=20))


@pytest.mark.anyio
async def test_a_kept_sub_solve_task_is_reused_without_solving_again_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Round 2 keeps round 1's map of sub-solves: on Temporal, as locally, the task is
    reused and no child solve starts again (each region's goal is planned and joined once
    per solve); the records (children too) have the same shape."""
    failing = {"tasks": [*MAP_PLAN["tasks"], {"id": "f", "tool": "boom", "args": {"x": 7}}]}
    revised = {
        "tasks": [*MAP_PLAN["tasks"], {"id": "n", "tool": "echo", "args": {"value": "${best}"}}]
    }
    replan = {"action": "replan", "feedback": "f failed: echo the suppliers instead"}
    finish = {"action": "finish", "answer": "EU: Acme; US: Bolt", "cites": ["n"]}
    router = Revising([failing, revised], [replan, finish])
    local, durable, _, _ = await both(model_server, workers, tmp_path, router)
    assert durable == local
    assert durable["status"] == "answered"
    first, second = durable["runs"]
    assert first["best"][0] == "succeeded" and second["best"][0] == "reused"
    assert second["n"][:2] == ["succeeded", ["Acme", "Bolt"]]
    assert len(durable["children"]) == 2  # round 1's; round 2 started none
    # each region's sub-solve planned and joined once locally, once on Temporal
    regions = {k: n for k, n in router.seen.items() if k[0] != GOAL}
    assert regions and set(regions.values()) == {2}
