"""Plain plans take a fast road through validation (``plan._plain_plan`` reads them without
pydantic, ``graph._scan_plain`` checks them in one pass). These tests hold the fast road to
what the full one gives: the same plan models, the same graph, and, for anything that is not
plain, the full road with its own issues."""

from __future__ import annotations

import enum
import math
import random
from typing import Any

import pytest

import dagagent
from dagagent import Plan, PlanLoadError, PlanValidationError
from dagagent import graph as graph_module
from dagagent import plan as plan_module
from dagagent._gc import MANY
from dagagent.plan import _plain_plan, read_plan
from dagagent.references import Template


def _registry() -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    async def noop() -> None:
        """Nothing."""

    @registry.tool
    async def add(a: int, b: int = 0) -> int:
        """Add."""
        return a + b

    @registry.tool
    def echo(text: str, times: int = 1) -> str:
        """Echo."""
        return text * times

    async def once(**_: Any) -> None:
        """Not to be called twice."""

    registry.add(
        dagagent.SchemaTool(once, name="once", parameters={"type": "object"}, retryable=False)
    )
    return registry


def _random_plan(rng: random.Random, n: int) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        earlier = [t["id"] for t in tasks]
        task: dict[str, Any] = {"id": f"t{i}"}
        kind = rng.choice(["noop", "add", "echo"])
        task["tool"] = kind
        if kind == "add":
            a: Any = rng.randint(0, 9)
            if earlier and rng.random() < 0.5:
                a = "${" + rng.choice(earlier) + "}"
            task["args"] = {"a": a, "b": rng.randint(0, 9)}
        elif kind == "echo":
            text = "x"
            if earlier and rng.random() < 0.5:
                text = "value: ${" + rng.choice(earlier) + "} and $${literal}"
            task["args"] = {"text": text}
        elif rng.random() < 0.3:
            task["args"] = {}
        if earlier and rng.random() < 0.7:
            deps = rng.sample(earlier, min(len(earlier), rng.randint(1, 3)))
            if rng.random() < 0.2:
                deps.append(deps[0])  # a repeated dependency counts once
            task["depends_on"] = deps
        if rng.random() < 0.2:
            task["retries"] = rng.randint(0, 3)
        if rng.random() < 0.2:
            task["timeout_s"] = rng.choice([1, 2.5, None])
        if rng.random() < 0.2:
            task["description"] = rng.choice(["what it does", None])
        tasks.append(task)
    plan: dict[str, Any] = {"tasks": tasks}
    if rng.random() < 0.8:
        plan["goal"] = "a goal"
    return plan


def _same_models(fast: Plan, full: Plan) -> None:
    assert fast == full
    assert fast.model_dump() == full.model_dump()
    assert fast.model_fields_set == full.model_fields_set
    for a, b in zip(fast.tasks, full.tasks, strict=True):
        assert type(a) is type(b)
        assert a.__dict__ == b.__dict__
        assert a.model_fields_set == b.model_fields_set
        assert type(a.timeout_s) is type(b.timeout_s)


@pytest.mark.parametrize("seed", range(20))
def test_a_plain_plan_is_read_as_pydantic_reads_it(seed: int) -> None:
    data = _random_plan(random.Random(seed), 30)
    fast = _plain_plan(data)
    assert fast is not None
    _same_models(fast, Plan.model_validate(data))
    # values are copied as pydantic copies them: editing the input leaves the plan alone
    data["tasks"][0].setdefault("args", {})["extra"] = 1
    data["tasks"][-1].setdefault("depends_on", []).append("t0")
    assert "extra" not in fast.tasks[0].args
    assert (
        fast.tasks[-1].depends_on
        == Plan.model_validate(_random_plan(random.Random(seed), 30)).tasks[-1].depends_on
    )


