"""Tools from MCP servers against real servers (mcp_servers.py) over stdio and HTTP: listing,
argument schemas, results, server errors, crashes, hangs, sessions, annotations."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import Any

import anyio
import pytest
from eventually import wait_until
from mcp_helpers import SERVERS, Connect, HTTPServers, http_server, stdio_client

import dagagent
from dagagent import PlanValidationError, Registry, RunStore, TaskStatus, ToolDefinitionError
from dagagent.approval import Policy, Rule
from dagagent.errors import MCPConnectError
from dagagent.events import TaskFinished
from dagagent.mcp import MCPClient
from dagagent.planners.prompts import tool_catalog
from dagagent.planners.schema import plan_json_schema
from dagagent.settings import RunSettings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_BOUND_S = 90.0  # generous: nothing here should come near it unless something hangs


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "use an MCP server", "tasks": list(tasks)}


async def kit_registry(client: MCPClient, **filters: Any) -> Registry:
    registry = Registry()
    await client.add_to(registry, **filters)
    return registry


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (waiting for it: shutdown is asynchronous)."""

    def exited() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    return wait_until(exited, f"process {pid} exits", timeout=20)


# -- listing and schemas -------------------------------------------------------------------


async def test_listing_names_tools_with_a_prefix_and_filters(connect: Connect) -> None:
    client = connect("kit")
    registry = await kit_registry(
        client, prefix="kit.", include=["weather", "shout", "delete_*", "put"], exclude="shout"
    )
    assert registry.names == ["kit.weather", "kit.delete_file", "kit.put"]
    weather = registry.get("kit.weather")
    assert weather.description == "Weather forecast for a city."
    schema = weather.parameters_schema
    assert schema["properties"]["city"]["type"] == "string"
    assert schema["required"] == ["city"]
    assert not client.is_open  # opened for the listing, closed after it


async def test_listing_follows_every_page(connect: Connect) -> None:
    tools = await connect("paged").tools()
    assert [t.name for t in tools] == [f"tool_{i}" for i in range(7)]
    assert tools[4].description == "Tool number 4"


async def test_plans_and_the_planner_schema_check_arguments_by_the_input_schema(
    connect: Connect,
) -> None:
    registry = await kit_registry(connect("kit"), prefix="kit.")
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate(
            plan({"id": "w", "tool": "kit.weather", "args": {"town": "Oslo", "days": "two"}}),
            registry,
        )
    message = str(info.value)
    assert "town: unexpected argument" in message
    assert "days: 'two' is not of type 'integer'" in message
    assert "city: required argument is missing" in message
    # a referenced argument counts as present; its value is checked when it is known
    dagagent.validate(
        plan(
            {"id": "s", "tool": "kit.shout", "args": {"text": "oslo"}},
            {"id": "w", "tool": "kit.weather", "args": {"city": "${s}"}},
        ),
        registry,
    )
    schema = plan_json_schema(registry)
    assert "kit.weather" in str(schema) and "'city'" in str(schema)
    # the planner's catalog shows what a tool gives when the server declares it
    catalog = tool_catalog(registry)
    assert "- kit.pid() -> {result: integer}" in catalog
    assert "- kit.shout(text: string)\n" in catalog


# -- calls ---------------------------------------------------------------------------------


async def test_outputs_are_structured_content_else_text_with_other_content_described(
    connect: Connect,
) -> None:
    client = connect("kit")
    registry = await kit_registry(client)
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan(
                {"id": "w", "tool": "weather", "args": {"city": "Oslo"}},
                {"id": "s", "tool": "shout", "args": {"text": "${w.city}"}},
                {"id": "p", "tool": "picture", "args": {}},
            ),
            registry,
            settings=RunSettings(executor="dataflow"),
        )
    assert result.ok, result.tasks
    assert result.tasks["w"].output == {"city": "Oslo", "days": 1, "temp_c": 21.5}
    assert result.tasks["s"].output == "OSLO"
    caption, image = result.tasks["p"].output.split("\n")
    assert caption == "a red dot"
    assert image.startswith("[image: image/png, ") and "kB" in image
    assert not client.is_open


