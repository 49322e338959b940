"""Approvals that wait, in Python: a run pauses on an ``ask`` rule answered later, a person's
decision is recorded in the store, and the same run resumes from the store by id."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from wait_tools import BESIDE, PLAN, TWO, make_registry

import dagagent
from dagagent import Approval, DecisionError, Policy, Rule, RunStatus, StoreError, ask_later
from dagagent.graph import finished_critical_path
from dagagent.settings import RunSettings
from dagagent.workflows import recorded_settings

pytestmark = pytest.mark.anyio


def _tools(calls: list[str]) -> dagagent.Registry:
    return make_registry(calls.append)


def _policy() -> Policy:
    return Policy([Rule(tool="send", action="ask", name="mail")], ask=ask_later)


async def _paused(tmp_path: Path, calls: list[str], plan: Any = PLAN) -> tuple[Any, Path]:
    store = tmp_path / "runs.db"
    result = await dagagent.execute(
        plan,
        _tools(calls),
        interceptors=[_policy()],
        store=store,
        settings=RunSettings(on_failure="cancel"),
    )
    return result, store


async def test_a_run_pauses_and_resumes_in_place_with_the_decision(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    assert result.status is RunStatus.PAUSED
    statuses = {k: r.status.value for k, r in result.tasks.items()}
    assert statuses == {"a": "succeeded", "mail": "waiting", "done": "skipped", "b": "succeeded"}
    assert sorted(calls) == ["fetch Paris", "fetch Tokyo"]  # the rest went on
    (wait,) = result.tasks["mail"].decisions or []
    assert (
        wait.decision == "wait"
        and wait.rule == "rule 'mail'"
        and wait.args
        == {
            "to": "Paris",
            "text": "hi",
        }
    )
    with dagagent.RunStore(store) as s:
        assert s.get_run(result.run_id).status is RunStatus.PAUSED
        (asked,) = s.approvals(result.run_id)
        assert (asked.task_id, asked.tool, asked.rule, asked.state) == (
            "mail",
            "send",
            "rule 'mail'",
            "waiting",
        )
        assert asked.args == {"to": "Paris", "text": "hi"}

    resumed = await dagagent.resume(
        result.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": Approval.approve("ok", by="ann")},
        interceptors=[_policy()],
    )
    assert resumed.run_id == result.run_id
    assert resumed.status is RunStatus.SUCCEEDED, resumed.tasks
    # The critical path counts the tasks kept from before the pause as they took then.
    assert (resumed.critical_path_s, resumed.critical_path) == finished_critical_path(
        ["a", "mail", "done", "b"], {"mail": ["a"], "done": ["mail"]}, resumed.tasks
    )
    # nothing that succeeded ran again; the approved call ran once
    assert sorted(calls) == ["after sent to Paris", "fetch Paris", "fetch Tokyo", "send Paris hi"]
    decision = (resumed.tasks["mail"].decisions or [])[-1]
    assert (decision.decision, decision.decided_by, decision.reason) == ("allow", "ann", "ok")
    with dagagent.RunStore(store) as s:
        record = s.get_run(result.run_id)
        assert record.status is RunStatus.SUCCEEDED
        assert {k: r.status.value for k, r in record.tasks.items()} == {
            "a": "succeeded",
            "mail": "succeeded",
            "done": "succeeded",
            "b": "succeeded",
        }
        assert record.tasks["a"].started_at == result.tasks["a"].started_at  # kept as it was
        (used,) = s.approval_history(result.run_id)
        assert used.state == "used" and used.decided_by == "ann"
        assert s.approvals() == []
        # a decision is used once: not again, and the run is not paused any more
        with pytest.raises(DecisionError, match="was used by a resume"):
            s.decide(result.run_id, "mail", "deny", by="bob")
    with pytest.raises(DecisionError, match="is succeeded, not paused"):
        await dagagent.resume(result.run_id, _tools(calls), store=store)
    assert len(calls) == 4


@pytest.mark.parametrize(
    "approval",
    [
        Approval.approve("ok", by="ann"),
        Approval.deny("no", by="ann"),
        Approval.edit({"to": "Lyon"}, by="ann"),
    ],
    ids=["allow", "deny", "edit"],
)
async def test_a_decision_recorded_while_paused_is_dated_when_the_person_took_it(
    tmp_path: Path, approval: Approval
) -> None:
    """The resumed call's record dates its decision when the person took it, not when the
    resume came to use it: the call took none of their time then (their wait is from the
    question to the resume, in the store); dated on use, a viewer took the moments between
    the resumed task's start and its policy for a second wait for a person."""
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    resumed = await dagagent.resume(
        result.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": approval},
        interceptors=[_policy()],
        settings=RunSettings(on_failure="continue"),
    )
    mail = resumed.tasks["mail"]
    decision = (mail.decisions or [])[-1]
    assert decision.decided_by == "ann"
    with dagagent.RunStore(store) as s:
        (used,) = s.approval_history(result.run_id)
    assert used.state == "used" and used.decided_at is not None and used.used_at is not None
    assert decision.at == used.decided_at  # not the time the resumed call reached the policy
    assert mail.started_at is not None and decision.at <= used.used_at <= mail.started_at


