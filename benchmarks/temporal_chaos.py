"""Chaos on Temporal: plans and solves run by real ``dagagent`` processes while workers and
drivers are killed (SIGKILL) at random moments, then what each run ended with is checked.

The script starts a Temporal development server (``temporal server start-dev``, in memory, on
a free loopback port; or uses ``--temporal-address`` of a cluster of your own) and
``--workers`` ``dagagent worker`` processes serving this module's tools, then runs
``--runs`` runs, ``--parallel`` at once, each in its own run store:

- **plans** (``dagagent run --executor temporal --on-failure continue``), made at random
  from a chain of slow tools, a fan-out and its fan-in, a map wide enough to run in chunks,
  a map of thousands of elements, a map of payments, a tool declared fast (a local
  activity), payments (a tool with side effects and a reconciler), mails (side effects, no
  reconciler) and a tool that fails;
- **solves** (``dagagent ask --executor temporal``) of one to five rounds, the model a
  loopback server speaking OpenAI's wire format (``tests/llm_server.py``) whose answers
  depend on the request alone (a model call made again gets the same answer).

The development server suggests continuing as new early (``--suggest-continue-as-new``), so
runs and solves roll over while the kills go on. A killer (seeded by ``--seed``) waits a
random time (exponential, mean ``--kill-every`` seconds), then SIGKILLs a random worker
(sometimes all workers but one at once, ``--all-but-one``) and starts others in their
place, or (one time in ``--driver-share``) the driver of a random run in flight: ``dagagent
resume RUN`` (a plan) or ``dagagent attach SOLVE`` (a solve) follows, and may be killed in
turn (a driver killed before it recorded anything starts again). Which moment a kill lands
on depends on the machine: a seed fixes the plans and the kill schedule, not the outcome.

Each run is then checked:

- **it ended**: every driver process ended within ``--run-timeout`` seconds;
- **its results**: every task's status and output equal those of the same plan run in this
  process on the local executor, or the task ended failed/denied/skipped for a reason it
  names (a lost worker under a call with side effects and no reconciler; a task whose
  upstream did so);
- **no effect twice**: every payment and mail appends its idempotency key to a file outside
  the workers; no key is there twice, and every payment or mail a task succeeded with is
  there;
- **its histories replay**: every execution of every workflow of the run (the run's, the
  solve's, each round's, and each run a workflow continued as new into, as the server lists
  them) replays with ``temporalio.worker.Replayer`` from the history the server returns;
- **their size**: the events and bytes the server reports for each history; and the
  workflow tasks that failed on a worker (the server retried them), by cause.

The exit code is 1 when a check failed; the working directory (each run's store and
processes' output, the histories that did not replay) is then kept.

    python benchmarks/temporal_chaos.py --seed 1 --runs 12
    python benchmarks/temporal_chaos.py --seed 7 --runs 40 --parallel 3 --write
    python benchmarks/temporal_chaos.py --temporal-address temporal.internal:7233 \\
        --temporal-namespace chaos --payload-store /mnt/shared/payloads --runs 20

Against a cluster of your own the workers still run on this machine (the killer needs their
process ids); give a namespace used for nothing else, since the replays list its workflows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagagent
from dagagent import Reconciled, current_call

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUEUE = "chaos"
TOOLS = "temporal_chaos:registry"

# -- the tools the workers serve ----------------------------------------------------------

registry = dagagent.Registry()


@registry.tool
def work(x: int, ms: int) -> int:
    """x + 1, after ``ms`` milliseconds."""
    time.sleep(ms / 1000)
    return x + 1


@registry.tool
def total(xs: list[int]) -> int:
    """The sum of xs."""
    return sum(xs)


@registry.tool
def upto(n: int) -> list[int]:
    """0, 1, ..., n - 1."""
    return list(range(n))


@registry.tool
def square(i: int, ms: int) -> int:
    """i squared, after ``ms`` milliseconds."""
    time.sleep(ms / 1000)
    return i * i


@registry.tool
def refuse(x: int) -> int:
    """Fail, naming x."""
    raise ValueError(f"refused {x}")


@registry.tool(blocking=False)
def fast(x: int) -> int:
    """Twice x (declared never to block, without side effects: a local activity)."""
    return 2 * x


def _effect(kind: str, name: str, where: str, ms: int) -> None:
    """The effect: a line ``KEY<TAB>KIND<TAB>NAME`` appended (one write) to
    ``<where>/effects``, halfway through ``ms`` milliseconds (``NAME`` names what was paid or
    mailed: no two calls of a run name the same)."""
    key = current_call().idempotency_key
    time.sleep(ms / 2000)
    fd = os.open(Path(where) / "effects", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{key}\t{kind}\t{name}\n".encode())
    finally:
        os.close(fd)
    time.sleep(ms / 2000)


def _effects(where: str) -> list[tuple[str, str, str]]:
    """The effects made so far: (key, kind, name) each."""
    path = Path(where) / "effects"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(k, kind, name) for k, kind, name in (line.split("\t") for line in lines)]


def _keys(where: str) -> list[str]:
    return [key for key, _, _ in _effects(where)]


def _paid(call: dagagent.CallIdentity) -> Reconciled:
    """Whether a payment was made: its key in the effects file."""
    if call.idempotency_key in _keys(call.args["where"]):
        return Reconciled.happened(f"paid {call.args['amount']} for {call.args['name']}")
    return Reconciled.not_happened()


@registry.tool(side_effects=True, reconcile=_paid)
def pay(name: str, where: str, amount: int, ms: int) -> str:
    """A payment (an effect), with a reconciler that looks for it."""
    _effect("pay", f"{name}:{amount}", where, ms)
    return f"paid {amount} for {name}"


@registry.tool(side_effects=True)
def mail(name: str, where: str, ms: int) -> str:
    """A mail (an effect), with no reconciler."""
    _effect("mail", name, where, ms)
    return f"mailed {name}"


# -- plans --------------------------------------------------------------------------------


def make_plan(rng: random.Random, where: str, label: str, scale: float) -> dict[str, Any]:
    """A plan of two to four parts, chosen at random."""
    tasks: list[dict[str, Any]] = []

    def ms() -> int:
        return int(rng.uniform(100, 1500) * scale)

    parts = rng.sample(
        ["chain", "fan", "map", "pay", "mail", "paymap", "fail", "wide"], rng.randint(2, 4)
    )
    if "chain" in parts:
        n = rng.randint(3, 6)
        for i in range(n):
            x: Any = 1 if i == 0 else f"${{c{i - 1}}}"
            tasks.append({"id": f"c{i}", "tool": "work", "args": {"x": x, "ms": ms()}})
        tasks.append({"id": "cf", "tool": "fast", "args": {"x": f"${{c{n - 1}}}"}})
    if "fan" in parts:
        n = rng.randint(4, 12)
        for i in range(n):
            tasks.append({"id": f"f{i}", "tool": "work", "args": {"x": i, "ms": ms()}})
        tasks.append(
            {"id": "fsum", "tool": "total", "args": {"xs": [f"${{f{i}}}" for i in range(n)]}}
        )
    if "map" in parts:
        n = rng.choice([150, 250, 420])  # past the 100 elements of a chunk
        tasks.append({"id": "items", "tool": "upto", "args": {"n": n}})
        tasks.append(
            {
                "id": "sq",
                "for_each": "${items}",
                "tool": "square",
                "args": {"i": "${@item}", "ms": rng.randint(5, 60)},
            }
        )
        tasks.append({"id": "sqsum", "tool": "total", "args": {"xs": "${sq}"}})
        tasks.append({"id": "sqfast", "tool": "fast", "args": {"x": "${sqsum}"}})
    if "pay" in parts:
        for i in range(rng.randint(1, 4)):
            name = f"{label}-p{i}"
            args = {"name": name, "where": where, "amount": 10 * (i + 1), "ms": ms()}
            tasks.append({"id": f"p{i}", "tool": "pay", "args": args})
    if "mail" in parts:
        for i in range(rng.randint(1, 3)):
            args = {"name": f"{label}-m{i}", "where": where, "ms": ms()}
            tasks.append({"id": f"m{i}", "tool": "mail", "args": args})
        tasks.append({"id": "after_mail", "tool": "fast", "args": {"x": 1}, "depends_on": ["m0"]})
    if "paymap" in parts:
        n = rng.choice([30, 130])
        tasks.append({"id": "payees", "tool": "upto", "args": {"n": n}})
        tasks.append(
            {
                "id": "pm",
                "for_each": "${payees}",
                "tool": "pay",
                "args": {
                    "name": f"{label}-pm",
                    "where": where,
                    "amount": "${@item}",
                    "ms": rng.randint(20, 200),
                },
            }
        )
    if "wide" in parts:  # a map of thousands of elements: tens of chunks at once
        n = rng.choice([2000, 3500])
        tasks.append({"id": "many", "tool": "upto", "args": {"n": n}})
        tasks.append(
            {
                "id": "wsq",
                "for_each": "${many}",
                "tool": "square",
                "args": {"i": "${@item}", "ms": rng.choice([0, 2])},
            }
        )
        tasks.append({"id": "wsum", "tool": "total", "args": {"xs": "${wsq}"}})
    if "fail" in parts:
        tasks.append({"id": "no", "tool": "refuse", "args": {"x": 1}, "retries": 1})
        tasks.append({"id": "after_no", "tool": "fast", "args": {"x": "${no}"}})
        tasks.append({"id": "no_fast", "tool": "fast", "args": {"x": 3}})
    return {"goal": f"chaos {label}", "tasks": tasks}


def with_where(plan: dict[str, Any], where: str) -> dict[str, Any]:
    """``plan`` with its effects going to ``where`` (for the local run)."""
    text = json.dumps(plan)
    for t in plan["tasks"]:
        old = t["args"].get("where")
        if old:
            text = text.replace(json.dumps(old)[1:-1], where)
    out: dict[str, Any] = json.loads(text)
    return out


# -- the model of the solves --------------------------------------------------------------


def done_marker(k: int) -> str:
    """The id of a task of round ``k``'s plan (the joiner sees it among the round's results)."""
    return f"round_{k}_done"


def again(k: int) -> str:
    """The joiner's feedback that asks for round ``k``."""
    return f"now do round {k}"


