"""Skills: a folder of Markdown procedures (or ``registry.skill``) whose summaries go in the
planner's and the agent's prompts and whose full text a model reads with ``read_skill``, so
a long procedure costs tokens only in the calls after it is read; each reading is an agent
step in the run's record; ``--skills DIR`` on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_server import LLMTestServer, Reply
from typer.testing import CliRunner

import dagagent
from dagagent.agent import ReActAgent
from dagagent.cli import app
from dagagent.errors import ConfigError, ToolDefinitionError
from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall, wire
from dagagent.planners import LLMPlanner
from dagagent.tools import READ_SKILL, Registry, Skill, load_skills

pytestmark = pytest.mark.anyio

REFUND = "\n".join(
    [
        "---",
        "name: refund",
        "description: How to refund an order: the checks, the refund call, the customer's note.",
        "---",
        "# Refunding an order",
        "",
        "1. Look the order up; refuse when it is older than 30 days.",
        "2. Call the refund tool with the order's id and amount.",
        *[
            f"{n}. A long step of the procedure, number {n}, that only a refund needs."
            for n in range(3, 40)
        ],
    ]
)
SHIPPING = (
    "# Shipping\n\nWhich carrier to pick for a parcel, by weight and country.\n\n"
    "- Up to 2 kg: post.\n"
)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "refund.md").write_text(REFUND, encoding="utf-8")
    (folder / "shipping").mkdir()
    (folder / "shipping" / "SKILL.md").write_text(SHIPPING, encoding="utf-8")
    (folder / ".draft.md").write_text("# not yet", encoding="utf-8")
    (folder / "notes.txt").write_text("not a skill", encoding="utf-8")
    return folder


def weather_registry() -> Registry:
    registry = Registry()

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """Weather of a city.

        Args:
            city: The city.
        """
        return {"city": city, "temp_c": 18.0}

    return registry


# -- reading a folder ---------------------------------------------------------------------------


def test_a_folder_of_skills(skills_dir: Path) -> None:
    refund, shipping = load_skills(skills_dir)
    assert refund.name == "refund" and refund.source == skills_dir / "refund.md"
    assert refund.summary.startswith("How to refund an order")
    assert refund.text.startswith("# Refunding an order") and "---" not in refund.text
    assert "number 39" in refund.text
    # no front matter: the folder's name, and the first paragraph that is not a heading
    assert shipping.name == "shipping"
    assert shipping.summary == "Which carrier to pick for a parcel, by weight and country."


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({}, "holds no skill"),
        (
            {"a.md": "---\nname: same\n---\nOne.", "b.md": "---\nname: same\n---\nTwo."},
            "two skills are named 'same'",
        ),
        ({"bad name.md": "Text."}, "skill name 'bad name'"),
        (
            {"empty.md": "---\nname: empty\ndescription: nothing\n---\n"},
            "skill 'empty' .* has no text",
        ),
        ({"big.md": "x" * 200_001}, "larger than 200,000 bytes"),
        ({"latin.md": b"caf\xe9"}, "cannot read the skill file"),
    ],
    ids=["empty", "duplicate", "bad-name", "no-text", "too-big", "not-utf8"],
)
def test_a_folder_that_cannot_be_used_says_which_file(
    tmp_path: Path, files: dict[str, Any], problem: str
) -> None:
    for name, text in files.items():
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match=problem):
        load_skills(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_skills(tmp_path / "missing")


# -- the registry and read_skill ---------------------------------------------------------------


async def test_the_first_skill_adds_read_skill_which_returns_the_text() -> None:
    registry = weather_registry()
    assert READ_SKILL not in registry
    registry.skill("refund", "How to refund an order.", REFUND)
    assert registry.names == ["get_weather", READ_SKILL]
    assert await registry[READ_SKILL].run({"name": "refund"}) == REFUND
    with pytest.raises(LookupError, match="no skill is named 'refnud'; the skills are: refund"):
        await registry[READ_SKILL].run({"name": "refnud"})
    with pytest.raises(ToolDefinitionError, match="already registered"):
        registry.skill("refund", "again", "text")
    # an agent task's subset of the tools keeps the skills and the tool that reads them
    sub = registry.subset(["get_weather"])
    assert sub.names == ["get_weather", READ_SKILL] and list(sub.skills) == ["refund"]
    assert registry.subset([]).skills["refund"].summary == "How to refund an order."


def test_a_tool_of_ones_own_named_read_skill_is_not_replaced() -> None:
    registry = Registry()

    @registry.tool
    def read_skill(name: str) -> str:
        """Mine."""
        return name

    with pytest.raises(ToolDefinitionError, match="skills need that name"):
        registry.skill("refund", "How to refund.", "Text.")


def test_the_prompts_carry_summaries_not_texts(skills_dir: Path) -> None:
    registry = weather_registry()
    registry.load_skills(skills_dir)
    planner = LLMPlanner(ScriptedLLM(), registry, agent_tasks=True)
    prompt = planner.system_prompt()
    assert "- refund: How to refund an order" in prompt
    assert "- shipping: Which carrier" in prompt
    assert "agent task with read_skill among its tools" in prompt
    assert "number 39" not in prompt
    own = LLMPlanner(ScriptedLLM(), registry, system_prompt="Plan well.\n\n{tools}")
    assert "- refund: How to refund an order" in own.system_prompt()
    agent = ReActAgent(ScriptedLLM(), registry)
    assert "- refund: How to refund an order" in agent.system_prompt
    assert "call read_skill with a skill's name" in agent.system_prompt
    assert "number 39" not in agent.system_prompt
    assert "Skills" not in ReActAgent(ScriptedLLM(), weather_registry()).system_prompt


async def test_a_solve_reads_a_skill_only_where_it_is_used(skills_dir: Path) -> None:
    registry = weather_registry()
    registry.load_skills(skills_dir)
    task = {
        "id": "refund",
        "instruction": "Refund order 17 following the refund skill.",
        "tools": [],
    }
    finish = {"action": "finish", "answer": "refunded", "cites": ["refund"]}
    read = ToolCall(id="c1", name=READ_SKILL, arguments={"name": "refund"})
    llm = ScriptedLLM(
        [
            json.dumps({"tasks": [task]}),
            LLMResponse(tool_calls=[read], finish_reason="tool_calls"),
            "Order 17 refunded, following the procedure.",
            json.dumps(finish),
        ]
    )
    async with llm:
        solution = await dagagent.solve("Refund order 17", registry, llm, agent_tasks=True)
    assert solution.ok and solution.answer == "refunded"
    sent = [json.dumps([m.content for m in r.messages]) for r in llm.requests]
    planner, agent_first, agent_second, joiner = sent
    assert "How to refund an order" in planner and "number 39" not in planner
    assert "How to refund an order" in agent_first and "number 39" not in agent_first
    assert "number 39" in agent_second  # the text, once the agent asked for it
    assert "number 39" not in joiner
    assert READ_SKILL in [t.name for t in llm.requests[1].tools]  # though the plan gave none
    result = solution.rounds[0].result
    assert result is not None
    steps = result.tasks["refund"].steps or []
    (call,) = steps[0].calls
    assert call.tool == READ_SKILL and call.args == {"name": "refund"}
    assert call.observation is not None and "number 39" in call.observation


def test_a_skill_built_in_python() -> None:
    skill = Skill("refund", "How to refund.", "Steps.")
    assert skill.source is None
    with pytest.raises(ToolDefinitionError, match="has no summary"):
        Skill("refund", " ", "Steps.")


# -- the command line ----------------------------------------------------------------------------


def test_plan_with_skills_shows_their_summaries(
    server: LLMTestServer, skills_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DAGAGENT_MODEL", "DAGAGENT_BASE_URL", "OPENAI_API_KEY", "DAGAGENT_TOOLS"):
        monkeypatch.delenv(name, raising=False)
    plan = {"tasks": [{"id": "proc", "tool": READ_SKILL, "args": {"name": "refund"}}]}
    server.push(Reply(json=wire.openai_text(json.dumps(plan), output_tokens=40)))
    args = ["--model", "openai:test-model", "--base-url", server.url + "/v1"]
    r = CliRunner().invoke(
        app, ["plan", "Refund order 17", "--skills", str(skills_dir), *args], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    system = server.requests[0].json["messages"][0]["content"]
    assert "- refund: How to refund an order" in system and "number 39" not in system
    assert "1 task in 1 level" in r.stdout
    # the bundled demo registry is left without skills
    from dagagent.toolkits.demo import registry as demo

    assert READ_SKILL not in demo and not demo.skills
    bad = CliRunner().invoke(app, ["plan", "x", "--skills", str(skills_dir / "nope"), *args])
    assert bad.exit_code == 2 and "does not exist" in bad.output


def test_the_tools_command_lists_skills(skills_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    r = CliRunner().invoke(app, ["tools", "--skills", str(skills_dir)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "read_skill(name: string) -> str" in r.stdout
    assert "skill refund: How to refund an order" in r.stdout
    assert f"from {skills_dir / 'refund.md'}" in r.stdout
    assert ", 2 skills" in r.stderr
    doc = json.loads(
        CliRunner().invoke(app, ["tools", "--skills", str(skills_dir), "--json"]).stdout
    )
    assert [s["name"] for s in doc["skills"]] == ["refund", "shipping"]


def test_replan_and_approve_load_the_skills_the_run_was_recorded_with(
    skills_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    task = {"id": "proc", "tool": READ_SKILL, "args": {"name": "refund"}}
    plan.write_text(json.dumps({"goal": "g", "tasks": [task]}))
    store = tmp_path / "runs.db"
    runner = CliRunner()
    first = runner.invoke(
        app, ["run", str(plan), "--skills", str(skills_dir), "--store", str(store), "--json"]
    )
    assert first.exit_code == 0, first.output
    from dagagent.store import RunStore

    with RunStore(store) as st:
        (record,) = st.list_runs()
        assert st.get_run(record.run_id).context["skills"] == str(skills_dir.resolve())
    # no --skills: the recorded folder's, so read_skill is a known tool again
    again = runner.invoke(app, ["replan", "--last", "--execute", "--store", str(store), "--json"])
    assert again.exit_code == 0, again.output
    with RunStore(store) as st:
        runs = st.list_runs()
        assert len(runs) == 2
        newest = max(runs, key=lambda r: r.created)
        assert st.get_run(newest.run_id).context["skills"] == str(skills_dir.resolve())
    # a folder that is gone is a message saying what to pass
    moved = skills_dir.rename(tmp_path / "elsewhere")
    gone = runner.invoke(app, ["replan", "--last", "--store", str(store)])
    assert gone.exit_code == 2 and "is not there any more: pass --skills DIR" in gone.output
    back = runner.invoke(app, ["replan", "--last", "--store", str(store), "--skills", str(moved)])
    assert back.exit_code == 0, back.output