async def test_is_error_fails_the_task_with_the_servers_message(connect: Connect) -> None:
    registry = await kit_registry(connect("kit"))
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan({"id": "r", "tool": "refuse", "args": {"reason": "the vault is locked"}}),
            registry,
        )
    r = result.tasks["r"]
    assert r.status is TaskStatus.FAILED
    assert r.error_type == "MCPToolError"
    assert "the vault is locked" in (r.error or "")


async def test_a_server_that_never_answers_is_bounded_by_the_task_timeout(
    connect: Connect,
) -> None:
    registry = await kit_registry(connect("kit"))
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan(
                {"id": "h", "tool": "hang", "args": {}, "timeout_s": 0.5},
                {"id": "w", "tool": "weather", "args": {"city": "Oslo"}},
            ),
            registry,
            settings=RunSettings(on_failure="continue"),
        )
    assert result.tasks["h"].status is TaskStatus.FAILED
    assert result.tasks["h"].error_type == "TaskTimeoutError"
    assert result.tasks["w"].status is TaskStatus.SUCCEEDED  # the session is still usable


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_server_that_dies_mid_call_fails_its_running_tasks(transport: str) -> None:
    tasks = plan(
        {"id": "c", "tool": "crash", "args": {}},
        {"id": "s", "tool": "slow", "args": {"seconds": 60}},
        {"id": "after", "tool": "weather", "args": {"city": "Oslo"}, "depends_on": ["c"]},
    )
    if transport == "stdio":
        client = stdio_client("kit")
        registry = await kit_registry(client)
        with anyio.fail_after(RUN_BOUND_S):
            result = await dagagent.execute(
                tasks, registry, settings=RunSettings(executor="dataflow")
            )
    else:
        with http_server("kit") as (url, _):
            client = MCPClient.http("kit", url)
            registry = await kit_registry(client)
            with anyio.fail_after(RUN_BOUND_S):
                result = await dagagent.execute(
                    tasks, registry, settings=RunSettings(executor="dataflow")
                )
    crashed = result.tasks["c"]
    assert crashed.status is TaskStatus.FAILED
    assert crashed.error_type == "MCPServerLostError"
    assert "MCP server 'kit'" in (crashed.error or "")
    if transport == "stdio":  # the server's last words are in the message
        assert "crashing on purpose" in (crashed.error or "")
    assert result.tasks["s"].status in (TaskStatus.FAILED, TaskStatus.CANCELLED)
    assert result.tasks["after"].status is TaskStatus.SKIPPED
    assert not client.is_open


async def test_a_server_that_cannot_start_is_a_configuration_error_before_anything_runs(
    tmp_path: Any,
) -> None:
    client = stdio_client("kit")
    registry = await kit_registry(client)
    client.args = (SERVERS, "no-such-kind", "stdio")  # the same tools, a server that fails
    store = tmp_path / "runs.db"
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(MCPConnectError) as info:
        await dagagent.execute(
            plan({"id": "w", "tool": "weather", "args": {"city": "Oslo"}}), registry, store=store
        )
    message = str(info.value)
    assert "MCP server 'kit'" in message
    assert "KeyError: 'no-such-kind'" in message  # from the server's stderr
    assert isinstance(info.value, dagagent.errors.ConfigError)
    assert not store.exists() or RunStore(store).list_runs() == []


async def test_headers_go_with_every_request_to_an_http_server(mcp_http: HTTPServers) -> None:
    url = mcp_http.url("guarded")
    refused = MCPClient.http("kit", url, connect_timeout_s=60)
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(MCPConnectError) as info:
        await refused.tools()
    assert "MCP server 'kit'" in str(info.value)
    client = MCPClient.http("kit", url, headers={"X-Token": "let-me-in"})
    registry = await kit_registry(client)
    assert "let-me-in" not in repr(client)  # headers may be credentials: never shown
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan({"id": "w", "tool": "weather", "args": {"city": "Oslo"}}), registry
        )
    assert result.ok and result.tasks["w"].output["city"] == "Oslo"


