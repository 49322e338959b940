"""The interceptor seam: order, argument rewrites, short-circuits, denials under the failure
policies, timeouts, and the ready-made tracing / caching / redaction interceptors."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

import dagagent
from dagagent.errors import TaskDeniedError
from dagagent.events import TaskDecision
from dagagent.interceptors import Span, caching, redacting, tracing
from dagagent.runner import ToolInvocation
from dagagent.settings import RunSettings
from dagagent.text import jsonable

pytestmark = pytest.mark.anyio

CallNext = Callable[[ToolInvocation], Awaitable[Any]]
EXECUTORS = ["serial", "levels", "dataflow"]


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "interceptor test", "tasks": list(tasks)}


def work(tid: str, depends_on: list[str] | None = None, **args: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"id": tid, "tool": "work", "args": {"name": tid, **args}}
    if depends_on:
        t["depends_on"] = depends_on
    return t


def deny_task(task_id: str) -> Any:
    async def icpt(call: ToolInvocation, call_next: CallNext) -> Any:
        if call.task_id == task_id:
            raise TaskDeniedError(f"{task_id} is off limits", decided_by="test")
        return await call_next(call)

    return icpt


# -- composition --------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_interceptors_compose_in_order_first_is_outermost(
    registry: dagagent.Registry, recorder: Any, executor: str
) -> None:
    trail: list[str] = []

    def layer(name: str) -> Any:
        async def icpt(call: ToolInvocation, call_next: CallNext) -> Any:
            trail.append(f"{name}>{call.task_id}")
            out = await call_next(call)
            trail.append(f"{name}<{call.task_id}")
            return f"{name}({out})"

        return icpt

    result = await dagagent.execute(
        plan(work("a")),
        registry,
        interceptors=[layer("x"), layer("y")],
        settings=RunSettings(executor=executor),
    )
    assert result.ok
    assert trail == ["x>a", "y>a", "y<a", "x<a"]
    assert result.outputs["a"] == "x(y(a))"
    assert recorder.calls == {"a": 1}


async def test_every_call_of_every_task_goes_through_the_interceptor(
    registry: dagagent.Registry, recorder: Any
) -> None:
    seen: list[tuple[str, str, int, str]] = []

    async def spy(call: ToolInvocation, call_next: CallNext) -> Any:
        seen.append((call.task_id, call.tool.name, call.attempt, call.source))
        return await call_next(call)

    p = plan(
        work("a"),
        {"id": "s", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "e", "tool": "echo", "args": {"value": "${s}"}},
    )
    result = await dagagent.execute(
        p, registry, interceptors=[spy], settings=RunSettings(executor="dataflow")
    )
    assert result.ok and result.outputs["e"] == 3
    assert sorted(seen) == [
        ("a", "work", 1, "plan"),
        ("e", "echo", 1, "plan"),
        ("s", "add", 1, "plan"),
    ]
    assert recorder.calls == {"a": 1}


async def test_each_retry_attempt_is_intercepted(registry: dagagent.Registry) -> None:
    attempts: list[int] = []
    calls = 0

    @registry.tool(retries=2)
    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise RuntimeError("not yet")
        return "ok"

    async def spy(call: ToolInvocation, call_next: CallNext) -> Any:
        attempts.append(call.attempt)
        return await call_next(call)

    result = await dagagent.execute(
        plan({"id": "f", "tool": "flaky"}),
        registry,
        interceptors=[spy],
        settings=RunSettings(retry=dagagent.TaskRetryPolicy(base_delay_s=0.0, jitter=0.0)),
    )
    assert result.ok
    assert attempts == [1, 2, 3]
    assert calls == 3


# -- argument rewrites --------------------------------------------------------------------------


async def test_rewritten_arguments_are_validated_before_the_next_layer(
    registry: dagagent.Registry,
) -> None:
    seen_by_inner: list[Any] = []

    async def rewrite(call: ToolInvocation, call_next: CallNext) -> Any:
        call.args = {**call.args, "b": "40"}  # a string: must be coerced to int again
        return await call_next(call)

    async def inner(call: ToolInvocation, call_next: CallNext) -> Any:
        seen_by_inner.append(call.args["b"])
        return await call_next(call)

    result = await dagagent.execute(
        plan({"id": "s", "tool": "add", "args": {"a": 2, "b": 1}}),
        registry,
        interceptors=[rewrite, inner],
    )
    assert result.ok
    assert result.outputs["s"] == 42
    assert seen_by_inner == [40] and isinstance(seen_by_inner[0], int)
    # the record keeps the arguments the plan resolved to, before any interceptor
    assert result.tasks["s"].args == {"a": 2, "b": 1}


async def test_rewrite_to_invalid_arguments_fails_the_task_clearly(
    registry: dagagent.Registry, recorder: Any
) -> None:
    async def breaker(call: ToolInvocation, call_next: CallNext) -> Any:
        call.args = {**call.args, "seconds": "soon"}
        return await call_next(call)

    result = await dagagent.execute(
        plan({**work("a"), "retries": 3}), registry, interceptors=[breaker]
    )
    r = result.tasks["a"]
    assert r.status is dagagent.TaskStatus.FAILED
    assert r.error_type == "ToolArgumentsError"
    assert "bad arguments for tool 'work'" in (r.error or "")
    assert "seconds" in (r.error or "")
    assert r.attempts == 1  # bad arguments are not retried
    assert recorder.calls == {}


# -- short-circuit ------------------------------------------------------------------------------


async def test_short_circuit_returns_without_calling_the_tool(
    registry: dagagent.Registry, recorder: Any
) -> None:
    async def stub(call: ToolInvocation, call_next: CallNext) -> Any:
        if call.args["name"] == "b":
            return "stubbed"
        return await call_next(call)

    result = await dagagent.execute(
        plan(work("a"), work("b"), work("c", depends_on=["b"], value="${b}")),
        registry,
        interceptors=[stub],
    )
    assert result.ok
    assert result.outputs == {"a": "a", "b": "stubbed", "c": "stubbed"}
    assert recorder.calls == {"a": 1, "c": 1}


# -- denial and the failure policy --------------------------------------------------------------


async def test_deny_in_a_level_with_cancel_cancels_the_sibling(
    registry: dagagent.Registry, recorder: Any
) -> None:
    async def deny_later(call: ToolInvocation, call_next: CallNext) -> Any:
        if call.task_id == "bad":
            await anyio.wait_all_tasks_blocked()  # the sibling has started, and sleeps
            raise TaskDeniedError("not today", decided_by="test")
        return await call_next(call)

    start = anyio.current_time()
    result = await dagagent.execute(
        plan(work("slow", seconds=5), work("bad"), work("after", depends_on=["slow"])),
        registry,
        interceptors=[deny_later],
        settings=RunSettings(executor="levels", on_failure="cancel"),
    )
    elapsed = anyio.current_time() - start
    t = result.tasks
    assert t["bad"].status is dagagent.TaskStatus.DENIED
    assert t["bad"].error == "denied by test: not today"
    assert t["bad"].error_type == "TaskDeniedError"
    assert t["slow"].status is dagagent.TaskStatus.CANCELLED
    assert t["after"].status is dagagent.TaskStatus.CANCELLED
    assert result.status is dagagent.RunStatus.FAILED
    assert elapsed < 3  # the 5 s sibling did not run to the end
    assert recorder.calls == {"slow": 1}  # started, then cancelled; 'bad' never called
    assert [r.task_id for r in result.failures()] == ["bad"]


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_deny_with_continue_lets_the_independent_branch_finish(
    registry: dagagent.Registry, recorder: Any, executor: str
) -> None:
    result = await dagagent.execute(
        plan(
            work("a"),
            work("b", seconds=0.05),
            work("a2", depends_on=["a"]),
            work("b2", depends_on=["b"]),
        ),
        registry,
        interceptors=[deny_task("a")],
        settings=RunSettings(executor=executor, on_failure="continue"),
    )
    t = result.tasks
    assert t["a"].status is dagagent.TaskStatus.DENIED
    assert t["a2"].status is dagagent.TaskStatus.SKIPPED
    assert "'a' denied" in (t["a2"].error or "")
    assert t["b"].ok and t["b2"].ok
    assert recorder.calls == {"b": 1, "b2": 1}
    with pytest.raises(dagagent.RunFailedError, match="a: denied: denied by test"):
        result.raise_for_status()


async def test_a_denial_is_not_retried(registry: dagagent.Registry, recorder: Any) -> None:
    result = await dagagent.execute(
        plan({**work("a"), "retries": 3}), registry, interceptors=[deny_task("a")]
    )
    assert result.tasks["a"].status is dagagent.TaskStatus.DENIED
    assert result.tasks["a"].attempts == 1
    assert recorder.calls == {}


async def test_decide_records_into_the_task_result_and_emits_events(
    registry: dagagent.Registry, recorder: Any
) -> None:
    events: list[Any] = []

    async def judge(call: ToolInvocation, call_next: CallNext) -> Any:
        if call.task_id == "no":
            call.decide("deny", "judge", "nope")
            raise TaskDeniedError("nope", decided_by="judge")
        call.decide("allow", "judge", None)
        return await call_next(call)

    result = await dagagent.execute(
        plan(work("yes"), work("no")),
        registry,
        interceptors=[judge],
        listeners=[events.append],
        settings=RunSettings(on_failure="continue"),
    )
    yes, no = result.tasks["yes"], result.tasks["no"]
    assert yes.decisions is not None and no.decisions is not None
    assert [(d.decision, d.decided_by, d.reason) for d in yes.decisions] == [
        ("allow", "judge", None)
    ]
    assert [(d.decision, d.decided_by, d.reason) for d in no.decisions] == [
        ("deny", "judge", "nope")
    ]
    assert no.decisions[0].args["name"] == "no"
    assert no.to_json_dict()["decisions"][0]["decision"] == "deny"
    decisions = sorted(
        (e.task_id, e.decision, e.decided_by) for e in events if isinstance(e, TaskDecision)
    )
    assert decisions == [("no", "deny", "judge"), ("yes", "allow", "judge")]
    assert recorder.calls == {"yes": 1}


# -- timeouts -----------------------------------------------------------------------------------


@pytest.mark.skip_time
async def test_time_spent_in_interceptors_does_not_count_against_the_timeout(
    registry: dagagent.Registry, recorder: Any
) -> None:
    async def slow_reviewer(call: ToolInvocation, call_next: CallNext) -> Any:
        await anyio.sleep(1.5)  # e.g. a person thinking about an approval
        return await call_next(call)

    result = await dagagent.execute(
        plan({**work("quick"), "timeout_s": 1.0}, {**work("late", seconds=5), "timeout_s": 1.0}),
        registry,
        interceptors=[slow_reviewer],
        settings=RunSettings(on_failure="continue"),
    )
    assert result.tasks["quick"].ok
    late = result.tasks["late"]
    assert late.status is dagagent.TaskStatus.FAILED
    assert late.error == "timed out after 1 s"
    assert late.error_type == "TaskTimeoutError"
    assert recorder.calls == {"quick": 1, "late": 1}


# -- ready-made interceptors ------------------------------------------------------------------


async def test_tracing_records_a_span_per_call_with_its_outcome(
    registry: dagagent.Registry, recorder: Any
) -> None:
    spans: list[Span] = []
    result = await dagagent.execute(
        plan(work("ok", seconds=0.05), work("boom", fail=True), work("no")),
        registry,
        interceptors=[tracing(spans.append), deny_task("no")],
        settings=RunSettings(executor="serial", on_failure="continue"),
    )
    assert not result.ok
    by_task = {s.task_id: s for s in spans}
    assert set(by_task) == {"ok", "boom", "no"}
    assert by_task["ok"].ok and by_task["ok"].error is None
    assert by_task["ok"].duration_s >= 0.04
    assert by_task["ok"].tool == "work" and by_task["ok"].source == "plan"
    assert by_task["ok"].run_id == result.run_id
    assert not by_task["boom"].ok
    assert by_task["boom"].error == "RuntimeError: boom failed on purpose"
    assert by_task["no"].error == "TaskDeniedError: denied by test: no is off limits"
    assert recorder.calls == {"ok": 1, "boom": 1}


async def test_tracing_without_a_sink_is_harmless(registry: dagagent.Registry) -> None:
    result = await dagagent.execute(plan(work("a")), registry, interceptors=[tracing()])
    assert result.ok


async def test_caching_answers_repeated_calls_without_calling_the_tool(
    registry: dagagent.Registry, recorder: Any
) -> None:
    store: dict[str, Any] = {}
    p = plan(
        {"id": "a", "tool": "work", "args": {"name": "same", "value": 1}},
        {"id": "b", "tool": "work", "args": {"name": "same", "value": 1}, "depends_on": ["a"]},
        {"id": "c", "tool": "work", "args": {"name": "other", "value": 2}, "depends_on": ["b"]},
    )
    first = await dagagent.execute(p, registry, interceptors=[caching(store)])
    assert first.ok and first.outputs == {"a": 1, "b": 1, "c": 2}
    assert recorder.calls == {"same": 1, "other": 1}
    again = await dagagent.execute(p, registry, interceptors=[caching(store)])
    assert again.outputs == first.outputs
    assert recorder.calls == {"same": 1, "other": 1}  # nothing called the second time
    assert len(store) == 2


async def test_caching_skips_side_effects_other_tools_and_failures(
    registry: dagagent.Registry,
) -> None:
    counts: dict[str, int] = {}

    @registry.tool(side_effects=True)
    def send(to: str) -> str:
        counts["send"] = counts.get("send", 0) + 1
        return f"sent to {to}"

    @registry.tool
    def shaky(x: int) -> int:
        counts["shaky"] = counts.get("shaky", 0) + 1
        if counts["shaky"] == 1:
            raise RuntimeError("first call fails")
        return x

    icpt = caching(tools=["send", "shaky"])
    p = plan(
        {"id": "s", "tool": "send", "args": {"to": "ann"}},
        {"id": "k", "tool": "shaky", "args": {"x": 5}},
    )
    for _ in range(2):
        await dagagent.execute(
            p, registry, interceptors=[icpt], settings=RunSettings(on_failure="continue")
        )
    third = await dagagent.execute(p, registry, interceptors=[icpt])
    assert third.ok and third.outputs["k"] == 5
    assert counts == {"send": 3, "shaky": 2}  # send never cached; the failure not cached

    only_echo = caching(tools="echo")
    q = plan({"id": "k", "tool": "shaky", "args": {"x": 6}})
    await dagagent.execute(q, registry, interceptors=[only_echo])
    await dagagent.execute(q, registry, interceptors=[only_echo])
    assert counts["shaky"] == 4  # not in the cached tools


async def test_redacting_rewrites_secrets_before_inner_layers_and_the_tool(
    registry: dagagent.Registry,
) -> None:
    received: list[dict[str, Any]] = []

    @registry.tool
    def post(text: str, api_token: str, tags: list[str]) -> str:
        received.append({"text": text, "api_token": api_token, "tags": tags})
        return "posted"

    spans: list[Span] = []
    p = plan(
        {
            "id": "p",
            "tool": "post",
            "args": {
                "text": "mail ann@example.com or bob@example.org",
                "api_token": "s3cr3t",
                "tags": ["x", "carol@example.net"],
            },
        }
    )
    result = await dagagent.execute(
        p,
        registry,
        interceptors=[redacting(patterns=[r"[\w.]+@[\w.]+"]), tracing(spans.append)],
    )
    assert result.ok
    expected = {
        "text": "mail [redacted] or [redacted]",
        "api_token": "[redacted]",
        "tags": ["x", "[redacted]"],
    }
    assert received == [expected]
    assert spans[0].args == expected  # the inner tracer never saw the secrets


async def test_redacting_leaves_clean_calls_and_other_tools_alone(
    registry: dagagent.Registry, recorder: Any
) -> None:
    received: list[str] = []

    @registry.tool
    def login(user: str, password: str) -> str:
        received.append(password)
        return user

    p = plan({"id": "l", "tool": "login", "args": {"user": "ann", "password": "pw"}}, work("a"))
    await dagagent.execute(p, registry, interceptors=[redacting(tools="other*")])
    await dagagent.execute(p, registry, interceptors=[redacting()])
    assert received == ["pw", "[redacted]"]
    assert recorder.calls == {"a": 2}


async def test_redacting_hides_nested_secret_keys(registry: dagagent.Registry) -> None:
    received: list[dict[str, Any]] = []

    @registry.tool
    def fetch(url: str, config: dict[str, Any], headers: dict[str, str]) -> str:
        received.append({"config": config, "headers": headers})
        return "fetched"

    spans: list[Span] = []
    p = plan(
        {
            "id": "f",
            "tool": "fetch",
            "args": {
                "url": "https://example.com",
                "config": {"retries": 2, "db": {"password": "pw-1"}, "Api_Key": "k-2"},
                "headers": {"Authorization": "Bearer tok-3", "Accept": "text/plain"},
            },
        }
    )
    result = await dagagent.execute(p, registry, interceptors=[redacting(), tracing(spans.append)])
    assert result.ok
    expected = {
        "config": {"retries": 2, "db": {"password": "[redacted]"}, "Api_Key": "[redacted]"},
        "headers": {"Authorization": "[redacted]", "Accept": "text/plain"},
    }
    assert received == [expected]
    text = json.dumps([s.args for s in spans])
    assert "pw-1" not in text and "k-2" not in text and "tok-3" not in text


class Vault(BaseModel):
    host: str
    port: int = 5432
    passphrase_secret: str
    retry: int = 1


async def test_redacting_hides_secrets_in_models_and_numbers(
    registry: dagagent.Registry, tmp_path: Any
) -> None:
    """A secret inside a model argument (the model's field names count as keys) and a
    secret that is a number are hidden like any other: from the tool, the spans and the
    store. A model with nothing to hide is passed on as it was, and not recorded as
    redacted."""
    received: dict[str, Any] = {}  # by tool: the two tasks run at once, in either order

    @registry.tool
    def connect(vault: Vault, pin_token: int | str, label: str = "") -> str:
        received["connect"] = (vault, pin_token)
        return "connected"

    @registry.tool
    def plain(vault: Vault) -> str:
        received["plain"] = vault
        return "plain"

    spans: list[Span] = []
    db = tmp_path / "runs.db"
    p = plan(
        {
            "id": "c",
            "tool": "connect",
            "args": {
                "vault": {"host": "db.kestrel", "passphrase_secret": "orchid-Lantern-88"},
                "pin_token": 73915846,
            },
        },
        {
            "id": "p",
            "tool": "plain",
            "args": {"vault": {"host": "db2", "passphrase_secret": "[redacted]"}},
        },
    )
    result = await dagagent.execute(
        p, registry, interceptors=[redacting(), tracing(spans.append)], store=db
    )
    assert result.ok, result.tasks
    vault, pin = received["connect"]
    assert vault == Vault(host="db.kestrel", passphrase_secret="[redacted]") and pin == "[redacted]"
    assert received["plain"] == Vault(host="db2", passphrase_secret="[redacted]")
    assert [d.decision for d in result.tasks["p"].decisions or ()] == []  # nothing to hide
    shown = json.dumps([s.args for s in spans], default=str)
    stored = b"".join(f.read_bytes() for f in tmp_path.glob("runs.db*"))
    for secret in ("orchid-Lantern-88", "73915846"):
        assert secret not in shown and secret.encode() not in stored


async def test_redacting_hides_secrets_from_the_side_effect_journal(
    registry: dagagent.Registry, tmp_path: Any
) -> None:
    """The intent of a call with side effects is recorded with its arguments as the tool gets
    them: a secret hidden from the tool (an argument, a field of a model argument, in a plan's
    task or in a call an agent's model wrote) is not in the store's file, nor derivable from
    the call's fingerprint, which is that of the arguments on record."""
    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall
    from dagagent.store import RunStore
    from dagagent.tools import args_fingerprint

    seen: dict[str, tuple[str, Any]] = {}  # by task: the key and arguments the tool got

    @registry.tool(side_effects=True)
    def charge(vault: Vault, api_token: str, cents: int) -> str:
        call = dagagent.current_call()
        seen[call.task_id] = (call.idempotency_key, (vault, api_token))
        return "charged"

    secrets = ("sekrit-123-plan", "orchid-Lantern-88", "sekrit-456-agent", "velvet-Harbor-19")
    vault = {"host": "db.kestrel", "passphrase_secret": secrets[1]}
    by_model = ToolCall(
        id="c1",
        name="charge",
        arguments={
            "vault": {"host": "db.wren", "passphrase_secret": secrets[3]},
            "api_token": secrets[2],
            "cents": 7,
        },
    )
    p = plan(
        {
            "id": "c",
            "tool": "charge",
            "args": {"vault": vault, "api_token": secrets[0], "cents": 5},
        },
        {"id": "ag", "instruction": "charge 7 cents", "tools": ["charge"]},
    )
    db = tmp_path / "runs.db"
    with ScriptedLLM([LLMResponse(tool_calls=[by_model]), "charged"]) as llm:
        result = await dagagent.execute(p, registry, interceptors=[redacting()], store=db, llm=llm)
    assert result.ok, result.tasks
    assert {t: v for t, (_, v) in seen.items()} == {
        "c": (Vault(host="db.kestrel", passphrase_secret="[redacted]"), "[redacted]"),
        "ag": (Vault(host="db.wren", passphrase_secret="[redacted]"), "[redacted]"),
    }
    with RunStore(db) as st:
        effects = {e.task_id: e for e in st.effects(result.run_id)}
    assert set(effects) == {"c", "ag"}
    for task_id, e in effects.items():
        assert e.key == seen[task_id][0] and e.state == "succeeded"
        assert isinstance(e.args, dict)
        assert e.args["api_token"] == "[redacted]"
        assert e.args["vault"]["passphrase_secret"] == "[redacted]"
        assert e.fingerprint == args_fingerprint("charge", e.args)  # of what is on record
    stored = b"".join(f.read_bytes() for f in tmp_path.glob("runs.db*"))
    for secret in secrets:
        assert secret.encode() not in stored, secret


async def test_redaction_holds_when_the_arguments_fail_validation(
    registry: dagagent.Registry, tmp_path: Any
) -> None:
    """The redacting interceptor never sees a call whose resolved arguments do not fit the
    tool; its secrets must stay out of the task's error, the store and the logs all the same."""
    from structlog.testing import capture_logs

    from dagagent.store import RunStore

    secret = "sk-live-4f9a8b7c6d5e"
    ssn = "078-05-1120"

    @registry.tool
    def key() -> dict[str, str]:
        """A key, as a tool may return one."""
        return {"key": secret, "ssn": ssn}

    @registry.tool
    def login(user: str, api_key: int, ssn: int) -> str:
        """Needs numbers: the strings below do not validate."""
        return user

    p = plan(
        {"id": "k", "tool": "key", "args": {}},
        {
            "id": "l",
            "tool": "login",
            "args": {"user": "ann", "api_key": "${k.key}", "ssn": "${k.ssn}"},
        },
    )
    db = tmp_path / "runs.db"
    with capture_logs() as logs:
        result = await dagagent.execute(
            p,
            registry,
            interceptors=[redacting(args=["*api_key*", "ssn"])],
            store=db,
            settings=RunSettings(on_failure="continue"),
        )
    failed = result.tasks["l"]
    assert failed.status == "failed" and failed.error_type == "ToolArgumentsError"
    assert "api_key" in (failed.error or "") and "ssn" in (failed.error or "")
    with RunStore(db) as st:
        rec = st.get_run(result.run_id).tasks["l"]
    assert rec.args == {"user": "ann", "api_key": "[redacted]", "ssn": "[redacted]"}
    shown = json.dumps(
        [failed.error, rec.error, rec.args, jsonable(rec.decisions), logs], default=str
    )
    assert secret not in shown and ssn not in shown
    assert rec.decisions is not None and rec.decisions[-1].decision == "redact"


def test_argument_errors_never_quote_a_value_whose_name_says_it_is_secret(
    registry: dagagent.Registry,
) -> None:
    from dagagent.errors import PlanValidationError, ToolArgumentsError

    @registry.tool
    def connect(port: int, password: int, headers: dict[str, int]) -> str:
        """Numbers only."""
        return "ok"

    tool = registry.get("connect")
    with pytest.raises(ToolArgumentsError) as caught:
        tool.validate_args(
            {"port": "eighty", "password": "hunter2-secret", "headers": {"X-Api-Key": "abc-key"}}
        )
    message = str(caught.value)
    assert "eighty" in message  # an ordinary value is still quoted, to help
    assert "hunter2-secret" not in message and "abc-key" not in message
    assert "password:" in message and "headers.X-Api-Key:" in message
    bad = plan(
        {
            "id": "c",
            "tool": "connect",
            "args": {"port": 1, "password": "hunter2-secret", "headers": {}},
        }
    )
    with pytest.raises(PlanValidationError) as invalid:
        dagagent.validate(bad, registry)
    assert "hunter2-secret" not in str(invalid.value)
