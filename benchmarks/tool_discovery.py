"""Tool discovery on a 300-tool catalogue from six MCP servers: what the planner's prompt
costs, and whether plans still get the tools they need, against showing every tool.

The catalogue is ``data/mcp_catalogue.json``: six servers (GitHub, Slack, a calendar, a CRM,
a drive, a payments platform), each with ten entities, each entity with ``list_``, ``get_``,
``create_``, ``update_`` and ``delete_`` tools: 300 tools, every one with a description and
described arguments. The benchmark starts the six as real stdio MCP servers
(``_catalogue_server.py``) and loads their tools the way ``--mcp`` does (``NAME.TOOL``).

The goals (20, in the same file) are phrased as a user would, without tool names, each with
the tools a correct plan needs. The planner is :class:`~dagagent.planners.LLMPlanner` over a
scripted model that plans like a careful model restricted to what it is shown: it reads the
tool list of the system prompt it is sent and writes a plan calling each needed tool that
the list shows, with the arguments its schema requires (the tools it cannot see it cannot
use). Each plan then runs against the servers. Reported, per way of showing the tools:

- **prompt tokens per planning call**: the call's prompt as the model-call record estimates
  it (messages and the plan's response-format schema, about 4 characters a token), and how
  much of it is the response format (one schema variant per tool shown);
- **plans with every tool**: goals whose plan calls every needed tool, and whose run against
  the MCP servers succeeded;
- **selection time**: :func:`dagagent.tools.select_tools` for the goal (BM25 over the 300).

The model is a script, so plan success measures retrieval (were the needed tools shown?),
not a model's judgement with a shorter list.

    python benchmarks/tool_discovery.py                 # print only
    python benchmarks/tool_discovery.py --write         # update benchmarks/results
    python benchmarks/tool_discovery.py --limits 10,30,60 --goals 5
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    DATA_DIR,
    add_output_options,
    command_line,
    machine_info,
    markdown_head,
    markdown_table,
    save,
    text_table,
)

import dagagent
from dagagent.llm import LLMRequest, MeteredLLM, ScriptedLLM, estimate_tokens
from dagagent.mcp import MCPClient
from dagagent.planners import LLMPlanner
from dagagent.tools import Registry, ToolDiscovery, connected, select_tools

SPEC = DATA_DIR / "mcp_catalogue.json"
SERVER = Path(__file__).with_name("_catalogue_server.py")
_LISTED = re.compile(r"^- ([\w.\-]+)\(", re.MULTILINE)


class Calls:
    """The planning calls' records, as an observer of the planner's client."""

    def __init__(self) -> None:
        self.prompt_tokens: list[int] = []
        self.format_tokens: list[int] = []

    def started(self, call: Any) -> None: ...
    def wrote(self, call: Any) -> None: ...
    def rejected(self, call: Any, issues: Any) -> None: ...

    def ended(self, call: Any) -> None:
        self.prompt_tokens.append(call.prompt_tokens)
        fmt = call.request.response_format
        chars = len(json.dumps(fmt.schema)) if fmt is not None else 0
        self.format_tokens.append(estimate_tokens(chars))


def planner_model(registry: Registry, needs: list[str]) -> ScriptedLLM:
    """A model that plans the needed tools it is shown (three answers: the attempts)."""

    def answer(request: LLMRequest) -> str:
        shown = set(_LISTED.findall(request.messages[0].content))
        tasks = []
        for i, name in enumerate(needs):
            if name in shown:
                schema = registry.get(name).parameters_schema
                args = {p: "x" for p in schema.get("required", [])}
                tasks.append({"id": f"t{i}", "tool": name, "args": args})
        if not tasks:  # none of them: the closest it can see, as a model would
            first = sorted(shown)[0]
            schema = registry.get(first).parameters_schema
            args = {p: "x" for p in schema.get("required", [])}
            tasks.append({"id": "t0", "tool": first, "args": args})
        return json.dumps({"tasks": tasks})

    return ScriptedLLM([answer, answer, answer])


async def load_catalogue(spec: dict[str, Any]) -> Registry:
    """The servers' tools, each server started and listed at the same time, added in the
    spec's order."""
    listed: dict[str, list[Any]] = {}

    async def listing(name: str) -> None:
        client = MCPClient.stdio(
            name, sys.executable, [str(SERVER), str(SPEC), name], connect_timeout_s=60.0
        )
        listed[name] = await client.tools(prefix=f"{name}.")

    async with anyio.create_task_group() as tg:
        for name in spec["servers"]:
            tg.start_soon(listing, name)
    registry = Registry()
    for name in spec["servers"]:
        for tool in listed[name]:
            registry.add(tool)
    return registry


