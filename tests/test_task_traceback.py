"""A failing tool's traceback on its TaskResult: the user's frames (not the runner's), the last
attempt's, chained causes kept, bounded in size; none for dagagent's own errors."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import dagagent
from dagagent import TaskRetryPolicy, execute
from dagagent.runner._traceback import MAX_TRACEBACK_CHARS, bound, task_traceback
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow"]
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.001, max_delay_s=0.01)


def parse_price(text: str) -> float:
    return float(text.removeprefix("$"))


@pytest.fixture
def reg() -> dagagent.Registry:
    reg = dagagent.Registry()
    calls = {"flaky": 0}

    @reg.tool
    def price(text: str) -> float:
        """Parse a price (sync: runs in a worker thread)."""
        return parse_price(text)

    @reg.tool
    async def aprice(text: str) -> float:
        """Parse a price (async)."""
        try:
            return parse_price(text)
        except ValueError as exc:
            raise LookupError(f"no price in {text!r}") from exc

    @reg.tool
    async def flaky() -> str:
        """Fails differently on each attempt."""
        calls["flaky"] += 1
        raise RuntimeError(f"attempt {calls['flaky']}")

    @reg.tool
    def deep(n: int) -> int:
        """Recurses until it fails."""
        return deep_fn(n)

    @reg.tool
    def quits() -> None:
        """Calls sys.exit."""
        sys.exit(3)

    @reg.tool(timeout_s=0.5)
    async def slow() -> None:
        """Never answers in time."""
        import anyio

        await anyio.sleep_forever()

    return reg


def deep_fn(n: int) -> int:
    if n == 0:
        raise ValueError("bottom " + "x" * 20_000)
    return deep_fn(n - 1) + 1


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_sync_tool_that_raises_records_where_its_code_failed(
    executor: str, reg: dagagent.Registry
) -> None:
    plan = {"tasks": [{"id": "p", "tool": "price", "args": {"text": "ten dollars"}}]}
    r = (await execute(plan, reg, settings=RunSettings(executor=executor))).tasks["p"]
    assert r.error == "ValueError: could not convert string to float: 'ten dollars'"
    tb = r.traceback
    assert tb is not None and tb.startswith("Traceback (most recent call last):\n")
    # the user's frames, innermost last, and the error line; none of the runner's plumbing
    assert tb.index(", in price\n") < tb.index(", in parse_price\n")
    assert __file__ in tb
    assert tb.rstrip().endswith("ValueError: could not convert string to float: 'ten dollars'")
    for plumbing in ("dagagent/runner", "anyio", "run_task", "call_sync"):
        assert plumbing not in tb


async def test_the_cause_of_a_chained_error_is_kept(reg: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "p", "tool": "aprice", "args": {"text": "n/a"}}]}
    r = (await execute(plan, reg)).tasks["p"]
    tb = r.traceback or ""
    assert "ValueError: could not convert string to float: 'n/a'" in tb
    assert "The above exception was the direct cause" in tb
    assert tb.rstrip().endswith("LookupError: no price in 'n/a'")


async def test_a_retried_task_keeps_the_traceback_of_its_last_attempt(
    reg: dagagent.Registry,
) -> None:
    plan = {"tasks": [{"id": "f", "tool": "flaky", "args": {}, "retries": 2}]}
    r = (await execute(plan, reg, settings=RunSettings(retry=FAST_RETRY))).tasks["f"]
    assert r.attempts == 3 and r.error == "RuntimeError: attempt 3"
    assert r.traceback is not None and r.traceback.rstrip().endswith("RuntimeError: attempt 3")
    assert "attempt 1" not in r.traceback


async def test_a_huge_traceback_is_bounded_keeping_both_ends(reg: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "d", "tool": "deep", "args": {"n": 40}}]}
    r = (await execute(plan, reg)).tasks["d"]
    tb = r.traceback or ""
    assert len(tb) <= MAX_TRACEBACK_CHARS
    assert tb.startswith("Traceback (most recent call last):\n")
    assert "characters of the traceback cut" in tb
    assert tb.rstrip().endswith("x" * 100)  # the end of the error message survives


async def test_a_base_exception_from_a_tool_gets_a_traceback(reg: dagagent.Registry) -> None:
    r = (await execute({"tasks": [{"id": "q", "tool": "quits", "args": {}}]}, reg)).tasks["q"]
    assert r.status == "failed" and r.error_type == "SystemExit"
    assert r.traceback is not None and "in quits" in r.traceback


async def test_dagagents_own_errors_explain_themselves_without_a_traceback(
    reg: dagagent.Registry,
) -> None:
    plan = {
        "tasks": [
            {"id": "slow", "tool": "slow", "args": {}},
            {"id": "bad", "tool": "price", "args": {"text": "${missing_ref_target.x}"}},
        ]
    }
    plan["tasks"].append({"id": "missing_ref_target", "tool": "aprice", "args": {"text": "$2"}})
    result = await execute(plan, reg, settings=RunSettings(on_failure="continue"))
    assert result.tasks["slow"].error_type == "TaskTimeoutError"
    assert result.tasks["bad"].error_type == "ReferenceResolutionError"
    assert result.tasks["slow"].traceback is None and result.tasks["bad"].traceback is None
    assert result.tasks["missing_ref_target"].traceback is None  # it succeeded


async def test_the_traceback_is_in_the_json_of_a_result(reg: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "p", "tool": "price", "args": {"text": "?"}}]}
    result = await execute(plan, reg)
    doc: dict[str, Any] = result.to_json_dict()
    assert "in parse_price" in doc["tasks"]["p"]["traceback"]
    ok = await execute({"tasks": [{"id": "p", "tool": "price", "args": {"text": "$1"}}]}, reg)
    assert "traceback" not in ok.to_json_dict()["tasks"]["p"]


def test_bound_keeps_short_text_and_cuts_long_text_to_the_limit() -> None:
    assert bound("short", 100) == "short"
    text = "".join(f"line {i}\n" for i in range(5000))
    cut = bound(text, 1000)
    assert len(cut) <= 1000 and cut.startswith("line 0\n") and cut.endswith("line 4999\n")
    head, _, tail = cut.partition("\n... (")
    n = int(tail.split(" ", 1)[0])
    assert n == len(text) - len(head) - len(cut.rsplit(") ...\n", 1)[1])


def test_an_exception_without_a_traceback_still_gets_its_line() -> None:
    assert task_traceback(RuntimeError("never raised")) == "RuntimeError: never raised\n"
    assert task_traceback(dagagent.errors.TaskTimeoutError("late")) is None


async def test_each_failed_element_of_a_map_task_has_its_traceback(
    reg: dagagent.Registry,
) -> None:
    plan = {
        "tasks": [
            {
                "id": "prices",
                "for_each": ["$1", "one", "$3"],
                "tool": "price",
                "args": {"text": "${@item}"},
            }
        ]
    }
    r = (await execute(plan, reg, settings=RunSettings(on_failure="continue"))).tasks["prices"]
    assert r.status == "failed" and r.elements is not None
    ok, bad, _ = r.elements
    assert ok.traceback is None
    assert bad.traceback is not None and "in parse_price" in bad.traceback
    assert r.traceback == bad.traceback  # the task's, for the element its error names
