"""Goal to answer: plan-and-execute against ReAct on LLMCompiler's three question sets.

``--dataset parallelqa|movie|hotpotqa`` (``_datasets.py``): every question is answered four
ways through dagagent's public API against an OpenAI-compatible model server on loopback
(``_latency_model.py``) that answers deterministically as planner, joiner and ReAct agent and
waits as a latency model says (a named ``--preset``). The tools are simulated and offline:
each look-up sleeps for a seeded latency and returns synthetic facts made for its question.

Modes:

- ``react``: :class:`dagagent.ReActAgent`, one tool call per model turn, then the answer;
- ``react-parallel``: the same agent, the model asking for every look-up in one turn
  (OpenAI-style parallel function calling);
- ``plan``: :func:`dagagent.solve` with ``stream=False`` (plan, then execute, then join);
- ``solve``: :func:`dagagent.solve`, streamed (tasks start while the plan is written).

Per mode: latency mean / p50 / p95, model calls, input and output tokens (one rule for every
mode: ``_latency_model.ACCOUNTING``), cost at one price table, accuracy, the ratios of mean
latency and cost against ``react``, where the time goes, LLMCompiler's published ratios beside
ours, and the issue's targets.

What the scripted planner writes (``--plan-written``): by default ``lean``, what the library's
planner prompt asks for (per task ``id``, ``tool`` and ``args``), with the library's default
request (its prompt and the non-strict plan schema of ``plan_response_format(registry)``);
``strict`` runs the planner with ``LLMPlanner(..., strict=True)``, so the request carries the
strict schema and the plan has every field of every task, as that schema makes a model write
it; ``llmcompiler`` writes LLMCompiler's text format (which the planner reads too) to the
default request, an estimate of a format the library's prompt does not ask for. The run
checks that the planner's requests and the written plan agree (strict or not).

    python benchmarks/agent_vs_react.py --dataset movie              # print only
    python benchmarks/agent_vs_react.py --dataset movie --write      # update benchmarks/results
    python benchmarks/agent_vs_react.py --dataset hotpotqa --questions 8 --scale 0.2
    python benchmarks/agent_vs_react.py --preset local --questions 40
    python benchmarks/agent_vs_react.py --dataset movie --plan-written strict  # strict=True
    python benchmarks/agent_vs_react.py --base-url http://localhost:8000/v1 --model NAME
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import _common as common
import _datasets as ds
import _latency_model as lm
import _png
import anyio

import dagagent
from dagagent.llm import HTTPRetryPolicy, ModelSettings, OpenAIChat, UsageTracker
from dagagent.planners import plan_json_schema

MODES = ("react", "react-parallel", "plan", "solve")
REACT_ONE = (
    "Use the tools to answer. Call one tool per turn; when you have what you need, give the "
    "answer as text."
)
REACT_PARALLEL = (
    "Use the tools to answer. Call every tool you can call independently in the same turn; "
    "when you have what you need, give the answer as text."
)
# One price table for every mode, preset and data set: OpenAI's list price of GPT-4o mini.
PRICE_IN, PRICE_OUT = 0.15, 0.60
PRICE_SOURCE = "OpenAI's list price for GPT-4o mini"
# The paper's models were priced $1 / $2 (gpt-3.5-turbo-1106) and $10 / $30 (gpt-4-turbo).
PAPER_PRICES = {"movie": (1.0, 2.0), "hotpotqa": (1.0, 2.0), "parallelqa": (10.0, 30.0)}

SEARCH_SOURCE = (
    "a seeded 0.3-1.2 s per look-up (mean 0.75 s, mean slowest of 8 about 1.1 s; LLMCompiler "
    "measured a mean search of 0.61 s and a mean slowest-of-8 of 1.13 s on Movie "
    "Recommendation, paper appendix E)"
)

# LLMCompiler (Kim et al., "An LLM Compiler for Parallel Function Calling", ICML 2024,
# arXiv:2312.04511v3): Table 1 (latency, s; ReAct is their ReAct with extra prompting against
# early stops and repeats), Table 2 (cost, $ per 1k questions, and tokens per question) and
# Table C.1 (plan-then-execute against streamed). OpenAI parallel function calling is "oai".
PAPER: dict[str, dict[str, Any]] = {
    "movie": {
        "model": "gpt-3.5-turbo-1106",
        "latency_s": {"react": 20.47, "oai": 7.42, "llmcompiler": 5.47},
        "cost": {"react": 20.46, "oai": 6.14, "llmcompiler": 3.04},
        "tokens": {"react": (20_000, 230), "oai": (5_800, 160), "llmcompiler": (2_800, 115)},
        "stream_s": (5.64, 5.47),
    },
    "hotpotqa": {
        "model": "gpt-3.5-turbo-1106",
        "latency_s": {"react": 7.12, "oai": 4.42, "llmcompiler": 3.95},
        "cost": {"react": 5.00, "oai": 2.66, "llmcompiler": 1.47},
        "tokens": {"react": (2_900, 120), "oai": (2_500, 63), "llmcompiler": (1_300, 80)},
        "stream_s": (4.00, 3.95),
    },
    "parallelqa": {
        "model": "gpt-4-turbo-1106",
        "latency_s": {"react": 35.90, "oai": None, "llmcompiler": 16.69},
        "cost": {"react": 480.0, "oai": 260.0, "llmcompiler": 103.0},
        "tokens": {"react": (46_000, 470), "oai": (25_000, 370), "llmcompiler": (9_200, 340)},
        "stream_s": (21.72, 16.69),
    },
}
PAPER_DIFFERS = (
    "What differs: the paper ran real models (gpt-3.5-turbo-1106 for Movie and HotpotQA, "
    "gpt-4-turbo-1106 for ParallelQA) against live Wikipedia, with a text ReAct that writes a "
    "Thought before every action and carries few-shot examples in every call, and a planner "
    "that writes a compact plan (`1. search(X)`); here a scripted model that never errs "
    "answers through a latency model, the look-ups are simulated, the ReAct agent uses "
    "function calling (no thoughts, no examples: its calls are as short as they can be), and "
    "the plan is {plan}."
)
PAPER_PLAN = {
    "lean": "JSON, as the planner's prompt asks (id, tool and args per task)",
    "strict": "JSON with every field of every task, as the strict schema makes a model write it",
    "llmcompiler": "in the paper's text format, but the planner's prompt and schema are ours",
}

TARGETS: dict[str, list[tuple[str, str, str, float]]] = {
    # (what, numerator mode, denominator mode, bound): ratio numerator/denominator >= bound
    # for latency/cost speed-ups; for "solve / plan" the ratio must be <= bound.
    "movie": [
        ("latency", "react", "solve", 4.0),
        ("cost", "react", "solve", 7.0),
        ("latency", "react-parallel", "solve", 1.4),
        ("latency<=", "solve", "plan", 0.85),
    ],
    "hotpotqa": [("latency", "react", "solve", 2.0), ("cost", "react", "solve", 3.4)],
    "parallelqa": [("latency", "react", "solve", 2.5)],
}


async def run_one(
    mode: str,
    q: ds.Question,
    base_url: str,
    model: str,
    registry: dagagent.Registry,
    strict: bool,
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
        result = await agent.run(q.text)
        answer = result.answer
        tool_calls = sum(len(s.calls) for s in result.steps)
    else:
        # strict: the planner solve makes by default, with OpenAI's strict schema instead
        planner = dagagent.LLMPlanner(llm, registry, strict=True) if strict else None
        solution = await dagagent.solve(
            q.text, registry, llm, stream=(mode == "solve"), planner=planner
        )
        answer = solution.answer_text if solution.status == "answered" else None
        tool_calls = sum(len(r.result.tasks) for r in solution.rounds if r.result is not None)
    latency = time.perf_counter() - t0
    return {
        "id": q.id,
        "group": q.group,
        "t0": t0,
        "latency_s": latency,
        "calls": usage.calls,
        "tool_calls": tool_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "answer": answer,
        "expected": q.expected,
    }


async def run_mode(
    mode: str,
    questions: list[ds.Question],
    base_url: str,
    model: str,
    registries: dict[str, dagagent.Registry],
    concurrency: int,
    strict: bool = False,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    limit = anyio.Semaphore(concurrency)

    async def one(q: ds.Question) -> None:
        async with limit:
            rows.append(await run_one(mode, q, base_url, model, registries[q.id], strict))

    async with anyio.create_task_group() as tg:
        for q in questions:
            tg.start_soon(one, q)
    order = {q.id: i for i, q in enumerate(questions)}
    return sorted(rows, key=lambda r: order[r["id"]])


def attach_timings(rows: list[dict[str, Any]], records: list[lm.CallRecord]) -> None:
    """Where each question's time went, from the model server's records of its calls."""
    by_q: dict[str, list[lm.CallRecord]] = {}
    for rec in records:
        by_q.setdefault(rec.question, []).append(rec)
    for row in rows:
        recs = sorted(by_q.get(row["id"], []), key=lambda r: r.start)
        t0 = row.pop("t0")
        row["model_s"] = sum(r.end - r.start for r in recs)
        planner = [r for r in recs if r.role == "planner"]
        joiner = [r for r in recs if r.role == "joiner"]
        if planner and joiner:
            row["planner_s"] = sum(r.end - r.start for r in planner)
            row["joiner_s"] = sum(r.end - r.start for r in joiner)
            row["planner_strict"] = planner[-1].strict  # the schema sent: None when none
            row["plan_done_s"] = planner[-1].end - t0  # when the last plan token arrived
            row["after_plan_s"] = joiner[0].start - planner[-1].end  # tools not yet done
            row["planner_tokens"] = [
                sum(r.input_tokens for r in planner),
                planner[-1].output_tokens,
                planner[-1].schema_tokens,
            ]
            row["joiner_tokens"] = [
                sum(r.input_tokens for r in joiner),
                joiner[-1].output_tokens,
                joiner[-1].schema_tokens,
            ]


def check_request(mode: str, rows: list[dict[str, Any]], plan_written: str) -> None:
    """The plan written must be what the request asked for: a strict plan only to a strict
    schema, any other only to the default, non-strict one."""
    want = plan_written == "strict"
    sent = {r["planner_strict"] for r in rows if "planner_strict" in r}
    if sent and sent != {want}:
        raise SystemExit(
            f"{mode}: the planner's requests sent strict={sorted(sent, key=str)} but the "
            f"scripted planner writes its plan {lm.PLAN_WRITTEN[plan_written]}"
        )


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return statistics.fmean(values) if values else None


def summarise(
    rows: list[dict[str, Any]], right: list[bool], prices: tuple[float, float]
) -> dict[str, Any]:
    lat = [r["latency_s"] for r in rows]
    n = len(rows)
    tin = sum(r["input_tokens"] for r in rows) / n
    tout = sum(r["output_tokens"] for r in rows) / n
    out = {
        "questions": n,
        "mean_s": statistics.fmean(lat),
        "p50_s": statistics.median(lat),
        "p95_s": p95(lat),
        "calls": sum(r["calls"] for r in rows) / n,
        "tool_calls": sum(r["tool_calls"] for r in rows) / n,
        "input_tokens": tin,
        "output_tokens": tout,
        "cost_usd": (tin * prices[0] + tout * prices[1]) / 1e6,
        "accuracy": sum(right) / n,
    }
    for key in ("model_s", "planner_s", "joiner_s", "plan_done_s", "after_plan_s"):
        value = mean_of(rows, key)
        if value is not None:
            out[key] = value
    for key in ("planner_tokens", "joiner_tokens"):
        pairs = [r[key] for r in rows if key in r]
        if pairs:
            out[key] = [statistics.fmean(p[i] for p in pairs) for i in range(3)]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Goal to answer on LLMCompiler's question sets: ReAct (one call per turn, "
        "parallel calls) against plan-then-execute and streamed dagagent.solve, with a "
        "latency-model model server on loopback and simulated look-ups.",
    )
    parser.add_argument(
        "--dataset", choices=sorted(ds.DATASETS), default="parallelqa", help="question set"
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--questions", type=int, default=0, help="questions (0 = all)")
    parser.add_argument("--data-dir", type=Path, default=common.DATA_DIR, help="data folder")
    parser.add_argument("--seed", type=int, default=1, help="seed of facts and tool latencies")
    parser.add_argument(
        "--preset",
        choices=sorted(lm.PRESETS),
        default="hosted-fast",
        help="latency model parameters (see the results files for their sources)",
    )
    parser.add_argument("--ttft", type=float, help="override: seconds to first token")
    parser.add_argument("--per-token", type=float, help="override: seconds per output token")
    parser.add_argument("--prefill", type=float, help="override: seconds per input token")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every model and tool latency"
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="questions in flight at once per mode"
    )
    parser.add_argument(
        "--price-in", type=float, default=PRICE_IN, help="$ per million input tokens, every mode"
    )
    parser.add_argument(
        "--price-out", type=float, default=PRICE_OUT, help="$ per million output tokens, every mode"
    )
    parser.add_argument(
        "--plan-written",
        choices=list(lm.PLAN_WRITTEN),
        default=lm.DEFAULT_PLAN,
        help="what the scripted planner writes: 'lean' (the default, and the fair one: what "
        "the planner's prompt asks for, per task id, tool and args, with the default "
        "non-strict schema sent); 'strict' (the planner made with LLMPlanner(strict=True): "
        "the strict schema sent, and every field of every task written, depends_on [] and "
        "for_each null included); 'llmcompiler' (LLMCompiler's text format, which the "
        "planner reads too, written to the default request: an estimate of a format the "
        "library's prompt does not ask for)",
    )
    parser.add_argument("--base-url", help="a real OpenAI-compatible model instead")
    parser.add_argument("--model", default="latency-model", help="model name (with --base-url)")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise SystemExit(f"unknown mode(s) {', '.join(bad)}; choose from {', '.join(MODES)}")
    dataset = ds.DATASETS[args.dataset]
    questions = dataset.load(args.data_dir, args.questions, args.seed)
    preset = lm.PRESETS[args.preset].with_overrides(
        ttft_s=args.ttft, per_token_s=args.per_token, prefill_s=args.prefill
    )
    latency = preset.model.scaled(args.scale)
    registries = {q.id: dataset.registry(q, args.seed, args.scale) for q in questions}

    per_mode: dict[str, list[dict[str, Any]]] = {}
    with ExitStack() as stack:
        servers: dict[str, lm.ModelServer] = {}
        if not args.base_url:
            one = stack.enter_context(
                lm.ModelServer(dataset, questions, latency, plan_written=args.plan_written)
            )
            par = stack.enter_context(lm.ModelServer(dataset, questions, latency, parallel=True))
            servers = {m: (par if m == "react-parallel" else one) for m in modes}
        for mode in modes:
            url = args.base_url or servers[mode].base_url
            t0 = time.perf_counter()
            rows = anyio.run(
                run_mode,
                mode,
                questions,
                url,
                args.model,
                registries,
                args.concurrency,
                args.plan_written == "strict",
            )
            attach_timings(rows, servers[mode].take_records() if servers else [])
            if servers:
                check_request(mode, rows, args.plan_written)
            per_mode[mode] = rows
            print(f"{mode}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    report(args, dataset, preset, latency, questions, per_mode)


def _x(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}" if num and den else "-"


def report(
    args: argparse.Namespace,
    dataset: ds.Dataset,
    preset: lm.Preset,
    latency: lm.LatencyModel,
    questions: list[ds.Question],
    per_mode: dict[str, list[dict[str, Any]]],
) -> None:
    info = common.machine_info()
    by_id = {q.id: q for q in questions}
    for rows in per_mode.values():
        for r in rows:
            r["right"] = dataset.is_right(r["answer"], by_id[r["id"]])
    prices = (args.price_in, args.price_out)
    price_source = PRICE_SOURCE if prices == (PRICE_IN, PRICE_OUT) else "given on the command line"
    summary = {
        m: summarise(rows, [r["right"] for r in rows], prices) for m, rows in per_mode.items()
    }
    groups = sorted({q.group for q in questions})
    by_group = {
        mode: {g: statistics.fmean(r["latency_s"] for r in rows if r["group"] == g) for g in groups}
        for mode, rows in per_mode.items()
    }
    react = summary.get("react")
    par = summary.get("react-parallel")

    # -- the main table ---------------------------------------------------------------
    headers = ["mode", "mean s", "p50 s", "p95 s", "model calls", "tool calls"]
    headers += ["in tok", "out tok", "cost $", "right", "× react latency", "× react cost"]
    headers += ["× react-parallel latency"]
    if len(groups) > 1:
        headers += [f"× react, {g}" for g in groups]
    table = []
    for mode, s in summary.items():
        row = [mode, *(common.fmt(s[k], 3) for k in ("mean_s", "p50_s", "p95_s"))]
        row += [common.fmt(s["calls"], 2), common.fmt(s["tool_calls"], 2)]
        row += [f"{s['input_tokens']:,.0f}", f"{s['output_tokens']:,.0f}"]
        row += [f"{s['cost_usd']:.6f}", f"{s['accuracy']:.1%}"]
        row.append(_x(react["mean_s"], s["mean_s"]) if react else "-")
        row.append(_x(react["cost_usd"], s["cost_usd"]) if react else "-")
        row.append(_x(par["mean_s"], s["mean_s"]) if par else "-")
        if len(groups) > 1:
            row += [_x(by_group["react"][g], by_group[mode][g]) if react else "-" for g in groups]
        table.append(row)

    # -- where the time goes ------------------------------------------------------------
    time_headers = ["mode", "mean s", "model calls s", "tools and engine s"]
    time_headers += ["plan written at s", "planner call s", "after the plan s", "joiner call s"]
    time_headers += ["planner in / out tok", "joiner in / out tok"]
    time_rows = []
    for mode, s in summary.items():
        if "model_s" not in s:
            continue
        tr: list[str] = [mode, common.fmt(s["mean_s"], 3), common.fmt(s["model_s"], 3)]
        if "planner_s" in s:
            tr.append(common.fmt(s["mean_s"] - s["planner_s"] - s["joiner_s"], 3))
            tr += [common.fmt(s[k], 3) for k in ("plan_done_s", "planner_s", "after_plan_s")]
            tr.append(common.fmt(s["joiner_s"], 3))
            tr += [
                f"{s[k][0]:,.0f} ({s[k][2]:,.0f} schema) / {s[k][1]:,.0f}"
                for k in ("planner_tokens", "joiner_tokens")
            ]
        else:
            tr.append(common.fmt(s["mean_s"] - s["model_s"], 3))
            tr += ["-"] * 6
        time_rows.append(tr)

    # -- the same plan in the other formats (estimates, from the scripted plans) --------
    format_headers = ["plan written", "output tokens", "writing s against this run's"]
    format_headers += ["plan est. s", "× react est."]
    format_rows = []
    registry = dataset.registry(questions[0], args.seed, args.scale)
    schema_sizes = {
        strict: lm.text_tokens(json.dumps(plan_json_schema(registry, strict=strict)))
        for strict in (False, True)
    }
    variants = [lm.plan_variants(dataset, q) for q in questions]
    written = statistics.fmean(lm.text_tokens(v[args.plan_written]) for v in variants)
    base = summary.get("plan")
    for name in lm.PLAN_WRITTEN:
        toks = statistics.fmean(lm.text_tokens(v[name]) for v in variants)
        more = (toks - written) * latency.per_token_s
        est = base["mean_s"] + more if base else None
        label = f"{name} (this run)" if name == args.plan_written else name
        format_rows.append(
            [label, f"{toks:,.0f}", f"{more:+.2f}", common.fmt(est, 3),
             _x(react["mean_s"], est) if react and est else "-"]
        )  # fmt: skip

    # -- the paper beside us -----------------------------------------------------------
    paper = PAPER[dataset.name]
    pl, pc = paper["latency_s"], paper["cost"]
    ours_l = {m: s["mean_s"] for m, s in summary.items()}
    ours_c = {m: s["cost_usd"] for m, s in summary.items()}
    pin, pout = PAPER_PRICES[dataset.name]

    def paper_cost(mode: str) -> float | None:
        s = summary.get(mode)
        return (s["input_tokens"] * pin + s["output_tokens"] * pout) / 1e6 if s else None

    paper_headers = ["ratio", "LLMCompiler paper", "ours (this run)"]
    paper_rows = [
        ["latency, ReAct / plan-and-execute", _x(pl["react"], pl["llmcompiler"]),
         _x(ours_l.get("react"), ours_l.get("solve"))],
        ["latency, ReAct / parallel calls", _x(pl["react"], pl["oai"]),
         _x(ours_l.get("react"), ours_l.get("react-parallel"))],
        ["latency, parallel calls / plan-and-execute", _x(pl["oai"], pl["llmcompiler"]),
         _x(ours_l.get("react-parallel"), ours_l.get("solve"))],
        ["latency, not streamed / streamed", _x(*paper["stream_s"]),
         _x(ours_l.get("plan"), ours_l.get("solve"))],
        ["cost, ReAct / plan-and-execute", _x(pc["react"], pc["llmcompiler"]),
         _x(ours_c.get("react"), ours_c.get("solve"))],
        [f"cost, ReAct / plan-and-execute at the paper's prices (${pin:g} / ${pout:g})",
         _x(pc["react"], pc["llmcompiler"]), _x(paper_cost("react"), paper_cost("solve"))],
        ["cost, ReAct / parallel calls", _x(pc["react"], pc["oai"]),
         _x(ours_c.get("react"), ours_c.get("react-parallel"))],
        ["input tokens per question, ReAct / plan-and-execute",
         f"{paper['tokens']['react'][0]:,} / {paper['tokens']['llmcompiler'][0]:,}",
         (f"{summary['react']['input_tokens']:,.0f} / {summary['solve']['input_tokens']:,.0f}"
          if "react" in summary and "solve" in summary else "-")],
        ["output tokens per question, ReAct / plan-and-execute",
         f"{paper['tokens']['react'][1]:,} / {paper['tokens']['llmcompiler'][1]:,}",
         (f"{summary['react']['output_tokens']:,.0f} / {summary['solve']['output_tokens']:,.0f}"
          if "react" in summary and "solve" in summary else "-")],
    ]  # fmt: skip

    # -- targets ------------------------------------------------------------------------
    targets = []
    for what, num, den, bound in TARGETS[dataset.name]:
        key = "cost_usd" if what == "cost" else "mean_s"
        if num not in summary or den not in summary:
            continue
        ratio = summary[num][key] / summary[den][key]
        met = ratio <= bound if what.endswith("<=") else ratio >= bound
        if what.endswith("<="):
            text = f"latency of {num} / {den} = {ratio:.2f} (target <= {bound:g})"
        else:
            text = f"{what} of {num} / {den} = {ratio:.2f}x (target >= {bound:g}x)"
        targets.append({"target": text, "ratio": ratio, "bound": bound, "met": met})

    # -- words ----------------------------------------------------------------------------
    if args.base_url:
        source = f"real model {args.model} at {args.base_url}"
    else:
        source = (
            f"loopback latency model, preset **{preset.name}** ({preset.describes}): "
            f"{latency.ttft_s:g} s to first token, {latency.per_token_s:.4g} s per output "
            f"token, {latency.prefill_s:.4g} s per input token (scale {args.scale:g}). "
            f"Source: {preset.source}"
        )
    total = dataset.size
    note = (
        f"{len(questions)} of the {total:,} {dataset.name} questions"
        f"{' (spread over ' + ', '.join(groups) + ')' if len(groups) > 1 else ''}, "
        f"{args.concurrency} at once per mode; {source}. Look-ups simulated: {SEARCH_SOURCE}, "
        "over synthetic facts (see benchmarks/_datasets.py). Calls, tokens and cost are per "
        f"question; cost at one price table for every mode: ${prices[0]:g} / ${prices[1]:g} "
        f"per million input / output tokens ({price_source})."
    )
    time_note = (
        "Where the time goes (means per question, from the model server's record of each "
        "call): model calls is the time inside model calls; for plan and solve, the plan is "
        "written at the given second, the planner call lasts as given (in solve the tools "
        "already run during it), after the plan is the wait from the plan's last token to the "
        "joiner's call (tools not yet done, and the engine), then the joiner's call."
    )
    planned = (
        f"Plan written {lm.PLAN_WRITTEN[args.plan_written]} (--plan-written "
        f"{args.plan_written}); the planner's request: its system prompt, the goal and "
        + (
            "the strict plan schema (LLMPlanner(strict=True))."
            if args.plan_written == "strict"
            else "the non-strict plan schema it sends by default (plan_response_format)."
        )
    )
    print(common.machine_line(info))
    print(note)
    if not args.base_url:
        print(planned)
    print(lm.ACCOUNTING)
    print(common.text_table(headers, table))
    if time_rows:
        print(common.text_table(time_headers, time_rows))
    print(common.text_table(paper_headers, paper_rows))
    for t in targets:
        print(f"target {'met' if t['met'] else 'MISSED'}: {t['target']}")

    data = {
        "machine": info,
        "dataset": dataset.name,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "preset": {"name": preset.name, "describes": preset.describes, "source": preset.source},
        "latency_model": vars(latency),
        "accounting": lm.ACCOUNTING,
        "prices_per_million": {"input": prices[0], "output": prices[1], "source": price_source},
        "summary": summary,
        "by_group": by_group,
        "paper": paper,
        "targets": targets,
        "plan_formats": [dict(zip(format_headers, r, strict=True)) for r in format_rows],
        "questions": per_mode,
    }
    md = [
        f"# Goal to answer against ReAct: {dataset.name} (preset {preset.name})"
        + {
            "lean": "",
            "strict": ", the planner with strict=True",
            "llmcompiler": ", the plan written in LLMCompiler's text format: an estimate of "
            "a format the library's planner does not ask for",
        }[args.plan_written],
        f"`{common.command_line()}`",
        common.machine_line(info),
        note,
        *([] if args.base_url else [f"**{planned}**"]),
        f"**Accounting.** {lm.ACCOUNTING}",
        common.markdown_table(headers, table),
    ]
    if time_rows:
        md += [time_note, common.markdown_table(time_headers, time_rows)]
    format_note = (
        "The same plan in every format (an estimate, not a run): its output tokens by the "
        "same rule, the writing time it takes more (+) or less (-) than this run's plan at "
        "this preset's time per output token, and plan-then-execute's measured mean latency "
        "with that difference. Only the output side is estimated: the request stays this "
        f"run's (for these tools the plan schema is {schema_sizes[False]:,} tokens non-strict "
        f"and {schema_sizes[True]:,} strict). The joiner's call (above) is the other fixed cost."
    )
    if not args.base_url:
        md += [format_note, common.markdown_table(format_headers, format_rows)]
        print(common.text_table(format_headers, format_rows))
    md += [
        "## LLMCompiler's published ratios beside ours",
        f"Paper: Kim et al., ICML 2024 (arXiv:2312.04511v3), with {paper['model']}; Tables 1 "
        "(latency, against their ReAct with extra prompting), 2 (cost and tokens) and C.1 "
        "(streaming). Ours: solve against react, react-parallel and plan, same run. "
        + PAPER_DIFFERS.format(plan=PAPER_PLAN[args.plan_written]),
        common.markdown_table(paper_headers, paper_rows),
        "## Targets (issue 42)",
        "\n".join(f"- {'met' if t['met'] else '**missed**'}: {t['target']}" for t in targets),
    ]
    out = common.result_dir(args)
    if out is None:
        print("results not written (pass --write to update benchmarks/results, or --out DIR)")
        return
    name = f"agent_vs_react_{dataset.name}"
    if preset.name != "hosted-fast":
        name += f"_{preset.name}".replace("+", "_")
    if args.plan_written != lm.DEFAULT_PLAN:
        name += f"_plan_{args.plan_written}"
    for p in common.write_results(out, name, data, "\n\n".join(md)):
        print(f"wrote {p}")
    png = out / f"{name}.png"
    _png.bar_chart(
        png,
        f"mean latency in s - {dataset.name}, {len(questions)} questions, {preset.name}",
        ["all", *groups] if len(groups) > 1 else ["all"],
        {
            m: [summary[m]["mean_s"], *(by_group[m][g] for g in groups if len(groups) > 1)]
            for m in summary
        },
    )
    print(f"wrote {png}")


if __name__ == "__main__":
    main()
