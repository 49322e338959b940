"""The corpus of planner answers (``data/answers``): what real models write, read into plans.

Each answer ``NN-name.txt`` is the text a model sent (GPT-4o-mini, Claude, Llama- and
Gemma-class small models: fences, prose around the JSON, comments, trailing commas, tasks
out of order, numbers into text parameters, LLMCompiler's format with and without
``Thought:`` lines, revisions that keep a succeeded task's id with another call...).
``NN-name.json`` says what it must give: the plan (``goal``, ``tasks``), or the ``issue``
codes that send it back to the model (with a piece of the message, ``says``). Optional:
``answer_as: "tool_call"`` (the plan comes as a tool call's arguments), ``replan`` (the answer
revises the run of a scenario below) and ``new_versions`` (the successes it changes under
their ids).

Every answer goes through the planner (or the replanner) streamed and not, over the OpenAI
and the Anthropic wire formats (a scripted model running the real clients), and its plan
runs. A plan must come from the first answer, without asking the model again; an issue must
reach the model in the next request. ``test_the_corpus_reads_without_asking_again`` prints
the figure.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import dagagent
from dagagent.llm import ScriptedLLM, wire
from dagagent.planners import PLAN_FORMAT_NAME, LLMPlanner, LLMReplanner
from dagagent.planners.streaming import plan_and_execute_streamed
from dagagent.results import TaskStatus
from dagagent.review import reuse_map
from dagagent.settings import RunSettings
from dagagent.workflows import record_of

pytestmark = pytest.mark.anyio

ANSWERS = Path(__file__).parent / "data" / "answers"


# ---------------------------------------------------------------------------- the tools


class Hit(BaseModel):
    title: str
    url: str
    snippet: str


class Weather(BaseModel):
    city: str
    temp_c: float
    condition: str


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def _arithmetic(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return float(_OPS[type(node.op)](_arithmetic(node.operand)))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def corpus_registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def search(query: str, limit: int = 5) -> list[Hit]:
        """Search the web; the hits, best first."""
        return [
            Hit(title=f"{query} #{i}", url=f"https://example.com/{i}", snippet=f"about {query}")
            for i in range(limit)
        ]

    @reg.tool
    def fetch_page(url: str) -> str:
        """The text of a web page."""
        return f"The page at {url} says many things about many topics in many words."

    @reg.tool
    def summarize(text: str, max_words: int = 100) -> str:
        """A summary of the text in at most max_words words."""
        return " ".join(text.split()[:max_words])

    @reg.tool
    def get_weather(city: str, units: str = "metric") -> Weather:
        """The current weather of a city."""
        if city == "Atlantis":
            raise LookupError(f"no weather for {city!r}")
        return Weather(city=city, temp_c=10.0 + len(city) % 7, condition="sunny")

    @reg.tool
    def top_cities(country: str, n: int = 3) -> list[str]:
        """The largest cities of a country."""
        return [f"{country} city {i}" for i in range(1, n + 1)]

    @reg.tool
    def population(city: str) -> int:
        """How many people live in a city."""
        return 1_000_000 + 1000 * len(city)

    @reg.tool
    def calculator(expression: str) -> float:
        """Evaluate an arithmetic expression (+ - * / and parentheses)."""
        return _arithmetic(ast.parse(expression, mode="eval"))

    @reg.tool
    def add(a: float, b: float) -> float:
        """a + b."""
        return a + b

    @reg.tool
    def stock_price(symbol: str) -> float:
        """The last share price of a stock, in USD."""
        return 100.0 + len(symbol)

    @reg.tool
    def convert_currency(amount: float, from_currency: str, to_currency: str) -> float:
        """Convert an amount between currencies."""
        return round(amount * 0.9, 2)

    @reg.tool
    def translate(text: str, target_language: str) -> str:
        """Translate text into a language."""
        return f"[{target_language}] {text}"

    @reg.tool
    def word_count(text: str) -> int:
        """How many words the text has."""
        return len(text.split())

    @reg.tool
    def market_open(exchange: str) -> bool:
        """Whether a stock exchange is open now."""
        return exchange != "TSE"

    @reg.tool
    def format_report(title: str, body: str) -> str:
        """A short report with a title."""
        return f"# {title}\n{body}"

    @reg.tool(side_effects=True)
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    return reg


# ---------------------------------------------------------------------------- the answers


@dataclass(frozen=True)
class Case:
    name: str
    text: str
    expect: dict[str, Any]

    @property
    def issue(self) -> list[str] | None:
        codes: list[str] | None = self.expect.get("issue")
        return codes

    @property
    def goal(self) -> str:
        return str(self.expect["goal"])


def _cases() -> list[Case]:
    cases = []
    for path in sorted(ANSWERS.glob("*.txt")):
        with path.open(encoding="utf-8", newline="") as f:  # keep "\r\n" as the model sent it
            text = f.read()
        expect = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        cases.append(Case(path.stem, text, expect))
    return cases


CASES = _cases()
FALLBACK = json.dumps({"tasks": [{"id": "fallback", "tool": "get_weather", "args": {"city": "X"}}]})

# What a revision answers: a run of this plan, whose second lookup fails.
SCENARIOS = {
    "atlantis": {
        "goal": "Which is warmer, Paris or Tokyo?",
        "tasks": [
            {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
            {"id": "tokyo", "tool": "get_weather", "args": {"city": "Atlantis"}},
            {
                "id": "cmp",
                "tool": "format_report",
                "args": {
                    "title": "Paris vs Tokyo",
                    "body": "Paris ${paris.temp_c}, Tokyo ${tokyo.temp_c}",
                },
            },
        ],
    }
}


def answer_item(case: Case, provider: str) -> Any:
    """What the scripted server sends for ``case`` (a text, or a tool call)."""
    if case.expect.get("answer_as") != "tool_call":
        return case.text
    if provider == "openai":
        return wire.openai_tool_calls([(PLAN_FORMAT_NAME, case.text)])
    return wire.anthropic_tool_use([(PLAN_FORMAT_NAME, case.text)])


def scripted(provider: str, *items: Any) -> ScriptedLLM:
    if provider == "openai":
        return ScriptedLLM.openai(items, chunk_size=7)
    return ScriptedLLM.anthropic(items, chunk_size=7)


def tasks_by_id(tasks: Any) -> dict[str, dict[str, Any]]:
    plan = dagagent.Plan.model_validate({"tasks": list(tasks)})
    return {t.id: t.model_dump(mode="json", exclude_defaults=True) for t in plan.tasks}


@dataclass
class Outcome:
    plan: dagagent.Plan | None
    attempts: int
    issues: list[Any]
    warnings: list[Any]
    result: dagagent.RunResult | None
    llm: ScriptedLLM


async def read_answer(case: Case, provider: str, streamed: bool) -> Outcome:
    """Run ``case`` through the planner (or the replanner), as ``dagagent`` would."""
    reg = corpus_registry()
    items = [answer_item(case, provider)] + ([FALLBACK] if case.issue else [])
    llm = scripted(provider, *items)
    attempts = len(items)
    record = None
    scenario = case.expect.get("replan")
    if scenario is not None:
        old = dagagent.Plan.model_validate(SCENARIOS[scenario])
        first = await dagagent.execute(old, reg, settings=RunSettings(on_failure="continue"))
        record = record_of(old, first)
    async with llm:
        planner: Any
        if record is not None:
            planner = LLMReplanner(llm, reg, max_attempts=attempts)
        else:
            planner = LLMPlanner(llm, reg, max_attempts=attempts)
        if streamed:
            round_ = await plan_and_execute_streamed(
                planner,
                case.goal,
                reg,
                replan_of=record,
                reuse=reuse_map(record) if record is not None else None,
                parent_id=record.run_id if record is not None else None,
            )
            planning, result = round_.planning, round_.result
        else:
            if record is not None:
                planning = await planner.replan_with_report(case.goal, record.plan, record.tasks)
            else:
                planning = await planner.plan_with_report(case.goal)
            reuse = reuse_map(record) if record is not None else None
            result = await dagagent.execute(planning.plan, reg, reuse=reuse)
    first_issues = list(planning.attempts[0].issues)
    return Outcome(
        planning.plan, len(planning.attempts), first_issues, list(planning.warnings), result, llm
    )


def fed_back(llm: ScriptedLLM) -> str:
    message = llm.requests[1].messages[-1]
    return str(message.content)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_an_answer_reads_into_its_plan_or_its_issue(
    case: Case, streamed: bool, provider: str
) -> None:
    got = await read_answer(case, provider, streamed)
    if case.issue is not None:
        # not readable as a plan: the issue goes back to the model, which answers again
        assert [i.code for i in got.issues] == case.issue
        assert case.expect["says"] in str(got.issues[0])
        text = fed_back(got.llm)
        for code in case.issue:
            assert f"[{code}]" in text
        assert got.attempts == 2
        return
    assert got.attempts == 1, got.issues  # read at once: the model was not asked again
    assert got.plan is not None
    assert tasks_by_id(got.plan.tasks) == tasks_by_id(case.expect["tasks"])
    assert got.result is not None
    statuses = {k: r.status for k, r in got.result.tasks.items()}
    assert got.result.ok, {k: r.error for k, r in got.result.tasks.items() if r.error}
    if "replan" in case.expect:
        versions = case.expect["new_versions"]
        assert [w.task_id for w in got.warnings if w.code == "new_version"] == versions
        for tid in versions:  # a new version runs: its old output is not reused
            assert statuses[tid] is TaskStatus.SUCCEEDED
        kept = [t["id"] for t in SCENARIOS[case.expect["replan"]]["tasks"][:1]]
        for tid in kept:
            if tid in statuses and tid not in versions:
                assert statuses[tid] is TaskStatus.REUSED


def test_the_corpus_reads_without_asking_again(capsys: pytest.CaptureFixture[str]) -> None:
    """The figure: answers that give their plan at once (each is checked, streamed and not,
    by the test above), out of all. The others end in an issue fed back to the model."""
    total = len(CASES)
    plans = sum(1 for c in CASES if c.issue is None)
    assert total >= 40
    assert plans / total >= 0.95
    with capsys.disabled():
        print(
            f"\ncorpus: {plans} of {total} answers ({plans / total:.0%}) give their plan without "
            f"asking the model again, streamed and not; {total - plans} end in an issue fed back"
        )


def test_every_answer_has_what_it_must_give() -> None:
    names = {p.stem for p in ANSWERS.iterdir()}
    for case in CASES:
        assert ("tasks" in case.expect) != ("issue" in case.expect), case.name
        assert case.expect.get("style"), case.name
        if case.expect.get("answer_as") == "tool_call":  # a call's arguments are an object
            assert isinstance(json.loads(case.text), dict), case.name
    assert all(p.suffix in (".txt", ".json") for p in ANSWERS.iterdir())
    assert len(names) == len(CASES)  # no expectation without its answer