async def test_a_command_that_is_not_there_is_a_configuration_error() -> None:
    client = MCPClient.stdio("ghost", "dagagent-no-such-mcp-server")
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(MCPConnectError) as info:
        await client.tools()
    assert "MCP server 'ghost'" in str(info.value)
    assert "dagagent-no-such-mcp-server" in str(info.value)


async def test_a_server_that_never_shakes_hands_is_a_configuration_error() -> None:
    client = MCPClient.stdio(
        "mute", sys.executable, ["-c", "import sys; sys.stdin.read()"], connect_timeout_s=0.5
    )
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(MCPConnectError) as info:
        await client.tools()
    assert "did not complete the MCP handshake within 0.5 s" in str(info.value)


async def test_a_tool_whose_schema_is_invalid_is_named_and_can_be_left_out(
    connect: Connect,
) -> None:
    client = connect("badschema")
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(ToolDefinitionError) as info:
        await client.tools()
    assert "tool 'broken'" in str(info.value) and "integr" in str(info.value)
    assert [t.name for t in await client.tools(exclude="broken")] == ["fine"]


# -- bounds: what a server may send ---------------------------------------------------------

SMALL = {"max_output_bytes": 512 * 1024, "max_blocks": 100, "max_schema_bytes": 64 * 1024}


async def _call(registry: Registry, tool: str, **args: Any) -> Any:
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(plan({"id": "t", "tool": tool, "args": args}), registry)
    return result.tasks["t"]


async def test_a_result_past_the_bounds_fails_its_call_and_the_session_goes_on(
    connect: Connect,
) -> None:
    """Too many content blocks, or more bytes than a message may hold, fail the call with an
    MCPToolError saying which bound (read before the whole answer is parsed); the same
    session answers the next call."""
    client = connect("kit", **SMALL)
    registry = await kit_registry(client)
    async with client:
        few = await _call(registry, "confetti", pieces=100)
        assert few.status is TaskStatus.SUCCEEDED and len(few.output.split()) == 100
        for pieces in (2_000, 9_000):  # a short answer, and one long enough to be pre-read
            many = await _call(registry, "confetti", pieces=pieces)
            assert many.status is TaskStatus.FAILED and many.error_type == "MCPToolError"
            assert f"{pieces:,} content blocks, more than the 100" in (many.error or "")
        big = await _call(registry, "ream", kib=3 * 1024)
        assert big.status is TaskStatus.FAILED and big.error_type == "MCPToolError"
        assert "larger than 524,288 bytes" in (big.error or ""), big.error
        assert "max_output_bytes" in (big.error or "")
        fine = await _call(registry, "shout", text="still here")
        assert fine.status is TaskStatus.SUCCEEDED and fine.output == "STILL HERE"


async def test_a_bulky_schema_is_refused_by_name_and_can_be_left_out(connect: Connect) -> None:
    client = connect("hugeschema", **SMALL)
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(ToolDefinitionError) as info:
        await client.tools()
    assert "tool 'atlas'" in str(info.value) and "max_schema_bytes" in str(info.value)
    assert [t.name for t in await client.tools(exclude="atlas")] == ["fine"]


async def test_a_listing_larger_than_a_message_may_be_is_a_configuration_error(
    connect: Connect,
) -> None:
    client = connect("hugeschema", max_output_bytes=48 * 1024)
    with anyio.fail_after(RUN_BOUND_S), pytest.raises(MCPConnectError) as info:
        await client.tools()
    assert "larger than 49,152 bytes" in str(info.value)


# -- sessions ------------------------------------------------------------------------------


async def _pid_of_run(registry: Registry, *tasks: dict[str, Any], **options: Any) -> int:
    result = await dagagent.execute(
        plan(*tasks), registry, **options, settings=RunSettings(on_failure="continue")
    )
    return int(result.tasks["p"].output["result"])


