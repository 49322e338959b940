"""Goal to answer: plan-and-execute against ReAct on the ParallelQA questions, end to end.

Every mode runs through dagagent's public API against an OpenAI-compatible model server on
loopback with a latency model (``_latency_model.py``: time to first token, time per output
token, time per input token), which answers each question deterministically as planner,
joiner and ReAct agent. The tools are simulated and offline: ``search`` returns a synthetic
fact (a whole number) after a seeded latency, ``math`` evaluates arithmetic.

Modes:

- ``react``: :class:`dagagent.ReActAgent`, one tool call per model turn, then the answer;
- ``react-parallel``: the same agent, the model asking for every search in one turn
  (OpenAI-style parallel function calling);
- ``plan``: :func:`dagagent.solve` with ``stream=False`` (plan, then execute, then join);
- ``solve``: :func:`dagagent.solve`, streamed (tasks start while the plan is written).

Per mode: latency mean / p50 / p95, model calls, input and output tokens, cost at
``--price-in`` / ``--price-out`` dollars per million tokens, accuracy, and the speed-up of
mean latency over ``react``, overall and by ``branch``.

    python benchmarks/agent_vs_react.py                      # print only
    python benchmarks/agent_vs_react.py --write              # update benchmarks/results
    python benchmarks/agent_vs_react.py --questions 8 --scale 0.2
    python benchmarks/agent_vs_react.py --base-url http://localhost:8000/v1 --model NAME
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import _common as common
import _latency_model as lm
import _png
import anyio

import dagagent
from dagagent.llm import HTTPRetryPolicy, ModelSettings, OpenAIChat, UsageTracker
from dagagent.toolkits.calc import evaluate

MODES = ("react", "react-parallel", "plan", "solve")
SEARCH_S = (0.3, 1.2)  # seconds per simulated web search (assumption, see README)
MATH_S = (0.001, 0.005)
REACT_ONE = (
    "Use the tools to answer. Call one tool per turn; when you have what you need, give the "
    "answer as text."
)
REACT_PARALLEL = (
    "Use the tools to answer. Call every tool you can call independently in the same turn; "
    "when you have what you need, give the answer as text."
)


def build_registry(world: lm.World, seed: int, scale: float) -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    async def search(query: str) -> int:
        """Search the web for one fact; returns it as a number.

        Args:
            query: The fact to look up, e.g. "fact 1 of question 7".
        """
        rng = random.Random(f"{seed}:search:{query}")
        await anyio.sleep(rng.uniform(*SEARCH_S) * scale)
        if query not in world.facts:
            raise ValueError(f"nothing found for {query!r}")
        return world.facts[query]

    @registry.tool
    async def math(expression: str) -> float | int:
        """Evaluate arithmetic such as "12 + 30 * 2".

        Args:
            expression: The arithmetic to evaluate.
        """
        rng = random.Random(f"{seed}:math:{expression}")
        await anyio.sleep(rng.uniform(*MATH_S) * scale)
        return evaluate(expression)

    return registry


def is_right(answer: str | None, expected: str) -> bool:
    """A number within 1 % of the expected one, or the expected text exactly."""
    if answer is None:
        return False
    try:
        want = float(expected)
    except ValueError:
        return answer.strip().lower() == expected.strip().lower()
    for found in re.findall(r"-?\d[\d,]*\.?\d*", answer):
        try:
            got = float(found.replace(",", ""))
        except ValueError:
            continue
        if abs(got - want) <= 0.01 * abs(want):
            return True
    return False


async def run_one(
    mode: str, q: dict[str, Any], base_url: str, model: str, registry: dagagent.Registry
) -> dict[str, Any]:
    usage = UsageTracker()
    llm = OpenAIChat(
        model,
        base_url=base_url,
        api_key="unused",
        usage=usage,
        settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)),
    )
    t0 = time.perf_counter()
    answer: str | None
    if mode.startswith("react"):
        agent = dagagent.ReActAgent(
            llm, registry, instructions=REACT_PARALLEL if mode == "react-parallel" else REACT_ONE
        )
        result = await agent.run(q["question"])
        answer = result.answer
        tool_calls = sum(len(s.calls) for s in result.steps)
    else:
        solution = await dagagent.solve(q["question"], registry, llm, stream=(mode == "solve"))
        answer = solution.answer_text if solution.status == "answered" else None
        tool_calls = sum(len(r.result.tasks) for r in solution.rounds if r.result is not None)
    latency = time.perf_counter() - t0
    return {
        "id": str(q["id"]),
        "branch": int(q["branch"]),
        "latency_s": latency,
        "calls": usage.calls,
        "tool_calls": tool_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "answer": answer,
        "right": is_right(answer, q["expected"]),
    }


async def run_mode(
    mode: str,
    questions: list[dict[str, Any]],
    base_url: str,
    model: str,
    registry: dagagent.Registry,
    concurrency: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    limit = anyio.Semaphore(concurrency)

    async def one(q: dict[str, Any]) -> None:
        async with limit:
            rows.append(await run_one(mode, q, base_url, model, registry))

    async with anyio.create_task_group() as tg:
        for q in questions:
            tg.start_soon(one, q)
    return sorted(rows, key=lambda r: (r["branch"], r["id"]))


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def summarise(rows: list[dict[str, Any]], price_in: float, price_out: float) -> dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    n = len(rows)
    tin = sum(r["input_tokens"] for r in rows) / n
    tout = sum(r["output_tokens"] for r in rows) / n
    return {
        "questions": n,
        "mean_s": statistics.fmean(lat),
        "p50_s": statistics.median(lat),
        "p95_s": p95(lat),
        "calls": sum(r["calls"] for r in rows) / n,
        "input_tokens": tin,
        "output_tokens": tout,
        "cost_usd": (tin * price_in + tout * price_out) / 1e6,
        "accuracy": sum(r["right"] for r in rows) / n,
    }


def pick(questions: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` questions spread over the branch counts, in data-set order (all when 0)."""
    if n <= 0 or n >= len(questions):
        return questions
    by_k: dict[int, list[dict[str, Any]]] = {}
    for q in questions:
        by_k.setdefault(int(q["branch"]), []).append(q)
    chosen: list[dict[str, Any]] = []
    while len(chosen) < n:
        for k in sorted(by_k):
            if by_k[k] and len(chosen) < n:
                chosen.append(by_k[k].pop(0))
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Goal to answer on the ParallelQA questions: ReAct (one call per turn, "
        "parallel calls) against plan-then-execute and streamed dagagent.solve, with a "
        "latency-model model server on loopback and simulated tools.",
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--questions", type=int, default=0, help="questions (0 = all 113)")
    parser.add_argument("--dataset", type=Path, default=common.DATA_DIR / "parallelqa_dataset.json")
    parser.add_argument("--seed", type=int, default=1, help="seed of facts and tool latencies")
    parser.add_argument("--ttft", type=float, default=0.5, help="seconds to first token")
    parser.add_argument(
        "--per-token", type=float, default=1 / 80, help="seconds per output token (1/80)"
    )
    parser.add_argument(
        "--prefill", type=float, default=0.0001, help="seconds per input token (0.0001)"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every model and tool latency"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="questions in flight at once per mode"
    )
    parser.add_argument("--price-in", type=float, default=0.15, help="$ per million input tokens")
    parser.add_argument("--price-out", type=float, default=0.60, help="$ per million output tokens")
    parser.add_argument("--base-url", help="a real OpenAI-compatible model instead")
    parser.add_argument("--model", default="latency-model", help="model name (with --base-url)")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(MODES)}")
    if not args.dataset.is_file():
        raise SystemExit(f"the ParallelQA dataset is missing: {args.dataset}")
    questions = pick(json.loads(args.dataset.read_text(encoding="utf-8")), args.questions)
    world = lm.World(questions, args.seed)
    for q in questions:
        q.update(world.by_question[str(q["question"]).strip()])
        q["expected"] = world.answer(q)
    latency = lm.LatencyModel(args.ttft, args.per_token, args.prefill).scaled(args.scale)
    registry = build_registry(world, args.seed, args.scale)

    per_mode: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        urls = {}
        if args.base_url:
            urls = dict.fromkeys(modes, args.base_url)
        else:
            one = stack.enter_context(lm.ModelServer(world, latency))
            par = stack.enter_context(lm.ModelServer(world, latency, parallel=True))
            urls = {m: (par.base_url if m == "react-parallel" else one.base_url) for m in modes}
        for mode in modes:
            t0 = time.perf_counter()
            per_mode[mode] = anyio.run(
                run_mode, mode, questions, urls[mode], args.model, registry, args.concurrency
            )
            print(f"{mode}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    report(args, latency, questions, per_mode)


def report(
    args: argparse.Namespace,
    latency: lm.LatencyModel,
    questions: list[dict[str, Any]],
    per_mode: dict[str, list[dict[str, Any]]],
) -> None:
    info = common.machine_info()
    summary = {m: summarise(rows, args.price_in, args.price_out) for m, rows in per_mode.items()}
    branches = sorted({int(q["branch"]) for q in questions})
    by_branch: dict[str, dict[str, float]] = {}
    for mode, rows in per_mode.items():
        by_branch[mode] = {
            str(k): statistics.fmean(r["latency_s"] for r in rows if r["branch"] == k)
            for k in branches
        }
    base = summary.get("react")
    high = {
        mode: statistics.fmean(r["latency_s"] for r in rows if r["branch"] >= 4)
        for mode, rows in per_mode.items()
        if any(r["branch"] >= 4 for r in rows)
    }
    headers = ["mode", "mean s", "p50 s", "p95 s", "calls", "in tok", "out tok", "cost $", "right"]
    headers += ["× react"] + [f"× react k={k}" for k in branches] + ["× react k=4–5"]
    rows = []
    for mode, s in summary.items():
        row = [mode, *(common.fmt(s[k], 3) for k in ("mean_s", "p50_s", "p95_s"))]
        row.append(common.fmt(s["calls"], 2))
        row.append(round(s["input_tokens"]))
        row += [round(s["output_tokens"]), f"{s['cost_usd']:.6f}", f"{s['accuracy']:.0%}"]
        if base:
            row.append(f"{base['mean_s'] / s['mean_s']:.2f}")
            row += [f"{by_branch['react'][str(k)] / by_branch[mode][str(k)]:.2f}" for k in branches]
            row.append(f"{high['react'] / high[mode]:.2f}" if high else "-")
        else:
            row += ["-"] * (2 + len(branches))
        rows.append(row)
    source = (
        f"real model {args.model} at {args.base_url}"
        if args.base_url
        else (
            f"loopback latency model: {latency.ttft_s:g} s to first token, "
            f"{latency.per_token_s:g} s per output token, {latency.prefill_s:g} s per input "
            f"token (scale {args.scale:g})"
        )
    )
    note = (
        f"{len(questions)} ParallelQA questions, {args.concurrency} at once per mode; "
        f"{source}; simulated search {SEARCH_S[0] * args.scale:g}–{SEARCH_S[1] * args.scale:g} s "
        f"(seeded) over synthetic facts; price ${args.price_in:g} / ${args.price_out:g} per "
        "million input / output tokens. Calls, tokens and cost are per question."
    )
    print(common.machine_line(info))
    print(note)
    print(common.text_table(headers, rows))
    data = {
        "machine": info,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "latency_model": vars(latency),
        "summary": summary,
        "by_branch": by_branch,
        "branch_4_5": high,
        "questions": per_mode,
    }
    markdown = "\n\n".join(
        [
            "# Goal to answer: plan-and-execute against ReAct",
            f"`{common.command_line()}`",
            common.machine_line(info),
            note,
            common.markdown_table(headers, rows),
        ]
    )
    out = common.result_dir(args)
    if out is None:
        print("results not written (pass --write to update benchmarks/results, or --out DIR)")
        return
    for p in common.write_results(out, "agent_vs_react", data, markdown):
        print(f"wrote {p}")
    png = out / "agent_vs_react.png"
    _png.bar_chart(
        png,
        f"mean latency in s - goal to answer ({len(questions)} parallelqa questions)",
        ["all", *(f"k={k}" for k in branches)],
        {m: [summary[m]["mean_s"], *(by_branch[m][str(k)] for k in branches)] for m in summary},
    )
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
