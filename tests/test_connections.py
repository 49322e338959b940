"""``dagagent.tools.connected``: the connections a run's tools need (MCP sessions) open at the
same time, each held by a task of its own; one that cannot be opened closes the others and
is raised as itself, and so is the error of the block they were opened for."""

from __future__ import annotations

import json
from types import TracebackType

import anyio
import pytest
from backends import BACKENDS, both_backends

import dagagent
from dagagent.tools import connected

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)


class Connection:
    """A connection that records its life; its opening waits for ``gate`` when given. As an
    MCP client's session, it is shared while it is open: entering it again opens nothing,
    and the last to leave closes it."""

    def __init__(self, name: str, log: list[str], gate: anyio.Event | None = None) -> None:
        self.name, self.log, self.gate = name, log, gate
        self.opening = anyio.Event()
        self.fail: Exception | None = None
        self.users = 0

    async def __aenter__(self) -> Connection:
        self.users += 1
        if self.users > 1:
            return self
        self.log.append(f"open {self.name}")
        self.opening.set()
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail is not None:
                raise self.fail
        except BaseException:
            self.users -= 1
            raise
        self.log.append(f"opened {self.name}")
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.users -= 1
        if not self.users:
            self.log.append(f"closed {self.name}")


def tools_with(*connections: Connection) -> list[dagagent.Tool]:
    tools = []
    for c in connections:

        def call() -> str:
            return "ok"

        t = dagagent.Tool(call, name=f"call_{c.name}")
        t.connection = c
        tools.append(t)
    return tools


async def test_connections_open_at_the_same_time_and_close_at_the_end() -> None:
    log: list[str] = []
    both = anyio.Event()
    a, b = Connection("a", log, both), Connection("b", log, both)

    async def open_both_when_both_are_opening() -> None:
        await a.opening.wait()
        await b.opening.wait()  # b began opening while a was still opening
        both.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(open_both_when_both_are_opening)
            async with connected(tools_with(a, b, a)):  # a's two tools share a connection
                assert sorted(log) == ["open a", "open b", "opened a", "opened b"]
                log.clear()
    assert sorted(log) == ["closed a", "closed b"]


async def test_one_that_cannot_be_opened_closes_the_others_and_is_raised_as_itself() -> None:
    log: list[str] = []
    good, bad = Connection("good", log), Connection("bad", log)
    bad.fail = dagagent.errors.MCPConnectError("MCP server 'bad' did not start")
    with pytest.raises(dagagent.errors.MCPConnectError, match="'bad' did not start"):
        async with connected(tools_with(good, bad)):
            raise AssertionError("the block does not run")
    assert "opened good" in log and "closed good" in log and "closed bad" not in log


async def test_the_blocks_own_error_is_raised_as_itself() -> None:
    log: list[str] = []
    with pytest.raises(LookupError, match="the run's own"):
        async with connected(tools_with(Connection("a", log), Connection("b", log))):
            raise LookupError("the run's own")
    assert "closed a" in log and "closed b" in log


async def test_a_cancelled_block_closes_them_and_stays_cancelled() -> None:
    log: list[str] = []
    with anyio.CancelScope() as scope:
        async with connected(tools_with(Connection("a", log), Connection("b", log))):
            scope.cancel()
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert "closed a" in log and "closed b" in log


async def test_a_solve_opens_each_connection_once_for_all_its_rounds() -> None:
    from dagagent.llm import ScriptedLLM

    log: list[str] = []
    a, b = Connection("a", log), Connection("b", log)
    registry = dagagent.Registry(tools_with(a, b))
    x = {"id": "x", "tool": "call_a", "args": {}}
    y = {"id": "y", "tool": "call_b", "args": {}}
    plan, plan2 = json.dumps({"tasks": [x]}), json.dumps({"tasks": [x, y]})
    llm = ScriptedLLM(
        [
            plan,
            '{"action": "replan", "feedback": "call b too"}',
            plan2,
            '{"action": "finish", "answer": "done", "cites": ["y"]}',
        ]
    )
    solution = await dagagent.solve("call them", registry, llm)
    assert solution.ok and len(solution.rounds) == 2
    assert log.count("opened a") == 1 and log.count("opened b") == 1
    assert sorted(log[-2:]) == ["closed a", "closed b"]  # when the solve was over