@pytest.mark.parametrize("seed", range(20))
def test_a_plain_plan_gets_the_graph_the_full_checks_give(seed: int) -> None:
    registry = _registry()
    data = _random_plan(random.Random(seed), 40)
    plan, _ = read_plan(data)
    fast = graph_module._scan_plain(plan, registry)
    assert fast is not None
    fast_templates, fast_preds, fast_levels, by_id, tool_names = fast
    assert tool_names == list(dict.fromkeys(t.tool for t in plan.tasks))  # type: ignore[union-attr]
    issues, templates, preds, succs = graph_module._scan(plan, registry, [])
    assert issues == []
    assert fast_preds == preds
    assert {t: list(d) for t, d in graph_module._successors(fast_preds).items()} == succs
    assert by_id == {t.id: t for t in plan.tasks}
    assert templates.keys() == fast_templates.keys()
    outputs = {t: i for i, t in enumerate(templates)}
    for tid, tmpl in templates.items():
        assert [r.text for r in fast_templates[tid].refs] == [r.text for r in tmpl.refs]
        assert fast_templates[tid].resolve(outputs) == tmpl.resolve(outputs)
    # every task of the random plan comes after its dependencies: the levels come out of the
    # scan, as Kahn's algorithm gives them, each in plan order
    position = {t.id: i for i, t in enumerate(plan.tasks)}
    generations, _ = graph_module._generations(preds, succs)
    assert fast_levels == [sorted(g, key=position.__getitem__) for g in generations]
    g = dagagent.validate(data, registry)
    assert g.levels == fast_levels
    assert g.order == [t for level in fast_levels for t in level]


@pytest.mark.parametrize("seed", range(10))
def test_a_plan_listing_tasks_before_their_dependencies_gets_the_same_levels(seed: int) -> None:
    """The scan places tasks on their levels only while each comes after its dependencies;
    a plan in any other order gets its levels from Kahn's algorithm, the same ones."""
    registry = _registry()
    data = _random_plan(random.Random(seed), 40)
    in_order = dagagent.validate(data, registry)
    shuffled = {**data, "tasks": random.Random(seed).sample(data["tasks"], len(data["tasks"]))}
    plan, _ = read_plan(shuffled)
    fast = graph_module._scan_plain(plan, registry)
    assert fast is not None
    assert fast[2] is None  # some task came before one of its dependencies
    g = dagagent.validate(shuffled, registry)
    position = {t["id"]: i for i, t in enumerate(shuffled["tasks"])}
    assert [sorted(level) for level in g.levels] == [sorted(lv) for lv in in_order.levels]
    for level in g.levels:
        assert level == sorted(level, key=position.__getitem__)
    assert g.dependencies == in_order.dependencies
    assert {t: set(d) for t, d in g.dependents.items()} == {
        t: set(d) for t, d in in_order.dependents.items()
    }


class _Kind(str, enum.Enum):
    A = "a"


class _Str(str):
    pass


