"""The accounting of ``benchmarks/agent_vs_react.py``: what each side is charged.

In process, against the benchmark's own loopback model server with a latency model of zero and
look-ups that do not sleep, so each question takes milliseconds. The claims: a tool call and a
plan are charged by one rule (the characters the model writes, one text each); the lean plan
(what the planner's prompt asks) and the strict one (``LLMPlanner(strict=True)``) are each
charged what they write and the schema their request really sends; a run whose request and
written plan disagree stops.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagagent.planners import plan_json_schema

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> Iterator[dict[str, Any]]:
    sys.path.insert(0, str(BENCH))
    try:
        import _datasets as ds
        import _latency_model as lm
        import agent_vs_react as avr
    finally:
        sys.path.remove(str(BENCH))
    yield {"ds": ds, "lm": lm, "avr": avr}


def _question(bench: dict[str, Any], dataset: str) -> Any:
    ds = bench["ds"]
    return ds.DATASETS[dataset].load(BENCH / "data", 1, 1)[0]


async def _run(
    bench: dict[str, Any], dataset: str, mode: str, plan_written: str = "lean"
) -> tuple[dict[str, Any], list[Any], list[str]]:
    """One question in one mode through the benchmark's own path: its row, the server's
    records of the calls, and every text the model wrote (each reply's text and each of its
    tool calls as name followed by arguments)."""
    ds, lm, avr = bench["ds"], bench["lm"], bench["avr"]
    data = ds.DATASETS[dataset]
    q = _question(bench, dataset)
    zero = lm.LatencyModel(ttft_s=0.0, per_token_s=0.0, prefill_s=0.0)
    parallel = mode == "react-parallel"
    written: list[str] = []
    with lm.ModelServer(data, [q], zero, parallel=parallel, plan_written=plan_written) as server:
        replies = server.reply

        def reply(body: dict[str, Any]) -> Any:
            q_, role, text, calls = replies(body)
            written.append(text)
            written.extend(c["function"]["name"] + c["function"]["arguments"] for c in calls)
            return q_, role, text, calls

        server.reply = reply
        registry = data.registry(q, 1, 0.0)
        strict = plan_written == "strict"
        row = await avr.run_one(mode, q, server.base_url, "latency-model", registry, strict)
        records = server.take_records()
    assert data.is_right(row["answer"], q), (row["answer"], q.expected)
    avr.attach_timings([row], records)
    return row, records, written


def test_a_tool_call_costs_the_same_as_its_characters_written_as_text(
    bench: dict[str, Any],
) -> None:
    lm = bench["lm"]
    for name, args in [
        ("search", json.dumps({"entity": "The Silence of the Lambs"})),
        ("math", json.dumps({"expression": "${s1} + ${s2} + ${s3}"})),
        ("s", "{}"),
        ("search", json.dumps({"query": "fact 3 of question 17"})),
    ]:
        call = {"id": "call_9", "type": "function", "function": {"name": name, "arguments": args}}
        # One text, rounded up once: not the wire JSON, not name and arguments rounded apart.
        assert lm.reply_tokens("", [call]) == lm.reply_tokens(name + args, [])
        assert lm.reply_tokens("", [call]) == -(-len(name + args) // 4)
        assert lm.reply_tokens("", [call, call]) == 2 * lm.reply_tokens("", [call])


@pytest.mark.anyio
@pytest.mark.parametrize("dataset", ["movie", "parallelqa"])
async def test_react_and_the_plan_are_charged_by_one_rule(
    bench: dict[str, Any], dataset: str
) -> None:
    """Every mode's output tokens, as the client's usage adds them up, are the characters its
    model wrote over four, one text per answer, per tool call and per plan, computed here
    from the data set without the server's help."""
    ds, lm = bench["ds"], bench["lm"]
    data = ds.DATASETS[dataset]
    q = _question(bench, dataset)
    calls: dict[str, list[str]] = {}
    for mode in ("react", "react-parallel"):
        row, records, written = await _run(bench, dataset, mode)
        assert row["output_tokens"] == sum(-(-len(t) // 4) for t in written), mode
        assert row["calls"] == len(records) and row["tool_calls"] == len(written) - len(records)
        calls[mode] = sorted(written[:-1])  # the answer is the last text
    # The same calls, made one per turn or all in one turn, are the same texts.
    assert [c for c in calls["react"] if c] == [c for c in calls["react-parallel"] if c]

    row, records, written = await _run(bench, dataset, "plan")
    plan = lm.plan_variants(data, q)["lean"]
    assert written[0] == plan and len(written) == 2  # the plan, then the joiner's reply
    assert row["output_tokens"] == sum(-(-len(t) // 4) for t in written)
    planner = next(r for r in records if r.role == "planner")
    assert planner.output_tokens == -(-len(plan) // 4)
    # The plan holds the look-ups ReAct makes, each inside its task: with the ids, keys and
    # punctuation around them it costs more than the same calls alone, by the same rule.
    tasks = json.loads(plan)["tasks"]
    in_plan = sorted(t["tool"] + json.dumps(t["args"]) for t in tasks)
    searches = [c for c in in_plan if c.startswith("search")]
    assert searches == [c for c in calls["react-parallel"] if c.startswith("search")]
    assert planner.output_tokens > sum(-(-len(c) // 4) for c in in_plan)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["plan", "solve"])
async def test_lean_and_strict_are_each_charged_what_they_write_and_send(
    bench: dict[str, Any], mode: str
) -> None:
    ds, lm = bench["ds"], bench["lm"]
    data = ds.DATASETS["movie"]
    q = _question(bench, "movie")
    variants = lm.plan_variants(data, q)
    registry = data.registry(q, 1, 0.0)
    rows = {}
    for written in ("lean", "strict"):
        row, records, _ = await _run(bench, "movie", mode, written)
        planner = next(r for r in records if r.role == "planner")
        assert planner.strict is (written == "strict")
        # What the scripted model writes in each form: the lean one is id, tool and args.
        tasks = json.loads(variants[written])["tasks"]
        fields = {"id", "tool", "args"} | (
            {"depends_on", "for_each"} if written == "strict" else set()
        )
        assert all(set(t) == fields for t in tasks)
        assert planner.output_tokens == lm.text_tokens(variants[written])
        if mode == "plan":  # streamed, the schema also bounds the number of tasks
            schema = plan_json_schema(registry, strict=written == "strict")
            assert planner.schema_tokens == lm.text_tokens(json.dumps(schema))
        rows[written] = (row, planner)
    (lean, lean_planner), (strict, strict_planner) = rows["lean"], rows["strict"]
    # Counted apart: the strict plan writes more, and its request sends another schema.
    assert strict_planner.output_tokens > lean_planner.output_tokens
    assert strict_planner.schema_tokens != lean_planner.schema_tokens
    assert (
        strict["output_tokens"] - lean["output_tokens"]
        == strict_planner.output_tokens - lean_planner.output_tokens
    )
    assert (
        strict["input_tokens"] - lean["input_tokens"]
        == strict_planner.input_tokens - lean_planner.input_tokens
        == strict_planner.schema_tokens - lean_planner.schema_tokens
    )


def test_a_run_whose_request_and_plan_disagree_stops(bench: dict[str, Any]) -> None:
    avr = bench["avr"]
    avr.check_request("plan", [{"planner_strict": False}], "lean")
    avr.check_request("plan", [{"planner_strict": True}], "strict")
    with pytest.raises(SystemExit, match=r"strict=\[True\].*per task id, tool and args"):
        avr.check_request("plan", [{"planner_strict": True}], "lean")
    with pytest.raises(SystemExit, match=r"strict=\[False\].*every field of every task"):
        avr.check_request("solve", [{"planner_strict": False}], "strict")


def test_lean_is_the_default_and_strict_a_choice(bench: dict[str, Any]) -> None:
    lm, avr = bench["lm"], bench["avr"]
    assert lm.DEFAULT_PLAN == "lean"
    with pytest.raises(SystemExit):
        avr.main(["--plan-written", "loose"])
    with pytest.raises(ValueError, match="one of lean, strict, llmcompiler"):
        lm.ModelServer(bench["ds"].DATASETS["movie"], [], lm.LatencyModel(), plan_written="loose")