def _latest(text: str, what: Any, rounds: int) -> int:
    return max((k for k in range(1, rounds + 1) if what(k) in text), default=0)


class Model:
    """Answers that depend on the request alone (a model call made again gets the same
    answer): the goal names the solve (``chaos solve LABEL``); the planner plans round ``k``
    when the request carries the feedback asking for it (round 1 without), the joiner asks for
    the next round until it sees the last round's marker task, then answers."""

    def __init__(self, plans: dict[str, list[dict[str, Any]]]) -> None:
        self.plans = plans

    def __call__(self, request: Any) -> Any:
        from llm_server import Reply, SSEReply  # type: ignore[import-not-found]

        from dagagent.llm import wire

        body = request.json
        text = json.dumps(body)
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        label = text.split("chaos solve ", 1)[1].split(" ", 1)[0].strip('".\\')
        rounds = self.plans[label]
        if "plan" in name:
            answer: Any = rounds[max(_latest(text, again, len(rounds)), 1) - 1]
        else:
            k = _latest(text, done_marker, len(rounds))
            if k < len(rounds):
                answer = {"action": "replan", "feedback": again(k + 1)}
            else:
                answer = {"action": "finish", "answer": f"done {label}", "cites": []}
        reply = wire.openai_text(json.dumps(answer), input_tokens=100, output_tokens=20)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)