async def test_each_run_opens_a_session_and_closes_it_when_it_ends() -> None:
    client = stdio_client("kit")
    registry = await kit_registry(client)
    with anyio.fail_after(RUN_BOUND_S):
        pid = await _pid_of_run(registry, {"id": "p", "tool": "pid", "args": {}})
        assert gone(pid)
        # a failed run closes it too
        failed = await _pid_of_run(
            registry,
            {"id": "p", "tool": "pid", "args": {}},
            {"id": "r", "tool": "refuse", "args": {"reason": "no"}},
        )
        assert failed != pid and gone(failed)


async def test_a_cancelled_run_closes_its_session() -> None:
    client = stdio_client("kit")
    registry = await kit_registry(client)
    pids: list[int] = []
    got_pid = anyio.Event()

    def listen(event: Any) -> None:
        if isinstance(event, TaskFinished) and event.result.task_id == "p":
            pids.append(int(event.result.output["result"]))
            got_pid.set()

    with anyio.fail_after(RUN_BOUND_S):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await dagagent.execute(
                    plan(
                        {"id": "p", "tool": "pid", "args": {}},
                        {"id": "h", "tool": "hang", "args": {}, "depends_on": ["p"]},
                    ),
                    registry,
                    listeners=[listen],
                )

            tg.start_soon(run)
            await got_pid.wait()
            await anyio.wait_all_tasks_blocked()  # the hanging call is under way
            tg.cancel_scope.cancel()
    assert pids and gone(pids[0])
    assert not client.is_open


async def test_an_open_client_serves_several_runs_at_once_with_one_session() -> None:
    client = stdio_client("kit")
    registry = Registry()
    pids: list[int] = []
    with anyio.fail_after(RUN_BOUND_S):
        async with client:
            await client.add_to(registry)
            async with anyio.create_task_group() as tg:
                for _ in range(3):

                    async def one() -> None:
                        pids.append(await _pid_of_run(registry, {"id": "p", "tool": "pid"}))

                    tg.start_soon(one)
            assert client.is_open
    assert len(pids) == 3 and len(set(pids)) == 1
    assert not client.is_open and gone(pids[0])


async def test_a_tool_called_with_no_session_says_so() -> None:
    client = stdio_client("kit")
    weather = (await client.tools(include="weather"))[0]
    with pytest.raises(dagagent.errors.MCPServerLostError, match="is not connected") as lost:
        await weather.run({"city": "Oslo"})
    assert not lost.value.mid_call  # never sent: a call with side effects is simply failed


# -- the identity of a call with side effects ----------------------------------------------


async def test_a_call_with_side_effects_sends_its_identity_in_meta(
    connect: Connect, tmp_path: Any
) -> None:
    """The server gets the call's idempotency key (the one on record in the store, the same
    when the run is made again), its run, task, attempt and map element under the
    ``dagagent/`` prefix of the request's ``_meta``; a read-only tool's call sends none."""
    registry = await kit_registry(connect("kit"), prefix="kit.")
    assert registry.get("kit.book").side_effects and not registry.get("kit.peek").side_effects
    store = tmp_path / "runs.db"
    tasks = plan(
        {"id": "b", "tool": "kit.book", "args": {"room": "blue"}},
        {
            "id": "each",
            "for_each": ["red", "red"],
            "tool": "kit.book",
            "args": {"room": "${@item}"},
        },
        {"id": "p", "tool": "kit.peek", "args": {"room": "blue"}},
    )
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(tasks, registry, store=store)
    assert result.ok, result.tasks
    with RunStore(store) as st:
        keys = {(e.task_id, e.element): e.key for e in st.effects(result.run_id)}
    sent = result.outputs["b"]["meta"]
    assert sent == {
        dagagent.mcp.IDEMPOTENCY_KEY_META: keys[("b", None)],
        dagagent.mcp.RUN_ID_META: result.run_id,
        dagagent.mcp.TASK_ID_META: "b",
        dagagent.mcp.ATTEMPT_META: 1,
    }
    assert dagagent.mcp.IDEMPOTENCY_KEY_META == "dagagent/idempotency-key"
    elements = [o["meta"] for o in result.outputs["each"]]
    assert [m[dagagent.mcp.ELEMENT_META] for m in elements] == [0, 1]
    assert [m[dagagent.mcp.IDEMPOTENCY_KEY_META] for m in elements] == [
        keys[("each", 0)],
        keys[("each", 1)],
    ]
    assert len({*keys.values()}) == 3  # equal arguments in two elements: two calls, two keys
    assert result.outputs["p"]["meta"] == {}  # read-only: no identity, nothing sent

    with anyio.fail_after(RUN_BOUND_S):  # the same calls again (another store): the same keys
        again = await dagagent.execute(tasks, registry, run_id=result.run_id)
    assert again.outputs["b"]["meta"] == sent


