"""Streamed planning against planning first: when the first tool starts, and the whole time.

A simulated model writes a plan at a fixed pace (``--chunk-delay`` seconds per
``--chunk-size`` characters, as ``ScriptedLLM(chunk_delay_s=...)`` does for both a streamed
and a whole answer): ``--tools`` independent look-ups that each take ``--tool-s`` seconds,
then one task combining them. Both ways run on the same executor (``--executors``, default
``dataflow``); the model's pace is the same, so the difference is what streaming buys.

Reported per executor and way (best of ``--repeats``, medians in the JSON):

- **first tool**: seconds from the start until the first tool starts;
- **total**: seconds until the run has finished;
- **total / floor**, where the floor is measured in the same run: the time the model takes
  to write the whole plan, plus one tool's time. Planning first cannot beat the floor; a
  streamed plan can, since its look-ups run while the plan is being written.

    python benchmarks/streamed_planning.py
    python benchmarks/streamed_planning.py --tools 10 --tool-s 1.0 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import _common as common
import anyio

import dagagent
from dagagent.events import TaskStarted
from dagagent.llm import ScriptedLLM
from dagagent.planners import LLMPlanner
from dagagent.planners.streaming import plan_and_execute_streamed
from dagagent.settings import RunSettings


def build_registry(tool_s: float) -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    async def lookup(topic: str) -> str:
        """Simulated look-up: sleeps, then returns a fact about the topic.

        Args:
            topic: What to look up.
        """
        await anyio.sleep(tool_s)
        return f"a fact about {topic}"

    @registry.tool
    def combine(facts: list[str], note: str = "") -> int:
        """Combine the facts.

        Args:
            facts: The facts.
            note: Free text.
        """
        return len(facts)

    return registry


def plan_text(tools: int) -> str:
    tasks: list[dict[str, Any]] = [
        {"id": f"look{i}", "tool": "lookup", "args": {"topic": f"topic number {i}"}}
        for i in range(tools)
    ]
    facts = [f"${{look{i}}}" for i in range(tools)]
    tasks.append(
        {"id": "all", "tool": "combine", "args": {"facts": facts, "note": "the look-ups, combined"}}
    )
    return json.dumps({"goal": "combine the look-ups", "tasks": tasks})


async def one_run(
    streamed: bool, args: argparse.Namespace, executor: str, text: str
) -> dict[str, float]:
    registry = build_registry(args.tool_s)
    llm = ScriptedLLM([text], chunk_size=args.chunk_size, chunk_delay_s=args.chunk_delay)
    planner = LLMPlanner(llm, registry)
    first: list[float] = []

    def listener(event: Any) -> None:
        if isinstance(event, TaskStarted) and not first:
            first.append(time.perf_counter())

    t0 = time.perf_counter()
    if streamed:
        round_ = await plan_and_execute_streamed(
            planner,
            "combine the look-ups",
            registry,
            listeners=[listener],
            settings=RunSettings(executor=executor),
        )
        result = round_.result
    else:
        plan = await planner.plan("combine the look-ups")
        result = await dagagent.execute(
            plan, registry, listeners=[listener], settings=RunSettings(executor=executor)
        )
    total = time.perf_counter() - t0
    if not result.ok:
        raise SystemExit(f"the run failed: {result.status}")
    return {"first_tool_s": first[0] - t0, "total_s": total}


async def writing_time(args: argparse.Namespace, text: str) -> float:
    """How long the simulated model takes to write the whole plan (the floor's first part)."""
    llm = ScriptedLLM([text], chunk_size=args.chunk_size, chunk_delay_s=args.chunk_delay)
    t0 = time.perf_counter()
    async for _ in llm.stream([]):
        pass
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=5, help="parallel look-ups (default 5)")
    parser.add_argument("--tool-s", type=float, default=0.5, help="seconds per look-up")
    parser.add_argument("--chunk-size", type=int, default=8, help="characters per piece")
    parser.add_argument("--chunk-delay", type=float, default=0.01, help="seconds per piece")
    parser.add_argument("--executors", default="dataflow", help="comma-separated executors")
    parser.add_argument("--repeats", type=int, default=3, help="runs per way (best is shown)")
    common.add_output_options(parser)
    args = parser.parse_args()
    executors = common.usable_executors(parser, args.executors.split(","))
    text = plan_text(args.tools)

    async def measure() -> dict[str, Any]:
        out: dict[str, Any] = {"writing_s": [], "runs": {}}
        for executor in executors:
            for streamed in (False, True):
                key = f"{executor}/{'streamed' if streamed else 'plan first'}"
                out["runs"][key] = [
                    await one_run(streamed, args, executor, text) for _ in range(args.repeats)
                ]
            out["writing_s"].append(await writing_time(args, text))
        return out

    data = anyio.run(measure)
    floor = common.median(data["writing_s"]) + args.tool_s
    headers = ["executor / way", "first tool (s)", "total (s)", "total / floor"]
    rows = []
    for key, runs in data["runs"].items():
        best = min(runs, key=lambda r: r["total_s"])
        rows.append(
            [
                key,
                common.fmt(best["first_tool_s"]),
                common.fmt(best["total_s"]),
                common.fmt(best["total_s"] / floor),
            ]
        )
        data["runs"][key] = {
            "runs": runs,
            "median_total_s": common.median([r["total_s"] for r in runs]),
            "median_first_tool_s": common.median([r["first_tool_s"] for r in runs]),
        }
    info = common.machine_info()
    note = (
        f"{args.tools} look-ups of {args.tool_s:g} s and one combining task; the model writes "
        f"{len(text)} characters, {args.chunk_size} every {args.chunk_delay:g} s (measured: "
        f"{common.fmt(common.median(data['writing_s']))} s). Floor = writing time + one "
        f"look-up = {common.fmt(floor)} s."
    )
    print(common.machine_line(info))
    print(note)
    print(common.text_table(headers, rows))
    markdown = "\n\n".join(
        [
            "# Streamed planning",
            f"`{common.command_line()}`",
            common.machine_line(info),
            note,
            common.markdown_table(headers, rows),
        ]
    )
    result = {"machine": info, "options": vars(args), "floor_s": floor, **data}
    common.save(args, "streamed_planning", result, markdown)


if __name__ == "__main__":
    main()