# -- processes ----------------------------------------------------------------------------


def _env(home: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(home),
        "OPENAI_API_KEY": "sk-chaos",
    }


class Workers:
    """The ``dagagent worker`` processes; each one's stderr in a log file of its own."""

    def __init__(self, args: argparse.Namespace, work: Path, where: dict[str, str]) -> None:
        self.args, self.work, self.where = args, work, where
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self.lock = threading.Lock()

    def _one(self) -> subprocess.Popen[bytes]:
        self.started += 1
        log = self.work / f"worker{self.started}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dagagent", "worker", "--tools", TOOLS, *self.where_opts()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=out,
                env=_env(self.work / "home"),
                cwd=self.work,
            )
        deadline = time.monotonic() + 120
        while b"serves" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"a worker did not start: {log.read_text()}")
            time.sleep(0.1)
        return proc

    def where_opts(self) -> list[str]:
        return [
            *("--temporal-address", self.where["address"]),
            *("--temporal-namespace", self.where["namespace"]),
            *("--task-queue", self.where["queue"]),
            *("--payload-store", self.where["payloads"]),
        ]

    def start(self, n: int) -> None:
        for _ in range(n):
            self.procs.append(self._one())

    def replace(self, victim: subprocess.Popen[bytes]) -> None:
        with self.lock:
            self.procs.remove(victim)
        fresh = self._one()
        with self.lock:
            self.procs.append(fresh)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Run:
    """One run (a plan or a solve) and what happened to it."""

    index: int
    kind: str  # "plan" | "solve"
    label: str
    rounds: list[dict[str, Any]]  # a plan's plan; a solve's, round by round
    dir: Path
    drivers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    driver_kills: int = 0
    killed: set[int] = field(default_factory=set)
    restarts: int = 0
    exits: list[int | None] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # run ids (a solve's rounds), then solve id
    failures: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    histories: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    done: bool = False
    ended_on_record: bool = False

    @property
    def store(self) -> Path:
        return self.dir / "runs.db"

    @property
    def where(self) -> str:
        return str(self.dir / "effects-dir")

    @property
    def plan(self) -> dict[str, Any]:
        """The plan a run ran (a solve's last round's)."""
        return self.rounds[-1]

    def alive(self) -> subprocess.Popen[bytes] | None:
        live = [p for p in self.drivers if p.poll() is None]
        return live[-1] if live else None