async def test_a_call_with_side_effects_cut_off_by_its_server_dying_is_in_doubt(
    tmp_path: Any,
) -> None:
    """A server that dies during a call with side effects leaves its effect unknown: on
    record the call is cut off (in doubt), and a resume of the run (here: its process was
    killed right after) asks a person instead of making the call again, as for a call whose
    worker was lost."""
    client = stdio_client("kit")
    registry = await kit_registry(client)
    assert registry.get("crash").side_effects  # not declared read-only
    store = tmp_path / "runs.db"
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan({"id": "c", "tool": "crash", "args": {}}), registry, store=store
        )
    assert result.tasks["c"].error_type == "MCPServerLostError"
    with RunStore(store) as st:
        (effect,) = st.effects(result.run_id)
    assert (effect.task_id, effect.state) == ("c", "cancelled")
    assert "crashing on purpose" in (effect.error or "")
    # The record a kill of the process leaves once the call's outcome is committed and
    # before its task's row is: the run is interrupted, the task not done.
    with sqlite3.connect(store) as conn:
        conn.execute(
            "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
            (2**22 + 1, result.run_id),  # above Linux's largest pid: a process that is gone
        )
        conn.execute("DELETE FROM tasks WHERE run_id = ?", (result.run_id,))
    with RunStore(store) as st:
        (effect,) = st.effects(result.run_id)
        assert effect.in_doubt

    with anyio.fail_after(RUN_BOUND_S):
        again = await dagagent.resume(result.run_id, registry, store=store)
    assert again.status is dagagent.RunStatus.PAUSED
    c = again.tasks["c"]
    assert (c.status, c.error_type) == (TaskStatus.WAITING, "CallInDoubtError"), c.error
    assert effect.key in (c.error or "") and "MCP server was lost" in (c.error or "")
    with RunStore(store) as st:
        (after,) = st.effects(result.run_id)
        assert after.state == "cancelled" and after.in_doubt  # not made again
        (asked,) = st.approvals(result.run_id)
        assert (asked.task_id, asked.rule, asked.tool) == ("c", "in doubt", "crash")


def test_a_lost_server_error_keeps_whether_the_call_was_under_way_across_a_pickle() -> None:
    import pickle

    for mid_call in (True, False):
        lost = dagagent.errors.MCPServerLostError("MCP server 'kit' is gone", mid_call=mid_call)
        back = pickle.loads(pickle.dumps(lost))
        assert (str(back), back.mid_call) == ("MCP server 'kit' is gone", mid_call)


async def test_a_side_effecting_tool_that_calls_an_mcp_tool_does_not_lend_it_its_key(
    connect: Connect,
) -> None:
    """The key belongs to the call of the tool it was made for: an MCP tool called from inside
    another tool's call is another call, and sends no identity of its own."""
    client = connect("kit")
    book = (await client.tools(include="book"))[0]
    registry = Registry([book])

    @registry.tool(side_effects=True)
    async def book_through(room: str) -> Any:
        first = await book.run({"room": room})
        return [first, dagagent.current_call().idempotency_key]

    with anyio.fail_after(RUN_BOUND_S):
        async with client:  # the plan calls no MCP tool itself: execute() leaves it closed
            result = await dagagent.execute(
                plan({"id": "t", "tool": "book_through", "args": {"room": "red"}}), registry
            )
    assert result.ok, result.tasks
    inner, key = result.outputs["t"]
    assert key.startswith("dga-") and inner["meta"] == {}


# -- annotations ---------------------------------------------------------------------------