NOT_PLAIN: list[Any] = [
    {"tasks": [{"id": "a", "tool": "noop", "retries": True}]},  # a bool where an int goes
    {"tasks": [{"id": "a", "tool": "noop", "retries": "2"}]},  # a number as text
    {"tasks": [{"id": "a", "tool": "noop", "retries": -1}]},
    {"tasks": [{"id": "a", "tool": "noop", "retries": 101}]},
    {"tasks": [{"id": "a", "tool": "noop", "timeout_s": 0}]},
    {"tasks": [{"id": "a", "tool": "noop", "timeout_s": math.nan}]},
    {"tasks": [{"id": "a", "tool": "noop", "timeout_s": "1"}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": ("b",)}, {"id": "b", "tool": "noop"}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": [_Kind.A]}]},
    {"tasks": [{"id": _Str("a"), "tool": "noop"}]},
    {"tasks": [{"id": "a", "tool": "add", "args": {1: 2}}]},
    {"tasks": [{"id": "a", "tool": "noop", "args": None}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": None}]},
    {"tasks": [{"id": "a", "tool": "noop", "description": 3}]},
    {"tasks": [{"id": "a", "tool": "noop", "whatever": 1}]},
    {"tasks": [{"id": "a", "instruction": "think"}]},  # an agent task
    {"tasks": [{"id": "a", "tool": None, "instruction": "think"}]},
    {"tasks": [{"id": 1, "tool": "noop"}]},
    {"tasks": [{"id": "a", "tool": "add", "args": {"a": "${@item}"}, "for_each": ["x", "y"]}]},
    {"tasks": [{"id": "a", "tool": "noop", "max_concurrency": 2}]},
    {"tasks": [{"id": "a", "tool": "noop", "allow_partial": True}]},
    {"tasks": [["a", "noop"]]},
    {"tasks": ({"id": "a", "tool": "noop"},)},
    {"goal": 3, "tasks": []},
    {"goal": "g", "tasks": [], "version": 2},
]


@pytest.mark.parametrize("data", NOT_PLAIN, ids=range(len(NOT_PLAIN)))
def test_anything_not_plain_takes_the_full_road(data: Any) -> None:
    assert _plain_plan(data) is None
    try:
        expected = Plan.model_validate(data)
    except Exception:
        with pytest.raises(PlanLoadError):
            read_plan(data)
        return
    plan, _ = read_plan(data)
    assert plan.model_dump() == expected.model_dump()


@pytest.mark.parametrize(
    ("tasks", "code"),
    [
        ([{"id": "a", "tool": "noop"}, {"id": "a", "tool": "noop"}], "duplicate_id"),
        ([{"id": "a.b", "tool": "noop"}], "invalid_id"),
        ([{"id": "a\n", "tool": "noop"}], "invalid_id"),
        ([{"id": "a\nb", "tool": "noop"}], "invalid_id"),
        ([{"id": "a", "tool": "noop"}, {"id": "b\nc", "tool": "noop"}], "invalid_id"),
        ([{"id": "a", "tool": "nope"}], "unknown_tool"),
        ([{"id": "a", "tool": "noop", "depends_on": ["zz"]}], "missing_dependency"),
        ([{"id": "a", "tool": "noop", "depends_on": ["a"]}], "self_dependency"),
        ([{"id": "a", "tool": "add", "args": {"a": "${a}"}}], "self_dependency"),
        ([{"id": "a", "tool": "add", "args": {"b": 1}}], "bad_arguments"),
        ([{"id": "a", "tool": "add"}], "bad_arguments"),  # no arguments, one required
        (
            [{"id": "a", "tool": "noop"}, {"id": "b", "tool": "noop"}, {"id": "c", "tool": "add"}],
            "bad_arguments",
        ),
        ([{"id": "a", "tool": "noop"}, {"id": "b", "tool": "nope"}], "unknown_tool"),
        ([{"id": "a", "tool": "once", "retries": 2}], "not_retryable"),
        ([{"id": "a", "tool": "once"}, {"id": "b", "tool": "once", "retries": 1}], "not_retryable"),
        ([{"id": "a", "tool": "add", "args": {"a": "x"}}], "bad_arguments"),
        ([{"id": "a", "tool": "noop", "args": {"a": 1}}], "bad_arguments"),
        ([{"id": "a", "tool": "echo", "args": {"text": "${"}}], "bad_reference"),
        ([{"id": "a", "tool": "add", "args": {"a": "${@item}"}}], "element_outside_map"),
        (
            [{"id": "a", "tool": "noop"}, {"id": "b", "tool": "add", "args": {"c": "${a}"}}],
            "bad_arguments",
        ),
        (
            [
                {"id": "a", "tool": "noop", "depends_on": ["b"]},
                {"id": "b", "tool": "noop", "depends_on": ["a"]},
            ],
            "cycle",
        ),
    ],
)
def test_a_plain_plan_with_an_issue_is_reported_in_full(
    tasks: list[dict[str, Any]], code: str
) -> None:
    registry = _registry()
    plan, _ = read_plan({"tasks": tasks})
    if code != "cycle":
        assert graph_module._scan_plain(plan, registry) is None
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate({"tasks": tasks}, registry)
    assert code in {i.code for i in info.value.issues}


@pytest.mark.parametrize(
    "option", [{"max_concurrency": 2}, {"allow_partial": True}], ids=["max_concurrency", "partial"]
)
def test_a_map_option_without_a_map_is_reported_from_a_plan_model(option: dict[str, Any]) -> None:
    """A Plan given as a model skips reading: its tasks still take the full checks when one
    has a map's option without a map."""
    registry = _registry()
    plan = Plan.model_validate({"tasks": [{"id": "a", "tool": "noop", **option}]})
    assert graph_module._scan_plain(plan, registry) is None
    for given in (plan, plan.model_dump()):
        with pytest.raises(PlanValidationError) as info:
            dagagent.validate(given, registry)
        assert [i.code for i in info.value.issues] == ["map_option"]


def test_validation_leaves_the_garbage_collector_as_it_was() -> None:
    import gc

    registry = _registry()
    assert gc.isenabled()
    dagagent.validate({"tasks": [{"id": "a", "tool": "noop"}]}, registry)
    assert gc.isenabled()
    with pytest.raises(PlanValidationError):
        dagagent.validate({"tasks": [{"id": "a", "tool": "nope"}]}, registry)
    assert gc.isenabled()
    gc.disable()
    try:
        dagagent.validate({"tasks": [{"id": "a", "tool": "noop"}]}, registry)
        assert not gc.isenabled()
    finally:
        gc.enable()


class _Node:
    """An object that can be in a reference cycle and be watched with a weak reference."""

    def __init__(self) -> None:
        self.me = self


def _many_tasks(n: int) -> dict[str, Any]:
    return {"tasks": [{"id": f"t{i}", "tool": "noop"} for i in range(n)]}


def test_a_large_plan_takes_no_garbage_along_to_the_oldest_generation() -> None:
    """A plan of many tasks puts what validation made in the collector's oldest generation;
    the garbage made before it is collected first, not moved there with it (where only a full
    collection would find it)."""
    import gc
    import weakref

    registry = _registry()
    plan = _many_tasks(MANY)
    gc.collect()
    node = _Node()
    dead = weakref.ref(node)
    del node  # a cycle: only the collector frees it
    assert dead() is not None
    graph = dagagent.validate(plan, registry)
    assert dead() is None
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert len(graph.order) == MANY


def test_a_small_plan_leaves_the_collector_alone() -> None:
    import gc
    import weakref

    registry = _registry()
    plan = _many_tasks(3)
    gc.collect()
    node = _Node()
    dead = weakref.ref(node)
    del node
    dagagent.validate(plan, registry)
    assert dead() is not None  # no collection for a few tasks: it costs more than they do
    gc.collect()
    assert dead() is None


def test_objects_someone_froze_stay_frozen() -> None:
    import gc

    registry = _registry()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        dagagent.validate(_many_tasks(MANY), registry)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_the_fields_handed_to_the_checks_are_the_models_own() -> None:
    """A plain plan read from a dict comes with each task's fields, which the one-pass checks
    read instead of the models' attributes: they must be the models' own ``__dict__``."""
    data = _random_plan(random.Random(3), 30)
    plan, issues, fields = plan_module.read_plan_fields(data)
    assert issues == []
    assert fields is not None
    assert [f is t.__dict__ for t, f in zip(plan.tasks, fields, strict=True)] == [True] * 30
    registry = _registry()
    assert _same_scans(
        graph_module._scan_plain(plan, registry, fields), graph_module._scan_plain(plan, registry)
    )
    # a Plan given as a model, or a plan that is not plain, comes without them
    assert plan_module.read_plan_fields(plan)[2] is None
    agent = {"tasks": [{"id": "a", "instruction": "think"}]}
    assert plan_module.read_plan_fields(agent)[2] is None


def _same_scans(a: Any, b: Any) -> bool:
    assert a is not None
    assert b is not None
    templates_a, preds_a, levels_a, by_id_a, tools_a = a
    templates_b, preds_b, levels_b, by_id_b, tools_b = b
    assert (preds_a, levels_a, by_id_a, tools_a) == (preds_b, levels_b, by_id_b, tools_b)
    assert templates_a.keys() == templates_b.keys()
    outputs = {t: i for i, t in enumerate(templates_a)}
    for tid, tmpl in templates_a.items():
        other = templates_b[tid]
        assert [r.text for r in tmpl.refs] == [r.text for r in other.refs]
        assert tmpl.malformed == other.malformed
        assert tmpl.resolve(outputs) == other.resolve(outputs)
    return True


def _same_template(a: Template, b: Template) -> None:
    for slot in Template.__slots__:
        assert getattr(a, slot) == getattr(b, slot), slot


def test_a_task_without_arguments_gets_the_template_template_gives_it() -> None:
    """The one-pass checks build the template of a task without arguments themselves: it
    must be what Template builds, slot for slot, its literal the task's own arguments."""
    registry = _registry()
    graph = dagagent.validate({"tasks": [{"id": "a", "tool": "noop"}]}, registry)
    task = graph.tasks["a"]
    tmpl = graph.templates["a"]
    assert type(tmpl) is Template
    _same_template(tmpl, Template(task.args))
    assert tmpl.literal is task.args
    assert tmpl.resolve({}) == {}
    assert not tmpl.has_refs
    assert tmpl.literal_keys() == {}


BAD_PLANS: list[Any] = [
    *NOT_PLAIN,
    {"tasks": [{"id": "a", "tool": "noop", "retries": 2.5}]},
    {"tasks": [{"id": "a", "tool": "noop", "timeout_s": -1}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": "b"}]},
    {"tasks": [{"id": "a", "tool": "noop", "args": []}]},
    {"tasks": [{"id": "a", "tool": "noop", "args": {"a": 1}}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": [1]}]},
    {"tasks": [{"id": "a", "tool": "noop", "tools": ["noop"]}]},
    {"tasks": [{"id": "a", "tool": "noop", "instruction": "x"}]},
    {"tasks": [{"id": "a", "args": {"a": 1}}]},
    {"tasks": [{"id": "a", "tool": "noop", "dependson": ["b"]}]},
    {"tasks": [{"tool": "noop"}]},
    {"tasks": [{"id": "a", "tool": "noop"}], "goal": None},
    {"tasks": "a"},
    {"tasks": []},
    {"tasks": [{"id": "a", "tool": "noop"}, {"id": "a", "tool": "nope"}]},
    {"tasks": [{"id": "-a", "tool": "noop"}]},
    {"tasks": [{"id": "a" * 65, "tool": "noop"}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": ["b", "b"]}]},
    {"tasks": [{"id": "a", "tool": "noop", "depends_on": ["b"]}, {"id": "b", "tool": "noop"}]},
]


def _outcome(data: Any, registry: dagagent.Registry) -> Any:
    try:
        graph = dagagent.validate(data, registry)
    except (PlanLoadError, PlanValidationError) as exc:
        return type(exc).__name__, str(exc), [(i.code, i.task_id, i.message) for i in exc.issues]
    return graph.plan.model_dump(), graph.levels, graph.dependencies


@pytest.mark.parametrize("data", BAD_PLANS, ids=range(len(BAD_PLANS)))
def test_every_plan_gets_what_it_gets_without_the_fast_road(
    data: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same outcome, word for word, with the fast road and without it (the reading and
    checks that pydantic and the task-by-task checks do)."""
    registry = _registry()
    fast = _outcome(data, registry)
    monkeypatch.setattr(plan_module, "_PLAIN_OK", False)
    monkeypatch.setattr(graph_module, "_scan_plain", lambda *_: None)
    assert _outcome(data, registry) == fast


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.anyio
async def test_a_plain_plan_lists_its_tools_for_the_run(seed: int) -> None:
    """Validation lists the tools a plain plan calls, and says it is plain: a run then
    neither reads every task for its tool nor looks for map tasks."""
    from dagagent.api import _used_tools
    from dagagent.runner import TaskRunner

    registry = _registry()
    data = _random_plan(random.Random(seed), 40)
    g = dagagent.validate(data, registry)
    assert g.plain and g.tool_names is not None
    listed = _used_tools(g, registry)
    g.tool_names = None  # read from the tasks instead
    assert listed == _used_tools(g, registry)
    assert [t.name for t in listed] == list(dict.fromkeys(t["tool"] for t in data["tasks"]))
    assert not TaskRunner(g, registry, run_id="r")._maps
    # Without a registry the tools are not checked, so not listed; the run reads them.
    unchecked = dagagent.validate(data)
    assert unchecked.plain and unchecked.tool_names is None
    assert _used_tools(unchecked, registry) == listed


@pytest.mark.anyio
async def test_a_plan_with_a_map_or_an_agent_task_is_not_plain() -> None:
    from dagagent.runner import TaskRunner

    registry = _registry()
    mapped = dagagent.validate(
        {
            "tasks": [
                {"id": "a", "tool": "noop"},
                {"id": "m", "tool": "echo", "for_each": ["x", "y"], "args": {"text": "${@item}"}},
            ]
        },
        registry,
    )
    assert not mapped.plain and mapped.tool_names is None
    assert TaskRunner(mapped, registry, run_id="r")._maps
    agent = dagagent.validate(
        {"tasks": [{"id": "a", "tool": "noop"}, {"id": "b", "instruction": "think"}]}, registry
    )
    assert not agent.plain and agent.tool_names is None
