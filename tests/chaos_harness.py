"""Chaos for exactly-once: random plans run by real processes that are killed (SIGKILL) at
random moments and at chosen points around their side effects, resumed, killed again, until
they are done; the side effects are counted outside the processes.

Each trial makes a random plan (tasks that pay, mail and write, which have side effects, and
pure ones that compute; maps over side-effecting tools; agent tasks whose scripted model
mails; an approval rule asking about some payments; references between them) and runs it in
a forked process that is killed, either at a random time or by a tool at a chosen point
(``before``: its intent is on record and the effect not done; ``after``: the effect is done
and its outcome not on record; ``during``: a sleep inside the call). Then, until the run has ended:

- a run that paused waits for a person: the harness decides each waiting call, in a random
  order: an approval is allowed; a call in doubt (a ``mail``, which has no reconciler) is
  checked in the effect log, as a person would check the mailbox: ``happened`` (with its
  output) if its key is there, else allowed (made again, with the same key);
- the run is resumed (``dagagent.resume``) in a new process, which may be killed again.

Every effect appends its idempotency key to a SQLite file of the harness's own (not the run
store), in the same transaction as the effect: after the run, **every key is there at most
once** (no duplicated effect), **every side-effecting call of the plan is there** (no lost
effect), every task succeeded with the output its effect gave (no lost success), and no
resume failed.

Run it as a script for a long sweep::

    python tests/chaos_harness.py --kills 2000 --seed 1

(``tests/test_exactly_once_chaos.py`` runs a few trials in the suite.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

import dagagent
from dagagent.store import RunStore

_KILL_POINTS = ("before", "after", "during", "time")


# -- the tools, in the process under test -------------------------------------------------


class _Chaos:
    """Where the process under test kills itself: at the ``nth`` effect of this process, at
    ``point`` (``before`` / ``after`` / ``during`` it)."""

    def __init__(self, log: Path, point: str | None, nth: int) -> None:
        self.log = log
        self.point = point
        self.nth = nth
        self.count = 0

    def effect(self, kind: str, task: str, value: Any) -> dict[str, Any]:
        call = dagagent.current_call()
        self.count += 1
        here = self.count == self.nth
        if here and self.point == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if here and self.point == "during":
            time.sleep(0.002)
            os.kill(os.getpid(), signal.SIGKILL)
        output = {"kind": kind, "value": value, "key": call.idempotency_key}
        with sqlite3.connect(self.log, timeout=30, isolation_level=None) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO effects (key, task, output) VALUES (?, ?, ?)",
                (call.idempotency_key, task, json.dumps(output)),
            )
            conn.execute("COMMIT")
        if here and self.point == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return output

    def lookup(self, key: str) -> dict[str, Any] | None:
        with sqlite3.connect(self.log, timeout=30) as conn:
            row = conn.execute("SELECT output FROM effects WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None


def build_registry(chaos: _Chaos) -> dagagent.Registry:
    registry = dagagent.Registry()

    def check_payment(call: dagagent.CallIdentity) -> dagagent.Reconciled:
        found = chaos.lookup(call.idempotency_key)
        if found is None:
            return dagagent.Reconciled.not_happened()
        return dagagent.Reconciled.happened(found)

    @registry.tool(side_effects=True, reconcile=check_payment)
    def pay(n: int, task: str) -> dict[str, Any]:
        """Pay n (a reconciler knows whether a payment went through)."""
        return chaos.effect("pay", task, n)

    @registry.tool(side_effects=True)
    async def mail(n: int, task: str) -> dict[str, Any]:
        """Send a mail (nobody can tell whether an interrupted one went: a person decides)."""
        await anyio.lowlevel.checkpoint()
        return chaos.effect("mail", task, n)

    async def check_write(call: dagagent.CallIdentity) -> dagagent.Reconciled:
        found = chaos.lookup(call.idempotency_key)
        return dagagent.Reconciled.happened(found) if found else dagagent.Reconciled.not_happened()

    @registry.tool(side_effects=True, reconcile=check_write)
    async def write(n: int, task: str) -> dict[str, Any]:
        """Write a record (an async tool with an async reconciler)."""
        return await anyio.to_thread.run_sync(chaos.effect, "write", task, n)

    @registry.tool
    def compute(n: int) -> dict[str, Any]:
        """Pure: run again as often as needed."""
        return {"kind": "compute", "value": n * 2 + 1}

    return registry


def agent_model() -> Any:
    """A scripted model for agent tasks, as a function of what it is asked: an instruction
    ``mail N for TASK`` gets one call of ``mail``, its result the answer ``done``."""
    import re

    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    def turn(request: Any) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return "done"
        text = " ".join(str(getattr(m, "content", "")) for m in request.messages)
        found = re.search(r"mail (\d+) for (t\d+)", text)
        assert found is not None, text
        args = {"n": int(found.group(1)), "task": found.group(2)}
        return LLMResponse(tool_calls=[ToolCall(id="c1", name="mail", arguments=args)])

    return ScriptedLLM([turn] * 100_000)


def policy() -> dagagent.Policy:
    return dagagent.Policy(
        [dagagent.Rule(tool="pay", action="ask", name="big payments", args=_big)],
        ask=dagagent.ask_later,
    )


def _big(args: dict[str, Any]) -> bool:
    return int(args.get("n", 0)) % 7 == 0


# -- plans ----------------------------------------------------------------------------------


def random_plan(rng: random.Random, n_tasks: int) -> dict[str, Any]:
    """A random DAG of ``n_tasks`` tasks: each may read an earlier task's value."""
    tasks: list[dict[str, Any]] = []
    single: list[str] = []  # tasks whose output has a value (not maps)
    for i in range(n_tasks):
        tid = f"t{i}"
        tool = rng.choice(("pay", "mail", "write", "compute", "compute", "agent"))
        n: Any = rng.randint(1, 50)
        if tool == "agent":  # an agent task whose model makes one side-effecting call
            tasks.append({"id": tid, "instruction": f"mail {n} for {tid}", "tools": ["mail"]})
            continue
        if single and rng.random() < 0.5:
            n = f"${{{rng.choice(single)}.value}}"
        task: dict[str, Any] = {"id": tid, "tool": tool, "args": {"n": n}}
        if tool != "compute":
            task["args"]["task"] = tid
        if tool != "compute" and rng.random() < 0.2:
            task["for_each"] = [rng.randint(1, 50) for _ in range(rng.randint(1, 4))]
            task["args"]["n"] = "${@item}"
        else:
            single.append(tid)
        if i and rng.random() < 0.3:
            task["depends_on"] = [f"t{rng.randrange(i)}"]
        tasks.append(task)
    return {"goal": "chaos", "tasks": tasks}


