"""An agent task whose tool call waits for a person pauses with the run, and continues from
its recorded steps when the run resumes: the calls that returned are not made again, the
model is not asked again for the turn it already took."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent import Approval, Policy, Rule, RunStatus, ask_later
from dagagent.agent import make_agent_runner
from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall, ToolResultMessage, UserMessage
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio


def _tools(calls: list[str]) -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    def fetch(city: str) -> dict[str, Any]:
        """Fetch a city."""
        calls.append(f"fetch {city}")
        return {"city": city, "temp_c": 18}

    @registry.tool(side_effects=True)
    def send(to: str) -> str:
        """Send a message."""
        calls.append(f"send {to}")
        return f"sent to {to}"

    @registry.tool
    def after(note: str) -> str:
        """Note it."""
        calls.append(f"after {note}")
        return note

    return registry


PLAN = {
    "goal": "tell ann the weather",
    "tasks": [
        {"id": "note", "instruction": "Tell ann the weather in Paris", "tools": ["fetch", "send"]},
        {"id": "done", "tool": "after", "args": {"note": "${note}"}},
    ],
}


def _policy() -> Policy:
    return Policy([Rule(tool="send", action="ask", name="mail")], ask=ask_later)


def call(id: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=args)


async def test_a_waiting_call_pauses_the_agent_which_continues_on_resume(tmp_path: Path) -> None:
    calls: list[str] = []
    store = tmp_path / "runs.db"
    turn = LLMResponse(
        content="both", tool_calls=[call("c1", "fetch", city="Paris"), call("c2", "send", to="ann")]
    )
    with ScriptedLLM([turn]) as llm:  # one model turn, then the agent pauses
        paused = await dagagent.execute(
            PLAN, _tools(calls), llm=llm, interceptors=[_policy()], store=store
        )
    assert paused.status is RunStatus.PAUSED
    note = paused.tasks["note"]
    assert note.status.value == "waiting"
    assert calls == ["fetch Paris"]  # the sibling call returned; the send waits
    (step,) = note.steps or []
    assert [(c.id, c.observation is not None) for c in step.calls] == [("c1", True), ("c2", False)]
    with dagagent.RunStore(store) as s:
        (asked,) = s.approvals(paused.run_id)
    assert (asked.task_id, asked.tool, asked.source, asked.args) == (
        "note",
        "send",
        "agent",
        {"to": "ann"},
    )

    with ScriptedLLM(["Told ann: 18 C."]) as llm2:
        result = await dagagent.resume(
            paused.run_id,
            _tools(calls),
            store=store,
            interceptors=[_policy()],
            llm=llm2,
            decisions={"note": Approval.approve(by="ann")},
        )
    assert result.status is RunStatus.SUCCEEDED, result.tasks
    # nothing ran twice: fetch once, the approved send once, then the task after it
    assert calls == ["fetch Paris", "send ann", "after Told ann: 18 C."]
    # the model was asked once more, and saw both results of its first turn, in order
    (request,) = llm2.requests
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    assert [(m.tool_call_id, m.content) for m in results] == [
        ("c1", '{"city": "Paris", "temp_c": 18}'),
        ("c2", "sent to ann"),
    ]
    assert [m.content for m in request.messages if isinstance(m, UserMessage)] == [
        "Tell ann the weather in Paris"
    ]
    steps = result.tasks["note"].steps or []
    assert [s.step for s in steps] == [1, 2]
    assert steps[0].calls[1].observation == "sent to ann" and steps[1].answer == "Told ann: 18 C."
    decisions = [(d.decision, d.decided_by) for d in result.tasks["note"].decisions or []]
    assert decisions[-1] == ("allow", "ann")


async def test_a_denied_call_is_an_observation_for_the_continued_agent(tmp_path: Path) -> None:
    calls: list[str] = []
    store = tmp_path / "runs.db"
    runner = make_agent_runner(mode="text")
    with ScriptedLLM(['Thought: mail\nAction: send\nAction Input: {"to": "ann"}']) as llm:
        paused = await dagagent.execute(
            PLAN, _tools(calls), llm=llm, interceptors=[_policy()], store=store, agent_runner=runner
        )
    assert paused.status is RunStatus.PAUSED and calls == []
    with ScriptedLLM(["Final Answer: could not tell ann"]) as llm2:
        result = await dagagent.resume(
            paused.run_id,
            _tools(calls),
            store=store,
            interceptors=[_policy()],
            llm=llm2,
            agent_runner=runner,
            decisions={"note": Approval.deny("not now", by="bob")},
        )
    assert result.ok and calls == ["after could not tell ann"]
    texts = [m.content for m in llm2.requests[0].messages]
    assert 'Thought: mail\nAction: send\nAction Input: {"to": "ann"}' in texts
    assert "Observation: Error: <output>denied: not now</output>" in texts


async def test_a_map_of_agents_resumes_each_waiting_element_from_its_steps(
    tmp_path: Path,
) -> None:
    """A map of two agent elements, where only a mail to bob needs a person: ann's element
    finishes, bob's waits and, on resume, continues from its recorded step (its fetch is
    not made again, its first turn not asked for again)."""
    calls: list[str] = []
    store = tmp_path / "runs.db"
    plan = {
        "tasks": [
            {
                "id": "notes",
                "instruction": "Tell ${@item} the weather in Paris",
                "for_each": ["ann", "bob"],
                "tools": ["fetch", "send"],
            }
        ]
    }
    policy = Policy(
        [Rule(tool="send", args={"to": "bob"}, action="ask", name="bob")], ask=ask_later
    )

    def turn(to: str) -> LLMResponse:
        return LLMResponse(
            content="", tool_calls=[call("c1", "fetch", city="Paris"), call("c2", "send", to=to)]
        )

    script = [turn("ann"), LLMResponse(content="told ann"), turn("bob")]
    with ScriptedLLM(script) as llm:  # the serial executor: ann's element, then bob's
        paused = await dagagent.execute(
            plan,
            _tools(calls),
            llm=llm,
            interceptors=[policy],
            store=store,
            settings=RunSettings(executor="serial"),
        )
    assert paused.status is RunStatus.PAUSED
    ann, bob = paused.tasks["notes"].elements or []
    assert (ann.status.value, bob.status.value) == ("succeeded", "waiting")
    # the two calls of a turn run side by side: in either order (trio varies it)
    assert sorted(calls[:2]) == ["fetch Paris", "send ann"] and calls[2:] == ["fetch Paris"]
    with ScriptedLLM([LLMResponse(content="told bob")]) as llm:
        resumed = await dagagent.resume(
            paused.run_id,
            _tools(calls),
            store=store,
            llm=llm,
            interceptors=[policy],
            decisions={"notes": Approval.approve(by="ann")},
        )
        assert llm.calls == 1  # bob's next turn only
    assert resumed.status is RunStatus.SUCCEEDED, resumed.tasks
    assert resumed.tasks["notes"].output == ["told ann", "told bob"]
    assert sorted(calls[:2]) == ["fetch Paris", "send ann"]
    assert calls[2:] == ["fetch Paris", "send bob"]