async def one_mode(
    registry: Registry, goals: list[tuple[str, list[str]]], discovery: ToolDiscovery
) -> dict[str, Any]:
    calls = Calls()
    rows = []
    selection_s = []
    for goal, needs in goals:
        started = time.perf_counter()
        selection = await select_tools(registry, goal, discovery)
        selection_s.append(time.perf_counter() - started)
        llm = MeteredLLM(planner_model(registry, needs), observer=calls)
        planner = LLMPlanner(llm, registry, discovery=discovery)
        report = await planner.plan_with_report(goal)
        used = {t.tool for t in report.plan.tasks if isinstance(t, dagagent.ToolTask)}
        missing = sorted(set(needs) - used)
        result = await dagagent.execute(report.plan, registry)
        rows.append(
            {
                "goal": goal,
                "needs": needs,
                "shown": len(selection.shown) if selection is not None else len(registry),
                "missing": missing,
                "ran": result.ok,
                "ok": not missing and result.ok,
                "prompt_tokens": calls.prompt_tokens[-1],
                "format_tokens": calls.format_tokens[-1],
            }
        )
    tokens = [r["prompt_tokens"] for r in rows]
    return {
        "threshold": discovery.threshold,
        "limit": discovery.shown if discovery.threshold is not None else None,
        "goals": rows,
        "prompt_tokens_mean": statistics.mean(tokens),
        "prompt_tokens_median": statistics.median(tokens),
        "format_tokens_mean": statistics.mean(r["format_tokens"] for r in rows),
        "shown_median": statistics.median(r["shown"] for r in rows),
        "plans_ok": sum(r["ok"] for r in rows),
        "selection_ms_median": statistics.median(selection_s) * 1000,
    }


async def main_async(
    limits: list[int], n_goals: int | None = None, n_servers: int | None = None
) -> dict[str, Any]:
    spec = json.loads(SPEC.read_text(encoding="utf-8"))
    if n_servers is not None:  # the first N servers, and the goals their tools can reach
        names = list(spec["servers"])[:n_servers]
        spec["servers"] = {n: spec["servers"][n] for n in names}
        spec["goals"] = [g for g in spec["goals"] if all(t.split(".")[0] in names for t in g[1])]
    goals = [(g, needs) for g, needs in spec["goals"]][:n_goals]
    registry = await load_catalogue(spec)
    unknown = sorted({n for _, needs in goals for n in needs} - set(registry.names))
    if unknown:
        raise SystemExit(f"goals name tools the catalogue does not have: {unknown}")
    modes: dict[str, ToolDiscovery] = {"every tool": ToolDiscovery(threshold=None)}
    for limit in limits:
        modes[f"BM25, {limit} shown"] = ToolDiscovery(threshold=limit, limit=limit)
    async with connected(registry):  # the six servers, open for every run
        results = {name: await one_mode(registry, goals, d) for name, d in modes.items()}
    return {"tools": len(registry), "servers": len(spec["servers"]), "modes": results}


def render(data: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    base = data["modes"]["every tool"]["prompt_tokens_mean"]
    headers = [
        "tools shown",
        "tools in the prompt (median)",
        "prompt tokens per planning call (mean)",
        "of which the response format",
        "of every tool's",
        "plans with every tool, run ok",
        "selection (median)",
    ]
    rows = []
    n = None
    for name, m in data["modes"].items():
        n = len(m["goals"])
        rows.append(
            [
                name,
                f"{m['shown_median']:.0f}",
                f"{m['prompt_tokens_mean']:,.0f}",
                f"{m['format_tokens_mean']:,.0f}",
                f"{m['prompt_tokens_mean'] / base:.0%}",
                f"{m['plans_ok']}/{n}",
                "-" if m["threshold"] is None else f"{m['selection_ms_median']:.1f} ms",
            ]
        )
    return headers, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limits",
        default="15,30",
        help="how many tools BM25 shows, comma-separated (default 15,30)",
    )
    parser.add_argument(
        "--goals", type=int, default=None, help="only the first N goals (default: all 20)"
    )
    parser.add_argument(
        "--servers", type=int, default=None, help="only the first N servers (default: all 6)"
    )
    add_output_options(parser)
    args = parser.parse_args()
    limits = [int(x) for x in args.limits.split(",") if x.strip()]
    info = machine_info()
    data = anyio.run(main_async, limits, args.goals, args.servers)
    headers, rows = render(data)
    print(text_table(headers, rows))
    missed = {
        name: [(r["goal"], r["missing"]) for r in m["goals"] if r["missing"]]
        for name, m in data["modes"].items()
    }
    for name, lost in missed.items():
        for goal, missing in lost:
            print(f"{name}: {goal!r} was not shown {', '.join(missing)}")
    md = [
        *markdown_head(
            f"Tool discovery: {data['tools']} tools from {data['servers']} MCP servers",
            command_line(),
            info,
        ),
        f"Commit: {info.get('git_commit') or '-'}",
        "",
        f"{data['tools']} tools from {data['servers']} stdio MCP servers, "
        f"{len(next(iter(data['modes'].values()))['goals'])} goals (see "
        "`benchmarks/tool_discovery.py` for the method).",
        "",
        markdown_table(headers, rows),
        "",
    ]
    for name, lost in missed.items():
        for goal, missing in lost:
            md.append(f"- {name}: *{goal}* was not shown {', '.join(missing)}")
    save(
        args, "tool_discovery", {"command": command_line(), "machine": info, **data}, "\n".join(md)
    )


if __name__ == "__main__":
    main()
