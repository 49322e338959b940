"""Tool discovery: past a threshold, the planner, the replanner and agent tasks are shown the
tools most relevant to the goal (BM25, or an embedding function of the user's), the tools
the goal names and those a plan uses always; the selection is on each call's record and in
``dagagent show``; agent tasks search the rest with ``find_tools`` and call what they find."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.agent import ReActAgent
from dagagent.cli import app
from dagagent.errors import ConfigError
from dagagent.llm import LLMResponse, MeteredLLM, ScriptedLLM, ToolCall
from dagagent.planners import LLMPlanner, LLMReplanner
from dagagent.results import TaskResult, TaskStatus
from dagagent.tools import (
    FIND_TOOLS,
    READ_SKILL,
    BM25Index,
    Registry,
    SchemaTool,
    ToolDiscovery,
    select_tools,
)
from dagagent.tools._discovery import named_in, tokens

pytestmark = pytest.mark.anyio

#: (service, noun, what the tool does): 6 services x 8 verbs = 48 tools, each described.
SERVICES = {
    "github": "repository issues pull requests code review",
    "slack": "channel messages workspace chat",
    "calendar": "events meetings schedule invitations",
    "weather": "forecast temperature rain wind city",
    "billing": "invoices payments customers refunds",
    "files": "documents folders storage upload",
}
VERBS = ["list", "get", "create", "update", "delete", "search", "archive", "export"]


def _tool(name: str, description: str, params: dict[str, str]) -> SchemaTool:
    async def call(**args: Any) -> Any:
        return {"tool": name, "args": args}

    schema = {
        "type": "object",
        "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
        "required": list(params),
    }
    return SchemaTool(call, name=name, parameters=schema, description=description)


def catalogue() -> Registry:
    reg = Registry()
    for service, topic in SERVICES.items():
        for verb in VERBS:
            reg.add(
                _tool(
                    f"{service}_{verb}",
                    f"{verb.capitalize()} {service} items: {topic}.",
                    {"query": f"What to {verb} in {service}"},
                )
            )
    return reg


def _plan(*tasks: dict[str, Any]) -> str:
    return json.dumps({"tasks": list(tasks)})


# -- ranking ---------------------------------------------------------------------------------


def test_words_are_split_folded_and_stemmed() -> None:
    assert tokens("listOpenIssues of the github_repo-names") == [
        "list",
        "open",
        "issue",
        "github",
        "repo",
        "name",
    ]
    assert tokens("HTTPServer cities") == ["http", "server", "city"]


def test_bm25_ranks_the_tool_whose_words_match_best() -> None:
    index = BM25Index(catalogue())
    ranked = index.rank("forecast rain in Oslo", 3)
    assert {name for name, _ in ranked} <= {f"weather_{v}" for v in VERBS}
    scores = index.scores("refund an invoice payment")
    assert max(scores, key=scores.__getitem__).startswith("billing_")
    # a name is worth more than a description: "search" in the name wins over the others
    top, _ = index.rank("search github", 1)[0]
    assert top == "github_search"
    assert index.rank("zzz qqq") == []  # nothing in common: nothing ranked
    # the formula itself, for one word in one document
    one = BM25Index([_tool("alpha", "beta", {})])
    (score,) = one.scores("alpha").values()
    idf = math.log(1 + (1 - 1 + 0.5) / (1 + 0.5))
    assert score == pytest.approx(idf * 3 * 2.2 / (3 + 1.2))  # tf 3: the name counts 3 times


def test_names_in_the_goal_are_whole_words() -> None:
    names = ["get", "get_weather", "weather.now"]
    assert named_in("call get_weather for Oslo", names) == ["get_weather"]
    assert named_in("use weather.now, then get it", names) == ["get", "weather.now"]
    assert named_in("get_weather_now", names) == []


async def test_small_registries_are_shown_whole() -> None:
    reg = catalogue()
    assert await select_tools(reg, "anything", ToolDiscovery(threshold=48)) is None
    assert await select_tools(reg, "anything", ToolDiscovery(threshold=None)) is None
    assert await select_tools(reg, "anything", ToolDiscovery(threshold=47)) is not None


async def test_a_selection_keeps_named_kept_and_skill_tools_beside_the_ranked() -> None:
    reg = catalogue()
    reg.skill("triage", "How to triage a bug report.", "1. Read it.")
    sel = await select_tools(
        reg,
        "Rain forecast in Oslo, then files_export",
        ToolDiscovery(threshold=10, limit=5),
        keep=["slack_create", "not_a_tool"],
    )
    assert sel is not None
    why = {s.name: s.why for s in sel.shown}
    assert why["files_export"] == "named"
    assert why["slack_create"] == "kept" and why[READ_SKILL] == "skills"
    ranked = [s for s in sel.shown if s.why == "ranked"]
    assert len(ranked) == 5 and any(s.name.startswith("weather_") for s in ranked)
    assert all((s.score or 0) > 0 for s in ranked)
    assert "not_a_tool" not in why
    assert sel.total == len(reg) and sel.threshold == 10 and sel.method == "bm25"
    doc = sel.as_json()
    assert doc["limit"] == 5 and {"name", "why", "score"} <= set(doc["shown"][0])
    order = reg.names
    assert sel.names == sorted(sel.names, key=order.index)  # in the registry's order


async def test_an_embedding_function_ranks_and_tool_vectors_are_computed_once() -> None:
    reg = catalogue()
    seen: list[list[str]] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        seen.append(texts)  # a deterministic fake: one axis per service
        return [[float(s in t.lower()) for s in SERVICES] + [0.01] for t in texts]

    discovery = ToolDiscovery(threshold=10, limit=8, embed=embed)
    sel = await select_tools(reg, "anything about billing", discovery)
    assert sel is not None and sel.method == "embedding"
    assert {s.name for s in sel.shown} == {f"billing_{v}" for v in VERBS}
    assert len(seen) == 2 and len(seen[0]) == len(reg)  # the tools, then the goal
    await select_tools(reg, "calendar", discovery)
    assert len(seen) == 3 and seen[2] == ["calendar"]  # the tools' vectors were kept


async def test_an_embedding_that_fails_falls_back_to_bm25_and_says_so() -> None:
    def down(texts: list[str]) -> list[list[float]]:
        raise ConnectionError("embedding service down")

    sel = await select_tools(catalogue(), "rain forecast", ToolDiscovery(threshold=10, embed=down))
    assert sel is not None and sel.method == "bm25"
    assert "embedding service down" in sel.note and "BM25" in sel.note

    def wrong(texts: list[str]) -> list[list[float]]:
        return [[1.0]]  # one vector for many texts: the function is wrong, not down

    with pytest.raises(ConfigError, match="returned 1 vectors for 48 texts"):
        await select_tools(catalogue(), "x", ToolDiscovery(threshold=10, embed=wrong))


def test_bad_discovery_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="threshold must be a whole number"):
        ToolDiscovery(threshold=0)
    with pytest.raises(ConfigError, match="limit must be"):
        ToolDiscovery(limit=True)


# -- the planner -----------------------------------------------------------------------------


async def test_the_planner_shows_the_selected_tools_and_records_the_selection() -> None:
    reg = catalogue()
    seen: list[Any] = []

    class Observer:
        def started(self, call: Any) -> None: ...
        def wrote(self, call: Any) -> None: ...
        def ended(self, call: Any) -> None:
            seen.append(call)

        def rejected(self, call: Any, issues: Any) -> None: ...

    # the plan uses a registered tool it was not shown: accepted (validation knows them all)
    plan = _plan(
        {"id": "f", "tool": "weather_get", "args": {"query": "Oslo"}},
        {"id": "b", "tool": "billing_export", "args": {"query": "all"}},
    )
    llm = ScriptedLLM([plan])
    planner = LLMPlanner(
        MeteredLLM(llm, observer=Observer()), reg, discovery=ToolDiscovery(threshold=20, limit=6)
    )
    result = await planner.plan_with_report("Rain forecast for Oslo tomorrow")
    assert [t.id for t in result.plan.tasks] == ["f", "b"]
    (request,) = llm.requests
    system = request.messages[0].content
    assert "the 6 of 48 most relevant to the goal" in system
    assert "- weather_get(query: string)" in system and "billing_export" not in system
    schema = json.dumps(request.response_format.schema if request.response_format else {})
    assert '"weather_get"' in schema and '"billing_export"' not in schema
    (call,) = seen
    sel = call.options["tool_selection"]
    assert sel["total"] == 48 and sel["threshold"] == 20 and sel["method"] == "bm25"
    assert len(sel["shown"]) == 6 and all(t["name"].startswith("weather_") for t in sel["shown"])
    # a registry under the threshold: the whole catalogue, as before, and no selection
    whole = ScriptedLLM([plan])
    await LLMPlanner(whole, reg, discovery=ToolDiscovery(threshold=100)).plan("Rain in Oslo")
    assert "billing_export" in whole.requests[0].messages[0].content


async def test_a_prompt_of_ones_own_gets_the_selection_where_it_wants_the_tools() -> None:
    reg = catalogue()
    plan = _plan({"id": "f", "tool": "weather_get", "args": {"query": "Oslo"}})
    llm = ScriptedLLM([plan])
    own = "Plan with care.\n\n{tools}\n\nBe brief."
    planner = LLMPlanner(llm, reg, system_prompt=own, discovery=ToolDiscovery(threshold=20))
    await planner.plan("Rain forecast for Oslo")
    system = llm.requests[0].messages[0].content
    assert system.startswith("Plan with care.\n\nTools (the 20 of 48 most relevant")
    assert system.endswith("Be brief.") and "- weather_get(" in system


async def test_the_tools_of_the_few_shot_examples_are_always_shown() -> None:
    reg = catalogue()
    example = {
        "goal": "Archive old invoices",
        "plan": {"tasks": [{"id": "a", "tool": "billing_archive", "args": {"query": "2020"}}]},
    }
    llm = ScriptedLLM([_plan({"id": "f", "tool": "weather_get", "args": {"query": "Oslo"}})])
    planner = LLMPlanner(llm, reg, examples=[example], discovery=ToolDiscovery(threshold=20))
    result = await planner.plan_with_report("Rain forecast for Oslo")
    assert result.plan.tasks[0].id == "f"
    assert "- billing_archive(" in llm.requests[0].messages[0].content


async def test_the_replanner_is_shown_the_tools_of_the_plan_it_revises() -> None:
    reg = catalogue()
    old = dagagent.load_plan(
        {"goal": "g", "tasks": [{"id": "a", "tool": "files_export", "args": {"query": "x"}}]}
    )
    results = {"a": TaskResult(task_id="a", status=TaskStatus.FAILED, error="boom")}
    llm = ScriptedLLM([_plan({"id": "a", "tool": "files_export", "args": {"query": "y"}})])
    replanner = LLMReplanner(llm, reg, discovery=ToolDiscovery(threshold=20, limit=10))
    await replanner.replan("Rain forecast for Oslo", old, results, feedback="try the calendar")
    system = llm.requests[0].messages[0].content
    assert "- files_export(" in system  # kept: the plan uses it
    assert "calendar_" in system  # ranked for the feedback too


async def test_a_solve_records_the_selection_and_show_prints_it(tmp_path: Path) -> None:
    reg = catalogue()
    store = tmp_path / "runs.db"
    llm = ScriptedLLM(
        [
            _plan({"id": "f", "tool": "weather_get", "args": {"query": "Oslo"}}),
            json.dumps({"action": "finish", "answer": "rain", "cites": ["f"]}),
        ]
    )
    solution = await dagagent.solve(
        "Rain forecast for Oslo",
        reg,
        llm,
        store=store,
        discovery=ToolDiscovery(threshold=20, limit=5),
    )
    assert solution.ok
    planner_call = solution.calls[0]
    assert planner_call.role == "planner"
    assert planner_call.options["tool_selection"]["limit"] == 5
    assert "tool_selection" not in solution.calls[1].options  # the joiner sees no tools
    r = CliRunner().invoke(app, ["show", solution.solve_id, "--store", str(store)])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "call 1 (planner) was shown 5 of 48 tools" in text
    assert "the 5 best by BM25" in text and "weather_get" in text
    with dagagent.RunStore(store) as st:
        record = st.get_solve(solution.solve_id)
    assert record.options is not None
    assert record.options["discovery"] == {"threshold": 20, "limit": 5}


async def test_a_streamed_revision_keeps_the_tools_of_the_round_before() -> None:
    reg = catalogue()
    first = _plan({"id": "b", "tool": "billing_get", "args": {"query": "total"}})
    llm = ScriptedLLM(
        [
            first,
            json.dumps({"action": "replan", "feedback": "also the rain forecast"}),
            _plan(
                {"id": "b", "tool": "billing_get", "args": {"query": "total"}},
                {"id": "w", "tool": "weather_get", "args": {"query": "Oslo"}},
            ),
            json.dumps({"action": "finish", "answer": "done", "cites": ["b", "w"]}),
        ]
    )
    solution = await dagagent.solve(
        "Tidy the archive", reg, llm, discovery=ToolDiscovery(threshold=20, limit=5)
    )
    assert solution.ok, solution.reason
    (revision,) = [c for c in solution.calls if c.role == "replanner"]
    shown = {t["name"]: t["why"] for t in revision.options["tool_selection"]["shown"]}
    assert shown["billing_get"] == "kept"  # the goal does not rank it: the plan used it
    assert any(n.startswith("weather_") for n in shown)  # ranked for the feedback


# -- agents: find_tools ----------------------------------------------------------------------


async def test_an_agent_finds_a_tool_and_calls_it_on_its_next_turn() -> None:
    reg = catalogue()
    found = ToolCall(id="c1", name=FIND_TOOLS, arguments={"query": "refund invoice payment"})
    use = ToolCall(id="c2", name="billing_update", arguments={"query": "refund 17"})
    llm = ScriptedLLM(
        [
            LLMResponse(tool_calls=[found], finish_reason="tool_calls"),
            LLMResponse(tool_calls=[use], finish_reason="tool_calls"),
            "Refunded.",
        ]
    )
    agent = ReActAgent(llm, reg.subset(["weather_get"]), catalogue=reg)
    result = await agent.run("Refund order 17")
    assert result.ok and result.answer == "Refunded."
    first, second, _ = ([t.name for t in r.tools] for r in llm.requests)
    assert first == ["weather_get", FIND_TOOLS]
    assert "billing_update" in second and "weather_get" in second
    observation = result.steps[0].calls[0].observation or ""
    assert "billing_update" in observation and "description" in observation
    assert result.steps[1].calls[0].observation is not None
    assert "refund 17" in result.steps[1].calls[0].observation
    assert agent.found()[:1] and "billing_update" in agent.found()
    # continued from its first step (as a task that waited for a person is): it is offered
    # what it had found, though nothing was searched in this process
    again = ScriptedLLM(["Refunded."])
    later = ReActAgent(again, reg.subset(["weather_get"]), catalogue=reg)
    continued = await later.run("Refund order 17", steps=result.steps[:1])
    assert continued.ok
    assert "billing_update" in [t.name for t in again.requests[0].tools]


async def test_an_agent_task_without_tools_gets_a_selection_and_find_tools() -> None:
    reg = catalogue()
    plan = _plan({"id": "ask", "instruction": "Get the rain forecast for Oslo"})
    find = ToolCall(id="c1", name=FIND_TOOLS, arguments={"query": "post a chat message"})
    post = ToolCall(id="c2", name="slack_create", arguments={"query": "rain in Oslo"})
    llm = ScriptedLLM(
        [
            plan,
            LLMResponse(tool_calls=[find], finish_reason="tool_calls"),
            LLMResponse(tool_calls=[post], finish_reason="tool_calls"),
            "It will rain; posted.",
            json.dumps({"action": "finish", "answer": "rain", "cites": ["ask"]}),
        ]
    )
    policy = dagagent.Policy.from_dict(
        {"rules": [{"tool": "slack_delete", "action": "deny"}], "default": "allow"}
    )
    solution = await dagagent.solve(
        "Rain in Oslo?",
        reg,
        llm,
        agent_tasks=True,
        policy=policy,
        discovery=ToolDiscovery(threshold=20, limit=3),
    )
    assert solution.ok, solution.reason
    offered = [t.name for t in llm.requests[1].tools]
    assert len(offered) == 4 and offered[-1] == FIND_TOOLS
    assert "weather_get" in offered[:3]
    assert "slack_create" in [t.name for t in llm.requests[2].tools]  # found, then offered
    agent_call = next(c for c in solution.calls if c.role == "agent")
    assert agent_call.options["tool_selection"]["limit"] == 3
    result = solution.rounds[0].result
    assert result is not None
    steps = result.tasks["ask"].steps or []
    assert [c.tool for s in steps for c in s.calls] == [FIND_TOOLS, "slack_create"]
    assert "rain in Oslo" in (steps[1].calls[0].observation or "")
    # a task that lists its tools gets those, and no search: the plan said what it may use
    listed = ScriptedLLM(
        [
            _plan({"id": "ask", "instruction": "x", "tools": ["slack_get"]}),
            "done",
            json.dumps({"action": "finish", "answer": "ok", "cites": ["ask"]}),
        ]
    )
    await dagagent.solve("x", reg, listed, agent_tasks=True)
    assert [t.name for t in listed.requests[1].tools] == ["slack_get"]


# -- the command line ------------------------------------------------------------------------

TOOLS_FILE = """
from dagagent import Registry