# -- one process under test ---------------------------------------------------------------


def _child(
    store: Path,
    log: Path,
    plan: dict[str, Any],
    run_id: str,
    resume: bool,
    point: str | None,
    nth: int,
) -> None:
    chaos = _Chaos(log, point, nth)
    registry = build_registry(chaos)

    async def main() -> None:
        llm = agent_model()
        if resume:
            await dagagent.resume(run_id, registry, store=store, interceptors=[policy()], llm=llm)
        else:
            await dagagent.execute(
                plan, registry, store=store, run_id=run_id, interceptors=[policy()], llm=llm
            )

    anyio.run(main)


def _run_process(
    store: Path,
    log: Path,
    plan: dict[str, Any],
    run_id: str,
    resume: bool,
    point: str | None,
    nth: int,
    kill_after_s: float | None,
) -> int | None:
    """Fork a process that runs (or resumes) the run; kill it after ``kill_after_s`` if
    given. Its exit status (``None``: killed)."""
    pid = os.fork()
    if pid == 0:  # the process under test
        code = 0
        try:
            _child(store, log, plan, run_id, resume, point, nth)
        except BaseException as exc:  # a failed resume: reported through the exit status
            print(f"chaos child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 3
        os._exit(code)
    if kill_after_s is not None:
        deadline = time.monotonic() + kill_after_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return None if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            time.sleep(0.001)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return None if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# -- a trial --------------------------------------------------------------------------------


@dataclass
class Trial:
    """What one plan's trial saw."""

    tasks: int
    kills: int = 0
    resumes: int = 0
    decisions: int = 0
    in_doubt_decided: int = 0
    points: dict[str, int] = field(default_factory=dict)  # kills by where they were aimed
    problems: list[str] = field(default_factory=list)


def _decide(store_path: Path, run_id: str, log: Path, rng: random.Random, trial: Trial) -> None:
    """A person answers every waiting call of the paused run, in a random order."""
    with RunStore(store_path) as st:
        waiting = st.approvals(run_id, states=("waiting",))
        doubts = {(e.task_id, e.element): e for e in st.effects(run_id) if e.in_doubt}
        rng.shuffle(waiting)
        asked: set[str] = set()
        for a in waiting:
            if a.rule != "in doubt":
                if a.task_id not in asked:
                    asked.add(a.task_id)
                    trial.decisions += 1
                    st.decide(run_id, a.task_id, "allow", by="chaos")
                continue
            # one call in doubt: the person checks its key (each element on its own)
            for (t, _), e in doubts.items():
                if t != a.task_id or e.args != a.args or e.key in asked:
                    continue
                asked.add(e.key)
                trial.decisions += 1
                trial.in_doubt_decided += 1
                found = _logged(log, e.key)
                if found is not None:
                    st.decide(run_id, t, "happened", by="chaos", output=found, key=e.key)
                else:
                    st.decide(run_id, t, "allow", by="chaos", key=e.key)


def _logged(log: Path, key: str) -> Any:
    with sqlite3.connect(log) as conn:
        row = conn.execute("SELECT output FROM effects WHERE key = ?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


def run_trial(
    workdir: Path, rng: random.Random, *, n_tasks: int, max_kills: int, max_rounds: int = 400
) -> Trial:
    """Run one random plan to its end through up to ``max_kills`` kills; see the module
    docstring for what is checked (``Trial.problems`` is empty when all of it holds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    store, log = workdir / "runs.db", workdir / "effects.db"
    for p in (store, log):
        for suffix in ("", "-wal", "-shm"):
            Path(str(p) + suffix).unlink(missing_ok=True)
    with sqlite3.connect(log) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE effects (key TEXT NOT NULL, task TEXT NOT NULL, output TEXT)")
    plan = random_plan(rng, n_tasks)
    run_id = dagagent.new_run_id()
    trial = Trial(tasks=n_tasks)
    started = False
    for _ in range(max_rounds):
        if started and _recorded(store, run_id):
            with RunStore(store) as st:
                status = st.get_run(run_id).status.value
            if status in ("succeeded", "failed"):
                break
            if status == "paused":
                try:
                    _decide(store, run_id, log, rng, trial)
                except dagagent.DagagentError as exc:
                    trial.problems.append(f"a decision was refused: {exc}")
                    return trial
        kill = trial.kills < max_kills
        point = rng.choice(_KILL_POINTS) if kill else None
        nth = rng.randint(1, 6)
        kill_after = rng.uniform(0.05, 0.6) if point == "time" else None
        if point == "time":
            point = None
        resume = started and _recorded(store, run_id)
        code = _run_process(store, log, plan, run_id, resume, point, nth, kill_after)
        started = True
        if resume:
            trial.resumes += 1
        if code is None:
            trial.kills += 1
            aimed = point or ("time" if kill_after is not None else "none")
            trial.points[aimed] = trial.points.get(aimed, 0) + 1
        elif code != 0:
            trial.problems.append(f"a {'resume' if resume else 'run'} failed (exit {code})")
            return trial
    else:
        trial.problems.append(f"the run did not end within {max_rounds} processes")
        return trial
    _check(store, log, plan, run_id, trial)
    return trial


def _recorded(store: Path, run_id: str) -> bool:
    if not store.exists():
        return False
    with RunStore(store) as st:
        return st.exists(run_id)


def _check(store: Path, log: Path, plan: dict[str, Any], run_id: str, trial: Trial) -> None:
    with sqlite3.connect(log) as conn:
        rows = conn.execute("SELECT key, task, output FROM effects").fetchall()
    seen: dict[str, int] = {}
    for key, _task, _out in rows:
        seen[key] = seen.get(key, 0) + 1
    dup = {k: n for k, n in seen.items() if n > 1}
    if dup:
        trial.problems.append(f"{len(dup)} effects ran more than once: {sorted(dup)[:5]}")
    by_key = {k: json.loads(o) for k, _t, o in rows}
    with RunStore(store) as st:
        record = st.get_run(run_id)
        effects = st.effects(run_id)
    if record.status.value != "succeeded":
        failed = [(t, r.status.value, r.error) for t, r in record.tasks.items() if not r.status.ok]
        trial.problems.append(f"the run ended {record.status.value}: {failed[:3]}")
        return
    for e in effects:
        if e.in_doubt:
            trial.problems.append(f"{e.where} is still in doubt")
        if e.key not in by_key:
            trial.problems.append(f"{e.where}: its effect ({e.tool}) is not in the log")
    expected = 0
    per_task: dict[str, int] = {}
    for _key, task_id, _out in rows:
        per_task[task_id] = per_task.get(task_id, 0) + 1
    for task in plan["tasks"]:
        if "instruction" in task:  # an agent task: one mail, once
            expected += 1
            if per_task.get(task["id"]) != 1:
                trial.problems.append(
                    f"agent task {task['id']}: {per_task.get(task['id'], 0)} effects, not 1"
                )
            continue
        if task["tool"] == "compute":
            continue
        r = record.tasks.get(task["id"])
        outputs = r.output if task.get("for_each") is not None else [r.output] if r else []
        expected += len(task["for_each"]) if task.get("for_each") is not None else 1
        for out in outputs or []:
            if not isinstance(out, dict) or by_key.get(out.get("key")) != out:
                trial.problems.append(f"task {task['id']}: output {out} is not its effect's")
    if len(seen) != expected:
        trial.problems.append(f"{len(seen)} effects for {expected} side-effecting calls")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200, help="kills in all (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=Path("chaos-work"))
    parser.add_argument("--min-tasks", type=int, default=10)
    parser.add_argument("--max-tasks", type=int, default=200)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    kills = trials = resumes = doubts = 0
    points: dict[str, int] = {}
    problems: list[str] = []
    started = time.monotonic()
    while kills < args.kills:
        n = rng.randint(args.min_tasks, args.max_tasks)
        trial = run_trial(
            args.dir / f"trial-{trials}", rng, n_tasks=n, max_kills=rng.randint(1, 12)
        )
        trials += 1
        kills += trial.kills
        resumes += trial.resumes
        doubts += trial.in_doubt_decided
        for k, v in trial.points.items():
            points[k] = points.get(k, 0) + v
        for p in trial.problems:
            problems.append(f"trial {trials - 1} ({n} tasks): {p}")
        print(
            f"trial {trials - 1}: {n} tasks, {trial.kills} kills, {trial.resumes} resumes, "
            f"{trial.decisions} decisions ({trial.in_doubt_decided} in doubt): "
            + ("ok" if not trial.problems else "; ".join(trial.problems)),
            flush=True,
        )
    print(
        f"{trials} trials, {kills} kills, {resumes} resumes, {doubts} calls in doubt decided by "
        f"a person, in {time.monotonic() - started:.0f} s: {len(problems)} problems"
    )
    aimed = ", ".join(f"{n} {k}" for k, n in sorted(points.items()))
    print(f"kills: {aimed} (before / during / after an effect; at a random time)")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
