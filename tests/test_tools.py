from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel, Field

import dagagent
from dagagent import Registry, tool
from dagagent.errors import ToolArgumentsError, ToolDefinitionError, UnknownToolError


def test_schema_and_descriptions_from_docstring() -> None:
    @tool
    def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast") -> list[str]:
        """Search the index.

        Longer text that is not part of the short description.

        Args:
            query: What to look for.
            limit: How many hits
                to return at most.
            mode: Search mode.
        """
        return []

    spec = search.spec()
    assert spec["name"] == "search"
    assert spec["description"] == "Search the index."
    params = spec["parameters"]
    assert params["required"] == ["query"]
    assert params["additionalProperties"] is False
    assert params["properties"]["query"]["description"] == "What to look for."
    assert params["properties"]["limit"]["description"] == "How many hits to return at most."
    assert params["properties"]["mode"]["enum"] == ["fast", "deep"]


def test_sphinx_docstring_and_field_defaults() -> None:
    @tool(name="scale", description="Scale a number.")
    def f(x: float, factor: Annotated[float, Field(gt=0)] = 2.0) -> float:
        """:param x: the number
        :param factor: multiplier"""
        return x * factor

    props = f.parameters_schema["properties"]
    assert props["x"]["description"] == "the number"
    assert props["factor"]["exclusiveMinimum"] == 0
    assert f.name == "scale" and f.description == "Scale a number."
    with pytest.raises(ToolArgumentsError, match="factor"):
        f.validate_args({"x": 1, "factor": -1})


def test_coercion_and_unknown_arguments() -> None:
    class Point(BaseModel):
        x: int
        y: int

    @tool
    def dist(p: Point, scale: float = 1.0) -> float:
        return (p.x**2 + p.y**2) ** 0.5 * scale

    args = dist.validate_args({"p": {"x": "3", "y": 4}, "scale": "2"})
    assert isinstance(args["p"], Point) and args["scale"] == 2.0
    with pytest.raises(ToolArgumentsError) as ei:
        dist.validate_args({"p": {"x": 1, "y": 2}, "color": "red"})
    assert ei.value.errors == ["color: unexpected argument"]
    with pytest.raises(ToolArgumentsError, match="required argument is missing"):
        dist.validate_args({})


def test_registry_rejects_duplicates_and_unknown_names() -> None:
    reg = Registry()

    @reg.tool
    def a() -> int:
        return 1

    with pytest.raises(ToolDefinitionError, match="already registered"):
        reg.add(tool(a.fn))
    with pytest.raises(UnknownToolError, match="known tools: a"):
        reg.get("b")
    assert "a" in reg and len(reg) == 1 and reg.subset(["a"]).names == ["a"]


def test_bad_definitions() -> None:
    def star(*a: int) -> None:
        return None

    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        tool(star)
    with pytest.raises(ToolDefinitionError, match="not valid"):
        tool(name="has space")(lambda: None)
    with pytest.raises(ToolDefinitionError, match="max_concurrency"):
        tool(name="ok", max_concurrency=0)(lambda: None)


def test_tool_stays_callable() -> None:
    @tool
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8
    assert double.__name__ == "double"


@pytest.mark.anyio
async def test_sync_tools_run_in_worker_threads() -> None:
    main = threading.get_ident()
    seen: list[int] = []

    @tool
    def where() -> None:
        seen.append(threading.get_ident())

    await where.run({})
    assert seen and seen[0] != main


@pytest.mark.anyio
async def test_sync_tool_does_not_block_the_loop() -> None:
    import time

    @tool
    def blocking(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(5):
            await anyio.sleep(0.02)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        assert await blocking.run({"seconds": 0.3}) == "done"
    assert ticks == 5


@pytest.mark.anyio
async def test_async_tool_runs() -> None:
    @tool
    async def hello(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        return f"hi {name}"

    assert await hello.run({"name": "x"}) == "hi x"
    assert hello.is_async


def test_module_level_tools_join_registries() -> None:
    @tool
    def one() -> int:
        return 1

    reg = Registry([one])
    assert reg.get("one") is one
    assert isinstance(reg.specs()[0]["parameters"], dict)


def test_dagagent_exports() -> None:
    assert dagagent.tool is tool and dagagent.Registry is Registry
    assert set(dagagent.__all__) <= set(dir(dagagent))


def test_any_params() -> None:
    @tool
    def anything(x, y: Any = None):  # type: ignore[no-untyped-def]
        return x

    assert anything.validate_args({"x": [1]}) == {"x": [1], "y": None}


def test_tool_options_name_every_option_of_tool() -> None:
    """``@tool(...)``/``@registry.tool(...)`` are typed by ToolOptions: it must list exactly the
    keyword options Tool takes, or a type checker rejects a real option (or lets a typo by)."""
    import inspect

    from dagagent.tools import Tool, ToolOptions

    params = inspect.signature(Tool.__init__).parameters.values()
    keyword_only = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(ToolOptions.__annotations__) == keyword_only