registry = Registry()
for service in ("github", "slack", "calendar", "billing", "files"):
    for verb in ("list", "get", "create", "update", "delete", "search", "archive", "export"):
        registry.tool(name=f"{service}_{verb}", description=f"{verb} {service} items.")(
            lambda query: query
        )
"""


def test_max_tools_on_the_command_line_and_in_the_project_file(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llm_server import Reply

    from dagagent.llm import wire

    for name in ("DAGAGENT_MODEL", "DAGAGENT_BASE_URL", "OPENAI_API_KEY", "DAGAGENT_TOOLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bigtools.py").write_text(TOOLS_FILE, encoding="utf-8")
    plan = _plan({"id": "a", "tool": "slack_search", "args": {"query": "x"}})
    args = [
        "--tools",
        "bigtools.py:registry",
        "--model",
        "openai:m",
        "--base-url",
        server.url + "/v1",
    ]
    store = tmp_path / "runs.db"
    server.push(Reply(json=wire.openai_text(plan, output_tokens=20)))
    r = CliRunner().invoke(
        app, ["plan", "search slack", *args, "--max-tools", "6", "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    system = server.requests[-1].json["messages"][0]["content"]
    assert "the 6 of 40 most relevant" in system and "- billing_export(" not in system
    (run_id,) = set(re.findall(r"dagagent show ([0-9a-f]{12})", r.output))
    shown = CliRunner().invoke(app, ["show", run_id, "--store", str(store)])
    assert "was shown 6 of 40 tools" in " ".join(shown.stdout.split()), shown.output
    # the project file's max_tools = 0: every tool
    (tmp_path / "pyproject.toml").write_text("[tool.dagagent]\nmax_tools = 0\n")
    server.push(Reply(json=wire.openai_text(plan, output_tokens=20)))
    r = CliRunner().invoke(app, ["plan", "search slack", *args, "--store", str(store)])
    assert r.exit_code == 0, r.output
    system = server.requests[-1].json["messages"][0]["content"]
    assert "- billing_export(" in system and "most relevant" not in system


def test_the_tools_command_shows_what_the_planner_would_see_for_a_goal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bigtools.py").write_text(TOOLS_FILE, encoding="utf-8")
    base = ["tools", "--tools", "bigtools.py:registry"]
    goal = "search slack for the outage, then calendar_create a review"
    r = CliRunner().invoke(app, [*base, "--for", goal, "--max-tools", "5"])
    assert r.exit_code == 0, r.output
    assert "calendar_create(query" in r.stdout and "score" in r.stdout and ", named" in r.stdout
    assert "billing_export" not in r.stdout
    assert "6 tools of 40 shown for the goal" in r.stderr
    doc = json.loads(
        CliRunner().invoke(app, [*base, "--for", goal, "--max-tools", "5", "--json"]).stdout
    )
    assert len(doc["tools"]) == 6
    assert {t["name"]: t["shown_because"] for t in doc["tools"]}["calendar_create"].endswith(
        "named"
    )
    every = CliRunner().invoke(app, [*base, "--for", goal, "--max-tools", "0"])
    assert "billing_export" in every.stdout and "every tool is shown" in every.stderr