async def test_annotations_only_ever_make_a_tool_safer(connect: Connect) -> None:
    tools = {t.name: t for t in await connect("kit").tools()}
    assert (tools["weather"].side_effects, tools["weather"].retryable) == (False, True)
    assert (tools["delete_file"].side_effects, tools["delete_file"].retryable) == (True, False)
    assert (tools["put"].side_effects, tools["put"].retryable) == (True, True)
    assert (tools["shout"].side_effects, tools["shout"].retryable) == (True, False)
    registry = Registry(tools.values())
    with pytest.raises(PlanValidationError, match="not_retryable"):
        dagagent.validate(
            plan({"id": "s", "tool": "shout", "args": {"text": "a"}, "retries": 2}), registry
        )
    dagagent.validate(
        plan({"id": "p", "tool": "put", "args": {"key": "k", "value": "v"}, "retries": 2}),
        registry,
    )


async def test_approval_rules_on_side_effects_hold_the_tools_not_declared_read_only(
    connect: Connect,
) -> None:
    registry = await kit_registry(connect("kit"), prefix="kit.")
    policy = Policy([Rule(action="deny", side_effects=True, reason="read-only session")])
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan(
                {"id": "w", "tool": "kit.weather", "args": {"city": "Oslo"}},
                {"id": "d", "tool": "kit.delete_file", "args": {"path": "/etc/hosts"}},
                {"id": "s", "tool": "kit.shout", "args": {"text": "hi"}},
            ),
            registry,
            interceptors=[policy],
            settings=RunSettings(on_failure="continue"),
        )
    assert result.tasks["w"].status is TaskStatus.SUCCEEDED
    assert result.tasks["d"].status is TaskStatus.DENIED
    assert result.tasks["s"].status is TaskStatus.DENIED  # unannotated: side effects


# -- executors -----------------------------------------------------------------------------


async def test_the_dask_executor_calls_mcp_tools_on_the_driver(kit_url: str) -> None:
    pytest.importorskip("distributed")
    from dagagent.executors.dask import DaskExecutor

    client = MCPClient.http("kit", kit_url)
    registry = await kit_registry(client)
    registry.add(dagagent.tool(_increment))
    with anyio.fail_after(RUN_BOUND_S):
        result = await dagagent.execute(
            plan(
                {"id": "w", "tool": "weather", "args": {"city": "Oslo"}},
                {"id": "i", "tool": "_increment", "args": {"x": 1}},
            ),
            registry,
            settings=RunSettings(executor=DaskExecutor(processes=False, n_workers=1)),
        )
    assert result.ok, result.tasks
    assert result.tasks["w"].output["city"] == "Oslo"
    assert result.tasks["i"].output == 2
    assert not client.is_open


def _increment(x: int) -> int:
    return x + 1


async def test_streamed_planning_runs_read_only_tools_at_once_and_holds_the_rest(
    kit_url: str,
) -> None:
    from dagagent.events import TaskParsed
    from dagagent.llm import ScriptedLLM
    from dagagent.planners import LLMPlanner
    from dagagent.planners.streaming import plan_and_execute_streamed

    client = MCPClient.http("kit", kit_url)
    registry = await kit_registry(client)
    answer = {
        "goal": "g",
        "tasks": [
            {"id": "s", "tool": "shout", "args": {"text": "oslo"}},
            {"id": "w", "tool": "weather", "args": {"city": "Oslo"}},
        ],
    }
    llm = ScriptedLLM([json.dumps(answer)], chunk_size=8)
    parsed: list[Any] = []
    with anyio.fail_after(RUN_BOUND_S):
        round_ = await plan_and_execute_streamed(
            LLMPlanner(llm, registry),
            "g",
            registry,
            listeners=[lambda e: parsed.append(e) if isinstance(e, TaskParsed) else None],
        )
    assert round_.result.ok, round_.result.tasks
    # unannotated: side effects, so it waits for the whole plan; read-only runs at once
    assert [(e.task_id, e.held) for e in parsed] == [("s", True), ("w", False)]
    assert round_.result.tasks["s"].output == "OSLO"
    assert not client.is_open
