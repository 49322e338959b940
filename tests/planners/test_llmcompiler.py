"""Reading LLMCompiler plan text into plans."""

from __future__ import annotations

import pytest

import dagagent
from dagagent.errors import PlanLoadError
from dagagent.planners import parse_llmcompiler


@pytest.fixture
def reg() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def search(query: str) -> str:
        """Search the web."""
        return f"result for {query}"

    @reg.tool
    def math(problem: str, context: list[str] | None = None) -> float:
        """Solve a math problem."""
        return 0.0

    @reg.tool
    def scale(value: float, factor: float = 1.0, unit: str = "") -> float:
        """Scale a number."""
        return value * factor

    return reg


def shape(plan: dagagent.Plan, reg: dagagent.Registry) -> dict[str, tuple[str, ...]]:
    graph = dagagent.validate(plan, reg)
    return {tid: tuple(sorted(graph.dependencies[tid])) for tid in graph.order}


def test_market_cap_example(reg: dagagent.Registry):
    text = (
        '1. search("Microsoft Market Cap")\n'
        '2. search("Apple Market Cap")\n'
        '3. math("$1 / $2")\n'
        "4. join()<END_OF_PLAN>"
    )
    plan = parse_llmcompiler(text, reg, goal="ratio of market caps")
    assert plan.goal == "ratio of market caps"
    assert [(t.id, t.tool, t.args) for t in plan.tasks] == [
        ("1", "search", {"query": "Microsoft Market Cap"}),
        ("2", "search", {"query": "Apple Market Cap"}),
        ("3", "math", {"problem": "${1} / ${2}"}),
    ]
    assert shape(plan, reg) == {"1": (), "2": (), "3": ("1", "2")}
    assert dagagent.validate(plan, reg).levels == [["1", "2"], ["3"]]


def test_thoughts_brace_references_and_context_lists(reg: dagagent.Registry):
    text = """Thought: I need the speed of each animal first.
1. search("cheetah top speed")
Thought: Then slow it down.
2. math("cheetah speed if 1.3 times slower", ["${1}"])
3. search("greyhound top speed")
4. math("greyhound speed if 1.5 times faster", ["$3"])
Thought: Now compare.
5. math("which is faster: ${2} or $4?", ["${2}", "$4"])
6. join()
"""
    plan = parse_llmcompiler(text, reg)
    assert shape(plan, reg) == {
        "1": (),
        "3": (),
        "2": ("1",),
        "4": ("3",),
        "5": ("2", "4"),
    }
    tasks = {t.id: t for t in plan.tasks}
    assert tasks["1"].description == "I need the speed of each animal first."
    assert tasks["2"].description == "Then slow it down."
    assert tasks["3"].description is None
    assert tasks["2"].args == {"problem": "cheetah speed if 1.3 times slower", "context": ["${1}"]}
    assert tasks["5"].args["problem"] == "which is faster: ${2} or ${4}?"
    assert tasks["5"].args["context"] == ["${2}", "${4}"]


def test_keywords_numbers_bare_references_and_types(reg: dagagent.Registry):
    text = (
        "1. search(query='price of gold')\n"
        "2. scale($1, factor=2.5)\n"
        '3. scale(value=${2}, unit="g")\n'
        "4. math('''sum of $2 and $3''', context=('$2', \"$3\"))\n"
        "5. join()"
    )
    plan = parse_llmcompiler(text, reg)
    tasks = {t.id: t for t in plan.tasks}
    assert tasks["1"].args == {"query": "price of gold"}
    # a bare $1 becomes a whole reference: it keeps the referenced value's type at run time
    assert tasks["2"].args == {"value": "${1}", "factor": 2.5}
    assert tasks["3"].args == {"value": "${2}", "unit": "g"}
    assert tasks["4"].args == {"problem": "sum of ${2} and ${3}", "context": ["${2}", "${3}"]}
    assert shape(plan, reg)["4"] == ("2", "3")


def test_dollar_amounts_that_are_not_task_numbers_stay_text(reg: dagagent.Registry):
    plan = parse_llmcompiler('1. search("laptops under $100 or $1.5k")\n2. join()', reg)
    assert plan.tasks[0].args == {"query": "laptops under $100 or $1.5k"}
    dagagent.validate(plan, reg)


def test_join_ends_the_plan_and_is_not_a_task(reg: dagagent.Registry):
    text = '1. search("a")\njoin()\n2. search("never read")\n'
    plan = parse_llmcompiler(text, reg)
    assert [t.id for t in plan.tasks] == ["1"]
    text = '1. search("a")<END_OF_PLAN>\nanything at all'
    assert [t.id for t in parse_llmcompiler(text, reg).tasks] == ["1"]


def test_ids_are_task_numbers_and_run(reg: dagagent.Registry):
    text = '1. search("x")\n2. math("len of $1")\n3. join()'
    result = dagagent.execute_sync(parse_llmcompiler(text, reg), reg)
    assert result.ok
    assert result.tasks["2"].args["problem"] == "len of result for x"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('1. search("a")\n2. then I will do something\n', "line 2"),
        ('1. search("a")\n2 search("b"\n', "line 2"),
        ('1. search("a")\nsearch("b")\n', "line 2"),
        ('1. search("a")\n2. teleport("Mars")\n', "line 2 (task 2): unknown tool 'teleport'"),
        ('1. search("a", "b")\n', "takes 1 argument (query), got 2 positional"),
        ('1. search("a", query="b")\n', "argument 'query' is given twice"),
        ('1. search(query="a", query="b")\n', "given twice"),
        ('1. search("unterminated)\n', "do not parse"),
        ("1. search(open('/etc/passwd'))\n", "is not a literal"),
        ("1. search(__import__('os').system('echo hi'))\n", "is not a literal"),
        ("1. search(*['a'])\n", "*arguments"),
        ("1. search(**{'query': 'a'})\n", "**arguments"),
        ("1. search({1, 2})\n", "set values are not supported"),
        ("Thought: nothing to do\njoin()", "no tasks"),
    ],
)
def test_malformed_lines_are_plan_load_errors_naming_the_line(
    reg: dagagent.Registry, text: str, needle: str
):
    with pytest.raises(PlanLoadError) as info:
        parse_llmcompiler(text, reg)
    assert needle in str(info.value)


def test_prose_and_code_fences_around_the_lines_mean_nothing(reg: dagagent.Registry):
    text = (
        "```\n"
        '1. search("a")\n'
        "Now I search the second one, then compare.\n"
        '2. search("b")\n'
        "```\n"
        "This plan searches twice."
    )
    plan = parse_llmcompiler(text, reg)
    assert [(t.id, t.args) for t in plan.tasks] == [("1", {"query": "a"}), ("2", {"query": "b"})]


def test_forward_and_self_references_are_left_to_validation(reg: dagagent.Registry):
    plan = parse_llmcompiler('1. math("$1 and $2")\n2. search("$1")\n', reg)
    with pytest.raises(dagagent.PlanValidationError) as info:
        dagagent.validate(plan, reg)
    assert {i.code for i in info.value.issues} == {"self_dependency", "cycle"}
