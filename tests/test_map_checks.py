"""Map tasks before the run: the plan format (``for_each``, ``${@item}``, ``${@index}``) and
what validation can see of the list and its elements."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import dagagent
from dagagent import PlanLoadError, PlanValidationError, validate
from dagagent.graph import PlanChecker
from dagagent.plan import Plan, same_call
from dagagent.references import ElementScope, Template


class City(BaseModel):
    name: str
    population: int


class Found(BaseModel):
    cities: list[City]
    total: int


@pytest.fixture
def registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def search(query: str) -> list[str]:
        return [query]

    @reg.tool
    def find(query: str) -> Found:
        return Found(cities=[], total=0)

    @reg.tool
    def anything(query: str) -> Any:
        return query

    @reg.tool
    def text(query: str) -> str:
        return query

    @reg.tool
    def weather(city: str) -> dict[str, float]:
        return {"temp_c": 1.0}

    @reg.tool
    def count(n: int) -> int:
        return n

    @reg.tool
    def shape(data: dict[str, Any]) -> int:
        return len(data)

    return reg


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "g", "tasks": list(tasks)}


SEARCH = {"id": "s", "tool": "search", "args": {"query": "x"}}


def issues(p: dict[str, Any], registry: dagagent.Registry | None) -> list[tuple[str, str]]:
    with pytest.raises(PlanValidationError) as exc:
        validate(p, registry)
    return [(i.code, i.message) for i in exc.value.issues]


def test_a_map_task_depends_on_its_list(registry: dagagent.Registry) -> None:
    graph = validate(
        plan(
            SEARCH,
            {"id": "w", "tool": "weather", "for_each": "${s}", "args": {"city": "${@item}"}},
            {"id": "c", "tool": "count", "args": {"n": "${w.0.temp_c}"}, "depends_on": ["s"]},
        ),
        registry,
    )
    assert graph.dependencies == {"s": (), "w": ("s",), "c": ("s", "w")}
    assert graph.levels == [["s"], ["w"], ["c"]]
    assert graph.tasks["w"].is_map and not graph.tasks["s"].is_map


def test_the_format_round_trips_in_order() -> None:
    p = Plan.model_validate(
        plan(
            {
                "allow_partial": True,
                "for_each": [1, 2],
                "max_concurrency": 2,
                "args": {"n": "${@item}"},
                "tool": "count",
                "id": "c",
            }
        )
    )
    assert p.to_json(indent=None) == (
        '{"goal":"g","tasks":[{"id":"c","tool":"count","args":{"n":"${@item}"},'
        '"for_each":[1,2],"max_concurrency":2,"allow_partial":true}]}'
    )
    assert Plan.model_validate_json(p.to_json()) == p


def test_element_names_never_collide_with_task_ids(registry: dagagent.Registry) -> None:
    # a task may be called "item" or "index": ${item} is that task, ${@item} the element
    graph = validate(
        plan(
            {"id": "item", "tool": "search", "args": {"query": "x"}},
            {"id": "index", "tool": "text", "args": {"query": "y"}},
            {
                "id": "w",
                "tool": "text",
                "for_each": "${item}",
                "args": {"query": "${@item} ${item.0} ${@index} ${index}"},
            },
        ),
        registry,
    )
    assert graph.dependencies["w"] == ("item", "index")
    tmpl = Template(graph.tasks["w"].template_source)
    scope = ElementScope({"item": ["x"], "index": "y"}, "elem", 3)
    assert tmpl.resolve(scope) == {"query": "elem x 3 y"}
    with pytest.raises(PlanValidationError, match="invalid_id"):
        validate(plan({"id": "@item", "tool": "text", "args": {"query": "x"}}), registry)


def test_for_each_must_be_a_list_or_one_reference(registry: dagagent.Registry) -> None:
    with pytest.raises(PlanLoadError) as exc:
        validate(plan({"id": "w", "tool": "text", "for_each": {"a": 1}, "args": {}}), registry)
    assert "for_each must be a list, or one ${task_id.path} reference to a list, not an " in str(
        exc.value
    )
    for bad in ("cities", "${s} and ${s}", "x ${s}", "${@item}"):
        found = issues(
            plan(SEARCH, {"id": "w", "tool": "text", "for_each": bad, "args": {"query": "q"}}),
            registry,
        )
        assert found[0][0] == "bad_for_each", bad
        assert f"for_each {bad!r} is not a list" in found[0][1]


def test_for_each_names_a_task_of_the_plan(registry: dagagent.Registry) -> None:
    found = issues(
        plan({"id": "w", "tool": "text", "for_each": "${nope}", "args": {"query": "${@item}"}}),
        registry,
    )
    assert found == [("missing_dependency", "has for_each ${nope} to unknown task 'nope'")]
    found = issues(
        plan({"id": "w", "tool": "text", "for_each": "${w}", "args": {"query": "${@item}"}}),
        registry,
    )
    assert found == [("self_dependency", "the task depends on itself (for_each ${w})")]
    found = issues(
        plan(
            {"id": "a", "tool": "text", "for_each": "${b}", "args": {"query": "${@item}"}},
            {"id": "b", "tool": "search", "args": {"query": "${a.0}"}},
        ),
        registry,
    )
    assert [c for c, _ in found] == ["cycle"]


def test_element_references_belong_to_maps(registry: dagagent.Registry) -> None:
    found = issues(
        plan(
            {"id": "a", "tool": "text", "args": {"query": "${@item}"}, "max_concurrency": 2},
            {"id": "b", "instruction": "about ${@index}", "allow_partial": True},
        ),
        registry,
    )
    assert found == [
        ("element_outside_map", "${@item} names a map's element, but the task has no 'for_each'"),
        ("map_option", "max_concurrency is for map tasks, and the task has no 'for_each'"),
        ("element_outside_map", "${@index} names a map's element, but the task has no 'for_each'"),
        ("map_option", "allow_partial is for map tasks, and the task has no 'for_each'"),
    ]
    found = issues(
        plan(
            SEARCH,
            {
                "id": "w",
                "tool": "text",
                "for_each": "${s}",
                "args": {"query": "${@itme} ${@index.x} ${item}"},
            },
        ),
        registry,
    )
    assert found == [
        (
            "unknown_element",
            "${@itme}: a map names its element ${@item} and its position ${@index} "
            "(did you mean '@item'?)",
        ),
        ("unknown_element", "${@index.x}: ${@index} is a number"),
        (
            "missing_dependency",
            "has reference ${item} to unknown task 'item' (the element of a map is ${@item}, "
            "with an '@')",
        ),
    ]


def test_a_list_declared_not_to_be_one(registry: dagagent.Registry) -> None:
    cases = {
        "${t}": "task 't' (text) declares it a string",
        "${f}": "task 'f' (find) declares it an object",
        "${f.total}": "task 'f' (find) declares it an integer",
        "${f.cities.0}": "task 'f' (find) declares it an object",
        "${f.cities.0.name}": "task 'f' (find) declares it a string",
    }
    for ref, why in cases.items():
        found = issues(
            plan(
                {"id": "t", "tool": "text", "args": {"query": "x"}},
                {"id": "f", "tool": "find", "args": {"query": "x"}},
                {"id": "w", "tool": "text", "for_each": ref, "args": {"query": "${@item}"}},
            ),
            registry,
        )
        assert found == [("for_each_not_list", f"for_each {ref} is not a list: {why}")], ref
    # what is not declared, or is a list, is fine before the run
    for ref in ("${a}", "${a.x}", "${f.cities}", "${s}", "${f.nope}"):
        validate(
            plan(
                SEARCH,
                {"id": "a", "tool": "anything", "args": {"query": "x"}},
                {"id": "f", "tool": "find", "args": {"query": "x"}},
                {"id": "w", "tool": "text", "for_each": ref, "args": {"query": "q"}},
            ),
            registry,
        )


def test_arguments_are_checked_with_the_elements_type(registry: dagagent.Registry) -> None:
    found = issues(
        plan(
            SEARCH,
            {"id": "f", "tool": "find", "args": {"query": "x"}},
            {"id": "n", "tool": "count", "for_each": "${f.cities}", "args": {"n": "${@item}"}},
            {"id": "d", "tool": "shape", "for_each": "${s}", "args": {"data": "${@item}"}},
            {"id": "i", "tool": "shape", "for_each": "${s}", "args": {"data": "${@index}"}},
        ),
        registry,
    )
    assert found == [
        (
            "bad_arguments",
            "arguments for tool 'count' do not fit its schema: n: ${@item} is an object here, "
            "and the tool takes integer",
        ),
        (
            "bad_arguments",
            "arguments for tool 'shape' do not fit its schema: data: ${@item} is a string here, "
            "and the tool takes object",
        ),
        (
            "bad_arguments",
            "arguments for tool 'shape' do not fit its schema: data: ${@index} is an integer "
            "(the element's position), and the tool takes object",
        ),
    ]
    validate(
        plan(
            SEARCH,
            {"id": "f", "tool": "find", "args": {"query": "x"}},
            {
                "id": "n",
                "tool": "count",
                "for_each": "${f.cities}",
                "args": {"n": "${@item.population}"},
            },
            {
                "id": "t",
                "tool": "text",
                "for_each": "${f.cities}",
                "args": {"query": "${@item.name}"},
            },
            {"id": "u", "tool": "count", "for_each": ["1", 2], "args": {"n": "${@item}"}},
            {"id": "i", "tool": "count", "for_each": "${s}", "args": {"n": "${@index}"}},
            # numbers into text: given as their text when the elements run
            {"id": "c", "tool": "text", "for_each": [1, 2.5, True], "args": {"query": "${@item}"}},
            {"id": "w", "tool": "weather", "for_each": "${n}", "args": {"city": "${@item}"}},
            {"id": "k", "tool": "text", "for_each": "${s}", "args": {"query": "${@index}"}},
        ),
        registry,
    )


def test_a_whole_reference_is_checked_with_the_type_its_task_declares(
    registry: dagagent.Registry,
) -> None:
    found = issues(
        plan(
            SEARCH,
            {"id": "f", "tool": "find", "args": {"query": "x"}},
            {"id": "a", "tool": "text", "args": {"query": "${s}"}},
            {"id": "b", "tool": "count", "args": {"n": "${f}"}},
            {"id": "c", "tool": "shape", "args": {"data": "${f.cities.0.name}"}},
        ),
        registry,
    )
    assert found == [
        (
            "bad_arguments",
            "arguments for tool 'text' do not fit its schema: query: ${s} is an array (as task "
            "'s' (search) declares it), and the tool takes string",
        ),
        (
            "bad_arguments",
            "arguments for tool 'count' do not fit its schema: n: ${f} is an object (as task "
            "'f' (find) declares it), and the tool takes integer",
        ),
        (
            "bad_arguments",
            "arguments for tool 'shape' do not fit its schema: data: ${f.cities.0.name} is a "
            "string (as task 'f' (find) declares it), and the tool takes object",
        ),
    ]
    # what fits, converts (a number into text), or is not declared is left to the run
    validate(
        plan(
            SEARCH,
            {"id": "f", "tool": "find", "args": {"query": "x"}},
            {"id": "y", "tool": "anything", "args": {"query": "x"}},
            {"id": "a", "tool": "text", "args": {"query": "${f.total}"}},
            {"id": "b", "tool": "count", "args": {"n": "${f.cities.0.population}"}},
            {"id": "c", "tool": "text", "args": {"query": "${y}"}},
            {"id": "d", "tool": "text", "args": {"query": "${f.nope}"}},
            {"id": "e", "tool": "text", "args": {"query": "total ${f.cities}"}},
        ),
        registry,
    )


def test_map_options_are_checked(registry: dagagent.Registry) -> None:
    with pytest.raises(PlanLoadError, match="max_concurrency: Input should be greater than"):
        validate(plan({"id": "c", "tool": "count", "for_each": [1], "max_concurrency": 0}))


def test_a_changed_list_is_a_changed_call() -> None:
    a = Plan.model_validate(plan({"id": "c", "tool": "count", "for_each": [1], "args": {}}))
    b = Plan.model_validate(plan({"id": "c", "tool": "count", "for_each": [2], "args": {}}))
    assert not same_call(a.tasks[0], b.tasks[0]) and same_call(a.tasks[0], a.tasks[0])


def test_a_streamed_plan_checks_maps_task_by_task(registry: dagagent.Registry) -> None:
    checker = PlanChecker(registry)
    first = checker.check(Plan.model_validate(plan(SEARCH)).tasks[0])
    assert first.ok
    ok = Plan.model_validate(
        plan({"id": "w", "tool": "weather", "for_each": "${s}", "args": {"city": "${@item}"}})
    ).tasks[0]
    assert checker.check(ok).dependencies == ("s",)
    bad = Plan.model_validate(
        plan({"id": "n", "tool": "count", "for_each": "${w}", "args": {"n": "${@item}"}})
    ).tasks[0]
    assert [i.code for i in checker.check(bad).issues] == ["bad_arguments"]
