"""Chaos for exactly-once: random plans run by real processes that are killed (SIGKILL) at
random moments and at chosen points around their side effects, resumed, killed again, until
they are done; the side effects are counted outside the processes.

Each trial makes random plans (tasks that pay, mail and write, which have side effects, and
pure ones that compute; maps over side-effecting tools; agent tasks whose scripted model
mails; an approval rule asking about some payments; references between them) and runs them
at once (``--runs-per-process``, on one store) in a forked process that is killed, either at
a random moment or by a tool at a chosen point (``before``: its intent is on record and the
effect not done; ``after``: the effect is done and its outcome not on record; ``during``: a
sleep inside the call). A kill interrupts every run in flight in the process, each at its own
moment. Then, until every run has ended:

- a run that paused waits for a person: the harness decides each waiting call, in a random
  order: an approval is allowed; a call in doubt (a ``mail``, which has no reconciler) is
  checked in the effect log, as a person would check the mailbox: ``happened`` (with its
  output) if its key is there, else allowed (made again, with the same key);
- the runs not ended are resumed (``dagagent.resume``) in a new process, which may be killed
  again.

Every effect appends its idempotency key to a SQLite file of the harness's own (not the run
store), in the same transaction as the effect: after the runs, **every key is there at most
once** (no duplicated effect), **every side-effecting call of each plan is there** (no lost
effect), every task succeeded with the output its effect gave (no lost success), and no
resume failed.

Where the time goes: the harness first runs one small plan in its own process (``warm_up``),
so that the processes it forks start with every module imported (else most of a process's
time is imports, and a random kill mostly hits them); a process's time is then its runs', and a
timed kill lands within the time a process takes when nothing kills it (``Pace``), not after it
ended. The last lines printed say how the wall time divided.

Run it as a script for a long sweep::

    python tests/chaos_harness.py --kills 2000 --seed 7

(``tests/test_exactly_once_chaos.py`` runs a short sweep of a few hundred kills in the suite;
``--json FILE`` writes the figures.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import sqlite3
import sys
import threading
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

    def __init__(self, logs: dict[str, Path], point: str | None, nth: int) -> None:
        self.logs = logs  # each run's effect log, by run id
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
        with sqlite3.connect(self.logs[call.run_id], timeout=30, isolation_level=None) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO effects (key, run, task, output) VALUES (?, ?, ?, ?)",
                (call.idempotency_key, call.run_id, task, json.dumps(output)),
            )
            conn.execute("COMMIT")
        if here and self.point == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return output

    def lookup(self, call: dagagent.CallIdentity) -> dict[str, Any] | None:
        found: dict[str, Any] | None = _logged(self.logs[call.run_id], call.idempotency_key)
        return found


def build_registry(chaos: _Chaos) -> dagagent.Registry:
    registry = dagagent.Registry()

    def check_payment(call: dagagent.CallIdentity) -> dagagent.Reconciled:
        found = chaos.lookup(call)
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
        found = chaos.lookup(call)
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
        if single and rng.random() <= 0.5:
            n = f"${{{rng.choice(single)}.value}}"
        task: dict[str, Any] = {"id": tid, "tool": tool, "args": {"n": n}}
        if tool != "compute":
            task["args"]["task"] = tid
        if tool != "compute" and rng.random() <= 0.2:
            task["for_each"] = [rng.randint(1, 50) for _ in range(rng.randint(1, 4))]
            task["args"]["n"] = "${@item}"
        else:
            single.append(tid)
        if i and rng.random() <= 0.3:
            task["depends_on"] = [f"t{rng.randrange(i)}"]
        tasks.append(task)
    return {"goal": "chaos", "tasks": tasks}


# -- one process under test ---------------------------------------------------------------


@dataclass
class Job:
    """One run a process under test runs: from its start, or resumed."""

    plan: dict[str, Any]
    run_id: str
    resume: bool
    store: Path
    log: Path  # the effect log of the run's own


def _child(jobs: list[Job], point: str | None, nth: int) -> None:
    """Run (or resume) ``jobs`` at once, in one event loop, as a server running several runs
    would (each with a store of its own): one kill interrupts all of them, each at its own
    moment."""
    chaos = _Chaos({job.run_id: job.log for job in jobs}, point, nth)
    registry = build_registry(chaos)

    async def one(job: Job) -> None:
        llm = agent_model()
        if job.resume:
            await dagagent.resume(
                job.run_id, registry, store=job.store, interceptors=[policy()], llm=llm
            )
        else:
            await dagagent.execute(
                job.plan,
                registry,
                store=job.store,
                run_id=job.run_id,
                interceptors=[policy()],
                llm=llm,
            )

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for job in jobs:
                tg.start_soon(one, job)

    anyio.run(main)


def _run_process(
    jobs: list[Job],
    point: str | None,
    nth: int,
    kill_after_s: float | None,
) -> int | None:
    """Fork a process that runs ``jobs``; kill it after ``kill_after_s`` if given. Its exit
    status (``None``: killed)."""
    pid = os.fork()
    if pid == 0:  # the process under test
        code = 0
        try:
            _child(jobs, point, nth)
        except BaseException as exc:  # a failed resume: reported through the exit status
            print(f"chaos child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 3
        os._exit(code)
    if kill_after_s is not None and not _exits_within(pid, kill_after_s):
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return None if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _exits_within(pid: int, seconds: float) -> bool:
    """Whether process ``pid`` (a child, not yet reaped) ends within ``seconds``: its pidfd
    becomes readable when it does (Linux); elsewhere, its status is polled."""
    if hasattr(os, "pidfd_open"):
        fd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([fd], [], [], seconds)
        finally:
            os.close(fd)
        return bool(ready)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.001)
    return False


def warm_up(workdir: Path) -> None:
    """Run one small plan through every tool, an approval, a pause and a resume in this
    process, before any fork: the forked processes then start with every module imported and
    every first-use cost paid, as a long-lived worker would, and their time goes to the run
    and its kill rather than to imports. Waits for the threads those runs started to end (a
    process that forks should have no other thread)."""
    workdir.mkdir(parents=True, exist_ok=True)
    store, log = _fresh(workdir)
    plan = {
        "goal": "warm up",
        "tasks": [
            {"id": "t0", "tool": "pay", "args": {"n": 7, "task": "t0"}},  # asks a person
            {"id": "t1", "tool": "mail", "args": {"n": 1, "task": "t1"}},
            {
                "id": "t2",
                "tool": "write",
                "args": {"n": "${@item}", "task": "t2"},
                "for_each": [1, 2],
            },
            {"id": "t3", "instruction": "mail 3 for t3", "tools": ["mail"]},
            {"id": "t4", "tool": "compute", "args": {"n": "${t1.value}"}},
        ],
    }
    run_id = dagagent.new_run_id()
    trial = Trial(tasks=len(plan["tasks"]))
    _child([Job(plan, run_id, False, store, log)], None, 0)
    _decide(store, run_id, log, random.Random(0), trial)
    _child([Job(plan, run_id, True, store, log)], None, 0)
    _check(store, log, plan, run_id, trial)
    if trial.problems:
        raise RuntimeError(f"the warm-up run went wrong: {trial.problems}")
    for thread in threading.enumerate():
        if thread is not threading.main_thread():
            thread.join(timeout=30)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if others:
        raise RuntimeError(f"threads left after the warm-up, the harness cannot fork: {others}")


def _fresh(workdir: Path, name: str = "run") -> tuple[Path, Path]:
    """An empty run store and effect log in ``workdir``: their paths."""
    store, log = workdir / f"{name}.db", workdir / f"{name}-effects.db"
    for p in (store, log):
        for suffix in ("", "-wal", "-shm"):
            Path(str(p) + suffix).unlink(missing_ok=True)
    with sqlite3.connect(log) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE effects (key TEXT NOT NULL, run TEXT NOT NULL, task TEXT NOT NULL, "
            "output TEXT)"
        )
    return store, log


# -- a trial --------------------------------------------------------------------------------


@dataclass
class Trial:
    """What one trial saw: ``runs`` random plans run at once by the same processes."""

    tasks: int
    runs: int = 1
    kills: int = 0  # SIGKILLs
    runs_killed: int = 0  # runs those kills interrupted (a kill interrupts every run in flight)
    resumes: int = 0
    decisions: int = 0
    in_doubt_decided: int = 0
    points: dict[str, int] = field(default_factory=dict)  # kills by where they were aimed
    processes: int = 0  # processes forked (killed or not)
    process_s: float = 0.0  # the time they took, fork to reaped
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


class Pace:
    """How long the processes under test take when nothing kills them (to a pause or to
    their run's end), the longest of the last few: a timed kill lands at a random moment
    within that, so that it interrupts a run rather than a process that already ended."""

    def __init__(self, first_guess_s: float = 0.2) -> None:
        self.recent: list[float] = []
        self.first_guess_s = first_guess_s

    def moment(self, rng: random.Random) -> float:
        return rng.uniform(0.0, max(self.recent, default=self.first_guess_s))

    def saw(self, seconds: float) -> None:
        self.recent = [*self.recent[-19:], seconds]


def run_trial(
    workdir: Path,
    rng: random.Random,
    *,
    sizes: list[int],
    max_kills: int,
    pace: Pace | None = None,
    max_rounds: int = 400,
) -> Trial:
    """Run one random plan of each size in ``sizes``, all at once in the same processes (and
    store), to their ends through up to ``max_kills`` kills; see the module docstring for
    what is checked (``Trial.problems`` is empty when all of it holds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    pace = pace or Pace()
    plans = {dagagent.new_run_id(): random_plan(rng, n) for n in sizes}
    files = {run_id: _fresh(workdir, run_id) for run_id in plans}  # its store and effect log
    calls = sum(_side_effecting_calls(plan) for plan in plans.values())
    trial = Trial(tasks=sum(sizes), runs=len(sizes))
    ended: set[str] = set()
    for _ in range(max_rounds):
        jobs: list[Job] = []
        for run_id, plan in plans.items():
            store, log = files[run_id]
            status = _status(store, run_id)
            if status in ("succeeded", "failed"):
                ended.add(run_id)
                continue
            if status == "paused":
                try:
                    _decide(store, run_id, log, rng, trial)
                except dagagent.DagagentError as exc:
                    trial.problems.append(f"run {run_id}: a decision was refused: {exc}")
                    return trial
            jobs.append(Job(plan, run_id, status is not None, store, log))
        if not jobs:
            break
        kill = trial.kills < max_kills
        point = rng.choice(_KILL_POINTS) if kill else None
        # aimed at one of the effects still to be made (this process makes at most these)
        made = sum(_effects_logged(log) for _, log in files.values())
        nth = rng.randint(1, max(1, min(6, calls - made)))
        kill_after = pace.moment(rng) if point == "time" else None
        if point == "time":
            point = None
        began = time.monotonic()
        code = _run_process(jobs, point, nth, kill_after)
        took = time.monotonic() - began
        trial.processes += 1
        trial.process_s += took
        trial.resumes += sum(job.resume for job in jobs)
        if code is None:
            trial.kills += 1
            trial.runs_killed += sum(_status(j.store, j.run_id) not in _ENDED for j in jobs)
            aimed = point or ("time" if kill_after is not None else "none")
            trial.points[aimed] = trial.points.get(aimed, 0) + 1
        elif code != 0:
            trial.problems.append(f"a process running {len(jobs)} runs failed (exit {code})")
            return trial
        else:
            pace.saw(took)
    else:
        trial.problems.append(f"the runs did not end within {max_rounds} processes")
        return trial
    for run_id, plan in plans.items():
        _check(*files[run_id], plan, run_id, trial)
    return trial


_ENDED = ("succeeded", "failed", "paused")


def _status(store: Path, run_id: str) -> str | None:
    """The run's status on record (``None``: not recorded yet)."""
    if not store.exists():
        return None
    with RunStore(store) as st:
        return st.get_run(run_id).status.value if st.exists(run_id) else None


def _side_effecting_calls(plan: dict[str, Any]) -> int:
    """How many side-effecting calls the plan makes (a map's: one per element)."""
    calls = 0
    for task in plan["tasks"]:
        if "instruction" in task:
            calls += 1
        elif task["tool"] != "compute":
            calls += len(task["for_each"]) if task.get("for_each") is not None else 1
    return calls


def _effects_logged(log: Path) -> int:
    with sqlite3.connect(log) as conn:
        return int(conn.execute("SELECT count(*) FROM effects").fetchone()[0])


def _check(store: Path, log: Path, plan: dict[str, Any], run_id: str, trial: Trial) -> None:
    """Add to ``trial.problems`` what went wrong with run ``run_id`` (see the module
    docstring)."""
    with sqlite3.connect(log) as conn:
        rows = conn.execute(
            "SELECT key, task, output FROM effects WHERE run = ?", (run_id,)
        ).fetchall()
    seen: dict[str, int] = {}
    for key, _task, _out in rows:
        seen[key] = seen.get(key, 0) + 1
    dup = {k: n for k, n in seen.items() if n > 1}
    if dup:
        trial.problems.append(
            f"run {run_id}: {len(dup)} effects ran more than once: {sorted(dup)[:5]}"
        )
    by_key = {k: json.loads(o) for k, _t, o in rows}
    with RunStore(store) as st:
        record = st.get_run(run_id)
        effects = st.effects(run_id)
    if record.status.value != "succeeded":
        failed = [(t, r.status.value, r.error) for t, r in record.tasks.items() if not r.status.ok]
        trial.problems.append(f"run {run_id} ended {record.status.value}: {failed[:3]}")
        return
    for e in effects:
        if e.in_doubt:
            trial.problems.append(f"run {run_id}: {e.where} is still in doubt")
        if e.key not in by_key:
            trial.problems.append(f"run {run_id}: {e.where}: its effect ({e.tool}) is not logged")
    expected = 0
    per_task: dict[str, int] = {}
    for _key, task_id, _out in rows:
        per_task[task_id] = per_task.get(task_id, 0) + 1
    for task in plan["tasks"]:
        if "instruction" in task:  # an agent task: one mail, once
            expected += 1
            if per_task.get(task["id"]) != 1:
                trial.problems.append(
                    f"run {run_id}: agent task {task['id']}: "
                    f"{per_task.get(task['id'], 0)} effects, not 1"
                )
            continue
        if task["tool"] == "compute":
            continue
        r = record.tasks.get(task["id"])
        outputs = r.output if task.get("for_each") is not None else [r.output] if r else []
        expected += len(task["for_each"]) if task.get("for_each") is not None else 1
        for out in outputs or []:
            if not isinstance(out, dict) or by_key.get(out.get("key")) != out:
                trial.problems.append(
                    f"run {run_id}: task {task['id']}: output {out} is not its effect's"
                )
    if len(seen) != expected:
        trial.problems.append(
            f"run {run_id}: {len(seen)} effects for {expected} side-effecting calls"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200, help="kills in all (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path("chaos-work"),
        help="where the trials' stores and effect logs go (those of failed trials are kept)",
    )
    parser.add_argument("--min-tasks", type=int, default=10)
    parser.add_argument("--max-tasks", type=int, default=200)
    parser.add_argument(
        "--runs-per-process",
        type=int,
        default=1,
        help="random plans run at once by each process (one kill interrupts them all; default 1)",
    )
    parser.add_argument(
        "--max-kills-per-trial",
        type=int,
        default=12,
        help="each plan is killed up to a random number of times up to this (default 12)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the figures to this JSON file"
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    load = os.getloadavg()
    started = time.monotonic()
    warm_up(args.dir / "warm-up")
    warm_s = time.monotonic() - started
    pace = Pace()
    kills = runs_killed = trials = runs = resumes = doubts = processes = tasks = 0
    process_s = 0.0
    points: dict[str, int] = {}
    problems: list[str] = []
    while kills < args.kills:
        sizes = [rng.randint(args.min_tasks, args.max_tasks) for _ in range(args.runs_per_process)]
        trial = run_trial(
            args.dir / f"trial-{trials}",
            rng,
            sizes=sizes,
            max_kills=rng.randint(1, args.max_kills_per_trial),
            pace=pace,
        )
        if not trial.problems:  # a failed trial's store and effect log are kept to look into
            shutil.rmtree(args.dir / f"trial-{trials}")
        trials += 1
        runs += len(sizes)
        tasks += sum(sizes)
        kills += trial.kills
        runs_killed += trial.runs_killed
        resumes += trial.resumes
        doubts += trial.in_doubt_decided
        processes += trial.processes
        process_s += trial.process_s
        for k, v in trial.points.items():
            points[k] = points.get(k, 0) + v
        for p in trial.problems:
            problems.append(f"trial {trials - 1} ({sizes} tasks): {p}")
        print(
            f"trial {trials - 1}: {len(sizes)} runs of {sizes} tasks, {trial.kills} kills "
            f"({trial.runs_killed} runs interrupted), {trial.resumes} resumes, "
            f"{trial.decisions} decisions ({trial.in_doubt_decided} in doubt): "
            + ("ok" if not trial.problems else "; ".join(trial.problems)),
            flush=True,
        )
    wall = time.monotonic() - started
    print(
        f"{trials} trials ({runs} runs), {kills} kills ({runs_killed} runs interrupted), "
        f"{resumes} resumes, {doubts} calls in doubt decided by a person, in {wall:.0f} s: "
        f"{len(problems)} problems"
    )
    aimed = ", ".join(f"{n} {k}" for k, n in sorted(points.items()))
    print(f"kills: {aimed} (before / during / after an effect; at a random time)")
    print(
        f"time: {warm_s:.1f} s warming up, {process_s:.1f} s in {processes} processes under "
        f"test ({1000 * process_s / max(processes, 1):.0f} ms each, fork to reaped), "
        f"{wall - warm_s - process_s:.1f} s deciding and checking"
    )
    for p in problems:
        print("  " + p)
    if args.json is not None:
        figures = {
            "kills": kills,
            "runs_interrupted": runs_killed,
            "trials": trials,
            "runs": runs,
            "runs_per_process": args.runs_per_process,
            "tasks_mean": round(tasks / max(runs, 1), 1),
            "tasks_min": args.min_tasks,
            "tasks_max": args.max_tasks,
            "seed": args.seed,
            "resumes": resumes,
            "processes": processes,
            "in_doubt_decided": doubts,
            "kill_points": points,
            "problems": problems,
            "wall_s": round(wall, 1),
            "warm_up_s": round(warm_s, 2),
            "process_s": round(process_s, 1),
            "loadavg_at_start": [round(x, 2) for x in load],
        }
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
