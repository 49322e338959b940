"""A task run again after its worker was lost under it (what a Temporal worker does with a
task whose activity timed out, ``tests/executors/test_temporal.py`` on a real server): its
calls with side effects that are not known to have ended are in doubt, and the tool's
reconciler decides, element by element for a map; a call the reconciler cannot decide about
goes by the run's ``in_doubt`` policy (``ask``: the task waits for a person, and the call is
named, with why, for the driver to record; ``deny``: it is not made)."""

from __future__ import annotations

from typing import Any

import pytest

import dagagent
from dagagent.runner import TaskRunner


def registry(verdicts: dict[int, str], made: list[dict[str, Any]]) -> dagagent.Registry:
    """``pay``: its reconciler answers ``verdicts[n]`` (``happened``: with the output the
    payment gave); every payment made is appended to ``made``."""
    reg = dagagent.Registry()

    def check(call: dagagent.CallIdentity) -> dagagent.Reconciled:
        verdict = verdicts[int(call.args["n"])]
        if verdict == "happened":
            return dagagent.Reconciled.happened({"n": call.args["n"], "key": "before"})
        if verdict == "not_happened":
            return dagagent.Reconciled.not_happened()
        return dagagent.Reconciled.unknown("no record of it")

    @reg.tool(side_effects=True, reconcile=check)
    def pay(n: int) -> dict[str, Any]:
        """Pay n."""
        out = {"n": n, "key": dagagent.current_call().idempotency_key}
        made.append(out)
        return out

    return reg


async def rerun(plan: dict[str, Any], task_id: str, reg: dagagent.Registry) -> Any:
    """Run ``task_id`` as a worker runs a task again after a lost worker (under ``continue``:
    an element denied does not cancel the others)."""
    runner = TaskRunner(
        dagagent.validate(plan, reg), reg, run_id="0123456789ab", on_failure="continue"
    )
    runner.calls.effects.lost_during(task_id)
    runner.calls.effects.in_doubt = "deny"
    return await runner.run_task(task_id)


@pytest.mark.anyio
async def test_a_call_its_reconciler_finds_made_is_not_made_again() -> None:
    made: list[dict[str, Any]] = []
    plan = {"tasks": [{"id": "p", "tool": "pay", "args": {"n": 1}}]}
    r = await rerun(plan, "p", registry({1: "happened"}, made))
    assert r.status.value == "succeeded", r.error
    assert r.output == {"n": 1, "key": "before"}
    assert made == []
    [decision] = r.decisions
    assert (decision.decision, decision.decided_by) == ("happened", "reconcile:check")


@pytest.mark.anyio
async def test_a_call_its_reconciler_finds_not_made_is_made_with_the_same_key() -> None:
    made: list[dict[str, Any]] = []
    plan = {"tasks": [{"id": "p", "tool": "pay", "args": {"n": 2}}]}
    reg = registry({2: "not_happened"}, made)
    r = await rerun(plan, "p", reg)
    assert r.status.value == "succeeded", r.error
    # the key a first run of the same run id gives the call
    first = TaskRunner(dagagent.validate(plan, reg), reg, run_id="0123456789ab")
    again = await first.run_task("p")
    assert made == [r.output, again.output] and r.output == again.output


@pytest.mark.anyio
async def test_a_map_decides_element_by_element_and_a_call_nobody_can_tell_is_not_made() -> None:
    made: list[dict[str, Any]] = []
    plan = {"tasks": [{"id": "m", "for_each": [1, 2, 3], "tool": "pay", "args": {"n": "${@item}"}}]}
    r = await rerun(plan, "m", registry({1: "happened", 2: "not_happened", 3: "unknown"}, made))
    one, two, three = r.elements or []
    assert (one.status.value, one.output) == ("succeeded", {"n": 1, "key": "before"})
    assert two.status.value == "succeeded" and made == [two.output]
    assert three.status.value == "denied"
    assert "no record of it" in (three.error or "")


@pytest.mark.anyio
async def test_calls_named_for_the_record_are_neither_reconciled_nor_made() -> None:
    """A task run again only to name its calls in doubt (a Temporal workflow that ended under
    its driver): each call is asked about, with its key, and neither its reconciler nor the
    tool is called."""
    made: list[dict[str, Any]] = []
    asked: list[int] = []
    reg = registry({1: "not_happened", 2: "not_happened"}, made)
    check = reg.get("pay").reconcile
    assert check is not None

    def counting(call: dagagent.CallIdentity) -> dagagent.Reconciled:
        asked.append(int(call.args["n"]))
        return check(call)  # type: ignore[no-any-return]

    reg.get("pay").reconcile = counting
    plan = {"tasks": [{"id": "m", "for_each": [1, 2], "tool": "pay", "args": {"n": "${@item}"}}]}
    runner = TaskRunner(
        dagagent.validate(plan, reg), reg, run_id="0123456789ab", on_failure="continue"
    )
    effects = runner.calls.effects
    effects.lost_during("m")
    effects.in_doubt = "ask"
    effects.reconciling = False
    r = await runner.run_task("m")
    assert r.status.value == "waiting", r.error
    assert made == [] and asked == []
    first = TaskRunner(dagagent.validate(plan, reg), reg, run_id="0123456789ab")
    keys = [e.output["key"] for e in (await first.run_task("m")).elements or ()]
    assert [(c["element"], c["key"]) for c in effects.asked] == list(enumerate(keys))
    assert all("its reconciler was not asked" in (e.error or "") for e in r.elements or ())


@pytest.mark.anyio
async def test_a_call_nobody_can_tell_about_waits_for_a_person_saying_which_worker_was_lost() -> (
    None
):
    """Under ``in_doubt="ask"`` (a Temporal run's default), the call its reconciler cannot
    decide about is not made: its task waits, its error and its record for the driver say
    which worker was lost (as the workflow told it); the one decided is settled as before."""
    made: list[dict[str, Any]] = []
    plan = {"tasks": [{"id": "m", "for_each": [1, 3], "tool": "pay", "args": {"n": "${@item}"}}]}
    reg = registry({1: "happened", 3: "unknown"}, made)
    runner = TaskRunner(
        dagagent.validate(plan, reg), reg, run_id="0123456789ab", on_failure="continue"
    )
    effects = runner.calls.effects
    why = "its call started on worker 42@there and the worker was lost (no heartbeat for 1 s)"
    effects.lost_during("m", why)
    effects.in_doubt = "ask"
    r = await runner.run_task("m")
    one, three = r.elements or []
    assert (one.status.value, one.output) == ("succeeded", {"n": 1, "key": "before"})
    assert three.status.value == "waiting"
    assert why in (three.error or "") and "no record of it" in (three.error or "")
    assert made == []
    [asked] = effects.asked
    assert (asked["element"], asked["why"]) == (1, why)