async def test_a_denied_call_denies_its_task_and_nothing_is_sent(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    resumed = await dagagent.resume(
        result.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": Approval.deny("not today", by="ann")},
        interceptors=[_policy()],
        settings=RunSettings(on_failure="continue"),
    )
    assert resumed.status is RunStatus.FAILED
    assert resumed.tasks["mail"].status.value == "denied"
    assert resumed.tasks["mail"].error == "denied by ann: not today"
    assert resumed.tasks["done"].status.value == "skipped"
    assert not any(c.startswith("send") for c in calls)


async def test_edited_arguments_are_checked_and_used(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    with dagagent.RunStore(store) as s:
        with pytest.raises(dagagent.ToolArgumentsError):
            dagagent.workflows.record_decision(
                s, result.run_id, "mail", Approval.edit({"text": 3}), _tools([])
            )
        assert s.approvals(result.run_id)[0].state == "waiting"  # nothing was recorded
    resumed = await dagagent.resume(
        result.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": Approval.edit({"to": "Lyon"}, by="ann")},
        interceptors=[_policy()],
    )
    assert resumed.ok
    assert "send Lyon hi" in calls
    assert resumed.tasks["done"].output == "sent to Lyon"


async def test_two_waiting_branches_resume_one_at_a_time(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls, TWO)
    assert [r.task_id for r in result.waiting()] == ["m1", "m2"]
    with dagagent.RunStore(store) as s:
        s.decide(result.run_id, "m2", "allow", by="ann")
    first = await dagagent.resume(
        result.run_id, _tools(calls), store=store, interceptors=[_policy()]
    )
    assert first.status is RunStatus.PAUSED
    assert calls == ["send bob hi", "after sent to bob"]
    assert first.tasks["m1"].status.value == "waiting"
    with dagagent.RunStore(store) as s:
        (still,) = s.approvals(result.run_id)
        assert (still.task_id, still.seq) == ("m1", 2)  # asked again by the resume
        s.decide(result.run_id, "m1", "allow", by="bob")
    second = await dagagent.resume(
        result.run_id, _tools(calls), store=store, interceptors=[_policy()]
    )
    assert second.ok
    assert calls == ["send bob hi", "after sent to bob", "send ann hi", "after sent to ann"]


async def test_a_decision_about_other_arguments_does_not_carry_over(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    with dagagent.RunStore(store) as s:
        s.decide(result.run_id, "mail", "allow", by="ann")
        # the recorded question was about other arguments (as after a replan)
        conn = sqlite3.connect(store)
        conn.execute('UPDATE approvals SET args = \'{"to": "Rome", "text": "hi"}\'')
        conn.commit()
        conn.close()
    resumed = await dagagent.resume(
        result.run_id, _tools(calls), store=store, interceptors=[_policy()]
    )
    assert resumed.status is RunStatus.PAUSED
    assert not any(c.startswith("send") for c in calls)
    assert "the arguments changed since ann decided (allow)" in (resumed.tasks["mail"].error or "")


async def test_decisions_are_refused_where_nothing_waits(tmp_path: Path) -> None:
    calls: list[str] = []
    result, store = await _paused(tmp_path, calls)
    with dagagent.RunStore(store) as s:
        with pytest.raises(DecisionError, match=r"task 'a' of run \w+ is not waiting .*succeeded"):
            s.decide(result.run_id, "a", "allow", by="ann")
        with pytest.raises(DecisionError, match="has no task 'nope'"):
            s.decide(result.run_id, "nope", "allow", by="ann")
        with pytest.raises(StoreError, match="no run"):
            s.decide("abcdefabcdef", "mail", "allow", by="ann")
        s.decide(result.run_id, "mail", "allow", by="ann")
        with pytest.raises(DecisionError, match="decided already"):
            s.decide(result.run_id, "mail", "deny", by="bob")


MAP = {
    "goal": "mail each person; some mails need a person's approval",
    "tasks": [
        {
            "id": "mail",
            "tool": "send",
            "for_each": ["ann", "bob", "cy", "bea"],
            "args": {"to": "${@item}"},
        },
        {"id": "done", "tool": "after", "args": {"note": "${mail.1}"}},
    ],
}


def _b_policy() -> Policy:
    """Asks about mails to people whose name starts with b."""
    return Policy(
        [Rule(tool="send", action="ask", args=lambda a: a["to"].startswith("b"), name="b")],
        ask=ask_later,
    )


@pytest.mark.parametrize("executor", ["serial", "dataflow"])
async def test_a_map_element_waits_and_resume_runs_only_the_waiting_elements(
    tmp_path: Path, executor: str
) -> None:
    calls: list[str] = []
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(
        MAP,
        _tools(calls),
        interceptors=[_b_policy()],
        store=store,
        settings=RunSettings(executor=executor),
    )
    assert paused.status is RunStatus.PAUSED
    mail = paused.tasks["mail"]
    assert mail.status.value == "waiting" and paused.tasks["done"].status.value == "skipped"
    assert [e.status.value for e in mail.elements or ()] == [
        "succeeded",
        "waiting",
        "succeeded",
        "waiting",
    ]
    assert mail.error == "2 of 4 elements wait for a person's decision (elements 1, 3)"
    assert sorted(calls) == ["send ann hi", "send cy hi"]
    with dagagent.RunStore(store) as s:
        asked = s.approvals(paused.run_id)
        record = s.get_run(paused.run_id)
    assert sorted((a.task_id, a.args["to"], a.state) for a in asked) == [
        ("mail", "bea", "waiting"),
        ("mail", "bob", "waiting"),
    ]
    assert [e.status.value for e in record.tasks["mail"].elements or ()] == [
        "succeeded",
        "waiting",
        "succeeded",
        "waiting",
    ]

    resumed = await dagagent.resume(
        paused.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": Approval.approve("fine", by="ann")},
        interceptors=[_b_policy()],
    )
    assert resumed.status is RunStatus.SUCCEEDED, resumed.tasks
    # only the two waiting elements ran; those that succeeded were not sent again
    assert sorted(calls) == [
        "after sent to bob",
        "send ann hi",
        "send bea hi",
        "send bob hi",
        "send cy hi",
    ]
    assert resumed.tasks["mail"].output == [
        "sent to ann",
        "sent to bob",
        "sent to cy",
        "sent to bea",
    ]
    with dagagent.RunStore(store) as s:
        assert [a.state for a in s.approval_history(paused.run_id)] == ["used", "used"]
        elements = s.get_run(paused.run_id).tasks["mail"].elements or []
    assert [e.status.value for e in elements] == ["succeeded"] * 4
    # the elements kept from before the pause keep their own record (their first start)
    assert elements[0].started_at == (mail.elements or [])[0].started_at


async def test_a_denied_map_element_denies_the_map_task(tmp_path: Path) -> None:
    calls: list[str] = []
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(MAP, _tools(calls), interceptors=[_b_policy()], store=store)
    assert paused.status is RunStatus.PAUSED
    resumed = await dagagent.resume(
        paused.run_id,
        _tools(calls),
        store=store,
        decisions={"mail": Approval.deny("no mail to b", by="ann")},
        interceptors=[_b_policy()],
    )
    assert resumed.status is RunStatus.FAILED
    assert resumed.tasks["mail"].status.value == "denied"
    assert sorted(calls) == ["send ann hi", "send cy hi"]  # nothing else was sent


async def test_a_call_asked_about_outside_the_redaction_resumes_with_its_decision(
    tmp_path: Path,
) -> None:
    """A policy outside (before) the redacting interceptor sees a call's secret: what waits
    for a person is recorded redacted all the same (the approvals, the task's decisions),
    and the resume still finds the person's decision for that call, the secret coming from
    a reference or written in the plan."""
    from dagagent.interceptors import redacting

    token = "ghp_Wq83nRt5VzLk20Jm"
    sent: list[Any] = []
    reg = dagagent.Registry()

    @reg.tool
    def vault() -> dict[str, str]:
        """A token."""
        return {"token": token}

    @reg.tool(side_effects=True)
    def push(repo: str, auth_token: str, signing_secret: str) -> str:
        """Push with a token."""
        sent.append((repo, auth_token, signing_secret))
        return "pushed"

    plan = {
        "tasks": [
            {"id": "v", "tool": "vault"},
            {
                "id": "p",
                "tool": "push",
                "args": {
                    "repo": "kestrel/site",
                    "auth_token": "${v.token}",
                    "signing_secret": "whsec_Lm41Zx0",
                },
            },
        ]
    }
    ask = Policy([Rule(tool="push", action="ask", name="pushes")], ask=ask_later)
    interceptors = [ask, redacting()]
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(plan, reg, interceptors=interceptors, store=store)
    assert paused.status is RunStatus.PAUSED
    with dagagent.RunStore(store) as s:
        (asked,) = s.approvals(paused.run_id)
        record = s.get_run(paused.run_id)
    assert asked.args == {
        "repo": "kestrel/site",
        "auth_token": "[redacted]",
        "signing_secret": "[redacted]",
    }
    assert token not in str(record.tasks["p"]) and "whsec_" not in str(record.tasks["p"])
    result = await dagagent.resume(
        paused.run_id,
        reg,
        store=store,
        interceptors=interceptors,
        decisions={"p": Approval.approve("fine", by="ann")},
    )
    assert result.status is RunStatus.SUCCEEDED, result.tasks["p"]
    assert sent == [("kestrel/site", "[redacted]", "[redacted]")]


def _both_approved() -> dict[str, Approval]:
    return {"m1": Approval.approve("ok", by="ann"), "m2": Approval.approve("ok", by="ann")}


async def test_a_resume_goes_on_with_the_failure_policy_the_run_was_started_with(
    tmp_path: Path,
) -> None:
    """Started with on_failure="continue", paused, resumed without settings: the failure the
    resume meets leaves the independent branch running (the defaults would cancel it)."""
    calls: list[str] = []
    store = tmp_path / "runs.db"
    started = RunSettings(executor="serial", on_failure="continue", max_concurrency=3)
    paused = await dagagent.execute(
        BESIDE, _tools(calls), interceptors=[_policy()], store=store, settings=started
    )
    assert paused.status is RunStatus.PAUSED and calls == []
    with dagagent.RunStore(store) as s:
        record = s.get_run(paused.run_id)
    assert record.settings == {
        "on_failure": "continue",
        "max_concurrency": 3,
        "max_elements": started.max_elements,
        "in_doubt": "ask",
        "retry": {"base_delay_s": 0.2, "max_delay_s": 30.0, "jitter": 0.5},
    }
    assert record.to_json_dict()["settings"] == record.settings
    assert recorded_settings(record) == started  # its executor too

    resumed = await dagagent.resume(
        paused.run_id,
        _tools(calls),
        store=store,
        interceptors=[_policy()],
        decisions=_both_approved(),
    )
    statuses = {k: r.status.value for k, r in resumed.tasks.items()}
    assert statuses == {"m1": "succeeded", "bad": "failed", "m2": "succeeded", "d2": "succeeded"}
    assert resumed.status is RunStatus.FAILED and resumed.executor == "serial"
    assert calls == ["send ann hi", "send bob hi", "after sent to bob"]
    with dagagent.RunStore(store) as s:
        assert s.get_run(paused.run_id).settings == record.settings  # kept as they were


async def test_settings_given_to_a_resume_win_and_the_record_says_so(tmp_path: Path) -> None:
    calls: list[str] = []
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(
        BESIDE,
        _tools(calls),
        interceptors=[_policy()],
        store=store,
        settings=RunSettings(executor="serial", on_failure="continue", max_concurrency=3),
    )
    resumed = await dagagent.resume(
        paused.run_id,
        _tools(calls),
        store=store,
        interceptors=[_policy()],
        decisions=_both_approved(),
        settings=RunSettings(executor="serial"),  # the resume's, all of them
    )
    assert resumed.tasks["bad"].status.value == "failed"
    assert resumed.tasks["d2"].status.value == "cancelled"  # on_failure="cancel", as given
    assert "after sent to bob" not in calls
    with dagagent.RunStore(store) as s:
        record = s.get_run(paused.run_id)
    assert (record.settings["on_failure"], record.settings["max_concurrency"]) == ("cancel", None)


async def test_recorded_settings_change_only_what_is_given(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    retry = dagagent.TaskRetryPolicy(base_delay_s=0.05, max_delay_s=1.0, jitter=0.0)
    started = RunSettings(
        executor="levels",
        on_failure="continue",
        max_concurrency=3,
        max_elements=50,
        retry=retry,
        in_doubt="deny",
    )
    paused = await dagagent.execute(
        PLAN, _tools([]), interceptors=[_policy()], store=store, settings=started
    )
    with dagagent.RunStore(store) as s:
        record = s.get_run(paused.run_id)
    assert recorded_settings(record) == started
    assert recorded_settings(record, max_concurrency=None, executor="serial") == started.but(
        max_concurrency=None, executor="serial"
    )
    with pytest.raises(dagagent.ConfigError, match="not run settings: concurrency"):
        recorded_settings(record, concurrency=2)
    with pytest.raises(dagagent.ConfigError, match="on_failure must be"):
        recorded_settings(record, on_failure="stop")
    # a run recorded without settings (a recorder of one's own): the defaults
    assert recorded_settings(record.model_copy(update={"settings": {}})) == RunSettings(
        executor="levels"
    )


async def test_a_resume_keeps_the_map_size_limit_the_run_was_started_with(
    tmp_path: Path,
) -> None:
    """A map task that only runs once the run resumes expands under the run's own
    max_elements (the default would let its three elements through)."""
    reg = _tools([])

    @reg.tool
    def cities(n: int) -> list[str]:
        """Some cities."""
        return ["Paris", "Tokyo", "Lima"][:n]

    plan = {
        "goal": "a map after a waiting call",
        "tasks": [
            {"id": "m1", "tool": "send", "args": {"to": "ann"}},
            {"id": "lst", "tool": "cities", "args": {"n": 3}, "depends_on": ["m1"]},
            {"id": "each", "for_each": "${lst}", "tool": "fetch", "args": {"city": "${@item}"}},
        ],
    }
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(
        plan, reg, interceptors=[_policy()], store=store, settings=RunSettings(max_elements=2)
    )
    assert paused.status is RunStatus.PAUSED
    resumed = await dagagent.resume(
        paused.run_id,
        reg,
        store=store,
        interceptors=[_policy()],
        decisions={"m1": Approval.approve("ok", by="ann")},
    )
    each = resumed.tasks["each"]
    assert each.status.value == "failed" and each.error_type == "MapError", each
    assert "2" in (each.error or "")
