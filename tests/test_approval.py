"""Approval rules and policies: matching, first match wins, allow / deny / ask (approve, deny,
edit), records and events, serialized asks, policy files, agent calls."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import dagagent
from dagagent.approval import Approval, ApprovalRequest, Policy, Rule, load_policy
from dagagent.errors import ConfigError, TaskDeniedError
from dagagent.events import TaskDecision
from dagagent.llm import (
    LLMRequest,
    LLMResponse,
    ScriptedLLM,
    ToolCall as ModelToolCall,
    ToolResultMessage,
)
from dagagent.llm.scripted import ScriptItem
from dagagent.runner import AgentNode
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "approval test", "tasks": list(tasks)}


def work(tid: str, depends_on: list[str] | None = None, **args: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"id": tid, "tool": "work", "args": {"name": tid, **args}}
    if depends_on:
        t["depends_on"] = depends_on
    return t


@pytest.fixture
def side_registry(registry: dagagent.Registry) -> dagagent.Registry:
    """The shared test registry plus a side-effecting ``write`` tool that counts its calls."""
    writes: list[dict[str, Any]] = []

    @registry.tool(side_effects=True)
    def write(path: str, text: str = "", count: int = 1) -> str:
        writes.append({"path": path, "text": text, "count": count})
        return f"wrote {path}"

    registry.writes = writes  # type: ignore[attr-defined]
    return registry


def writes(reg: dagagent.Registry) -> list[dict[str, Any]]:
    return reg.writes  # type: ignore[attr-defined,no-any-return]


# -- rules ------------------------------------------------------------------------------------


def test_rule_matching(side_registry: dagagent.Registry) -> None:
    write, work_, add = side_registry["write"], side_registry["work"], side_registry["add"]
    args = {"path": "/etc/passwd", "text": "x", "count": 3}

    assert Rule(action="deny").matches(write, args)
    assert Rule(action="deny", tool="wr*").matches(write, args)
    assert not Rule(action="deny", tool="wr*").matches(work_, {"name": "a"})
    assert Rule(action="deny", tool=["add", "write"]).matches(write, args)
    assert Rule(action="deny", args={"path": "/etc/*"}).matches(write, args)
    assert not Rule(action="deny", args={"path": "/tmp/*"}).matches(write, args)
    assert not Rule(action="deny", args={"nope": "*"}).matches(write, args)  # missing arg
    assert Rule(action="deny", args={"path": re.compile(r"pass")}).matches(write, args)
    assert Rule(action="deny", args={"path": {"regex": "^/etc/"}}).matches(write, args)
    assert not Rule(action="deny", args={"path": {"regex": "^/tmp/"}}).matches(write, args)
    assert Rule(action="deny", args={"count": 3}).matches(write, args)
    assert Rule(action="deny", args={"count": "3"}).matches(write, args)  # glob on JSON text
    assert not Rule(action="deny", args={"count": {"equals": "3"}}).matches(write, args)
    assert Rule(action="deny", args={"count": lambda v: v > 2}).matches(write, args)
    assert Rule(action="deny", args={"path": "/etc/*", "count": 3}).matches(write, args)
    assert not Rule(action="deny", args={"path": "/etc/*", "count": 4}).matches(write, args)
    assert Rule(action="deny", args=lambda a: a["count"] == 3).matches(write, args)
    assert Rule(action="ask", side_effects=True).matches(write, args)
    assert not Rule(action="ask", side_effects=True).matches(add, {"a": 1, "b": 2})
    assert Rule(action="ask", side_effects=False).matches(add, {"a": 1, "b": 2})
    assert Rule(action="ask", task="save-*").matches(write, args, task_id="save-1")
    assert not Rule(action="ask", task="save-*").matches(write, args, task_id="load-1")
    assert Rule(action="ask", source="agent").matches(write, args, source="agent")
    assert not Rule(action="ask", source="agent").matches(write, args, source="plan")


def test_rule_and_policy_reject_bad_definitions() -> None:
    with pytest.raises(ConfigError, match="action must be one of allow, deny, ask"):
        Rule(action="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="source must be 'plan' or 'agent'"):
        Rule(action="ask", source="human")
    with pytest.raises(ConfigError, match="bad regular expression"):
        Rule(action="ask", args={"x": {"regex": "("}})
    with pytest.raises(ConfigError, match="rule tool must be"):
        Rule(action="ask", tool=[])
    with pytest.raises(ConfigError, match="policy default must be"):
        Policy(default="never")  # type: ignore[arg-type]


def test_first_matching_rule_wins_then_the_default(side_registry: dagagent.Registry) -> None:
    write = side_registry["write"]
    policy = Policy(
        [
            Rule(action="allow", tool="write", args={"path": "/tmp/*"}),
            Rule(action="deny", tool="write", reason="only /tmp"),
            Rule(action="allow", tool="write"),  # never reached
        ],
        default="ask",
    )
    assert policy.match(write, {"path": "/tmp/a"})[0] == "allow"
    action, rule, label = policy.match(write, {"path": "/home/a"})
    assert (action, rule) == ("deny", policy.rules[1])
    assert label == "rule #2 (deny tool write)"
    assert policy.match(side_registry["add"], {"a": 1, "b": 2}) == ("ask", None, "policy default")
    assert Rule(action="deny", name="no-etc").label(7) == "rule 'no-etc'"


# -- allow / deny through execute ---------------------------------------------------------------


@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
async def test_deny_rule_denies_the_task_records_and_emits(
    side_registry: dagagent.Registry, recorder: Any, executor: str
) -> None:
    events: list[Any] = []
    policy = Policy(
        [
            Rule(action="deny", tool="write", args={"path": "/etc/*"}, reason="system files"),
            Rule(action="allow", tool="work"),
        ]
    )
    p = plan(
        {"id": "w", "tool": "write", "args": {"path": "/etc/hosts"}},
        work("a"),
        {"id": "s", "tool": "add", "args": {"a": 1, "b": 1}},
    )
    result = await dagagent.execute(
        p,
        side_registry,
        interceptors=[policy],
        listeners=[events.append],
        settings=RunSettings(executor=executor, on_failure="continue"),
    )
    w, a, s = result.tasks["w"], result.tasks["a"], result.tasks["s"]
    assert w.status is dagagent.TaskStatus.DENIED
    label = "rule #1 (deny tool write if path=/etc/*)"
    assert w.error == f"denied by {label}: system files"
    assert w.decisions is not None and len(w.decisions) == 1
    d = w.decisions[0]
    assert (d.decision, d.decided_by, d.reason, d.rule) == (
        "deny",
        label,
        "system files",
        label,
    )
    assert d.args == {"path": "/etc/hosts", "text": "", "count": 1}
    assert a.ok and a.decisions is not None and a.decisions[0].decision == "allow"
    assert s.ok and s.decisions is None  # default allow: nothing decided, nothing recorded
    decisions = sorted((e.task_id, e.decision) for e in events if isinstance(e, TaskDecision))
    assert decisions == [("a", "allow"), ("w", "deny")]
    assert writes(side_registry) == []
    assert recorder.calls == {"a": 1}


async def test_default_deny_with_reason(side_registry: dagagent.Registry, recorder: Any) -> None:
    policy = Policy(
        [Rule(action="allow", tool="work")], default="deny", default_reason="not on the allow list"
    )
    result = await dagagent.execute(
        plan(work("a"), {"id": "s", "tool": "add", "args": {"a": 1, "b": 1}}),
        side_registry,
        interceptors=[policy],
        settings=RunSettings(on_failure="continue"),
    )
    assert result.tasks["a"].ok
    assert result.tasks["s"].error == "denied by policy default: not on the allow list"
    assert recorder.calls == {"a": 1}


async def test_side_effects_rule_targets_declared_tools(
    side_registry: dagagent.Registry, recorder: Any
) -> None:
    policy = Policy([Rule(side_effects=True, action="deny", reason="read-only run")])
    result = await dagagent.execute(
        plan({"id": "w", "tool": "write", "args": {"path": "f"}}, work("a")),
        side_registry,
        interceptors=[policy],
        settings=RunSettings(on_failure="continue"),
    )
    assert result.tasks["w"].status is dagagent.TaskStatus.DENIED
    assert "read-only run" in (result.tasks["w"].error or "")
    assert result.tasks["a"].ok
    assert writes(side_registry) == [] and recorder.calls == {"a": 1}


# -- ask ----------------------------------------------------------------------------------------


async def test_ask_approve_deny_and_edit(side_registry: dagagent.Registry) -> None:
    asked: list[tuple[str, str, dict[str, Any], str]] = []

    def decide(req: ApprovalRequest) -> Approval:  # sync: runs in a worker thread
        asked.append((req.task_id, req.tool_name, dict(req.args), req.rule_label))
        if req.task_id == "ok":
            return Approval.approve("looks fine", by="ann")
        if req.task_id == "no":
            return Approval.deny("wrong file", by="ann")
        return Approval.edit({**req.args, "path": "/tmp/safe"}, "moved", by="ann")

    policy = Policy([Rule(action="ask", tool="write", name="writes")], ask=decide)
    p = plan(
        {"id": "ok", "tool": "write", "args": {"path": "a"}},
        {"id": "no", "tool": "write", "args": {"path": "b"}},
        {"id": "ed", "tool": "write", "args": {"path": "/etc/c", "text": "t"}},
    )
    result = await dagagent.execute(
        p,
        side_registry,
        interceptors=[policy],
        settings=RunSettings(executor="serial", on_failure="continue"),
    )
    t = result.tasks
    assert [a[0] for a in asked] == ["ok", "no", "ed"]
    assert asked[0][1:] == ("write", {"path": "a", "text": "", "count": 1}, "rule 'writes'")
    assert t["ok"].ok and t["ok"].output == "wrote a"
    assert t["no"].status is dagagent.TaskStatus.DENIED
    assert t["no"].error == "denied by ann: wrong file"
    assert t["ed"].ok and t["ed"].output == "wrote /tmp/safe"
    assert writes(side_registry) == [
        {"path": "a", "text": "", "count": 1},
        {"path": "/tmp/safe", "text": "t", "count": 1},
    ]
    recs = {k: r.decisions[0] for k, r in t.items() if r.decisions}
    assert (recs["ok"].decision, recs["ok"].decided_by, recs["ok"].reason) == (
        "allow",
        "ann",
        "looks fine",
    )
    assert (recs["no"].decision, recs["no"].reason) == ("deny", "wrong file")
    assert (recs["ed"].decision, recs["ed"].reason) == ("edit", "moved")
    assert recs["ed"].args["path"] == "/tmp/safe"  # the decision shows the edited call
    assert recs["ed"].rule == "rule 'writes'"
    assert t["ed"].args == {"path": "/etc/c", "text": "t"}  # what the plan asked for


async def test_ask_callback_may_be_async_and_return_bools(
    side_registry: dagagent.Registry,
) -> None:
    async def decide(req: ApprovalRequest) -> bool:
        await anyio.lowlevel.checkpoint()
        return bool(req.args["path"] != "b")

    policy = Policy([Rule(action="ask", tool="write")], ask=decide)
    result = await dagagent.execute(
        plan(
            {"id": "a", "tool": "write", "args": {"path": "a"}},
            {"id": "b", "tool": "write", "args": {"path": "b"}},
        ),
        side_registry,
        interceptors=[policy],
        settings=RunSettings(on_failure="continue"),
    )
    assert result.tasks["a"].ok
    b = result.tasks["b"]
    assert b.status is dagagent.TaskStatus.DENIED
    assert b.error == "denied by ask callback 'decide': not approved"
    assert [p["path"] for p in writes(side_registry)] == ["a"]


async def test_edit_to_invalid_arguments_fails_the_task_clearly(
    side_registry: dagagent.Registry,
) -> None:
    def decide(req: ApprovalRequest) -> Approval:
        return Approval.edit({"path": "x", "count": "many"}, by="bob")

    policy = Policy([Rule(action="ask", tool="write")], ask=decide)
    result = await dagagent.execute(
        plan({"id": "w", "tool": "write", "args": {"path": "a"}}),
        side_registry,
        interceptors=[policy],
    )
    w = result.tasks["w"]
    assert w.status is dagagent.TaskStatus.FAILED
    assert w.error_type == "ToolArgumentsError"
    assert "bad arguments for tool 'write': count:" in (w.error or "")
    assert "(arguments edited by bob)" in (w.error or "")
    assert w.decisions is not None and w.decisions[0].decision == "edit"
    assert writes(side_registry) == []


async def test_ask_without_a_callback_denies_and_says_why(
    side_registry: dagagent.Registry,
) -> None:
    result = await dagagent.execute(
        plan({"id": "w", "tool": "write", "args": {"path": "a"}}),
        side_registry,
        interceptors=[Policy([Rule(action="ask", tool="write")])],
    )
    w = result.tasks["w"]
    assert w.status is dagagent.TaskStatus.DENIED
    assert w.error == (
        "denied by rule #1 (ask tool write): approval needed for tool 'write' but no ask "
        "callback was given"
    )
    assert writes(side_registry) == []


async def test_ask_callback_returning_nonsense_fails_the_task(
    side_registry: dagagent.Registry,
) -> None:
    def decide(req: ApprovalRequest) -> Any:
        return "yes please"

    result = await dagagent.execute(
        plan({"id": "w", "tool": "write", "args": {"path": "a"}}),
        side_registry,
        interceptors=[Policy([Rule(action="ask", tool="write")], ask=decide)],
    )
    w = result.tasks["w"]
    assert w.status is dagagent.TaskStatus.FAILED
    assert "returned str; expected an Approval or a bool" in (w.error or "")
    assert writes(side_registry) == []


@pytest.mark.skip_time  # every question lasts until all that can be asked are
@pytest.mark.parametrize("serialize", [True, False])
async def test_concurrent_asks_are_serialized(
    side_registry: dagagent.Registry, serialize: bool
) -> None:
    active = 0
    most = 0

    async def decide(req: ApprovalRequest) -> bool:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await anyio.sleep(0.05)
        active -= 1
        return True

    policy = Policy([Rule(action="ask", tool="write")], ask=decide, serialize_asks=serialize)
    p = plan(*({"id": f"w{i}", "tool": "write", "args": {"path": str(i)}} for i in range(4)))
    result = await dagagent.execute(
        p, side_registry, interceptors=[policy], settings=RunSettings(executor="levels")
    )
    assert result.ok
    assert len(writes(side_registry)) == 4
    assert most == (1 if serialize else 4)


async def test_a_blocking_sync_ask_does_not_block_the_event_loop(
    side_registry: dagagent.Registry, recorder: Any
) -> None:
    threads: list[threading.Thread] = []
    released = threading.Event()

    def decide(req: ApprovalRequest) -> bool:
        threads.append(threading.current_thread())
        released.wait(5)  # like input(): blocks its thread until someone answers
        return True

    async def other_work_then_answer(call: Any, call_next: Any) -> Any:
        out = await call_next(call)
        if call.task_id == "free":
            released.set()  # only reachable if the loop kept running while 'w' waited
        return out

    policy = Policy([Rule(action="ask", tool="write")], ask=decide)
    result = await dagagent.execute(
        plan({"id": "w", "tool": "write", "args": {"path": "a"}}, work("free", seconds=0.05)),
        side_registry,
        interceptors=[policy, other_work_then_answer],
        settings=RunSettings(executor="levels"),
    )
    assert result.ok
    assert threads and threads[0] is not threading.main_thread()
    assert recorder.calls == {"free": 1} and len(writes(side_registry)) == 1
    w, free = result.tasks["w"], result.tasks["free"]
    assert free.finished_at is not None and w.finished_at is not None
    assert free.finished_at <= w.finished_at


@pytest.mark.skip_time
async def test_denied_ask_in_a_level_with_cancel_withdraws_pending_questions(
    side_registry: dagagent.Registry, recorder: Any
) -> None:
    asked: list[str] = []

    async def decide(req: ApprovalRequest) -> Approval:
        asked.append(req.task_id)
        if req.task_id == "no":
            await anyio.sleep(0.1)  # 'wait' is being asked meanwhile
            return Approval.deny("stop", by="ann")
        await anyio.sleep_forever()  # a question nobody answers
        return Approval.approve()

    policy = Policy([Rule(action="ask", tool="write")], ask=decide, serialize_asks=False)
    start = anyio.current_time()
    result = await dagagent.execute(
        plan(
            {"id": "no", "tool": "write", "args": {"path": "a"}},
            {"id": "wait", "tool": "write", "args": {"path": "b"}},
            work("next", depends_on=["wait"]),
        ),
        side_registry,
        interceptors=[policy],
        settings=RunSettings(executor="levels"),
    )
    assert anyio.current_time() - start < 3
    assert result.tasks["no"].status is dagagent.TaskStatus.DENIED
    assert result.tasks["wait"].status is dagagent.TaskStatus.CANCELLED
    assert result.tasks["next"].status is dagagent.TaskStatus.CANCELLED
    assert sorted(asked) == ["no", "wait"]
    assert writes(side_registry) == [] and recorder.calls == {}


# -- preview and description --------------------------------------------------------------------


def test_preview_and_describe(side_registry: dagagent.Registry) -> None:
    write, add = side_registry["write"], side_registry["add"]
    policy = Policy(
        [
            Rule(action="deny", tool="write", args={"path": "/etc/*"}),
            Rule(action="ask", side_effects=True, name="effects"),
        ]
    )
    assert policy.preview(write, {"path": "/etc/x"}) == "deny"
    assert policy.preview(write, {"path": "/tmp/x"}) == "ask"
    assert policy.preview(write, {}) == "deny?"  # path comes from a reference
    assert policy.preview(add, {"a": 1}) == "allow"
    assert policy.describe() == [
        "rule #1 (deny tool write if path=/etc/*)",
        "rule 'effects': ask any tool with side effects",
        "default: allow",
    ]


# -- policy files -------------------------------------------------------------------------------

POLICY = {
    "default": "deny",
    "default_reason": "unlisted",
    "rules": [
        {
            "tool": "write",
            "args": {"path": {"regex": "^/etc/"}},
            "action": "deny",
            "reason": "system files",
            "name": "no-etc",
        },
        {"tool": ["write", "work"], "action": "allow"},
        {"side_effects": True, "source": "agent", "action": "ask"},
    ],
}


async def test_json_policy_file_drives_a_run(
    tmp_path: Path, side_registry: dagagent.Registry, recorder: Any
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(POLICY))
    policy = load_policy(path)
    assert policy.default == "deny" and len(policy.rules) == 3
    assert policy.rules[1].tool == ("write", "work")
    result = await dagagent.execute(
        plan(
            {"id": "etc", "tool": "write", "args": {"path": "/etc/x"}},
            {"id": "tmp", "tool": "write", "args": {"path": "/tmp/x"}},
            work("a"),
            {"id": "s", "tool": "add", "args": {"a": 1, "b": 1}},
        ),
        side_registry,
        interceptors=[policy],
        settings=RunSettings(on_failure="continue"),
    )
    t = result.tasks
    assert t["etc"].error == "denied by rule 'no-etc': system files"
    assert t["tmp"].ok and t["a"].ok
    assert t["s"].error == "denied by policy default: unlisted"
    assert [w["path"] for w in writes(side_registry)] == ["/tmp/x"]
    assert recorder.calls == {"a": 1}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_toml_policy_file(tmp_path: Path, side_registry: dagagent.Registry) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        'default = "allow"\n'
        "[[rules]]\n"
        'tool = "write"\n'
        'action = "deny"\n'
        'reason = "no writes"\n'
        "[rules.args]\n"
        'path = "/etc/*"\n'
    )
    policy = load_policy(path)
    write = side_registry["write"]
    assert policy.match(write, {"path": "/etc/a"})[0] == "deny"
    assert policy.match(write, {"path": "/tmp/a"})[0] == "allow"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON: Expecting property name"),
        ("[1, 2]", "must be an object"),
        ('{"rules": [{"tool": "x"}]}', "rule #1: action: Field required"),
        ('{"rules": [{"tool": "x", "action": "nope"}]}', "rule #1: action: Input should be"),
        (
            '{"rules": [{"tool": "x", "action": "ask", "color": 1}]}',
            "rule #1: 'color' is not a rule key",
        ),
        ('{"default": "maybe"}', "default: Input should be 'allow', 'deny' or 'ask'"),
        (
            '{"rules": [{"action": "ask", "args": {"x": {"regex": "("}}}]}',
            "rule #1: bad regular expression '('",
        ),
    ],
)
def test_bad_policy_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    assert f"policy file {str(path)!r}" in str(info.value)
    assert message in str(info.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_policy(tmp_path / "nope.json")


# -- calls made by an agent node ------------------------------------------------------------------


async def test_agent_calls_go_through_the_policy_and_a_denial_reaches_the_agent(
    side_registry: dagagent.Registry,
) -> None:
    """The agent node calls tools through ``node.call_tool``; a denial arrives there as
    TaskDeniedError, which a ReAct loop turns into the observation of its step."""
    observations: list[str] = []

    async def agent(node: AgentNode) -> tuple[Any, list[dict[str, Any]] | None]:
        for path in ("/tmp/ok", "/etc/bad"):
            try:
                observations.append(await node.call_tool(node.tools.get("write"), {"path": path}))
            except TaskDeniedError as exc:
                observations.append(f"refused: {exc}")
        return "done", None

    policy = Policy(
        [
            Rule(
                action="deny",
                source="agent",
                args={"path": "/etc/*"},
                reason="agents may not touch /etc",
            )
        ]
    )
    result = await dagagent.execute(
        plan({"id": "ag", "instruction": "write two files", "tools": ["write"]}),
        side_registry,
        llm=object(),
        agent_runner=agent,
        interceptors=[policy],
    )
    ag = result.tasks["ag"]
    assert ag.ok and ag.output == "done"
    assert observations[0] == "wrote /tmp/ok"
    assert observations[1].startswith("refused: denied by rule #1")
    assert observations[1].endswith("agents may not touch /etc")
    assert ag.decisions is not None
    assert [(d.decision, d.args["path"]) for d in ag.decisions] == [("deny", "/etc/bad")]
    assert [w["path"] for w in writes(side_registry)] == ["/tmp/ok"]


async def test_react_agent_sees_a_refusal_as_its_observation(
    side_registry: dagagent.Registry,
) -> None:
    seen: list[ToolResultMessage] = []

    def after_refusal(request: LLMRequest) -> str:
        seen.extend(m for m in request.messages if isinstance(m, ToolResultMessage))
        return "I was not allowed to write there."

    def decide(req: ApprovalRequest) -> Approval:
        assert req.source == "agent"
        return Approval.deny("pick a file under /tmp", by="ann")

    script: list[ScriptItem] = [
        LLMResponse(tool_calls=[ModelToolCall(id="c1", name="write", arguments={"path": "/x"})]),
        after_refusal,
    ]
    with ScriptedLLM(script) as llm:
        result = await dagagent.execute(
            plan({"id": "ag", "instruction": "save a note", "tools": ["write"]}),
            side_registry,
            llm=llm,
            interceptors=[Policy([Rule(action="ask", side_effects=True)], ask=decide)],
        )
    ag = result.tasks["ag"]
    assert ag.ok and ag.output == "I was not allowed to write there."
    assert len(seen) == 1 and seen[0].is_error
    assert seen[0].content == "denied: pick a file under /tmp"
    assert ag.decisions is not None
    assert [(d.decision, d.decided_by, d.reason) for d in ag.decisions] == [
        ("deny", "ann", "pick a file under /tmp")
    ]
    assert writes(side_registry) == []


# ----------------------------------------------------------------------------------------------
# Approval rules under a demanding user: side-effecting tools under deny / ask / allow rules
# through every executor and failure policy, counting which calls really happened; policy
# files with mistakes.
# ----------------------------------------------------------------------------------------------


def _registry(calls: list[tuple[str, dict[str, Any]]]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(side_effects=True)
    async def write_file(path: str, text: str = "") -> str:
        """Write a file (pretend)."""
        calls.append(("write_file", {"path": path, "text": text}))
        await anyio.lowlevel.checkpoint()
        return path

    @reg.tool(side_effects=True)
    def delete_file(path: str) -> str:
        """Delete a file (pretend)."""
        calls.append(("delete_file", {"path": path}))
        return path

    @reg.tool
    async def read(key: str) -> str:
        """Read a value."""
        calls.append(("read", {"key": key}))
        await anyio.lowlevel.checkpoint()
        return key.upper()

    return reg


PLAN = {
    "goal": "side effects",
    "tasks": [
        {"id": "r", "tool": "read", "args": {"key": "k"}},
        {"id": "w_tmp", "tool": "write_file", "args": {"path": "/tmp/a", "text": "${r}"}},
        {"id": "w_etc", "tool": "write_file", "args": {"path": "/etc/passwd", "text": "x"}},
        {"id": "d_tmp", "tool": "delete_file", "args": {"path": "/tmp/old"}},
        {"id": "d_home", "tool": "delete_file", "args": {"path": "/home/ann/notes"}},
        {"id": "after", "tool": "read", "args": {"key": "${w_tmp}"}},
    ],
}


async def _ask(req: ApprovalRequest) -> Approval:
    await anyio.lowlevel.checkpoint()  # questions overlap with running tasks
    if req.task_id == "d_home":
        return Approval.deny("not my home", by="ann")
    if req.task_id == "d_tmp":
        return Approval.edit({"path": "/tmp/old.bak"}, by="ann")
    return Approval.approve(by="ann")


@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
async def test_denied_calls_never_happen_and_edited_calls_use_the_edit(
    executor: str, on_failure: str
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    policy = Policy(
        [
            Rule(tool="read", action="allow"),
            Rule(tool="*_file", args={"path": "/etc/*"}, action="deny", reason="system files"),
            Rule(tool="delete_*", args={"path": re.compile(r"^/(tmp|home)/")}, action="ask"),
        ],
        default="ask",
        ask=_ask,
    )
    result = await dagagent.execute(
        PLAN,
        _registry(calls),
        interceptors=[policy],
        settings=RunSettings(executor=executor, on_failure=on_failure),
    )
    st = {k: r.status.value for k, r in result.tasks.items()}
    made = [(tool, args["path"]) for tool, args in calls if tool != "read"]
    # Never: the denied calls.
    assert ("write_file", "/etc/passwd") not in made
    assert ("delete_file", "/home/ann/notes") not in made
    assert ("delete_file", "/tmp/old") not in made  # only the edited call may happen
    assert st["w_etc"] in ("denied", "cancelled", "skipped")
    assert st["d_home"] in ("denied", "cancelled", "skipped")
    # Every call that happened was allowed, and what happened is what the record says.
    for r in result.tasks.values():
        if r.status.value == "denied":
            assert r.decisions and r.decisions[-1].decision == "deny"
    if st["d_tmp"] == "succeeded":
        assert ("delete_file", "/tmp/old.bak") in made
        assert result.tasks["d_tmp"].output == "/tmp/old.bak"
        (edit,) = result.tasks["d_tmp"].decisions or []
        assert edit.decision == "edit" and edit.args == {"path": "/tmp/old.bak"}
    n_succeeded_side_effects = sum(1 for k in ("w_tmp", "d_tmp") if st[k] == "succeeded")
    assert len(made) == n_succeeded_side_effects
    if on_failure == "continue":
        assert st == {
            "r": "succeeded",
            "w_tmp": "succeeded",
            "w_etc": "denied",
            "d_tmp": "succeeded",
            "d_home": "denied",
            "after": "succeeded",
        }
        assert sorted(made) == [("delete_file", "/tmp/old.bak"), ("write_file", "/tmp/a")]


# -- policy files with mistakes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        # a misspelt matcher form used to compare the argument with the dict: never matched,
        # so this deny rule silently denied nothing
        ({"tool": "*", "args": {"path": {"regx": "^/etc"}}, "action": "deny"}, "regx"),
        ({"tool": "*", "args": {"path": {"glob": "/etc/*", "x": 1}}, "action": "deny"}, "glob"),
        # wrong types are errors, not coerced ("no" used to become False, "1" True)
        ({"side_effects": "yes", "action": "deny"}, "side_effects: Input should be a valid bool"),
        ({"tool": "x", "action": "deny", "reason": 5}, "reason: Input should be a valid string"),
        ({"tool": "x", "action": "deny", "reasn": "typo"}, "'reasn' is not a rule key"),
    ],
)
def test_policy_file_mistakes_name_the_rule(
    tmp_path: Path, rule: dict[str, Any], message: str
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [{"tool": "read", "action": "allow"}, rule]}))
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    text = str(info.value)
    assert text.startswith(f"policy file {str(path)!r}: rule #2: ")
    assert message in text


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML policy files need tomllib (3.11+)")
def test_a_named_rule_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[rules]]\nname = "no-etc"\naction = "deny"\nargs = { path = { rgx = "x" } }\n'
    )
    with pytest.raises(ConfigError, match=r"rule #1 \('no-etc'\): argument matcher"):
        load_policy(path)


def test_a_misspelt_matcher_form_is_refused_in_python_too() -> None:
    with pytest.raises(ConfigError, match="is not one of"):
        Rule(action="deny", args={"path": {"regx": "^/etc"}})
    rule = Rule(action="deny", args={"opts": {"equals": {"a": 1}}})  # comparing with a dict
    assert rule.matches_args({"opts": {"a": 1}}) and not rule.matches_args({"opts": {"a": 2}})


def test_a_rule_on_an_argument_no_tool_has_is_reported() -> None:
    reg = _registry([])
    policy = Policy(
        [
            Rule(tool="*_file", args={"filename": "/etc/*"}, action="deny", name="no-etc"),
            Rule(tool="*_file", args={"path": "/etc/*"}, action="deny"),  # fine
            Rule(tool="nothing_*", args={"x": 1}, action="deny"),  # no such tool: not a mistake
        ]
    )
    (problem,) = policy.check(reg)
    assert problem.startswith("rule 'no-etc' looks at argument 'filename'")
    assert "(write_file, delete_file)" in problem and "never matches" in problem


def test_cli_warns_about_a_rule_that_never_matches(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dagagent.cli import app

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"tasks": [{"id": "p", "tool": "get_weather", "args": {"city": "Paris"}}]})
    )
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {"rules": [{"tool": "get_weather", "args": {"town": "Paris"}, "action": "deny"}]}
        )
    )
    res = CliRunner().invoke(app, ["run", str(plan), "--policy", str(policy), "--json"])
    assert res.exit_code == 0
    assert "rule #1 (deny tool get_weather if town=Paris) looks at argument 'town'" in res.stderr


# -- deny rules cannot be walked around ---------------------------------------------------------


async def test_a_glob_matches_a_path_argument_as_the_tool_receives_it(tmp_path: Path) -> None:
    registry = dagagent.Registry()
    opened: list[Path] = []

    @registry.tool(side_effects=True)
    def remove(path: Path, count: int = 1) -> str:
        opened.append(path)
        return "gone"

    policy = Policy([Rule(action="deny", tool="remove", args={"path": "/etc/*", "count": "5"})])
    the_plan = {
        "goal": "g",
        "tasks": [{"id": "r", "tool": "remove", "args": {"path": "/etc/x", "count": "5"}}],
    }
    # the preview and the run take the same decision
    assert policy.preview(registry["remove"], {"path": "/etc/x", "count": "5"}) == "deny"
    result = await dagagent.execute(the_plan, registry, interceptors=[policy])
    assert result.tasks["r"].status is dagagent.TaskStatus.DENIED
    assert opened == []


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "//etc/passwd",
        "/./etc/passwd",
        "/tmp/../etc/passwd",
        " /etc/passwd",
        "/etc//passwd",
        "/etc/ssh/../passwd",
    ],
)
async def test_a_path_glob_matches_the_file_a_path_names(path: str) -> None:
    registry = dagagent.Registry()
    calls: list[str] = []

    @registry.tool(side_effects=True)
    def remove(path: str) -> str:
        calls.append(path)
        return "gone"

    policy = Policy([Rule(action="deny", tool="remove", args={"path": {"path": "/etc/*"}})])
    assert policy.preview(registry["remove"], {"path": path}) == "deny"
    the_plan = {"goal": "g", "tasks": [{"id": "r", "tool": "remove", "args": {"path": path}}]}
    result = await dagagent.execute(the_plan, registry, interceptors=[policy])
    assert result.tasks["r"].status is dagagent.TaskStatus.DENIED
    assert calls == []
    # a plain glob matches the text as it is, as docs/approvals.md says
    assert not Rule(action="deny", args={"path": "/etc/*"}).matches_args({"path": "//etc/x"})


def test_a_path_glob_resolves_symbolic_links_and_relative_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "secret")
    monkeypatch.chdir(tmp_path)
    rule = Rule(action="deny", args={"path": {"path": f"{tmp_path}/secret/*"}})
    assert rule.matches_args({"path": "link/key"})
    assert rule.matches_args({"path": Path("./secret/../secret/key")})
    assert not rule.matches_args({"path": "other/key"})


class Move(BaseModel):
    source: Path
    target: Path


async def test_a_path_glob_looks_into_lists_dicts_and_models() -> None:
    """A path glob sees every path a collection argument holds (a list, a tuple, a dict's
    values, a model's fields, at any depth): a deny rule matches when any of them does, an
    allow rule only when all of them do."""
    registry = dagagent.Registry()
    ran: list[str] = []

    @registry.tool(side_effects=True)
    def shred(paths: list[Path], options: dict[str, Any], plan: Move | None = None) -> str:
        ran.append(json.dumps([str(p) for p in paths]))
        return "shredded"

    deny = Policy(
        [
            Rule(action="deny", tool="shred", args={"paths": {"path": "/boot/*"}}),
            Rule(action="deny", tool="shred", args={"options": {"path": "/boot/*"}}),
            Rule(action="deny", tool="shred", args={"plan": {"path": "/boot/*"}}),
        ],
        default="allow",
    )
    allow = Policy(
        [Rule(action="allow", tool="shred", args={"paths": {"path": "/var/tmp/*"}})],
        default="deny",
    )
    cases = {
        (deny, "mixed"): ({"paths": ["/var/tmp/a", "/boot/vmlinuz"], "options": {}}, "denied"),
        (deny, "nested"): (
            {"paths": ["/var/tmp/a"], "options": {"then": {"copy": ["/boot/grub/../x"]}}},
            "denied",
        ),
        (deny, "model"): (
            {
                "paths": ["/var/tmp/a"],
                "options": {},
                "plan": {"source": "/var/tmp/b", "target": "//boot/initrd"},
            },
            "denied",
        ),
        (deny, "clear"): ({"paths": ["/var/tmp/a"], "options": {"k": "/srv/x"}}, "succeeded"),
        (allow, "outside"): ({"paths": ["/var/tmp/a", "/home/zoe/notes"], "options": {}}, "denied"),
        (allow, "inside"): (
            {"paths": ["/var/tmp/a", "/var/tmp/b/../c"], "options": {}},
            "succeeded",
        ),
    }
    for (policy, name), (args, want) in cases.items():
        one = {"goal": "g", "tasks": [{"id": name, "tool": "shred", "args": args}]}
        result = await dagagent.execute(one, registry, interceptors=[policy])
        assert result.tasks[name].status.value == want, name
    assert ran == [json.dumps(["/var/tmp/a"]), json.dumps(["/var/tmp/a", "/var/tmp/b/../c"])]