class Chaos:
    def __init__(self, args: argparse.Namespace, work: Path, where: dict[str, str]) -> None:
        self.args = args
        self.work = work
        self.where = where
        self.rng = random.Random(args.seed)
        self.kill_rng = random.Random(args.seed * 7919 + 1)
        self.workers = Workers(args, work, where)
        self.runs: list[Run] = []
        self.active: list[Run] = []
        self.lock = threading.Lock()
        self.kills: Counter[str] = Counter()
        self.stop = threading.Event()
        self.model_url = ""

    # the killer ------------------------------------------------------------------------

    def killer(self) -> None:
        while not self.stop.wait(self.kill_rng.expovariate(1 / self.args.kill_every)):
            if self.kill_rng.random() < 1 / self.args.driver_share:
                with self.lock:
                    procs = [(r, r.alive()) for r in self.active if not r.done]
                    live = [(r, p) for r, p in procs if p is not None]
                    if not live:
                        continue
                    run, proc = self.kill_rng.choice(live)
                    if run.driver_kills >= self.args.max_driver_kills:
                        continue
                    run.driver_kills += 1
                    run.killed.add(proc.pid)
                    proc.kill()
                self.kills["driver"] += 1
            else:  # a worker, or (--all-but-one of the time) all workers but one
                with self.workers.lock:
                    many = self.kill_rng.random() < self.args.all_but_one
                    n = len(self.workers.procs) - 1 if many else 1
                    victims = self.kill_rng.sample(self.workers.procs, max(n, 1))
                for victim in victims:
                    victim.kill()
                for victim in victims:
                    victim.wait()
                self.kills["worker"] += len(victims)
                self.kills["all workers but one at once"] += many
                try:
                    for victim in victims:
                        self.workers.replace(victim)
                except SystemExit as exc:
                    print(f"  ! {exc}", file=sys.stderr)
                    self.stop.set()

    # one run ---------------------------------------------------------------------------

    def temporal_opts(self) -> list[str]:
        return [
            *("--executor", "temporal"),
            *("--temporal-address", self.where["address"]),
            *("--temporal-namespace", self.where["namespace"]),
            *("--task-queue", self.where["queue"]),
            *("--payload-store", self.where["payloads"]),
        ]

    def spawn(self, run: Run, argv: list[str], name: str) -> subprocess.Popen[bytes]:
        n = len(run.drivers)
        with (
            open(run.dir / f"{n}-{name}.out", "wb") as out,
            open(run.dir / f"{n}-{name}.err", "wb") as err,
        ):
            proc = subprocess.Popen(
                [sys.executable, "-m", "dagagent", *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=_env(run.dir / "home"),
                cwd=run.dir,
            )
        with self.lock:
            run.drivers.append(proc)
        return proc

    def first_argv(self, run: Run) -> list[str]:
        common = ["--tools", TOOLS, "--store", str(run.store), "--on-failure", "continue"]
        if run.kind == "plan":
            (run.dir / "plan.json").write_text(json.dumps(run.plan))
            return ["run", str(run.dir / "plan.json"), *common, "--json", *self.temporal_opts()]
        goal = f"chaos solve {run.label} in {len(run.rounds)} rounds"
        return [
            *("ask", goal, *common, "--json", "--no-stream"),
            *("--model", "openai:chaos", "--base-url", f"{self.model_url}/v1"),
            *("--max-rounds", "6"),
            *self.temporal_opts(),
        ]

    def follow_argv(self, run: Run) -> list[str] | str | None:
        """``resume`` or ``attach`` of what the store has of the run (None: nothing yet;
        ``"ended"``: the run ended on record before its driver was killed)."""
        from dagagent.store import RunStore

        if not run.store.exists():
            return None
        with RunStore(run.store) as st:
            if run.kind == "plan":
                found = [r.run_id for r in st.list_runs()]
                if not found:
                    return None
                if st.get_run(found[0]).status.value in ("succeeded", "failed", "cancelled"):
                    return "ended"
                return ["resume", found[0], "--store", str(run.store), "--tools", TOOLS, "--json"]
            solves = [s.solve_id for s in st.list_solves()]
            if not solves:
                return None
            return [
                "attach",
                solves[0],
                "--store",
                str(run.store),
                "--json",
                *self.temporal_opts()[2:],
            ]

    def drive(self, run: Run) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.args.run_timeout
        argv = self.first_argv(run)
        name = "run" if run.kind == "plan" else "ask"
        while True:
            proc = self.spawn(run, argv, name)
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                run.exits.append(None)
                run.failures.append(
                    ("hang", f"{name} still running after {self.args.run_timeout} s")
                )
                break
            run.exits.append(proc.returncode)
            if proc.pid not in run.killed:
                break
            follow = self.follow_argv(run)
            if follow is None:  # killed before it recorded anything: start again
                run.notes.append(f"driver killed before its record: {name} again")
                run.restarts += 1
                continue
            if isinstance(follow, str):  # killed on its way out: nothing to follow
                run.notes.append("driver killed after the run ended on record")
                run.ended_on_record = True
                break
            argv, name = follow, follow[0]
        run.wall_s = time.monotonic() - t0

    # checks ----------------------------------------------------------------------------

    def check(self, run: Run, expected: dict[str, Any]) -> None:
        from dagagent.store import RunStore

        if any(k == "hang" for k, _ in run.failures):
            if run.store.exists():  # its workflows, for the replays
                with RunStore(run.store) as st:
                    run.ids = [r.run_id for r in st.list_runs()]
                    run.ids += [s.solve_id for s in st.list_solves()]
            return
        last = run.exits[-1]
        if last not in (0, 1) and not run.ended_on_record:
            err = sorted(run.dir.glob(f"{len(run.drivers) - 1}-*.err"))
            said = err[-1].read_text()[-600:] if err else ""
            run.failures.append(("exit", f"the last driver exited {last}: {said.strip()}"))
        with RunStore(run.store) as st:
            runs = st.list_runs()
            run.ids = [r.run_id for r in runs]
            if run.kind == "plan":
                if not runs:
                    run.failures.append(("record", "no run on record"))
                    return
                record = st.get_run(runs[0].run_id)
            else:
                solves = st.list_solves()
                if not solves:
                    run.failures.append(("record", "no solve on record"))
                    return
                solve = st.get_solve(solves[0].solve_id)
                run.ids.append(solve.solve_id)
                if solve.status != "answered" or solve.answer != f"done {run.label}":
                    run.failures.append(
                        ("result", f"solve {solve.status}: {solve.answer!r} ({solve.reason})")
                    )
                    return
                if solve.run_id is None:
                    run.failures.append(("record", "the solve's last round has no run"))
                    return
                record = st.get_run(solve.run_id)
        self.compare(run, record, expected)
        self.count_effects(run, record)

    def compare(self, run: Run, record: Any, expected: dict[str, Any]) -> None:
        """Each task as the local run had it, or ended for a lost call's reason."""
        got = {t: (r.status.value, r.output, r.error or "") for t, r in record.tasks.items()}
        excused: set[str] = set()
        deps = _dependencies(run.plan)
        for task_id in _order(deps):
            want = expected.get(task_id)
            have = got.get(task_id)
            if have is None:
                run.failures.append(("result", f"task {task_id!r} not on record"))
                continue
            # a round of a solve reuses what the round before it ran unchanged
            if want is not None and (_settled(have[0]), have[1]) == want:
                continue
            status, _, error = have
            upstream = deps.get(task_id, set())
            if status in ("failed", "denied") and _lost_reason(error):
                excused.add(task_id)
                run.notes.append(f"{task_id}: {status}: {error[:160]}")
            elif status in ("skipped", "failed", "cancelled") and upstream & excused:
                excused.add(task_id)
            else:
                run.failures.append(
                    (
                        "result",
                        f"task {task_id!r}: {status} {have[1]!r} {error[:300]!r}, locally {want!r}",
                    )
                )

    def count_effects(self, run: Run, record: Any) -> None:
        """No key and no payee twice; every payment and mail a task succeeded with made."""
        made = _effects(run.where)
        for what, seen in (("key", [k for k, _, _ in made]), ("name", [n for _, _, n in made])):
            twice = [k for k, n in Counter(seen).items() if n > 1]
            if twice:
                run.failures.append(
                    ("twice", f"{len(twice)} effects made twice (same {what}): {twice[:3]}")
                )
        names = {n for _, _, n in made}
        plan = run.plan
        for t in plan["tasks"]:
            r = record.tasks.get(t["id"])
            if r is None or r.status.value != "succeeded" or t["tool"] not in ("pay", "mail"):
                continue
            outputs = r.output if "for_each" in t else [r.output]
            for out in outputs:
                # "paid A for NAME" / "mailed NAME": the effect's name
                name = (
                    out.split(" for ")[1] + ":" + out.split()[1]
                    if out.startswith("paid")
                    else out.split(" ", 1)[1]
                )
                if name not in names:
                    run.failures.append(("lost effect", f"{t['id']}: {out!r} but no such effect"))

    # the whole ------------------------------------------------------------------------

    def one(self, run: Run) -> None:
        try:
            self.drive(run)
            expected = local_results(run.plan, run.dir / "local")
            self.check(run, expected)
        except Exception as exc:  # the harness's own trouble: say so, go on
            run.failures.append(("harness", f"{type(exc).__name__}: {exc}"))
        finally:
            run.done = True
            with self.lock:
                self.active.remove(run)
            said = "ok" if not run.failures else "FAILED: " + "; ".join(k for k, _ in run.failures)
            print(f"  {run.label} ended in {run.wall_s:.1f} s, exits {run.exits}: {said}")

    def make_runs(self) -> None:
        for i in range(self.args.runs):
            label = f"r{self.args.seed}x{i}"
            d = self.work / label
            (d / "effects-dir").mkdir(parents=True)
            (d / "home").mkdir()
            kind = "solve" if self.rng.random() < self.args.solve_share else "plan"
            plan = make_plan(self.rng, str(d / "effects-dir"), label, self.args.scale)
            rounds = [plan]
            if kind == "solve":
                for k in range(2, self.rng.choice([1, 1, 2, 3, 5]) + 1):
                    more = make_plan(
                        self.rng, str(d / "effects-dir"), f"{label}r{k}", self.args.scale
                    )
                    rounds.append(more)
                for k, each in enumerate(rounds, 1):
                    each["tasks"].append({"id": done_marker(k), "tool": "upto", "args": {"n": k}})
            self.runs.append(Run(i, kind, label, rounds, d))

    def go(self) -> None:
        self.workers.start(self.args.workers)
        killer = threading.Thread(target=self.killer, daemon=True)
        pending = list(self.runs)
        threads: list[threading.Thread] = []
        killer.start()
        try:
            while pending or any(t.is_alive() for t in threads):
                with self.lock:
                    room = self.args.parallel - len(self.active)
                    while room > 0 and pending:
                        run = pending.pop(0)
                        self.active.append(run)
                        t = threading.Thread(target=self.one, args=(run,), daemon=True)
                        threads.append(t)
                        t.start()
                        room -= 1
                        print(f"  run {run.index + 1}/{len(self.runs)}: {run.kind} {run.label}")
                time.sleep(0.2)
        finally:
            self.stop.set()
            killer.join()


def _dependencies(plan: dict[str, Any]) -> dict[str, set[str]]:
    deps: dict[str, set[str]] = {}
    ids = [t["id"] for t in plan["tasks"]]
    for t in plan["tasks"]:
        text = json.dumps({k: v for k, v in t.items() if k != "id"})
        deps[t["id"]] = {i for i in ids if f"${{{i}}}" in text} | set(t.get("depends_on", []))
    return deps


def _order(deps: dict[str, set[str]]) -> list[str]:
    done: list[str] = []
    while len(done) < len(deps):
        for t, up in deps.items():
            if t not in done and up <= set(done):
                done.append(t)
    return done


def _settled(status: str) -> str:
    return "succeeded" if status == "reused" else status


def _lost_reason(error: str) -> bool:
    """Whether a task's error says its call was cut off by a lost worker (in doubt)."""
    words = ("WorkerLostError", "worker was lost", "lost its worker", "in doubt")
    return any(w in error for w in words)


def local_results(plan: dict[str, Any], where: Path) -> dict[str, Any]:
    """Each task's (status, output) on the local executor."""
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    local = with_where(plan, str(where))
    for t in local["tasks"]:  # the same outputs, without the waits
        if "ms" in t["args"]:
            t["args"]["ms"] = 0
    result = dagagent.execute_sync(
        local, registry, settings=dagagent.RunSettings(on_failure="continue")
    )
    return {t: (r.status.value, r.output) for t, r in result.tasks.items()}


# -- histories ----------------------------------------------------------------------------


async def histories(where: dict[str, str], chaos: Chaos) -> dict[str, Any]:
    """Replay every execution of every workflow in the namespace; each one's size."""
    from temporalio.client import Client
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal import RunWorkflow, data_converter
    from dagagent.executors.temporal._payloads import DirectoryPayloads
    from dagagent.workflows.temporal_solve import SolveWorkflow

    client = await Client.connect(
        where["address"],
        namespace=where["namespace"],
        data_converter=data_converter(DirectoryPayloads(where["payloads"])),
    )
    owner = {}
    for run in chaos.runs:
        for i in run.ids:
            owner[i] = run
    replayer = Replayer(
        workflows=[RunWorkflow, SolveWorkflow],
        data_converter=client.data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )
    stats: Counter[str] = Counter()
    failures: list[tuple[str, str, str]] = []
    sizes: list[dict[str, Any]] = []
    async for ex in client.list_workflows():
        handle = client.get_workflow_handle(ex.id, run_id=ex.run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        history = await handle.fetch_history()
        of = next((r for i, r in owner.items() if ex.id.endswith(i)), None)
        entry = {
            "workflow_id": ex.id,
            "run_id": ex.run_id,
            "status": ex.status.name if ex.status else None,
            "events": info.history_length,
            "bytes": info.history_size_bytes,
            "of": of.label if of else None,
        }
        sizes.append(entry)
        if of is not None:
            of.histories.append(entry)
        else:
            stats["orphans"] += 1
        if ex.status is not None and ex.status.name == "RUNNING":
            stats["still running"] += 1  # a run that hung: it stops here
            await handle.terminate("the chaos script ends: this run's workflow hung")
        for event in history.events:  # a workflow task that failed on a worker, and why
            if event.HasField("workflow_task_failed_event_attributes"):
                why = event.workflow_task_failed_event_attributes.failure.message
                stats[f"workflow task failed: {_cause(why)}"] += 1
                if of is not None:
                    of.notes.append(f"{ex.id}: a workflow task failed: {why[:200]}")
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        stats["replayed"] += 1
        if result.replay_failure is not None:
            failure = result.replay_failure
            text = f"{type(failure).__name__}: {failure}"
            trace = "".join(traceback.format_exception(failure)) + str(failure.__cause__ or "")
            # a local activity's result reaching the workflow a workflow task later than
            # its marker: on replay a task starts before the output it reads (a KeyError
            # in the workflow's _map or _args)
            known = "KeyError" in trace and ("_map" in trace or "_args" in trace)
            kind = "replay: KeyError (local activity order)" if known else "replay"
            failures.append((kind, f"{ex.id} {ex.run_id}", text[:600]))
            kept = chaos.work / "replay-failures"
            kept.mkdir(exist_ok=True)
            (kept / f"{ex.id}-{ex.run_id}.json").write_text(history.to_json())
            (kept / f"{ex.id}-{ex.run_id}.txt").write_text(trace)
            if of is not None:
                of.failures.append((kind, f"{ex.id}: {text[:300]}"))
    return {"stats": dict(stats), "failures": failures, "sizes": sizes}


def _cause(message: str) -> str:
    """A workflow task failure's kind, from its message."""
    if "deadlock" in message.lower():
        return "deadlock (the workflow did not yield within 2 s)"
    if "nondetermin" in message.lower():
        return "nondeterminism"
    return message.split("\n", 1)[0][:80]


# -- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    import _common as common

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=12, help="runs (plans and solves)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--kill-every", type=float, default=8.0, help="mean seconds between kills")
    parser.add_argument("--driver-share", type=float, default=4.0, help="one kill in N a driver")
    parser.add_argument("--max-driver-kills", type=int, default=2, help="per run")
    parser.add_argument(
        "--all-but-one",
        type=float,
        default=0.15,
        help="share of worker kills that kill all but one",
    )
    parser.add_argument("--solve-share", type=float, default=0.35, help="share of runs that solve")
    parser.add_argument("--scale", type=float, default=1.0, help="tool durations times this")
    parser.add_argument("--run-timeout", type=float, default=300.0, help="seconds a run may take")
    parser.add_argument(
        "--suggest-continue-as-new",
        type=int,
        default=120,
        metavar="EVENTS",
        help="the history length at which the development server suggests continuing as new "
        "(its own default is 4,096; 0 keeps it): runs and solves continue as new often",
    )
    parser.add_argument("--temporal-address", default=None, help="a server of your own")
    parser.add_argument("--temporal-namespace", default="default")
    parser.add_argument("--payload-store", default=None, help="with --temporal-address")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    info = common.machine_info()

    sys.path.insert(0, str(ROOT / "tests"))
    from llm_server import LLMTestServer

    work = Path(tempfile.mkdtemp(prefix="temporal-chaos-"))
    server: subprocess.Popen[bytes] | None = None
    if args.temporal_address is None:
        from temporal_overhead import _free_port, start_dev_server

        port = _free_port()
        extra = []
        if args.suggest_continue_as_new:
            value = f"limit.historyCount.suggestContinueAsNew={args.suggest_continue_as_new}"
            extra = ["--dynamic-config-value", value]
        server = start_dev_server(port, *extra)
        address = f"127.0.0.1:{port}"
    else:
        address = args.temporal_address
    where = {
        "address": address,
        "namespace": args.temporal_namespace,
        "queue": f"{QUEUE}-{args.seed}-{os.getpid()}",
        "payloads": args.payload_store or str(work / "payloads"),
    }
    chaos = Chaos(args, work, where)
    chaos.make_runs()
    plans = {r.label: r.rounds for r in chaos.runs}
    t0 = time.monotonic()
    print(f"temporal chaos: seed {args.seed}, {args.runs} runs, work dir {work}")
    try:
        with LLMTestServer(Model(plans)) as model:
            chaos.model_url = model.url
            chaos.go()
        chaos.workers.stop()
        import asyncio

        found = asyncio.run(histories(where, chaos))
    finally:
        chaos.stop.set()
        for run in chaos.runs:  # drivers still running (the script was interrupted)
            for proc in run.drivers:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        chaos.workers.stop()
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    wall = time.monotonic() - t0
    report = summarise(args, chaos, found, wall, info, common.command_line())
    print(report["text"])
    out = common.result_dir(args)
    if out is not None:
        for p in common.write_results(out, "temporal_chaos", report["data"], report["md"]):
            print(f"wrote {p}")
    if args.keep or report["data"]["failures_total"]:
        print(f"working directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if report["data"]["failures_total"] else 0


def summarise(
    args: argparse.Namespace,
    chaos: Chaos,
    found: dict[str, Any],
    wall: float,
    info: dict[str, Any],
    command: str,
) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    for run in chaos.runs:
        for kind, _ in run.failures:
            kinds[kind] += 1
    # a replay failure of a workflow no run owns (an orphan) counts on its own
    owned = {h["workflow_id"] + h["run_id"] for r in chaos.runs for h in r.histories}
    orphans = 0
    for kind, which, _ in found["failures"]:
        if which.replace(" ", "") not in owned:
            kinds[kind] += 1
            orphans += 1
    lines = []
    for run in chaos.runs:
        ev = max((h["events"] for h in run.histories), default=0)
        by = max((h["bytes"] for h in run.histories), default=0)
        state = "ok" if not run.failures else "FAILED"
        lines.append(
            f"  {run.label:>10} {run.kind:5} {state:6} {run.wall_s:6.1f} s  exits {run.exits}  "
            f"driver kills {run.driver_kills}  workflows {len(run.histories)}  "
            f"largest history {ev} events, {by:,} bytes"
        )
        for kind, what in run.failures:
            lines.append(f"      {kind}: {what}")
        for note in run.notes:
            lines.append(f"      note: {note}")
    sizes = found["sizes"]
    data = {
        "benchmark": "temporal_chaos",
        "command": command,
        "machine": info,
        "options": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": len(chaos.runs),
        "plans": sum(r.kind == "plan" for r in chaos.runs),
        "solves": sum(r.kind == "solve" for r in chaos.runs),
        "kills": dict(chaos.kills),
        "driver_restarts_before_record": sum(r.restarts for r in chaos.runs),
        "failures_total": sum(len(r.failures) for r in chaos.runs) + orphans,
        "failures_by_kind": dict(kinds),
        "replays": found["stats"],
        "replay_failures": found["failures"],
        "histories": len(sizes),
        "history_events_max": max((s["events"] for s in sizes), default=0),
        "history_bytes_max": max((s["bytes"] for s in sizes), default=0),
        "history_bytes_total": sum(s["bytes"] for s in sizes),
        "wall_s": wall,
        "per_run": [
            {
                "label": r.label,
                "kind": r.kind,
                "wall_s": r.wall_s,
                "exits": r.exits,
                "driver_kills": r.driver_kills,
                "failures": r.failures,
                "notes": r.notes,
                "histories": r.histories,
            }
            for r in chaos.runs
        ],
    }
    head = (
        f"{data['runs']} runs ({data['plans']} plans, {data['solves']} solves) in {wall:.0f} s; "
        f"kills: {chaos.kills['worker']} workers, {chaos.kills['driver']} drivers; "
        f"{found['stats'].get('replayed', 0)} workflow executions replayed "
        f"({found['stats'].get('orphans', 0)} of no run, "
        f"{found['stats'].get('still running', 0)} still running); largest history "
        f"{data['history_events_max']} events, {data['history_bytes_max']:,} bytes"
    )
    fails = ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())) or "none"
    wft = {k: n for k, n in found["stats"].items() if k.startswith("workflow task failed")}
    tasks = "; ".join(f"{k[len('workflow task failed: ') :]}: {n}" for k, n in wft.items())
    tasks = f"workflow tasks failed on a worker (retried by the server): {tasks or 'none'}"
    kills = ", ".join(f"{k}: {n}" for k, n in sorted(chaos.kills.items()))
    text = "\n".join([*lines, "", head, f"kills: {kills}", tasks, f"failures by kind: {fails}"])
    md = "\n".join(
        [
            "# Chaos on Temporal: workers and drivers killed at random moments",
            "",
            f"Command: `{command}`  ",
            f"Machine: {__import__('_common').machine_line(info)}",
            "",
            head + ".",
            "",
            f"Kills: {kills}.",
            "",
            tasks + ".",
            "",
            f"Failures by kind: {fails}.",
            "",
            "```",
            *lines,
            "```",
        ]
    )
    return {"text": text, "md": md, "data": data}


if __name__ == "__main__":
    sys.exit(main())
